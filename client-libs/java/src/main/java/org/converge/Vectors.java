package org.converge;

import java.io.ByteArrayInputStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.PublicKey;
import java.security.cert.CertificateFactory;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The shared JSON test vectors ({@code client-libs/vectors/*.json}) run through this library:
 * {@link #runCase} is this implementation's output for one case, {@link #compare} checks it
 * against the case's expected fields (as the conformance runner does).
 */
public final class Vectors {
    public static final List<String> SCHEMAS = List.of(
            "converge-vectors/fingerprints/1",
            "converge-vectors/requests/1",
            "converge-vectors/legacy-signatures/1",
            "converge-vectors/notary-responses/1",
            "converge-vectors/bundles/1",
            "converge-vectors/consensus/1",
            "converge-vectors/cache/1",
            "converge-vectors/extended-answers/1",
            "converge-vectors/config/1",
            "converge-vectors/transparency/1");
    static final List<String> COMPARED = List.of("result", "error", "kind", "algorithm", "canonical",
            "request", "signed_bytes", "name", "version", "hosts", "verdict",
            "extended", "enabled");

    private Vectors() {}

    private static byte[] bytes(Map<?, ?> c, String name) {
        if (c.containsKey(name + "_hex")) {
            return HexFormat.of().parseHex((String) c.get(name + "_hex"));
        }
        return ((String) c.get(name)).getBytes(StandardCharsets.ISO_8859_1);
    }

    private static PublicKey key(Map<?, ?> doc, String name) throws Exception {
        String pem = (String) ((Map<?, ?>) doc.get("certificates")).get(name);
        return CertificateFactory.getInstance("X.509")
                .generateCertificate(new ByteArrayInputStream(pem.getBytes(StandardCharsets.US_ASCII)))
                .getPublicKey();
    }

    private static int intOf(Object o) {
        return ((BigInteger) o).intValueExact();
    }

    @SuppressWarnings("unchecked")
    private static List<String> strings(Object o) {
        return (List<String>) o;
    }

    /** This implementation's output for one case of the vector file {@code doc}. */
    public static Map<String, Object> runCase(Map<?, ?> doc, Map<?, ?> c) throws Exception {
        String schema = (String) doc.get("schema");
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("id", c.get("id"));
        try {
            switch (schema) {
                case "converge-vectors/fingerprints/1" -> {
                    Fingerprint fp = Fingerprint.parse((String) c.get("input"));
                    out.put("result", "valid");
                    out.put("algorithm", fp.algorithm());
                    out.put("canonical", fp.colonHex());
                }
                case "converge-vectors/requests/1" -> {
                    Fingerprint fp = Fingerprint.parse((String) c.get("fingerprint"));
                    BigInteger port = (BigInteger) c.get("port");
                    long p = port.bitLength() > 31 ? -1 : port.longValue();
                    Legacy.checkTarget((String) c.get("host"), p);
                    byte[] req = Legacy.requestBytes((String) c.get("host"), (int) p, fp, null);
                    out.put("result", "valid");
                    out.put("request", new String(req, StandardCharsets.US_ASCII));
                }
                case "converge-vectors/legacy-signatures/1" -> {
                    byte[] s = Legacy.verifiedBytes(
                            bytes(c, "body"), key(doc, (String) c.get("certificate")), Legacy.MAX_RESPONSE_BYTES);
                    Legacy.entries(s);
                    out.put("result", "valid");
                    out.put("signed_bytes", new String(s, StandardCharsets.UTF_8));
                }
                case "converge-vectors/notary-responses/1" -> {
                    List<Fingerprint> wanted = new ArrayList<>();
                    for (String f : strings(c.get("fingerprints"))) {
                        wanted.add(Fingerprint.parse(f));
                    }
                    Legacy.Outcome o = Legacy.outcomeFromHttp(bytes(c, "raw"), wanted,
                            key(doc, (String) c.get("certificate")), Legacy.MAX_RESPONSE_BYTES);
                    out.put("result", o.vote());
                    out.put("kind", o.kind());
                }
                case "converge-vectors/bundles/1" -> {
                    Bundle b = Bundle.parse(bytes(c, "bundle"));
                    out.put("result", "valid");
                    out.put("name", b.name);
                    out.put("version", BigInteger.valueOf(b.version));
                    List<Object> hosts = new ArrayList<>();
                    for (Bundle.Host h : b.hosts) {
                        Map<String, Object> m = new LinkedHashMap<>();
                        m.put("host", h.host);
                        m.put("ssl_port", BigInteger.valueOf(h.sslPort));
                        m.put("http_port", BigInteger.valueOf(h.httpPort));
                        m.put("pin", h.pin.colonHex());
                        hosts.add(m);
                    }
                    out.put("hosts", hosts);
                }
                case "converge-vectors/consensus/1" -> {
                    Policy policy = Policy.parse((String) c.get("policy"));
                    int pending = c.containsKey("pending") ? intOf(c.get("pending")) : 0;
                    boolean standAside = (Boolean) c.get("stand_aside");
                    List<String> votes = strings(c.get("votes"));
                    if (pending != 0) {
                        Boolean v = policy.settled(votes, pending, standAside);
                        out.put("result", v == null ? "unsettled" : (v ? "trusted" : "untrusted"));
                    } else {
                        out.put("result", policy.decide(votes, standAside) ? "trusted" : "untrusted");
                    }
                }
                case "converge-vectors/cache/1" -> {
                    Object ts = c.get("timestamp");
                    Object lt = c.get("lifetime");
                    out.put("result", CachePolicy.decide(ts == null ? null : ((BigInteger) ts).longValue(),
                            ((Number) numberOf(c.get("now"))).doubleValue(),
                            lt == null ? null : ((Number) numberOf(lt)).doubleValue()));
                }
                case "converge-vectors/extended-answers/1" -> out.putAll(extendedCase(doc, c));
                case "converge-vectors/transparency/1" -> out.putAll(transparencyCase(doc, c));
                case "converge-vectors/config/1" -> {
                    out.put("result", "valid");
                    out.put("enabled", configCase(c));
                }
                default -> throw new IllegalArgumentException("unknown vector schema " + schema);
            }
        } catch (ConvergeException.BadInput e) {
            out.put("result", "invalid");
            out.put("error", e.kind());
        }
        return out;
    }

    private static Object numberOf(Object o) {
        return o instanceof BigInteger b ? (Number) b.doubleValue() : o;
    }

    private static Map<String, Object> extendedCase(Map<?, ?> doc, Map<?, ?> c) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String type = (String) c.get("type");
        if (type.equals("bundle")) {
            try {
                Bundle b = Bundle.parse(bytes(c, "bundle"));
                out.put("result", "valid");
                out.put("extended", b.offersExtended());
            } catch (ConvergeException.BadInput e) {
                out.put("result", "invalid");
                out.put("kind", e.kind());
            }
            return out;
        }
        Map<?, ?> exp = (Map<?, ?>) c.get("expect");
        List<Object> keyDocs = new ArrayList<>();
        Map<?, ?> signingKeys = (Map<?, ?>) doc.get("signing_keys");
        for (String name : strings(c.get("bundle_keys"))) {
            keyDocs.add(signingKeys.get(name));
        }
        List<Extended.SigningKey> keys = Extended.parseSigningKeys(keyDocs);
        long now = ((BigInteger) exp.get("now")).longValue();
        Object fp = exp.get("fingerprint");
        Object port = exp.get("port");
        Extended.Expect x = new Extended.Expect(
                (String) exp.get("host"),
                port == null ? null : ((BigInteger) port).intValue(),
                fp == null ? null : Fingerprint.parse((String) fp),
                (String) exp.get("nonce"),
                now,
                exp.containsKey("max_skew") ? ((BigInteger) exp.get("max_skew")).longValue() : 300,
                (String) exp.get("ip"),
                exp.containsKey("ip"));
        try {
            Extended.Verified v = Extended.verifyAnswer(bytes(c, "answer"), Extended.trustedKeys(keys, now), x);
            out.put("result", "valid");
            out.put("verdict", v.verdict());
        } catch (Extended.AnswerRejected e) {
            out.put("result", "rejected");
            out.put("kind", e.kind);
        }
        return out;
    }

    private static byte[] b64(Object o) {
        return java.util.Base64.getDecoder().decode((String) o);
    }

    private static List<byte[]> hashes(Object o) {
        List<byte[]> out = new ArrayList<>();
        for (String t : strings(o)) {
            out.add(b64(t));
        }
        return out;
    }

    private static String b64(byte[] b) {
        return java.util.Base64.getEncoder().encodeToString(b);
    }

    /** One case of {@code converge-vectors/transparency/1} (see the file's description). */
    private static Map<String, Object> transparencyCase(Map<?, ?> doc, Map<?, ?> c) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String type = (String) c.get("type");
        switch (type) {
            case "tree" -> {
                List<byte[]> leaves = new ArrayList<>();
                for (String e : strings(doc.get("entries")).subList(0, intOf(c.get("size")))) {
                    leaves.add(Transparency.leafHash(b64((Object) e)));
                }
                out.put("result", "valid");
                out.put("root", b64(Transparency.treeRoot(leaves)));
            }
            case "checkpoint" -> {
                try {
                    List<Transparency.NoteKey> ws = new ArrayList<>();
                    for (String w : strings(c.get("witnesses"))) {
                        ws.add(Transparency.parseVkey(w, Transparency.COSIGNATURE_TYPE));
                    }
                    Transparency.LogPolicy policy = new Transparency.LogPolicy(
                            Transparency.parseVkey(c.get("log"), Transparency.ED25519_TYPE), null, ws,
                            intOf(c.get("min_cosignatures")));
                    Transparency.Checkpoint ck = Transparency.openCheckpoint(c.get("checkpoint"), policy);
                    out.put("result", "valid");
                    out.put("size", ck.size());
                    out.put("root", b64(ck.root()));
                } catch (Transparency.LogError e) {
                    out.put("result", "invalid");
                    out.put("kind", e.kind);
                }
            }
            case "answer" -> {
                Map<?, ?> exp = (Map<?, ?>) c.get("expect");
                Fingerprint fp = Fingerprint.parse((String) (exp.get("sha256") != null ? exp.get("sha256")
                        : exp.get("sha1")));
                Object member = c.get("transparency");
                byte[] raw = member == null ? null : Json.compact(member).getBytes(StandardCharsets.UTF_8);
                Map<String, Object> target = new LinkedHashMap<>();
                target.put("host", exp.get("host"));
                target.put("port", exp.get("port"));
                target.put("ip", exp.get("ip"));
                try {
                    Transparency.checkMember(raw, Transparency.parseLogPolicy(c.get("bundle")), target, fp);
                    out.put("result", "valid");
                } catch (Transparency.LogError e) {
                    out.put("result", "rejected");
                    out.put("kind", e.kind);
                }
            }
            case "inclusion", "consistency" -> {
                try {
                    if (type.equals("inclusion")) {
                        byte[] leaf = b64(c.get("leaf"));
                        byte[] root = b64(c.get("root"));
                        if (leaf.length != 32 || root.length != 32) {
                            throw new Transparency.Invalid("a hash of the wrong length");
                        }
                        Transparency.verifyInclusion(leaf, ((BigInteger) c.get("index")).longValueExact(),
                                ((BigInteger) c.get("size")).longValueExact(), hashes(c.get("proof")), root);
                    } else {
                        Transparency.verifyConsistency(((BigInteger) c.get("old_size")).longValueExact(),
                                ((BigInteger) c.get("new_size")).longValueExact(), b64(c.get("old_root")),
                                b64(c.get("new_root")), hashes(c.get("proof")));
                    }
                    out.put("result", "valid");
                } catch (Transparency.Invalid e) {
                    out.put("result", "invalid");
                }
            }
            default -> throw new IllegalArgumentException("unknown transparency case type " + type);
        }
        return out;
    }

    /**
     * Differences between a case's expected fields and {@code actual} (empty: pass); for the
     * transparency case types also {@code tree}'s {@code root} and {@code checkpoint}'s {@code
     * size} and {@code root} ({@code size} and {@code root} are inputs of the other types).
     */
    public static List<String> compare(Map<?, ?> c, Map<String, Object> actual) {
        List<String> problems = new ArrayList<>();
        List<String> keys = new ArrayList<>(COMPARED);
        if ("tree".equals(c.get("type"))) {
            keys.add("root");
        } else if ("checkpoint".equals(c.get("type"))) {
            keys.addAll(List.of("size", "root"));
        }
        for (String k : keys) {
            if (c.containsKey(k) && !Json.compact(c.get(k)).equals(Json.compact(actual.get(k)))) {
                problems.add(k + ": expected " + Json.compact(c.get(k)) + ", got " + Json.compact(actual.get(k)));
            }
        }
        return problems;
    }

    /** Create the case's file tree in a fresh directory, load it, list the enabled names. */
    static List<Object> configCase(Map<?, ?> c) throws ConvergeException.BadInput {
        java.nio.file.Path root;
        try {
            root = java.nio.file.Files.createTempDirectory("converge-vector-");
        } catch (java.io.IOException e) {
            throw new IllegalStateException(e);
        }
        try {
            Map<?, ?> files = c.get("files") instanceof Map<?, ?> m ? m : Map.of();
            for (Map.Entry<?, ?> f : files.entrySet()) {
                java.nio.file.Path p = root.resolve((String) f.getKey());
                java.nio.file.Files.createDirectories(p.getParent());
                java.nio.file.Files.writeString(p, (String) f.getValue(), StandardCharsets.UTF_8);
            }
            Map<?, ?> links = c.get("links") instanceof Map<?, ?> m ? m : Map.of();
            for (Map.Entry<?, ?> l : links.entrySet()) {
                java.nio.file.Path p = root.resolve((String) l.getKey());
                java.nio.file.Files.createDirectories(p.getParent());
                java.nio.file.Files.createSymbolicLink(p, java.nio.file.Path.of((String) l.getValue()));
            }
            List<String> names = new ArrayList<>();
            for (Bundle b : Config.load(root).notaries()) {
                names.add(b.name);
            }
            java.util.Collections.sort(names);
            return new ArrayList<Object>(names);
        } catch (java.io.IOException e) {
            throw new IllegalStateException(e);
        } finally {
            deleteTree(root);
        }
    }

    private static void deleteTree(java.nio.file.Path root) {
        try (java.util.stream.Stream<java.nio.file.Path> s = java.nio.file.Files.walk(root)) {
            s.sorted(java.util.Comparator.reverseOrder()).forEach(p -> {
                try {
                    java.nio.file.Files.deleteIfExists(p);
                } catch (java.io.IOException e) {
                    // a temporary file left behind is harmless
                }
            });
        } catch (java.io.IOException e) {
            // as above
        }
    }
}
