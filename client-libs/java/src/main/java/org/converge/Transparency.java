package org.converge;

import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.PublicKey;
import java.security.Signature;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * The notary's transparency log, client side (pure): the bundle's {@code transparency} member
 * and the check of an extended answer's proof of inclusion ({@code docs/transparency.md},
 * "Clients"; formats c2sp.org/signed-note, tlog-checkpoint, tlog-cosignature; RFC 6962 hashing,
 * RFC 9162 verification). Ed25519 is the JDK's ({@code Signature "Ed25519"}).
 *
 * <p>{@link #checkMember} checks, in this order, each failure a {@link LogError} of the kind
 * named: 1 the member is present ({@code log-missing}); 2 the bounds scan and Jackson give an
 * object with string {@code checkpoint} and {@code entry}, an integer {@code index} >= 0 and a
 * {@code proof} array of at most 63 strings ({@code log-proof}); 3 the checkpoint is a signed
 * note whose text is a checkpoint of the log key's origin, signed by the log key ({@code
 * log-checkpoint}; lines by unknown keys are ignored); 4 at least {@code min_cosignatures}
 * distinct bundle witnesses cosigned it, and no listed witness's line fails ({@code
 * log-witness}); 5 the entry is base64 of a {@code converge-observation/1} object about the
 * statement's target and the asked fingerprint ({@code log-entry}); 6 the proof puts {@code
 * SHA-256(0x00 || entry)} at {@code index} in the checkpoint's tree ({@code log-proof}).
 */
public final class Transparency {
    public static final List<String> LOG_KINDS =
            List.of("log-missing", "log-proof", "log-checkpoint", "log-witness", "log-entry");
    public static final String ENTRY_TYPE = "converge-observation/1";
    public static final int HASH_SIZE = 32;
    public static final int MAX_PROOF = 63;
    public static final int MAX_NOTE = 64 * 1024;
    public static final int MAX_SIGNATURE_LINES = 100;
    public static final int MAX_WITNESSES = 32;
    public static final int ED25519_TYPE = 0x01;
    public static final int COSIGNATURE_TYPE = 0x04;
    private static final String SIG_PREFIX = "\u2014 ";
    private static final Pattern SIZE = Pattern.compile("0|[1-9][0-9]{0,19}");
    private static final Pattern HEX8 = Pattern.compile("[0-9a-f]{8}");
    private static final Pattern B64 = Pattern.compile("[A-Za-z0-9+/]*={0,2}");

    private Transparency() {}

    /** A transparency check failed; {@link #kind} is one of {@link #LOG_KINDS}. */
    public static final class LogError extends Exception {
        private static final long serialVersionUID = 1L;
        public final String kind;

        LogError(String kind, String message) {
            super(message);
            this.kind = kind;
        }
    }

    /** A malformed input inside one step (mapped to that step's kind). */
    public static final class Invalid extends Exception {
        private static final long serialVersionUID = 1L;

        Invalid(String message) {
            super(message);
        }
    }

    // ------------------------------------------------------------------ keys

    /** A signed-note verifier key. */
    public record NoteKey(String name, byte[] keyId, PublicKey publicKey, int type, String vkey) {}

    /** A bundle's {@code transparency} member. */
    public record LogPolicy(NoteKey log, String url, List<NoteKey> witnesses, int minCosignatures) {}

