package org.converge;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.PublicKey;
import java.security.Signature;
import java.security.interfaces.RSAPublicKey;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The legacy notary protocol, client side (pure): request bytes, response framing, the signed
 * bytes {@code S} (the body without its signature member), SHA1withRSA over {@code S}, the
 * parse of {@code S} alone, and the per-notary outcome.
 */
public final class Legacy {
    public static final String FORMAT = "convergence-v1";
    public static final int MAX_RESPONSE_BYTES = 256 * 1024;
    public static final int MAX_HEADER_BYTES = 16 * 1024;
    public static final int MAX_HISTORY_ENTRIES = 1000;
    private static final byte[] SIG_MARKER = ", \"signature\": \"".getBytes(StandardCharsets.US_ASCII);
    static final Pattern HOST_RE = Pattern.compile("[A-Za-z0-9._:-]{1,253}");
    private static final Pattern STATUS_LINE = Pattern.compile("HTTP/1\\.[01] ([0-9]{3})(?: .*)?", Pattern.DOTALL);

    private Legacy() {}

    // ------------------------------------------------------------------ request

    public static void checkTarget(String host, long port) throws ConvergeException.BadInput {
        if (host == null
                || !HOST_RE.matcher(host).matches()
                || host.startsWith(".")
                || host.startsWith("-")) {
            throw ConvergeException.bad("target", "invalid target host " + host);
        }
        if (port <= 0 || port >= 65536) {
            throw ConvergeException.bad("target", "invalid target port " + port);
        }
    }

    /** The cache key {@code host:port} (host lower-cased). */
    public static String location(String host, int port) throws ConvergeException.BadInput {
        checkTarget(host, port);
        return host.toLowerCase(Locale.ROOT) + ":" + port;
    }

    public static byte[] requestBytes(String host, int port, Fingerprint fp, String ip)
            throws ConvergeException.BadInput {
        checkTarget(host, port);
        String suffix = ip == null ? "" : "/" + IpAddress.compressed(ip);
        String body = "fingerprint=" + fp.colonHex();
        String head =
                "POST /target/"
                        + host.toLowerCase(Locale.ROOT)
                        + "+"
                        + port
                        + suffix
                        + " HTTP/1.0\r\n"
                        + "Content-Type: application/x-www-form-urlencoded\r\n"
                        + "Connection: close\r\n"
                        + "Content-Length: "
                        + body.length()
                        + "\r\n\r\n";
        return (head + body).getBytes(StandardCharsets.US_ASCII);
    }

    // ------------------------------------------------------------------ framing

    /** A complete HTTP/1.x response; header names lower-case. */
    public record HttpResponse(int status, Map<String, String> headers, byte[] body) {
        public String header(String name) {
            return headers.get(name);
        }
    }

