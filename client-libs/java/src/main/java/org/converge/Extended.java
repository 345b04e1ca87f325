package org.converge;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.MessageDigest;
import java.security.PublicKey;
import java.security.SecureRandom;
import java.security.Signature;
import java.security.spec.X509EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The extended answer format {@code converge-answer/1}, client side (pure apart from the
 * nonce's randomness). Verification order and failure kinds as in {@code docs/wire-format.md}:
 * {@code malformed} (the fixed prefix), {@code unknown-key}, {@code bad-signature} (over the
 * statement bytes as received), {@code malformed} (the statement parsed, its shape), {@code
 * wrong-target}, {@code nonce-mismatch}, {@code stale}. The statement {@code T} ends at the first
 * {@code ,"transparency":} after the prefix; the member's value (from there to the final brace)
 * is checked by {@link Transparency#checkMember} for a {@code match} answer of a bundle that
 * names a log ({@link #evaluate}), each failure a {@code log-*} kind.
 */
public final class Extended {
    public static final String FORMAT = "converge-answer/1";
    public static final String MEDIA_TYPE = "application/vnd.converge.answer+json";
    public static final String ANSWER_PATH = "/v2/answer";
    public static final int MAX_ANSWER = 64 * 1024;
    public static final int MAX_SIGNING_KEYS = 8;
    public static final int DEFAULT_MAX_SKEW = 300;
    public static final List<String> MODES = List.of("off", "prefer", "fallback", "require");
    /** Statuses meaning "this notary does not offer the extended format here". */
    public static final Set<Integer> NOT_OFFERED = Set.of(400, 404, 405, 501);

    private static final byte[] ED25519_SPKI_PREFIX = HexFormat.of().parseHex("302a300506032b6570032100");
    private static final SecureRandom RANDOM = new SecureRandom();
    /**
     * y (little-endian, sign bit cleared) of the eight points of small order: 0, 1, p - 1, y8 and
     * p - y8 (the identity, (0, -1), the two points with y = 0, the four with y = +-y8).
     */
    private static final List<byte[]> SMALL_ORDER_Y = List.of(
            new byte[32],
            HexFormat.of().parseHex("01" + "00".repeat(31)),
            HexFormat.of().parseHex("ec" + "ff".repeat(30) + "7f"),
            HexFormat.of().parseHex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"),
            HexFormat.of().parseHex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"));

    private Extended() {}

    /** A verification failure; {@link #kind} names the failed check. */
    public static final class AnswerRejected extends Exception {
        private static final long serialVersionUID = 1L;
        public final String kind;

        AnswerRejected(String kind, String message) {
            super(message);
            this.kind = kind;
        }
    }

    // ------------------------------------------------------------------ encodings

    public static String b64url(byte[] data) {
        return Base64.getUrlEncoder().withoutPadding().encodeToString(data);
    }

    /** Unpadded base64url only; null on anything else. */
    public static byte[] unb64url(Object text) {
        if (!(text instanceof String s) || s.indexOf('=') >= 0 || s.length() % 4 == 1) {
            return null;
        }
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            boolean ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
                    || c == '-' || c == '_';
            if (!ok) {
                return null;
            }
        }
        try {
            return Base64.getUrlDecoder().decode(s);
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    // ------------------------------------------------------------------ keys

    /** One bundle signing key. */
    public record SigningKey(String keyId, PublicKey publicKey, String publicKeyB64, String status,
            Long validUntil) {
        public boolean trustedAt(long now) {
            return status.equals("current") || (validUntil != null && now <= validUntil);
        }
    }

    public static String keyIdOf(byte[] raw) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(raw);
            return HexFormat.of().formatHex(d, 0, 8);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    public static PublicKey ed25519(byte[] raw) throws GeneralSecurityException {
        byte[] spki = new byte[ED25519_SPKI_PREFIX.length + raw.length];
        System.arraycopy(ED25519_SPKI_PREFIX, 0, spki, 0, ED25519_SPKI_PREFIX.length);
        System.arraycopy(raw, 0, spki, ED25519_SPKI_PREFIX.length, raw.length);
        return KeyFactory.getInstance("Ed25519").generatePublic(new X509EncodedKeySpec(spki));
    }

    /**
     * Why the 32-byte Ed25519 public key {@code raw} must not be trusted, or null. Weak: y (the
     * encoding with its top bit, the sign of x, cleared) at or above the field prime p = 2^255 - 19
     * ("not in canonical form"), or y of one of the eight points of small order ("of small
     * order"), under which some Ed25519 libraries accept {@code R = identity, S = 0} as a
     * signature of any message. Plain byte comparison; keys off the curve are not refused here.
     */
    public static String weakKey(byte[] raw) {
        if (raw == null || raw.length != 32) {
            return "an Ed25519 public key has 32 bytes";
        }
        byte[] y = raw.clone();
        y[31] &= 0x7f;
        boolean atOrAboveP = y[31] == 0x7f && (y[0] & 0xff) >= 0xed;
        for (int i = 1; i < 31 && atOrAboveP; i++) {
            atOrAboveP = y[i] == (byte) 0xff;
        }
        if (atOrAboveP) {
            return "an Ed25519 public key not in canonical form";
        }
        for (byte[] small : SMALL_ORDER_Y) {
            if (Arrays.equals(small, y)) {
                return "an Ed25519 public key of small order";
            }
        }
        return null;
    }

    private static ConvergeException.BadInput bundle(String message) {
        return ConvergeException.bad("bundle", message);
    }

    public static SigningKey parseSigningKey(Object o) throws ConvergeException.BadInput {
        if (!(o instanceof Map<?, ?> obj)) {
            throw bundle("a signing key entry must be an object");
        }
        Set<Object> unknown = new HashSet<>(obj.keySet());
        unknown.removeAll(Set.of("alg", "key_id", "public_key", "status", "valid_until"));
        if (!unknown.isEmpty()) {
            throw bundle("unknown signing key fields: " + unknown);
        }
        if (!"ed25519".equals(obj.get("alg"))) {
            throw bundle("signing key alg must be ed25519");
        }
        Object text = obj.get("public_key");
        byte[] raw = unb64url(text);
        if (raw == null || !(text instanceof String)) {
            throw bundle("signing key public_key must be unpadded base64url");
        }
        if (raw.length != 32) {
            throw bundle("an Ed25519 public key has 32 bytes");
        }
        String weak = weakKey(raw);
        if (weak != null) {
            throw bundle("signing key: " + weak);
        }
        Object kid = obj.get("key_id");
        if (!keyIdOf(raw).equals(kid)) {
            throw bundle("signing key id " + kid + " does not match its public key");
        }
        Object status = obj.get("status");
        Object until = obj.get("valid_until");
        Long validUntil = null;
        if ("current".equals(status)) {
            if (until != null) {
                throw bundle("a current signing key has no valid_until");
            }
        } else if ("retired".equals(status)) {
            BigInteger u = Json.asInt(until);
            if (u == null || u.signum() <= 0 || u.compareTo(Json.MAX_SAFE_INT) > 0) {
                throw bundle("a retired signing key needs valid_until (unix seconds)");
            }
            validUntil = u.longValue();
        } else {
            throw bundle("signing key status must be current or retired");
        }
        try {
            return new SigningKey((String) kid, ed25519(raw), (String) text, (String) status, validUntil);
        } catch (GeneralSecurityException e) {
            throw bundle("signing key does not load: " + e.getMessage());
        }
    }

    public static List<String> parseProtocols(Object o) throws ConvergeException.BadInput {
        if (!(o instanceof List<?> l) || l.size() > 16) {
            throw bundle("protocols must be a list of at most 16 strings");
        }
        List<String> out = new ArrayList<>();
        for (Object p : l) {
            if (!(p instanceof String s) || s.isEmpty() || s.codePointCount(0, s.length()) > 64) {
                throw bundle("protocols must be a list of short strings");
            }
            out.add(s);
        }
        return List.copyOf(out);
    }

    public static List<SigningKey> parseSigningKeys(Object o) throws ConvergeException.BadInput {
        if (!(o instanceof List<?> l) || l.isEmpty()) {
            throw bundle("signing_keys must be a non-empty list");
        }
        if (l.size() > MAX_SIGNING_KEYS) {
            throw bundle("more than " + MAX_SIGNING_KEYS + " signing keys");
        }
        List<SigningKey> keys = new ArrayList<>();
        for (Object k : l) {
            keys.add(parseSigningKey(k));
        }
        Set<String> ids = new HashSet<>();
        int current = 0;
        for (SigningKey k : keys) {
            ids.add(k.keyId());
            if (k.status().equals("current")) {
                current++;
            }
        }
        if (ids.size() != keys.size()) {
            throw bundle("signing key ids repeat");
        }
        if (current != 1) {
            throw bundle("signing_keys must hold exactly one current key");
        }
        return List.copyOf(keys);
    }

    /** Key id to public key of the keys trusted at {@code now}. */
    public static Map<String, PublicKey> trustedKeys(List<SigningKey> keys, long now) {
        Map<String, PublicKey> out = new HashMap<>();
        for (SigningKey k : keys) {
            if (k.trustedAt(now)) {
                out.put(k.keyId(), k.publicKey());
            }
        }
        return out;
    }

    // ------------------------------------------------------------------ request

    public static String newNonce() {
        byte[] b = new byte[16];
        RANDOM.nextBytes(b);
        return b64url(b);
    }

    public static byte[] requestBytes(String host, int port, Fingerprint fp, String nonce, String ip)
            throws ConvergeException.BadInput {
        return requestBytes(host, port, fp, nonce, ip, false);
    }

    /** The request; {@code transparency}: ask for a proof of inclusion in the notary's log. */
    public static byte[] requestBytes(String host, int port, Fingerprint fp, String nonce, String ip,
            boolean transparency) throws ConvergeException.BadInput {
        Legacy.checkTarget(host, port);
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("host", host);
        doc.put("port", BigInteger.valueOf(port));
        doc.put("fingerprint", fp.colonHex());
        doc.put("alg", fp.algorithm());
        if (ip != null) {
            doc.put("ip", IpAddress.compressed(ip));
        }
        if (nonce != null) {
            doc.put("nonce", nonce);
        }
        if (transparency) {
            doc.put("transparency", Boolean.TRUE);
        }
        byte[] body = Json.compact(doc).getBytes(StandardCharsets.US_ASCII);
        String head = "POST " + ANSWER_PATH + " HTTP/1.0\r\n"
                + "Content-Type: application/json\r\n"
                + "Accept: " + MEDIA_TYPE + "\r\n"
                + "Connection: close\r\n"
                + "Content-Length: " + body.length + "\r\n\r\n";
        byte[] h = head.getBytes(StandardCharsets.US_ASCII);
        byte[] out = new byte[h.length + body.length];
        System.arraycopy(h, 0, out, 0, h.length);
        System.arraycopy(body, 0, out, h.length, body.length);
        return out;
    }

    /** The form to ask about: SHA-256 when known, else the first. */
    public static Fingerprint requestFingerprint(List<Fingerprint> forms) {
        for (Fingerprint f : forms) {
            if (f.algorithm().equals("sha256")) {
                return f;
            }
        }
        return forms.get(0);
    }

    // ------------------------------------------------------------------ verification

    /** What the verifier expects; null fields are not checked (except {@code ip} with bindIp). */
    public record Expect(String host, Integer port, Fingerprint fingerprint, String nonce, Long now,
            long maxSkew, String ip, boolean bindIp) {}

    /** A verified answer; {@code member}: the transparency member's value as received, or null. */
    public record Verified(Map<String, Object> statement, String verdict, String keyId, byte[] member) {}

    /** Where the statement ends when the answer carries a transparency member. */
    static final byte[] TRANSPARENCY_MEMBER = ",\"transparency\":".getBytes(StandardCharsets.US_ASCII);

    static int indexOf(byte[] hay, byte[] needle, int from, int to) {
        outer:
        for (int i = from; i + needle.length <= to; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (hay[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return i;
        }
        return -1;
    }

    /** {@code {"signature":{"alg":"ed25519","key_id":"K","value":"V"},"statement":}. */
    private static final Pattern PREFIX = Pattern.compile(
            "\\{\"signature\":\\{\"alg\":\"ed25519\",\"key_id\":\"([\\x20\\x21\\x23-\\x5b\\x5d-\\x7e]+)\","
                    + "\"value\":\"([\\x20\\x21\\x23-\\x5b\\x5d-\\x7e]+)\"\\},\"statement\":");

    /**
     * Checks an answer in the documented order: the fixed prefix and final brace, the key,
     * Ed25519 over the statement bytes {@code T} as received, then {@code T} alone parsed (the
     * bounds scan and Jackson) and its shape, the bindings, freshness.
     */
    public static Verified verifyAnswer(byte[] raw, Map<String, PublicKey> keys, Expect x)
            throws AnswerRejected {
        if (raw.length > MAX_ANSWER) {
            throw new AnswerRejected("malformed", "answer larger than " + MAX_ANSWER + " bytes");
        }
        String text = new String(raw, StandardCharsets.ISO_8859_1);
        Matcher m = PREFIX.matcher(text);
        if (!m.lookingAt() || raw.length == m.end() || raw[raw.length - 1] != '}') {
            throw new AnswerRejected("malformed", "answer is not the fixed prefix, the statement and a final brace");
        }
        String kid = m.group(1);
        int cut = indexOf(raw, TRANSPARENCY_MEMBER, m.end(), raw.length - 1);
        byte[] signed = Arrays.copyOfRange(raw, m.end(), cut < 0 ? raw.length - 1 : cut);
        byte[] member = cut < 0 ? null : Arrays.copyOfRange(raw, cut + TRANSPARENCY_MEMBER.length, raw.length - 1);
        PublicKey pub = keys.get(kid);
        if (pub == null) {
            throw new AnswerRejected("unknown-key", "signing key " + kid + " is not trusted by the bundle");
        }
        byte[] value = unb64url(m.group(2));
        boolean ok = false;
        if (value != null) {
            try {
                Signature v = Signature.getInstance("Ed25519");
                v.initVerify(pub);
                v.update(signed);
                ok = v.verify(value);
            } catch (GeneralSecurityException | RuntimeException e) {
                ok = false;
            }
        }
        if (!ok) {
            throw new AnswerRejected("bad-signature", "signature does not verify");
        }
        Map<String, Object> stmt;
        try {
            stmt = Json.parseVerified(signed);
        } catch (Json.JsonException e) {
            throw new AnswerRejected("malformed", "statement: " + e.getMessage());
        }
        if (!FORMAT.equals(stmt.get("type"))) {
            throw new AnswerRejected("malformed", "not a " + FORMAT + " statement");
        }
        if (!kid.equals(stmt.get("key_id"))) {
            throw new AnswerRejected("malformed", "key ids of statement and signature differ");
        }
        Object verdictObj = stmt.get("verdict");
        if (!(verdictObj instanceof String verdict)
                || !List.of("match", "mismatch", "unreachable", "refused").contains(verdict)
                || !(stmt.get("target") instanceof Map<?, ?> target)) {
            throw new AnswerRejected("malformed", "statement lacks a verdict or target");
        }
        BigInteger at = Json.asInt(stmt.get("answered_at"));
        if (at == null) {
            throw new AnswerRejected("malformed", "answered_at must be an integer");
        }
        if (x.host() != null
                && (!Json.sameValue(target.get("host"), IpAddress.expectedHost(x.host()))
                        || !Json.sameValue(target.get("port"), x.port() == null ? null : BigInteger.valueOf(x.port())))) {
            throw new AnswerRejected("wrong-target", "answer is about " + target.get("host") + ":"
                    + target.get("port") + ", not " + x.host() + ":" + x.port());
        }
        if (x.bindIp()
                && !Json.sameValue(target.get("ip"), x.ip() == null ? null : IpAddress.expectedHost(x.ip()))) {
            throw new AnswerRejected("wrong-target", "answer is about a probe of " + target.get("ip")
                    + ", not " + x.ip());
        }
        Object request = stmt.get("request");
        if (x.fingerprint() != null
                && (!(request instanceof Map<?, ?> rq)
                        || !Json.sameValue(rq.get("alg"), x.fingerprint().algorithm())
                        || !Json.sameValue(rq.get("fingerprint"), x.fingerprint().colonHex()))) {
            throw new AnswerRejected("wrong-target", "answer is about another certificate fingerprint");
        }
        if (x.nonce() != null
                && (!(request instanceof Map<?, ?> rq2) || !Json.sameValue(rq2.get("nonce"), x.nonce()))) {
            throw new AnswerRejected("nonce-mismatch", "answer does not echo our nonce");
        }
        if (x.now() != null
                && BigInteger.valueOf(x.now()).subtract(at).abs().compareTo(BigInteger.valueOf(x.maxSkew())) > 0) {
            throw new AnswerRejected("stale", "answer time is " + BigInteger.valueOf(x.now()).subtract(at)
                    + " s from now (max skew " + x.maxSkew() + " s)");
        }
        return new Verified(stmt, verdict, kid, member);
    }

    // ------------------------------------------------------------------ outcome

    static final Map<String, Integer> VERDICT_STATUS =
            Map.of("match", 200, "mismatch", 409, "unreachable", 503, "refused", 403);

    /** The vote and kind of a verified verdict. */
    static String[] voteOf(String verdict) {
        return switch (verdict) {
            case "match" -> new String[] {"success", "match"};
            case "mismatch" -> new String[] {"failure", "mismatch"};
            case "unreachable" -> new String[] {"unreachable", "target-unreachable"};
            default -> new String[] {"unreachable", "refused"};
        };
    }

    /** One response to a vote ({@code ip}: the address the caller named, or null). */
    public static Legacy.Outcome evaluate(Legacy.HttpResponse r, Map<String, PublicKey> keys,
            String host, int port, Fingerprint fp, String nonce, long now, long maxSkew, String ip) {
        return evaluate(r, keys, host, port, fp, nonce, now, maxSkew, ip, null);
    }

    /**
     * One response to a vote; with {@code log} (the bundle names a transparency log) a {@code
     * match} must carry a valid proof of inclusion, else it is a failure of that {@code log-*} kind.
     */
    public static Legacy.Outcome evaluate(Legacy.HttpResponse r, Map<String, PublicKey> keys,
            String host, int port, Fingerprint fp, String nonce, long now, long maxSkew, String ip,
            Transparency.LogPolicy log) {
        int status = r.status();
        String ctype = r.headers().getOrDefault("content-type", "").split(";", -1)[0].strip()
                .toLowerCase(Locale.ROOT);
        boolean signed = VERDICT_STATUS.containsValue(status) && ctype.equals(MEDIA_TYPE);
        if (!signed) {
            return new Legacy.Outcome("unreachable", "status", status, "HTTP status " + status, FORMAT);
        }
        Verified v;
        try {
            v = verifyAnswer(r.body(), keys, new Expect(host, port, fp, nonce, now, maxSkew, ip, true));
        } catch (AnswerRejected e) {
            return new Legacy.Outcome("failure", e.kind, status, e.getMessage(), FORMAT);
        } catch (RuntimeException e) {
            // the one parse boundary: nothing a hostile answer does escapes as an exception
            return new Legacy.Outcome("failure", "malformed", status, "unreadable answer: " + e, FORMAT);
        }
        if (VERDICT_STATUS.get(v.verdict()) != status) {
            return new Legacy.Outcome("failure", "response", status,
                    "status " + status + " with signed verdict " + v.verdict(), FORMAT);
        }
        if (log != null && v.verdict().equals("match")) {
            try {
                Transparency.checkMember(v.member(), log, (Map<?, ?>) v.statement().get("target"), fp);
            } catch (Transparency.LogError e) {
                return new Legacy.Outcome("failure", e.kind, status, e.getMessage(), FORMAT);
            }
        }
        String[] vk = voteOf(v.verdict());
        Object detail = v.statement().get("detail");
        return new Legacy.Outcome(vk[0], vk[1], status, detail instanceof String d ? d : "", FORMAT);
    }
}
