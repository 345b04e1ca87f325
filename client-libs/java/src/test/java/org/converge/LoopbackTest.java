package org.converge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.InputStream;
import java.math.BigInteger;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import javax.net.ssl.SSLHandshakeException;
import javax.net.ssl.SSLSocket;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The client against real TLS servers on 127.0.0.1 (legacy and extended notaries, a target). */
@Timeout(60)
class LoopbackTest extends ServerFixture {
    Bundle legacyNotary(String name, String seen) throws Exception {
        TestServers.Server s = serve(notaryId, TestServers.legacyNotary(notaryId, seen));
        return TestServers.bundle(name, s.port(), notaryId, null);
    }

    @Test
    void genuineIsTrustedThenCached() throws Exception {
        List<Bundle> b = List.of(legacyNotary("Org A", genuine), legacyNotary("Org B", genuine));
        Config cfg = config(b);
        cfg.agreement = Policy.CONSENSUS; // both answers are needed
        try (Client c = client(cfg)) {
            Verdict v = c.check("127.0.0.1", 4433, genuine);
            assertTrue(v.trusted());
            assertFalse(v.fromCache());
            assertEquals(List.of("listed", "listed"), v.results().stream().map(NotaryResult::kind).toList());
            assertEquals(Legacy.FORMAT, v.results().get(0).protocol());
            assertEquals("converge-notary; hit", v.results().get(0).cacheStatus());
            Verdict again = c.check("127.0.0.1", 4433, genuine.toLowerCase().replace(":", ""));
            assertTrue(again.trusted());
            assertTrue(again.fromCache());
            assertTrue(again.results().isEmpty());
        }
        assertEquals(2, servers.stream().mapToInt(s -> s.requests.size()).sum());
    }

    @Test
    void forgedIsNotTrustedAndNotCached() throws Exception {
        List<Bundle> b = List.of(legacyNotary("Org A", genuine), legacyNotary("Org B", genuine));
        try (Client c = client(config(b))) {
            Verdict v = c.check("127.0.0.1", 4433, FORGED);
            assertFalse(v.trusted());
            assertEquals(List.of("mismatch", "mismatch"), v.results().stream().map(NotaryResult::kind).toList());
            assertFalse(c.check("127.0.0.1", 4433, FORGED).fromCache());
        }
    }

    @Test
    void wrongPinSendsNoRequest() throws Exception {
        TestServers.Server s = serve(notaryId, TestServers.legacyNotary(notaryId, genuine));
        // the bundle pins the other certificate: the handshake is refused before any request
        Bundle wrong = TestServers.bundle("Org Pin", s.port(), otherId, null);
        Config cfg = config(List.of(wrong));
        try (Client c = client(cfg)) {
            Verdict v = c.check("127.0.0.1", 4433, genuine);
            assertFalse(v.trusted());
            assertEquals("failure", v.results().get(0).vote());
            assertEquals("pin", v.results().get(0).kind());
        }
        assertTrue(s.requests.isEmpty());
    }

    @Test
    void signatureByAnotherKeyIsAFailure() throws Exception {
        // the notary's TLS certificate is pinned, but its body is signed with another key
        TestServers.Server s = serve(notaryId, TestServers.legacyNotary(otherId, genuine));
        Bundle b = TestServers.bundle("Org Sig", s.port(), notaryId, null);
        try (Client c = client(config(List.of(b)))) {
            Verdict v = c.check("127.0.0.1", 4433, genuine);
            assertFalse(v.trusted());
            assertEquals("signature", v.results().get(0).kind());
        }
    }

    @Test
    void deadNotaryStandsAsideOrCounts() throws Exception {
        Bundle dead = TestServers.bundle("Org Dead", TestServers.deadPort(), notaryId, null);
        List<Bundle> b = List.of(legacyNotary("Org A", genuine), dead);
        Config cfg = config(b);
        cfg.agreement = Policy.CONSENSUS;
        cfg.earlyReturn = false;
        try (Client c = client(cfg)) {
            Verdict v = c.check("127.0.0.1", 4433, genuine);
            assertTrue(v.trusted());
            assertEquals("unreachable", v.results().get(1).vote());
        }
        cfg.standAside = false;
        cfg.db = dir.resolve("other.sqlite3");
        try (Client c = client(cfg)) {
            assertFalse(c.check("127.0.0.1", 4433, genuine).trusted());
        }
    }

