package org.converge;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Pure rules and the file-level IO (configuration directory, SQLite cache). */
class CoreTest {
    static final String SHA1 = "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB";

    @Test
    void fingerprintForms() throws Exception {
        Fingerprint a = Fingerprint.parse(SHA1.toLowerCase().replace(":", ""));
        assertEquals(SHA1, a.colonHex());
        assertEquals("sha1", a.algorithm());
        assertEquals(a, Fingerprint.parse(" " + SHA1 + "\n"));
    }

    @Test
    void weakEd25519Keys() throws Exception {
        java.util.HexFormat hex = java.util.HexFormat.of();
        String smallOrder = "an Ed25519 public key of small order";
        assertEquals(smallOrder, Extended.weakKey(hex.parseHex("01" + "00".repeat(31)))); // the identity
        assertEquals(smallOrder, Extended.weakKey(hex.parseHex("01" + "00".repeat(30) + "80"))); // sign bit set
        assertEquals(smallOrder, Extended.weakKey(
                hex.parseHex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"))); // y8
        assertEquals("an Ed25519 public key not in canonical form",
                Extended.weakKey(hex.parseHex("f0" + "ff".repeat(30) + "7f"))); // p + 3
        // the twin: a freshly generated key is sound
        byte[] spki = java.security.KeyPairGenerator.getInstance("Ed25519").generateKeyPair().getPublic().getEncoded();
        byte[] raw = java.util.Arrays.copyOfRange(spki, spki.length - 32, spki.length);
        assertNull(Extended.weakKey(raw));
        assertNotNull(Extended.ed25519(raw));
    }

    /** A witness vkey for {@code raw} under {@code name}, its key id computed here. */
    static String witnessVkey(String name, byte[] raw) {
        byte[] typed = new byte[33];
        typed[0] = 4;
        System.arraycopy(raw, 0, typed, 1, 32);
        return name + "+" + java.util.HexFormat.of().formatHex(Transparency.keyId(name, 4, raw)) + "+"
                + java.util.Base64.getEncoder().encodeToString(typed);
    }

    @Test
    void oneKeyNamedTwiceInTransparencyIsABundleError() throws Exception {
        // vectors/transparency.json "keys": log, witness-1, witness-2
        String log = "notary.test/converge-log/0a0b0c0d+fbc03967+ARCfgfIMm7KRDdmoAMM+CNfWUyF/NWocxHUB3nWQ1heF";
        String w1 = "witness.test/witness-1+a50bca9f+BJHvtV/lMA93dChRi2mPYCvASMtdvFY19CN2nUsMYtQk";
        String w2 = "witness.test/witness-2+f3479a00+BGHCiu805F38OifahymZWVcf025WXs/zVAHJhDSIAy9M";
        java.util.function.Function<List<String>, Map<String, Object>> member = vkeys -> Map.of("log", log,
                "witnesses", vkeys.stream().map(v -> Map.of("name", v.substring(0, v.indexOf('+')), "vkey", v))
                        .toList());
        java.util.function.Function<String, byte[]> raw = v -> java.util.Arrays.copyOfRange(
                java.util.Base64.getDecoder().decode(v.substring(v.indexOf('+') + 10)), 1, 33);
        byte[] w1Raw = raw.apply(w1);
        byte[] logRaw = raw.apply(log);
        String w1Again = witnessVkey("witness.test/witness-1-again", w1Raw);
        String logAsWitness = witnessVkey("witness.test/the-log", logRaw);
        for (List<String> twice : List.of(List.of(w1, w1Again), List.of(w2, logAsWitness))) {
            ConvergeException.BadInput e = assertThrows(ConvergeException.BadInput.class,
                    () -> Transparency.parseLogPolicy(member.apply(twice)), twice.toString());
            assertEquals("bundle", e.kind());
            assertEquals("transparency names one key twice (two witnesses, or a witness and the log)",
                    e.getMessage());
        }
        // the twin: two witnesses with keys of their own parse, as does the renamed key alone
        assertEquals(2, Transparency.parseLogPolicy(member.apply(List.of(w1, w2))).witnesses().size());
        assertEquals(1, Transparency.parseLogPolicy(member.apply(List.of(w1Again))).witnesses().size());
    }

    @Test
    void fingerprintRefusals() {
        for (String bad : new String[] {"", "AB:CD", SHA1 + ":", SHA1.replace(':', '-'), "sha1:" + SHA1}) {
            ConvergeException.BadInput e = assertThrows(ConvergeException.BadInput.class, () -> Fingerprint.parse(bad));
            assertEquals("fingerprint", e.kind());
        }
    }

    @Test
    void policiesAndEarlyReturn() {
        List<String> twoOfThree = List.of("success", "success", "failure");
        assertTrue(Policy.MAJORITY.decide(twoOfThree, false));
        assertFalse(Policy.CONSENSUS.decide(twoOfThree, false));
        assertTrue(Policy.CONSENSUS.decide(List.of("success", "unreachable"), true));
        assertFalse(Policy.CONSENSUS.decide(List.of("success", "unreachable"), false));
        assertFalse(Policy.MINORITY.decide(List.of(), true));
        assertEquals(Boolean.TRUE, Policy.MAJORITY.settled(List.of("success", "success"), 1, true) == null
                ? null : Policy.MAJORITY.settled(List.of("success", "success"), 1, false));
        assertNull(Policy.CONSENSUS.settled(List.of("success"), 1, true));
        assertEquals(Boolean.FALSE, Policy.CONSENSUS.settled(List.of("failure"), 2, true));
    }

    @Test
    void cacheDecisions() {
        assertEquals("miss", CachePolicy.decide(null, 1000, 10.0));
        assertEquals("hit", CachePolicy.decide(995L, 1000, 10.0));
        assertEquals("stale", CachePolicy.decide(989L, 1000, 10.0));
        assertEquals("hit", CachePolicy.decide(1L, 1e9, null));
        assertEquals("stale", CachePolicy.decide(2000L, 1000, null));
        assertEquals("hit", CachePolicy.decide(1_700_000_000_000L, 1_700_000_005, 10.0)); // milliseconds
        assertEquals("stale", CachePolicy.decide(1_700_000_000_000L, 1_700_000_011, 10.0));
    }

    @Test
    void strictJsonTheLastRepeatedMemberCounting() throws Exception {
        Map<?, ?> v = (Map<?, ?>) Json.parse("{\"b\": 1, \"a\": [true, null, \"\\u00e9\"], \"b\": 2}");
        assertEquals(java.math.BigInteger.TWO, v.get("b"));
        assertEquals(java.util.Arrays.asList(true, null, "\u00e9"), v.get("a"));
        for (String bad : List.of("[1,]", "[NaN]", "[Infinity]", "{1: 2}", "{1.5: 1}", "[1] // c", "/* c */ [1]",
                "['a']", "[\"a\u0001\"]", "[\"\\q\"]", "[01]", "[1] [2]", "{\"a\": 1}\u0000", "")) {
            assertThrows(Json.JsonException.class, () -> Json.parse(bad), bad);
        }
        assertThrows(Json.JsonException.class, () -> Json.parse(new byte[] {'[', '"', (byte) 0xed, (byte) 0xa0,
                (byte) 0x80, '"', ']'}));
        assertEquals(List.of("a\u0001"), Json.parse("[\"a\\u0001\"]")); // twin: the same character escaped
    }

    @Test
    void boundsScanBeforeParsing() throws Exception {
        String nest32 = "{\"a\":".repeat(31) + "{}" + "}".repeat(31);
        String nest33 = "{\"a\":".repeat(32) + "{}" + "}".repeat(32);
        assertTrue(Json.scan(nest32.getBytes(StandardCharsets.US_ASCII)));
        assertFalse(Json.scan(nest33.getBytes(StandardCharsets.US_ASCII)));
        // a million open brackets: refused by the scan, no recursion anywhere (the old parser's
        // depth limit of 900 overflowed a 512 KiB thread stack)
        byte[] deep = "[".repeat(1_000_000).getBytes(StandardCharsets.US_ASCII);
        Throwable[] thrown = new Throwable[1];
        Thread t = new Thread(null, () -> {
            try {
                Json.parseVerified(deep);
            } catch (Throwable e) {
                thrown[0] = e;
            }
        }, "small-stack", 512 * 1024);
        t.start();
        t.join();
        assertTrue(thrown[0] instanceof Json.JsonException, String.valueOf(thrown[0]));
        assertTrue(Json.scan("{\"a\": \"[[[[\\\"\", \"n\": -123456789012345}".getBytes(StandardCharsets.US_ASCII)));
        for (String bad : List.of("{\"n\": 1234567890123456}", "{\"n\": 1.5}", "{\"n\": 1e2}", "{\"n\": 01}",
                "{\"n\": -}", "{\"n\": " + "9".repeat(5000) + "}")) {
            assertFalse(Json.scan(bad.getBytes(StandardCharsets.US_ASCII)), bad);
        }
        assertThrows(Json.JsonException.class, () -> Json.parseVerified("[1]".getBytes(StandardCharsets.US_ASCII)));
    }

    @Test
    void addressForms() throws Exception {
        assertEquals("2001:db8::1", IpAddress.compressed("2001:0DB8:0:0:0:0:0:1"));
        assertEquals("::", IpAddress.compressed("0:0:0:0:0:0:0:0"));
        assertEquals("127.0.0.1", IpAddress.expectedHost("127.0.0.1"));
        assertEquals("example.com", IpAddress.expectedHost("Example.COM."));
        assertThrows(ConvergeException.BadInput.class, () -> IpAddress.compressed("01.2.3.4"));
        assertThrows(ConvergeException.BadInput.class, () -> IpAddress.compressed("1::2::3"));
    }

    static String bundleJson(String name, int port) throws Exception {
        String pem = Files.readString(VectorsTest.vectorsDir().resolve("keys/test-notary-cert.pem"));
        return Json.compact(Map.of("version", java.math.BigInteger.ONE, "name", name, "hosts",
                List.of(Map.of("host", "127.0.0.1", "ssl_port", java.math.BigInteger.valueOf(port),
                        "http_port", java.math.BigInteger.valueOf(port), "certificate", pem))));
    }

    @Test
    void configDirectoryLayout(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("converge.config"),
                "{\"notary-agreement\": \"consensus\", \"quorum\": 2, \"cache-lifetime\": null}");
        Path avail = Files.createDirectories(dir.resolve("notaries-available"));
        Path enabled = Files.createDirectories(dir.resolve("notaries-enabled"));
        Files.writeString(avail.resolve("b.notary"), bundleJson("Org B", 4001));
        Files.writeString(avail.resolve("a.notary"), bundleJson("Org A", 4000));
        Files.writeString(avail.resolve("c.notary"), bundleJson("Org C", 4002));
        Files.createSymbolicLink(enabled.resolve("b.notary"), Paths.get("../notaries-available/b.notary"));
        Files.createSymbolicLink(enabled.resolve("a.notary"), Paths.get("../notaries-available/a.notary"));
        Config c = Config.load(dir, Map.of());
        assertEquals(Policy.CONSENSUS, c.agreement);
        assertEquals(2, c.quorum);
        assertNull(c.cacheLifetime);
        assertEquals(dir.resolve("cache.sqlite3"), c.db);
        List<Bundle> n = c.notaries();
        assertEquals(List.of("Org A", "Org B"), n.stream().map(b -> b.name).toList());
        assertEquals(4000, n.get(0).hosts.get(0).sslPort);
    }

    @Test
    void configRefusals(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("converge.config"), "{\"no-such-key\": 1}");
        assertEquals("config", assertThrows(ConvergeException.BadInput.class,
                () -> Config.load(dir, Map.of())).kind());
        Files.writeString(dir.resolve("converge.config"), "{\"quorum\": true}");
        assertThrows(ConvergeException.BadInput.class, () -> Config.load(dir, Map.of()));
        Files.writeString(dir.resolve("converge.config"), "{\"extended\": \"always\"}");
        assertThrows(ConvergeException.BadInput.class, () -> Config.load(dir, Map.of()));
        assertThrows(ConvergeException.BadInput.class, () -> Config.load(dir.resolve("missing"), Map.of()));
    }