    static byte[] sha256(byte[]... parts) {
        try {
            MessageDigest d = MessageDigest.getInstance("SHA-256");
            for (byte[] p : parts) {
                d.update(p);
            }
            return d.digest();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    static boolean validName(String name) {
        return !name.isEmpty() && name.codePoints().allMatch(c -> c != '+' && !Character.isWhitespace(c)
                && !Character.isSpaceChar(c) && !Character.isISOControl(c) && Character.isDefined(c));
    }

    /** Standard padded base64 only. */
    static byte[] b64(Object text) throws Invalid {
        if (!(text instanceof String s) || s.length() % 4 != 0 || !B64.matcher(s).matches()) {
            throw new Invalid("not base64");
        }
        try {
            return Base64.getDecoder().decode(s);
        } catch (IllegalArgumentException e) {
            throw new Invalid("not base64");
        }
    }

    static byte[] keyId(String name, int type, byte[] raw) {
        byte[] d = sha256(name.getBytes(StandardCharsets.UTF_8), new byte[] {'\n', (byte) type}, raw);
        return Arrays.copyOf(d, 4);
    }

    /** {@code <name>+<8 hex>+<base64(type || 32-byte key)>}. */
    public static NoteKey parseVkey(Object o, int type) throws Invalid {
        if (!(o instanceof String text) || text.length() > 1024) {
            throw new Invalid("a verifier key is a short string");
        }
        int a = text.indexOf('+');
        int b = a < 0 ? -1 : text.indexOf('+', a + 1);
        if (b < 0 || !validName(text.substring(0, a)) || !HEX8.matcher(text.substring(a + 1, b)).matches()) {
            throw new Invalid(text + " is not <name>+<8 hex>+<base64 key>");
        }
        String name = text.substring(0, a);
        byte[] raw = b64(text.substring(b + 1));
        if (raw.length != 33 || raw[0] != type) {
            throw new Invalid(text + " is not a type 0x0" + type + " Ed25519 key");
        }
        byte[] key = Arrays.copyOfRange(raw, 1, 33);
        String weak = Extended.weakKey(key);
        if (weak != null) {
            throw new Invalid(text + ": " + weak);
        }
        byte[] id = HexFormat.of().parseHex(text.substring(a + 1, b));
        if (!Arrays.equals(keyId(name, type, key), id)) {
            throw new Invalid(text + ": the key id does not match the key");
        }
        try {
            return new NoteKey(name, id, Extended.ed25519(key), type, text);
        } catch (GeneralSecurityException e) {
            throw new Invalid(text + ": the key does not load");
        }
    }

    /** The 32 raw Ed25519 key bytes of {@code k}, from its verifier key text (checked when parsed). */
    static byte[] rawKey(NoteKey k) {
        String text = k.vkey();
        int b = text.indexOf('+', text.indexOf('+') + 1);
        byte[] typed = Base64.getDecoder().decode(text.substring(b + 1));
        return Arrays.copyOfRange(typed, 1, 33);
    }

    private static ConvergeException.BadInput bundle(String message) {
        return ConvergeException.bad("bundle", message);
    }

    /** The bundle's {@code transparency} member; a bundle error on anything malformed. */
    public static LogPolicy parseLogPolicy(Object o) throws ConvergeException.BadInput {
        if (!(o instanceof Map<?, ?> obj)) {
            throw bundle("transparency must be an object");
        }
        Set<Object> unknown = new HashSet<>(obj.keySet());
        unknown.removeAll(Set.of("log", "url", "witnesses", "min_cosignatures"));
        if (!unknown.isEmpty()) {
            throw bundle("unknown transparency fields: " + unknown);
        }
        NoteKey log;
        try {
            log = parseVkey(obj.get("log"), ED25519_TYPE);
        } catch (Invalid e) {
            throw bundle("transparency log key: " + e.getMessage());
        }
        Object url = obj.get("url");
        if (url != null && (!(url instanceof String u) || !u.startsWith("https://") || u.length() > 2048)) {
            throw bundle("transparency url must be an https:// URL");
        }
        Object rawWs = obj.containsKey("witnesses") ? obj.get("witnesses") : List.of();
        if (!(rawWs instanceof List<?> ws) || ws.size() > MAX_WITNESSES) {
            throw bundle("transparency witnesses must be a list of at most " + MAX_WITNESSES);
        }
        List<NoteKey> witnesses = new ArrayList<>();
        Set<String> seen = new HashSet<>();
        for (Object w : ws) {
            if (!(w instanceof Map<?, ?> wm) || !wm.keySet().equals(Set.of("name", "vkey"))) {
                throw bundle("a witness is an object with name and vkey");
            }
            NoteKey k;
            try {
                k = parseVkey(wm.get("vkey"), COSIGNATURE_TYPE);
            } catch (Invalid e) {
                throw bundle("witness key: " + e.getMessage());
            }
            if (!k.name().equals(wm.get("name"))) {
                throw bundle("witness name " + wm.get("name") + " is not its key's name");
            }
            if (!seen.add(k.name() + "+" + HexFormat.of().formatHex(k.keyId()))) {
                throw bundle("a witness is listed twice");
            }
            witnesses.add(k);
        }
        // One key under two names: a cosignature does not sign the witness's name, so one key
        // would count as two witnesses (or the log would cosign its own checkpoints).
        Set<String> raws = new HashSet<>(Set.of(HexFormat.of().formatHex(rawKey(log))));
        for (NoteKey k : witnesses) {
            if (!raws.add(HexFormat.of().formatHex(rawKey(k)))) {
                throw bundle("transparency names one key twice (two witnesses, or a witness and the log)");
            }
        }
        Object need = obj.containsKey("min_cosignatures") ? obj.get("min_cosignatures") : BigInteger.ZERO;
        BigInteger n = Json.asInt(need);
        if (n == null || n.signum() < 0 || n.compareTo(BigInteger.valueOf(witnesses.size())) > 0) {
            throw bundle("min_cosignatures must be an integer from 0 to " + witnesses.size());
        }
        return new LogPolicy(log, (String) url, List.copyOf(witnesses), n.intValue());
    }

    // ------------------------------------------------------------------ hashing

    public static byte[] leafHash(byte[] entry) {
        return sha256(new byte[] {0}, entry);
    }

    static byte[] nodeHash(byte[] left, byte[] right) {
        return sha256(new byte[] {1}, left, right);
    }

    /** RFC 6962, 2.1: the root of the leaf hashes {@code leaves}. */
    public static byte[] treeRoot(List<byte[]> leaves) {
        if (leaves.isEmpty()) {
            return sha256();
        }
        if (leaves.size() == 1) {
            return leaves.get(0);
        }
        int k = Integer.highestOneBit(leaves.size() - 1);
        return nodeHash(treeRoot(leaves.subList(0, k)), treeRoot(leaves.subList(k, leaves.size())));
    }

    /** RFC 9162, 2.1.3.2: {@code proof} puts {@code leaf} at {@code index} of the tree {@code root}. */
    public static void verifyInclusion(byte[] leaf, long index, long size, List<byte[]> proof, byte[] root)
            throws Invalid {
        if (index < 0 || index >= size) {
            throw new Invalid("index " + index + " is not in a tree of " + size);
        }
        checkHashes(proof);
        long fn = index;
        long sn = size - 1;
        byte[] r = leaf;
        for (byte[] p : proof) {
            if (sn == 0) {
                throw new Invalid("inclusion proof too long");
            }
            if ((fn & 1) == 1 || fn == sn) {
                r = nodeHash(p, r);
                while ((fn & 1) == 0 && fn != 0) {
                    fn >>= 1;
                    sn >>= 1;
                }
            } else {
                r = nodeHash(r, p);
            }
            fn >>= 1;
            sn >>= 1;
        }
        if (sn != 0 || !Arrays.equals(r, root)) {
            throw new Invalid("inclusion proof does not lead to the root");
        }
    }

    private static void checkHashes(List<byte[]> hashes) throws Invalid {
        for (byte[] h : hashes) {
            if (h.length != HASH_SIZE) {
                throw new Invalid("a proof hash is not 32 bytes");
            }
        }
    }

    /** RFC 9162, 2.1.4.2: tree {@code oldSize} is a prefix of tree {@code newSize}. */
    public static void verifyConsistency(long oldSize, long newSize, byte[] oldRoot, byte[] newRoot,
            List<byte[]> proof) throws Invalid {
        if (oldSize < 0 || oldSize > newSize) {
            throw new Invalid("old size " + oldSize + " is not within " + newSize);
        }
        checkHashes(proof);
        if (oldSize == newSize || oldSize == 0) {
            if (!proof.isEmpty() || (oldSize == newSize && !Arrays.equals(oldRoot, newRoot))) {
                throw new Invalid("no proof between these trees");
            }
            return;
        }
        List<byte[]> path = new ArrayList<>();
        if ((oldSize & (oldSize - 1)) == 0) {
            path.add(oldRoot);
        }
        path.addAll(proof);
        if (path.isEmpty()) {
            throw new Invalid("consistency proof is empty");
        }
        long fn = oldSize - 1;
        long sn = newSize - 1;
        while ((fn & 1) == 1) {
            fn >>= 1;
            sn >>= 1;
        }
        byte[] fr = path.get(0);
        byte[] sr = path.get(0);
        for (byte[] c : path.subList(1, path.size())) {
            if (sn == 0) {
                throw new Invalid("consistency proof too long");
            }
            if ((fn & 1) == 1 || fn == sn) {
                fr = nodeHash(c, fr);
                sr = nodeHash(c, sr);
                while ((fn & 1) == 0 && fn != 0) {
                    fn >>= 1;
                    sn >>= 1;
                }
            } else {
                sr = nodeHash(sr, c);
            }
            fn >>= 1;
            sn >>= 1;
        }
        if (sn != 0 || !Arrays.equals(fr, oldRoot) || !Arrays.equals(sr, newRoot)) {
            throw new Invalid("consistency proof does not lead to both roots");
        }
    }

    // ------------------------------------------------------------------ notes

    /** A checkpoint the log signed and enough witnesses cosigned. */
    public record Checkpoint(String origin, BigInteger size, byte[] root, List<String> cosignedBy) {}

    private record SigLine(String name, byte[] keyId, byte[] sig) {}

    private static List<SigLine> splitNote(String note, String[] textOut) throws Invalid {
        if (note.getBytes(StandardCharsets.UTF_8).length > MAX_NOTE) {
            throw new Invalid("note larger than " + MAX_NOTE + " bytes");
        }
        for (int i = 0; i < note.length(); i++) {
            char c = note.charAt(i);
            if (c != '\n' && (c < ' ' || (c >= 0x7f && c <= 0x9f))) {
                throw new Invalid("control character in the note");
            }
            if (Character.isSurrogate(c) && !(Character.isHighSurrogate(c) && i + 1 < note.length()
                    && Character.isLowSurrogate(note.charAt(++i)))) {
                throw new Invalid("the note is not UTF-8");
            }
        }
        int cut = note.lastIndexOf("\n\n");
        if (cut < 0 || !note.endsWith("\n")) {
            throw new Invalid("not a signed note");
        }
        textOut[0] = note.substring(0, cut + 1);
        String[] lines = note.substring(Math.min(cut + 2, note.length() - 1), note.length() - 1).split("\n", -1);
        if (lines.length > MAX_SIGNATURE_LINES) {
            throw new Invalid("too many signature lines");
        }
        List<SigLine> sigs = new ArrayList<>();
        for (String line : lines) {
            int sp = line.startsWith(SIG_PREFIX) ? line.indexOf(' ', SIG_PREFIX.length()) : -1;
            if (sp < 0 || !validName(line.substring(SIG_PREFIX.length(), sp))) {
                throw new Invalid("malformed signature line");
            }
            byte[] raw = b64(line.substring(sp + 1));
            if (raw.length < 5) {
                throw new Invalid("signature too short");
            }
            sigs.add(new SigLine(line.substring(SIG_PREFIX.length(), sp), Arrays.copyOf(raw, 4),
                    Arrays.copyOfRange(raw, 4, raw.length)));
        }
        return sigs;
    }

    static boolean ed25519Verify(PublicKey key, byte[] message, byte[] sig) {
        try {
            Signature v = Signature.getInstance("Ed25519");
            v.initVerify(key);
            v.update(message);
            return v.verify(sig);
        } catch (GeneralSecurityException | RuntimeException e) {
            return false;
        }
    }

    /** Whether {@code key} signed (its first line verifies); Invalid if that line does not verify. */
    private static boolean signedBy(NoteKey key, List<SigLine> sigs, byte[] text, boolean cosignature)
            throws Invalid {
        for (SigLine s : sigs) {
            if (!s.name().equals(key.name()) || !Arrays.equals(s.keyId(), key.keyId())) {
                continue;
            }
            boolean ok;
            if (cosignature) {
                if (s.sig().length != 8 + 64) {
                    throw new Invalid("a cosignature is 8 + 64 bytes");
                }
                long t = ByteBuffer.wrap(s.sig(), 0, 8).getLong();
                byte[] head = ("cosignature/v1\ntime " + Long.toUnsignedString(t) + "\n")
                        .getBytes(StandardCharsets.US_ASCII);
                byte[] msg = Arrays.copyOf(head, head.length + text.length);
                System.arraycopy(text, 0, msg, head.length, text.length);
                ok = ed25519Verify(key.publicKey(), msg, Arrays.copyOfRange(s.sig(), 8, 72));
            } else {
                ok = ed25519Verify(key.publicKey(), text, s.sig());
            }
            if (!ok) {
                throw new Invalid("the signature line of " + key.name() + " does not verify");
            }
            return true;
        }
        return false;
    }

    /** Steps 3 and 4: the checkpoint signed by the log and cosigned by enough witnesses. */
    public static Checkpoint openCheckpoint(Object note, LogPolicy policy) throws LogError {
        List<SigLine> sigs;
        byte[] message;
        String origin;
        BigInteger size;
        byte[] root;
        try {
            if (!(note instanceof String n)) {
                throw new Invalid("the checkpoint is not text");
            }
            String[] text = new String[1];
            sigs = splitNote(n, text);
            String[] lines = text[0].substring(0, text[0].length() - 1).split("\n", -1);
            if (lines.length < 3 || Arrays.stream(lines).anyMatch(String::isEmpty)) {
                throw new Invalid("a checkpoint has origin, size and root lines");
            }
            if (!SIZE.matcher(lines[1]).matches()) {
                throw new Invalid("size is not a decimal without leading zeros");
            }
            origin = lines[0];
            size = new BigInteger(lines[1]);
            root = b64(lines[2]);
            if (root.length != HASH_SIZE) {
                throw new Invalid("root is not 32 bytes");
            }
            if (!origin.equals(policy.log().name())) {
                throw new Invalid("origin " + origin + " is not the log's " + policy.log().name());
            }
            message = text[0].getBytes(StandardCharsets.UTF_8);
            if (!signedBy(policy.log(), sigs, message, false)) {
                throw new Invalid("no signature by the log's key");
            }
        } catch (Invalid | RuntimeException e) {
            throw new LogError("log-checkpoint", "checkpoint: " + e.getMessage());
        }
        List<String> cosigned = new ArrayList<>();
        for (NoteKey w : policy.witnesses()) {
            try {
                if (signedBy(w, sigs, message, true)) {
                    cosigned.add(w.name());
                }
            } catch (Invalid e) {
                throw new LogError("log-witness", "checkpoint: " + e.getMessage());
            }
        }
        if (cosigned.size() < policy.minCosignatures()) {
            throw new LogError("log-witness", "checkpoint cosigned by " + cosigned.size()
                    + " of the bundle's witnesses, " + policy.minCosignatures() + " required");
        }
        return new Checkpoint(origin, size, root, List.copyOf(cosigned));
    }

    // ------------------------------------------------------------------ the member

    /** What a valid member proves: the entry at {@code index} of the log's tree {@code checkpoint}. */
    public record Proven(long index, Map<String, Object> entry, Checkpoint checkpoint) {}

    /**
     * Check an answer's {@code transparency} member (its bytes as received, null when absent)
     * for the statement's {@code target} ({@code host}, {@code port}, {@code ip}) and the
     * fingerprint asked about; throws {@link LogError} and nothing else.
     */
    public static Proven checkMember(byte[] member, LogPolicy policy, Map<?, ?> target, Fingerprint fp)
            throws LogError {
        if (member == null) {
            throw new LogError("log-missing", "the answer carries no proof of inclusion in the log");
        }
        try {
            return check(member, policy, target, fp);
        } catch (RuntimeException e) {
            // the one parse boundary: nothing hostile bytes do escapes as an exception
            throw new LogError("log-proof", "unreadable transparency member: " + e);
        }
    }

    private static Proven check(byte[] member, LogPolicy policy, Map<?, ?> target, Fingerprint fp)
            throws LogError {
        Map<String, Object> obj;
        try {
            obj = Json.parseVerified(member);
        } catch (Json.JsonException e) {
            throw new LogError("log-proof", "transparency member is not bounded strict JSON: " + e.getMessage());
        }
        BigInteger index = Json.asInt(obj.get("index"));
        if (!(obj.get("checkpoint") instanceof String) || !(obj.get("entry") instanceof String entryText)
                || index == null || index.signum() < 0 || !(obj.get("proof") instanceof List<?> proofList)
                || proofList.size() > MAX_PROOF || !proofList.stream().allMatch(p -> p instanceof String)) {
            throw new LogError("log-proof", "transparency member lacks checkpoint, entry, index or proof");
        }
        Checkpoint ck = openCheckpoint(obj.get("checkpoint"), policy);
        byte[] entryBytes;
        Map<String, Object> entry;
        try {
            entryBytes = b64(entryText);
            entry = Json.parseVerified(entryBytes);
        } catch (Invalid | Json.JsonException e) {
            throw new LogError("log-entry", "the logged entry is not base64 of JSON: " + e.getMessage());
        }
        if (!ENTRY_TYPE.equals(entry.get("type"))) {
            throw new LogError("log-entry", "the logged entry is not a " + ENTRY_TYPE);
        }
        for (String name : List.of("host", "port", "ip")) {
            if (!Objects.equals(entry.get(name), target.get(name))) {
                throw new LogError("log-entry", "the logged entry's " + name + " is " + entry.get(name)
                        + ", not " + target.get(name));
            }
        }
        if (!fp.colonHex().equals(entry.get(fp.algorithm()))) {
            throw new LogError("log-entry", "the logged entry is about another certificate");
        }
        try {
            List<byte[]> proof = new ArrayList<>();
            for (Object p : proofList) {
                proof.add(b64(p));
            }
            if (ck.size().bitLength() > 63) {
                throw new Invalid("a tree too large for a proof of " + MAX_PROOF + " hashes");
            }
            verifyInclusion(leafHash(entryBytes), index.longValueExact(), ck.size().longValue(), proof, ck.root());
        } catch (Invalid e) {
            throw new LogError("log-proof", "inclusion proof: " + e.getMessage());
        }
        return new Proven(index.longValueExact(), entry, ck);
    }
}