    @Test
    void earlyReturnSkipsAHangingNotary() throws Exception {
        TestServers.Server hang = serve(notaryId, null);
        List<Bundle> b = List.of(legacyNotary("Org A", genuine), legacyNotary("Org B", genuine),
                TestServers.bundle("Org Hang", hang.port(), notaryId, null));
        Config cfg = config(b);
        cfg.notaryTimeout = 20;
        cfg.totalTimeout = 30;
        long t0 = System.nanoTime();
        try (Client c = client(cfg)) {
            Verdict v = c.check("127.0.0.1", 4433, genuine);
            assertTrue(v.trusted());
            assertEquals("skipped", v.results().get(2).vote());
            assertEquals("settled", v.results().get(2).kind());
        }
        assertTrue((System.nanoTime() - t0) / 1e9 < 10, "early return did not wait for the hanging notary");
        // the twin: without early return the hanging notary is waited for until its timeout
        cfg.earlyReturn = false;
        cfg.notaryTimeout = 1;
        cfg.db = dir.resolve("other.sqlite3");
        try (Client c = client(cfg)) {
            Verdict v = c.check("127.0.0.1", 4433, genuine);
            assertTrue(v.trusted());
            assertEquals("timeout", v.results().get(2).kind());
            assertNull(v.results().get(2).protocol());
        }
    }

    @Test
    void extendedAnswerVerifies() throws Exception {
        TestServers.SigningKey k = new TestServers.SigningKey();
        TestServers.Server s = serve(notaryId, TestServers.extendedNotary(k, genuine, st -> { }));
        Bundle b = TestServers.bundle("Org X", s.port(), notaryId, k);
        assertTrue(b.offersExtended());
        try (Client c = client(config(List.of(b)))) {
            Verdict v = c.check("127.0.0.1", 4433, genuine);
            assertTrue(v.trusted());
            assertEquals("match", v.results().get(0).kind());
            assertEquals(Extended.FORMAT, v.results().get(0).protocol());
            Verdict f = c.check("127.0.0.1", 4433, FORGED);
            assertFalse(f.trusted());
            assertEquals("mismatch", f.results().get(0).kind());
        }
        String sent = new String(s.requests.get(0).body(), StandardCharsets.US_ASCII);
        assertTrue(sent.contains("\"nonce\":"), sent);
    }

    @Test
    @SuppressWarnings("unchecked")
    void extendedAnswerAboutAnotherTargetIsRejected() throws Exception {
        TestServers.SigningKey k = new TestServers.SigningKey();
        TestServers.Server s = serve(notaryId, TestServers.extendedNotary(k, genuine,
                st -> ((java.util.Map<String, Object>) st.get("target")).put("port", BigInteger.valueOf(8443))));
        Bundle b = TestServers.bundle("Org X", s.port(), notaryId, k);
        try (Client c = client(config(List.of(b)))) {
            Verdict v = c.check("127.0.0.1", 4433, genuine);
            assertFalse(v.trusted());
            assertEquals("wrong-target", v.results().get(0).kind());
        }
    }

    @Test
    void extendedOffAsksInTheLegacyFormat() throws Exception {
        TestServers.SigningKey k = new TestServers.SigningKey();
        TestServers.Server s = serve(notaryId, TestServers.legacyNotary(notaryId, genuine));
        Bundle b = TestServers.bundle("Org X", s.port(), notaryId, k);
        Config cfg = config(List.of(b));
        cfg.extended = "off";
        try (Client c = client(cfg)) {
            Verdict v = c.check("127.0.0.1", 4433, genuine);
            assertTrue(v.trusted());
            assertEquals(Legacy.FORMAT, v.results().get(0).protocol());
        }
        assertTrue(s.requests.get(0).path().startsWith("/target/127.0.0.1+4433"));
    }

    @Test
    void optionsWithTheCertificate() throws Exception {
        List<Bundle> b = List.of(legacyNotary("Org A", genuine));
        byte[] der = otherId.cert.getEncoded();
        try (Client c = client(config(b))) {
            Verdict v = Converge.options().client(c).certificate(der).check("127.0.0.1", 4433, genuine);
            assertTrue(v.trusted());
            // the SHA-256 form of the same certificate is now a cache hit as well
            String sha256 = Fingerprint.of(der, "sha256").colonHex();
            assertTrue(Converge.options().client(c).check("127.0.0.1", 4433, sha256).fromCache());
            // a certificate that is not the fingerprint's is bad input, not a verdict
            ConvergeException.BadInput e = assertThrows(ConvergeException.BadInput.class,
                    () -> Converge.options().client(c).certificate(notaryId.cert.getEncoded())
                            .check("127.0.0.1", 4433, genuine));
            assertEquals("fingerprint", e.kind());
        }
    }

    @Test
    void noNotariesIsAConfigError() {
        try (Client c = client(config(List.of()))) {
            ConvergeException.BadInput e = assertThrows(ConvergeException.BadInput.class,
                    () -> c.check("127.0.0.1", 4433, genuine));
            assertEquals("config", e.kind());
        }
    }