    @Test
    void discoveryOrder(@TempDir Path dir) throws Exception {
        Path env = Files.createDirectories(dir.resolve("env"));
        Path home = Files.createDirectories(dir.resolve("home/.config/converge"));
        assertEquals(env, Config.discover(null, Map.of(Config.ENV_VAR, env.toString(), "HOME", dir.resolve("home").toString())));
        assertEquals(home, Config.discover(null, Map.of("HOME", dir.resolve("home").toString())));
        assertEquals(dir, Config.discover(dir, Map.of(Config.ENV_VAR, env.toString())));
        assertThrows(ConvergeException.BadInput.class,
                () -> Config.discover(null, Map.of(Config.ENV_VAR, dir.resolve("nope").toString())));
    }

    @Test
    void sqliteCacheSchemaAndReadOnly(@TempDir Path dir) throws Exception {
        Path db = dir.resolve("sub/cache.sqlite3");
        try (LocalCache c = new LocalCache(db, false)) {
            assertNull(c.lookup("example.com:443", SHA1));
            c.store("example.com:443", SHA1, 1_700_000_000L);
            c.store("example.com:443", SHA1, 1_700_000_001L);
            assertEquals(1_700_000_001L, c.lookup("example.com:443", SHA1));
            assertNull(c.lookup("example.com:444", SHA1));
        }
        try (LocalCache ro = new LocalCache(db, true)) {
            assertEquals(1_700_000_001L, ro.lookup("example.com:443", SHA1));
            assertEquals("cache-io", assertThrows(ConvergeException.IoFailure.class,
                    () -> ro.store("example.com:443", SHA1, 1L)).kind());
        }
        try (java.sql.Connection conn = java.sql.DriverManager.getConnection("jdbc:sqlite:" + db);
                java.sql.ResultSet rs = conn.createStatement().executeQuery(
                        "SELECT sql FROM sqlite_master WHERE name = 'fingerprints'")) {
            assertTrue(rs.next());
            assertTrue(rs.getString(1).contains("location TEXT, fingerprint TEXT, timestamp INTEGER"));
        }
    }

