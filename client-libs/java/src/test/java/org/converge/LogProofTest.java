package org.converge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.math.BigInteger;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.KeyFactory;
import java.security.KeyPairGenerator;
import java.security.PrivateKey;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Function;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManager;
import javax.net.ssl.X509TrustManager;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The transparency log's proofs against a real {@code notary serve} (its log on by default,
 * {@code notary bundle} naming it): a match whose proof verifies is trusted; relays with the
 * notary's own certificate that strip or alter the member make that notary's vote a failure of
 * the documented kind (log-missing, log-proof, log-checkpoint, log-entry), a bundle requiring a
 * witness that never cosigned makes it log-witness. Each failure has its twin: the same relay
 * passing the answer through unchanged, or the same bundle without the log.
 */
@Timeout(180)
class LogProofTest extends ServerFixture {
    static final Path NOTARY = Paths.get("../../.venv/bin/notary").toAbsolutePath().normalize();
    static Path work;
    static Process notary;
    static int notaryPort;
    static Map<String, Object> bundleDoc;
    static SSLContext notaryTls;

    @BeforeAll
    @SuppressWarnings("unchecked")
    static void startNotary() throws Exception {
        Assumptions.assumeTrue(Files.isExecutable(NOTARY), NOTARY + " is missing (make setup)");
        work = Files.createTempDirectory("converge-log-");
        notaryPort = TestServers.deadPort();
        notary = new ProcessBuilder(NOTARY.toString(), "serve", "--data-dir", work.resolve("data").toString(),
                "--listen", "127.0.0.1:" + notaryPort, "--allow-target", "127.0.0.0/8", "--probe-timeout", "2",
                "--log-interval", "0.2")
                .redirectErrorStream(true).redirectOutput(work.resolve("notary.log").toFile()).start();
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", notaryPort), 1000);
                break;
            } catch (IOException e) {
                if (!notary.isAlive() || System.nanoTime() > deadline) {
                    throw new AssertionError("notary not listening: " + Files.readString(work.resolve("notary.log")));
                }
                Thread.sleep(100);
            }
        }
        Process b = new ProcessBuilder(NOTARY.toString(), "bundle", "--data-dir", work.resolve("data").toString(),
                "--host", "127.0.0.1", "--ssl-port", String.valueOf(notaryPort), "--name", "Org Log",
                "-o", work.resolve("org.notary").toString()).redirectErrorStream(true).start();
        assertTrue(b.waitFor(60, TimeUnit.SECONDS) && b.exitValue() == 0, new String(b.getInputStream().readAllBytes()));
        bundleDoc = (Map<String, Object>) Json.parse(Files.readAllBytes(work.resolve("org.notary")));
        notaryTls = serverContext(work.resolve("data"));
    }

    @AfterAll
    static void stopNotary() throws Exception {
        if (notary != null) {
            notary.destroy();
            if (!notary.waitFor(10, TimeUnit.SECONDS)) {
                notary.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        }
        if (work != null) {
            try (var s = Files.walk(work)) {
                s.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
    }

    /** A TLS server context with the notary's own certificate and key (what a relay on its path holds). */
    static SSLContext serverContext(Path data) throws Exception {
        X509Certificate cert = (X509Certificate) CertificateFactory.getInstance("X.509")
                .generateCertificate(Files.newInputStream(data.resolve("notary.pem")));
        String k = Files.readString(data.resolve("notary.key")).replaceAll("-----[A-Z ]+-----", "")
                .replaceAll("\\s", "");
        PrivateKey key = KeyFactory.getInstance(cert.getPublicKey().getAlgorithm())
                .generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(k)));
        return TestServers.serverContext(cert, key);
    }

    /** The bundle of the real notary with {@code port} as its port; {@code change} edits the document. */
    @SuppressWarnings("unchecked")
    static Bundle bundle(int port, Consumer<Map<String, Object>> change) throws Exception {
        Map<String, Object> doc = (Map<String, Object>) Json.parse(Json.compact(bundleDoc));
        Map<String, Object> host = (Map<String, Object>) ((List<Object>) doc.get("hosts")).get(0);
        host.put("ssl_port", BigInteger.valueOf(port));
        change.accept(doc);
        return Bundle.parse(doc);
    }

    /** Ask the real notary (TLS without pinning: the relay is not the client) and return its raw response. */
    static byte[] forward(TestServers.Request r) throws Exception {
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(null, new TrustManager[] {new X509TrustManager() {
            @Override
            public void checkClientTrusted(X509Certificate[] c, String a) {}

            @Override
            public void checkServerTrusted(X509Certificate[] c, String a) {}

            @Override
            public X509Certificate[] getAcceptedIssuers() {
                return new X509Certificate[0];
            }
        }}, null);
        try (SSLSocket s = (SSLSocket) ctx.getSocketFactory().createSocket("127.0.0.1", notaryPort)) {
            s.setSoTimeout(20_000);
            s.getOutputStream().write(r.head().getBytes(StandardCharsets.ISO_8859_1));
            s.getOutputStream().write(r.body());
            s.getOutputStream().flush();
            InputStream in = s.getInputStream();
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] buf = new byte[8192];
            for (int n; (n = in.read(buf)) >= 0 && out.size() < 1 << 20; ) {
                out.write(buf, 0, n);
            }
            return out.toByteArray();
        }
    }

    static final byte[] MEMBER = ",\"transparency\":".getBytes(StandardCharsets.US_ASCII);

    /** A relay answering with the notary's answer, its transparency member changed by {@code change} (null: removed). */
    @SuppressWarnings("unchecked")
    static Function<TestServers.Request, byte[]> relay(Consumer<Map<String, Object>> change, List<byte[]> seen) {
        return r -> {
            try {
                byte[] raw = forward(r);
                String text = new String(raw, StandardCharsets.ISO_8859_1);
                int split = text.indexOf("\r\n\r\n");
                String head = text.substring(0, split);
                byte[] body = Arrays.copyOfRange(raw, split + 4, raw.length);
                seen.add(body);
                int cut = Extended.indexOf(body, MEMBER, 0, body.length);
                if (cut >= 0) {
                    byte[] signed = Arrays.copyOf(body, cut);
                    if (change == null) {
                        body = (new String(signed, StandardCharsets.ISO_8859_1) + "}").getBytes(StandardCharsets.ISO_8859_1);
                    } else {
                        Map<String, Object> m = (Map<String, Object>) Json.parse(
                                Arrays.copyOfRange(body, cut + MEMBER.length, body.length - 1));
                        change.accept(m);
                        body = (new String(signed, StandardCharsets.UTF_8) + ",\"transparency\":"
                                + Json.compact(m) + "}").getBytes(StandardCharsets.UTF_8);
                    }
                }
                StringBuilder h = new StringBuilder();
                for (String line : head.split("\r\n")) {
                    if (!line.toLowerCase().startsWith("content-length:")) {
                        h.append(line).append("\r\n");
                    }
                }
                h.append("Content-Length: ").append(body.length).append("\r\n\r\n");
                byte[] hb = h.toString().getBytes(StandardCharsets.ISO_8859_1);
                byte[] out = Arrays.copyOf(hb, hb.length + body.length);
                System.arraycopy(body, 0, out, hb.length, body.length);
                return out;
            } catch (Exception e) {
                return TestServers.response(502, "text/plain", new byte[0]);
            }
        };
    }

    /** The vote of the one notary in {@code b} about the target's genuine certificate. */
    NotaryResult ask(Bundle b, int target) throws Exception {
        Config cfg = config(List.of(b));
        cfg.db = null; // every check asks the notary: no cached verdict
        try (Client c = client(cfg)) {
            Verdict v = c.check("127.0.0.1", target, genuine);
            return v.results().get(0);
        }
    }

    TestServers.Server relayServer(Function<TestServers.Request, byte[]> handler) throws Exception {
        TestServers.Server s = new TestServers.Server(notaryTls, handler);
        servers.add(s);
        return s;
    }

    int target() throws Exception {
        return serve(otherId, r -> TestServers.response(200, "text/plain", new byte[0])).port();
    }

    @Test
    void aMatchWithAValidProofIsTrustedAndItsRequestAsksForTheProof() throws Exception {
        List<byte[]> seen = new ArrayList<>();
        TestServers.Server relay = relayServer(relay(m -> { }, seen));
        int target = target();
        Bundle b = bundle(relay.port(), d -> { });
        assertTrue(b.transparency != null && b.transparency.log().name().contains("/converge-log/"));
        NotaryResult r = ask(b, target);
        assertEquals("success", r.vote(), r.detail());
        assertEquals("match", r.kind());
        String sent = new String(relay.requests.get(0).body(), StandardCharsets.US_ASCII);
        assertTrue(sent.contains("\"transparency\":true"), sent);
        assertTrue(Extended.indexOf(seen.get(0), MEMBER, 0, seen.get(0).length) > 0, "the answer carries a member");
        // direct, without the relay
        NotaryResult direct = ask(bundle(notaryPort, d -> { }), target);
        assertEquals("match", direct.kind(), direct.detail());
    }

    @Test
    void aStrippedMemberIsLogMissingAndWithoutTheLogInTheBundleAMatch() throws Exception {
        TestServers.Server relay = relayServer(relay(null, new ArrayList<>()));
        int target = target();
        NotaryResult r = ask(bundle(relay.port(), d -> { }), target);
        assertEquals("failure", r.vote());
        assertEquals("log-missing", r.kind(), r.detail());
        // twin: the same stripped answer for a bundle that names no log
        NotaryResult twin = ask(bundle(relay.port(), d -> d.remove("transparency")), target);
        assertEquals("match", twin.kind(), twin.detail());
        String sent = new String(relay.requests.get(relay.requests.size() - 1).body(), StandardCharsets.US_ASCII);
        assertFalse(sent.contains("transparency"), sent);
    }

    @SuppressWarnings("unchecked")
    static void flipProofHash(Map<String, Object> m) {
        List<Object> proof = (List<Object>) m.get("proof");
        if (proof.isEmpty()) {
            m.put("index", ((BigInteger) m.get("index")).add(BigInteger.ONE));
            return;
        }
        byte[] h = Base64.getDecoder().decode((String) proof.get(0));
        h[0] ^= 1;
        proof.set(0, Base64.getEncoder().encodeToString(h));
    }

    static void otherPortInEntry(Map<String, Object> m) {
        String e = new String(Base64.getDecoder().decode((String) m.get("entry")), StandardCharsets.UTF_8);
        e = e.replaceFirst("\"port\":[0-9]+", "\"port\":1");
        m.put("entry", Base64.getEncoder().encodeToString(e.getBytes(StandardCharsets.UTF_8)));
    }

    static void otherSizeInCheckpoint(Map<String, Object> m) {
        String[] lines = ((String) m.get("checkpoint")).split("\n", -1);
        lines[1] = new BigInteger(lines[1]).add(BigInteger.ONE).toString();
        m.put("checkpoint", String.join("\n", lines));
    }

    @Test
    void alteredMembersAreFailuresOfTheirKind() throws Exception {
        int target = target();
        Map<String, Consumer<Map<String, Object>>> forms = new LinkedHashMap<>();
        forms.put("log-proof", LogProofTest::flipProofHash);
        forms.put("log-entry", LogProofTest::otherPortInEntry);
        forms.put("log-checkpoint", LogProofTest::otherSizeInCheckpoint);
        for (Map.Entry<String, Consumer<Map<String, Object>>> f : forms.entrySet()) {
            TestServers.Server relay = relayServer(relay(f.getValue(), new ArrayList<>()));
            NotaryResult r = ask(bundle(relay.port(), d -> { }), target);
            assertEquals("failure", r.vote(), f.getKey());
            assertEquals(f.getKey(), r.kind(), r.detail());
            // twin: the same altered answer judged without the log is still the notary's match
            NotaryResult twin = ask(bundle(relay.port(), d -> d.remove("transparency")), target);
            assertEquals("match", twin.kind(), f.getKey() + ": " + twin.detail());
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void aRequiredWitnessThatNeverCosignedIsLogWitness() throws Exception {
        int target = target();
        byte[] spki = KeyPairGenerator.getInstance("Ed25519").generateKeyPair().getPublic().getEncoded();
        byte[] raw = Arrays.copyOfRange(spki, spki.length - 32, spki.length);
        String name = "witness.test/absent";
        byte[] typed = new byte[33];
        typed[0] = 4;
        System.arraycopy(raw, 0, typed, 1, 32);
        String vkey = name + "+" + java.util.HexFormat.of().formatHex(Transparency.keyId(name, 4, raw)) + "+"
                + Base64.getEncoder().encodeToString(typed);
        Function<BigInteger, Consumer<Map<String, Object>>> withWitness = need -> d -> {
            Map<String, Object> t = (Map<String, Object>) d.get("transparency");
            t.put("witnesses", List.of(Map.of("name", name, "vkey", vkey)));
            t.put("min_cosignatures", need);
        };
        NotaryResult r = ask(bundle(notaryPort, withWitness.apply(BigInteger.ONE)), target);
        assertEquals("log-witness", r.kind(), r.detail());
        // twin: the same witness listed, none required
        NotaryResult twin = ask(bundle(notaryPort, withWitness.apply(BigInteger.ZERO)), target);
        assertEquals("match", twin.kind(), twin.detail());
    }

    @Test
    @SuppressWarnings("unchecked")
    void aMalformedTransparencyMemberIsABundleError() throws Exception {
        ConvergeException.BadInput e = assertThrows(ConvergeException.BadInput.class, () -> bundle(notaryPort,
                d -> ((Map<String, Object>) d.get("transparency")).put("log", "localhost+00000000+AAAA")));
        assertEquals("bundle", e.kind());
        assertThrows(ConvergeException.BadInput.class, () -> bundle(notaryPort,
                d -> ((Map<String, Object>) d.get("transparency")).put("min_cosignatures", BigInteger.ONE)));
        assertNotEquals(null, bundle(notaryPort, d -> { }).transparency);
    }
}