    // ------------------------------------------------------------------ the trust manager

    String fetchThroughConverge(Client c, int port) throws Exception {
        javax.net.ssl.SSLContext ctx = ConvergeTrustManager.sslContext(c);
        try (SSLSocket s = (SSLSocket) ctx.getSocketFactory().createSocket("127.0.0.1", port)) {
            s.setSoTimeout(10_000);
            s.getOutputStream().write("GET / HTTP/1.0\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
            InputStream in = s.getInputStream();
            return new String(in.readAllBytes(), StandardCharsets.ISO_8859_1);
        }
    }

    @Test
    void trustManagerAcceptsACertificateTheNotariesConfirm() throws Exception {
        TestServers.Server target = serve(otherId, r -> TestServers.response(200, "text/plain",
                "hello".getBytes(StandardCharsets.US_ASCII)));
        List<Bundle> b = List.of(legacyNotary("Org A", genuine), legacyNotary("Org B", genuine));
        Config cfg = config(b);
        cfg.agreement = Policy.CONSENSUS; // both notaries answer before the handshake goes on
        try (Client c = client(cfg)) {
            String reply = fetchThroughConverge(c, target.port());
            assertTrue(reply.endsWith("hello"), reply);
        }
        // each notary was asked about the target's host and port
        for (TestServers.Server notary : servers.subList(1, 3)) {
            String head = notary.requests.get(0).head();
            assertTrue(head.startsWith("POST /target/127.0.0.1+" + target.port() + " "), head);
        }
    }

    @Test
    void trustManagerRefusesACertificateTheNotariesDoNotSee() throws Exception {
        TestServers.Server target = serve(otherId, r -> TestServers.response(200, "text/plain",
                "hello".getBytes(StandardCharsets.US_ASCII)));
        List<Bundle> b = List.of(legacyNotary("Org A", FORGED), legacyNotary("Org B", FORGED));
        try (Client c = client(config(b))) {
            SSLHandshakeException e = assertThrows(SSLHandshakeException.class,
                    () -> fetchThroughConverge(c, target.port()));
            Throwable t = e;
            while (t != null && !(t instanceof ConvergeTrustManager.NotTrusted)) {
                t = t.getCause();
            }
            ConvergeTrustManager.NotTrusted nt = assertInstanceOf(ConvergeTrustManager.NotTrusted.class, t);
            assertFalse(nt.verdict.trusted());
        }
        assertTrue(target.requests.isEmpty());
    }

    @Test
    void trustManagerWorksThroughAnSslEngine() throws Exception {
        // java.net.http drives TLS with an SSLEngine: the engine variant supplies host and port
        TestServers.Server target = serve(otherId, r -> TestServers.response(200, "text/plain",
                "engine".getBytes(StandardCharsets.US_ASCII)));
        List<Bundle> b = List.of(legacyNotary("Org A", genuine));
        java.net.URI uri = java.net.URI.create("https://127.0.0.1:" + target.port() + "/");
        java.net.http.HttpRequest req = java.net.http.HttpRequest.newBuilder(uri)
                .timeout(java.time.Duration.ofSeconds(10)).build();
        try (Client c = client(config(b))) {
            java.net.http.HttpClient http = java.net.http.HttpClient.newBuilder()
                    .sslContext(ConvergeTrustManager.sslContext(c)).build();
            var resp = http.send(req, java.net.http.HttpResponse.BodyHandlers.ofString());
            assertEquals("engine", resp.body());
            // the twin: demanding a CA path as well refuses the self-signed test certificate
            java.net.http.HttpClient strict = java.net.http.HttpClient.newBuilder()
                    .sslContext(ConvergeTrustManager.sslContext(c, true)).build();
            assertThrows(java.io.IOException.class,
                    () -> strict.send(req, java.net.http.HttpResponse.BodyHandlers.ofString()));
        }
        String head = servers.get(1).requests.get(0).head();
        assertTrue(head.startsWith("POST /target/127.0.0.1+" + target.port() + " "), head);
    }

    @Test
    void pinningTrustManagerChecksTheLeafOnly() throws Exception {
        PinningTrustManager ok = new PinningTrustManager(Fingerprint.parse(genuine));
        ok.checkServerTrusted(new java.security.cert.X509Certificate[] {otherId.cert}, "RSA");
        PinningTrustManager wrong = new PinningTrustManager(Fingerprint.parse(notaryId.sha1()));
        assertThrows(PinningTrustManager.PinException.class,
                () -> wrong.checkServerTrusted(new java.security.cert.X509Certificate[] {otherId.cert}, "RSA"));
        assertTrue(InetAddress.getLoopbackAddress().isLoopbackAddress());
    }
}