    @Test
    void legacyRequestBytes() throws Exception {
        byte[] r = Legacy.requestBytes("WWW.Example.COM", 443, Fingerprint.parse(SHA1), null);
        String text = new String(r, StandardCharsets.US_ASCII);
        assertTrue(text.startsWith("POST /target/www.example.com+443 HTTP/1.0\r\n"));
        assertTrue(text.endsWith("\r\n\r\nfingerprint=" + SHA1));
        assertArrayEquals(r, Legacy.requestBytes("www.example.com", 443, Fingerprint.parse(SHA1), null));
        assertThrows(ConvergeException.BadInput.class,
                () -> Legacy.requestBytes("a/b", 443, Fingerprint.parse(SHA1), null));
    }

    @Test
    @SuppressWarnings("unchecked")
    void bounceRelayHeads() throws Exception {
        Bundle a = Bundle.parse(bundleJson("Org A", 4000).getBytes(StandardCharsets.UTF_8));
        Map<String, Object> two = new java.util.LinkedHashMap<>((Map<String, Object>) Json.parse(bundleJson("Org T", 4000)));
        List<Object> hosts = new java.util.ArrayList<>((List<?>) two.get("hosts"));
        Map<String, Object> second = new java.util.LinkedHashMap<>((Map<String, Object>) hosts.get(0));
        second.put("host", "127.0.0.12");
        hosts.add(second);
        two.put("hosts", hosts);
        Bundle t = Bundle.parse(two);
        assertEquals("CONNECT 127.0.0.1:4242 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + "X-Convergence-Notary: 127.0.0.12+4242\r\n\r\n",
                new String(NotaryIo.connectHead(t.hosts, 4242), StandardCharsets.US_ASCII));
        assertEquals("127.0.0.12", NotaryIo.parseConnectReply(
                "HTTP/1.1 200 OK\r\nX-Convergence-Notary: 127.0.0.12+4242\r\n\r\n", t.hosts).host);
        assertEquals("127.0.0.1", NotaryIo.parseConnectReply("HTTP/1.1 200 OK\r\n\r\n", a.hosts).host);
        // refused, or a host the bundle does not name: the tunnel is not used
        assertThrows(java.io.IOException.class,
                () -> NotaryIo.parseConnectReply("HTTP/1.1 403 Forbidden\r\n\r\n", a.hosts));
        assertThrows(java.io.IOException.class, () -> NotaryIo.parseConnectReply(
                "HTTP/1.1 200 OK\r\nX-Convergence-Notary: 127.0.0.99+4242\r\n\r\n", t.hosts));
        assertThrows(java.io.IOException.class,
                () -> NotaryIo.parseConnectReply("HTTP/1.1 200 OK\r\n\r\n", t.hosts));
    }
}