    static int indexOf(byte[] hay, byte[] needle, int from) {
        outer:
        for (int i = Math.max(from, 0); i + needle.length <= hay.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (hay[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return i;
        }
        return -1;
    }

    static int lastIndexOf(byte[] hay, byte[] needle) {
        outer:
        for (int i = hay.length - needle.length; i >= 0; i--) {
            for (int j = 0; j < needle.length; j++) {
                if (hay[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return i;
        }
        return -1;
    }

    public static HttpResponse parseHttpResponse(byte[] raw, int maxBytes)
            throws ConvergeException.BadInput {
        if (raw.length > maxBytes) {
            throw ConvergeException.bad("response", "response larger than " + maxBytes + " bytes");
        }
        int sep = indexOf(raw, new byte[] {'\r', '\n', '\r', '\n'}, 0);
        int sepLen = 4;
        if (sep < 0) {
            sep = indexOf(raw, new byte[] {'\n', '\n'}, 0);
            sepLen = 2;
        }
        if (sep < 0) {
            throw ConvergeException.bad("response", "response has no end of headers");
        }
        if (sep > MAX_HEADER_BYTES) {
            throw ConvergeException.bad("response", "response headers too large");
        }
        String head = new String(raw, 0, sep, StandardCharsets.ISO_8859_1);
        String[] lines = head.replace("\r\n", "\n").split("\n", -1);
        Matcher m = STATUS_LINE.matcher(lines[0]);
        if (!m.matches()) {
            throw ConvergeException.bad("response", "bad status line");
        }
        int status = Integer.parseInt(m.group(1));
        Map<String, String> headers = new LinkedHashMap<>();
        for (int k = 1; k < lines.length; k++) {
            String line = lines[k];
            int colon = line.indexOf(':');
            if (colon <= 0) {
                throw ConvergeException.bad("response", "bad header line");
            }
            String name = line.substring(0, colon);
            if (!name.equals(pyStrip(name))) {
                throw ConvergeException.bad("response", "bad header line");
            }
            String key = name.toLowerCase(Locale.ROOT);
            String value = pyStrip(line.substring(colon + 1));
            headers.merge(key, value, (a, b) -> a + ", " + b);
        }
        byte[] body = Arrays.copyOfRange(raw, sep + sepLen, raw.length);
        if (headers.getOrDefault("transfer-encoding", "").toLowerCase(Locale.ROOT).contains("chunked")) {
            throw ConvergeException.bad(
                    "response", "chunked transfer coding is not allowed on notary responses");
        }
        String cl = headers.get("content-length");
        if (cl != null) {
            if (cl.isEmpty() || cl.length() > 12 || !cl.chars().allMatch(c -> c >= '0' && c <= '9')) {
                throw ConvergeException.bad("response", "bad Content-Length");
            }
            long n = Long.parseLong(cl);
            if (n > body.length) {
                throw ConvergeException.bad("response", "truncated response body");
            }
            body = Arrays.copyOf(body, (int) n);
        }
        return new HttpResponse(status, headers, body);
    }

    /** Strip as the reference's {@code str.strip()} does for Latin-1 text. */
    static String pyStrip(String s) {
        int a = 0;
        int b = s.length();
        while (a < b && isPySpace(s.charAt(a))) {
            a++;
        }
        while (b > a && isPySpace(s.charAt(b - 1))) {
            b--;
        }
        return s.substring(a, b);
    }

    private static boolean isPySpace(char c) {
        return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0
                || Character.isWhitespace(c) || Character.isSpaceChar(c);
    }

    // ------------------------------------------------------------------ body

    public record HistoryEntry(Fingerprint fingerprint, long start, long finish) {}

    private static long timestamp(Object v, String what) throws ConvergeException.BadInput {
        if (v instanceof String s
                && !s.isEmpty()
                && s.length() <= 12
                && s.chars().allMatch(c -> c >= '0' && c <= '9')) {
            return Long.parseLong(s);
        }
        if (v instanceof BigInteger n
                && n.signum() >= 0
                && n.compareTo(BigInteger.TEN.pow(12)) < 0) {
            return n.longValue();
        }
        throw ConvergeException.bad("response", what + " is not a decimal unix time");
    }

    private static final Pattern SIGNATURE_TAIL = Pattern.compile("[A-Za-z0-9+/]+={0,2}\"}");

    /** The signed bytes {@code S} of a body and its signature text (step 1 of the contract). */
    public record Split(byte[] signedBytes, String signature) {}

    /**
     * A 200/409 body must be {@code S} without its final brace, then {@code , "signature":
     * "<base64>"}} as its very last bytes; else a {@code response} error.
     */
    public static Split splitBody(byte[] body, int maxBytes) throws ConvergeException.BadInput {
        if (body.length > maxBytes) {
            throw ConvergeException.bad("response", "body larger than " + maxBytes + " bytes");
        }
        int i = lastIndexOf(body, SIG_MARKER);
        if (i < 0) {
            throw ConvergeException.bad("response", "body has no trailing signature member");
        }
        int from = i + SIG_MARKER.length;
        String tail = new String(body, from, body.length - from, StandardCharsets.ISO_8859_1);
        if (!SIGNATURE_TAIL.matcher(tail).matches()) {
            throw ConvergeException.bad("response", "the signature member is not the last bytes of the body");
        }
        byte[] s = Arrays.copyOf(body, i + 1);
        s[i] = '}';
        return new Split(s, tail.substring(0, tail.length() - 2));
    }

    /**
     * Splits a body and verifies SHA1withRSA over {@code S} with the pinned key: {@code S}, else
     * a {@code response} or {@code signature} error.
     */
    public static byte[] verifiedBytes(byte[] body, PublicKey key, int maxBytes)
            throws ConvergeException.BadInput {
        Split split = splitBody(body, maxBytes);
        if (!(key instanceof RSAPublicKey)) {
            throw ConvergeException.bad("signature", "the notary certificate does not hold an RSA key");
        }
        try {
            byte[] signature = Base64.getDecoder().decode(split.signature());
            Signature s = Signature.getInstance("SHA1withRSA");
            s.initVerify(key);
            s.update(split.signedBytes());
            if (s.verify(signature)) {
                return split.signedBytes();
            }
        } catch (GeneralSecurityException | IllegalArgumentException e) {
            // base64 that does not decode, or a signature of the wrong length: verifies nothing
        }
        throw ConvergeException.bad(
                "signature", "signature does not verify against the notary's certificate");
    }

    /** The history in verified bytes {@code S}: bounds scan, parse, shape; else {@code response}. */
    public static List<HistoryEntry> entries(byte[] s) throws ConvergeException.BadInput {
        Map<String, Object> obj;
        try {
            obj = Json.parseVerified(s);
        } catch (Json.JsonException e) {
            throw ConvergeException.bad("response", "signed bytes: " + e.getMessage());
        }
        if (!(obj.get("fingerprintList") instanceof List<?> fl)) {
            throw ConvergeException.bad("response", "fingerprintList missing or not a list");
        }
        if (fl.size() > MAX_HISTORY_ENTRIES) {
            throw ConvergeException.bad("response", "more than " + MAX_HISTORY_ENTRIES + " history entries");
        }
        List<HistoryEntry> entries = new ArrayList<>();
        for (Object item : fl) {
            if (!(item instanceof Map<?, ?> it)) {
                throw ConvergeException.bad("response", "history entry is not an object");
            }
            if (!(it.get("timestamp") instanceof Map<?, ?> ts)) {
                throw ConvergeException.bad("response", "history entry has no timestamp object");
            }
            if (!(it.get("fingerprint") instanceof String fpText)) {
                throw ConvergeException.bad("response", "history entry has no fingerprint");
            }
            Fingerprint fp;
            try {
                fp = Fingerprint.parse(fpText);
            } catch (ConvergeException.BadInput e) {
                throw ConvergeException.bad("response", "history entry fingerprint: " + e.getMessage());
            }
            entries.add(
                    new HistoryEntry(
                            fp, timestamp(ts.get("start"), "start"), timestamp(ts.get("finish"), "finish")));
        }
        return List.copyOf(entries);
    }

    // ------------------------------------------------------------------ outcome

    /** One notary's answer reduced to a vote (see the reference's kinds). */
    public record Outcome(String vote, String kind, Integer status, String detail, String protocol) {
        static Outcome of(String vote, String kind, Integer status, String detail) {
            return new Outcome(vote, kind, status, detail, FORMAT);
        }
    }

    public static Outcome evaluate(int status, byte[] body, List<Fingerprint> wanted, PublicKey key) {
        if (status == 200 || status == 409) {
            List<HistoryEntry> entries;
            try {
                entries = entries(verifiedBytes(body, key, MAX_RESPONSE_BYTES));
            } catch (ConvergeException.BadInput e) {
                return Outcome.of("failure", e.kind(), status, e.getMessage());
            } catch (RuntimeException e) {
                // the one parse boundary: nothing a hostile body does escapes as an exception
                return Outcome.of("failure", "response", status, "unreadable answer: " + e);
            }
            if (status == 409) {
                return Outcome.of("failure", "mismatch", status, "notary sees another certificate");
            }
            for (Fingerprint fp : wanted) {
                if (entries.stream().anyMatch(e -> e.fingerprint().equals(fp))) {
                    return Outcome.of("success", "listed", status, "");
                }
            }
            boolean kindListed = false;
            for (Fingerprint fp : wanted) {
                for (HistoryEntry e : entries) {
                    if (e.fingerprint().algorithm().equals(fp.algorithm())) {
                        kindListed = true;
                    }
                }
            }
            if (!kindListed && !entries.isEmpty()) {
                return Outcome.of(
                        "success", "status-only", status, "list holds no fingerprint of the asked kind");
            }
            return Outcome.of(
                    "failure", "not-listed", status, "200 without the fingerprint in the signed list");
        }
        if (status == 303) {
            return Outcome.of("unreachable", "inconclusive", status, "notary could not decide");
        }
        return Outcome.of("unreachable", "status", status, "HTTP status " + status);
    }

    /** A whole response (read until EOF) to a vote; framing errors are {@code response}. */
    public static Outcome outcomeFromHttp(
            byte[] raw, List<Fingerprint> wanted, PublicKey key, int maxBytes) {
        HttpResponse r;
        try {
            r = parseHttpResponse(raw, maxBytes);
        } catch (ConvergeException.BadInput e) {
            return Outcome.of("failure", e.kind(), null, e.getMessage());
        }
        return evaluate(r.status(), r.body(), wanted, key);
    }
}
