package org.converge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Proxy;
import java.net.ProxySelector;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import javax.net.ssl.HttpsURLConnection;
import javax.net.ssl.SSLHandshakeException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The trust manager behind an HTTP CONNECT proxy: the notaries are asked about the origin
 * {@code proxied.test:P}, not the proxy, for {@code HttpsURLConnection} (a socket layered over
 * the tunnel, whose session reports the proxy's port) and for {@code HttpClient} (an engine).
 * The attacker's proxy routes the same origin to a server with another certificate: refused
 * before the request is written.
 */
@Timeout(60)
class ProxyTest {
    static TestServers.Identity genuineId;
    static TestServers.Identity forgedId;

    final List<AutoCloseable> open = new ArrayList<>();
    @TempDir Path dir;

    @BeforeAll
    static void identities() throws Exception {
        genuineId = new TestServers.Identity("other");
        forgedId = new TestServers.Identity("notary");
    }

    @AfterEach
    void stop() throws Exception {
        for (AutoCloseable c : open) {
            c.close();
        }
    }

    /** CONNECT host:port -> 127.0.0.1:routes[port] (or the same port); records the targets. */
    static final class ConnectProxy implements AutoCloseable {
        final ServerSocket socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        final List<String> connects = new CopyOnWriteArrayList<>();

        ConnectProxy(Map<Integer, Integer> routes) throws IOException {
            Thread t = new Thread(() -> {
                while (!socket.isClosed()) {
                    try {
                        Socket c = socket.accept();
                        Thread h = new Thread(() -> handle(c, routes));
                        h.setDaemon(true);
                        h.start();
                    } catch (IOException e) {
                        return;
                    }
                }
            });
            t.setDaemon(true);
            t.start();
        }

        private void handle(Socket c, Map<Integer, Integer> routes) {
            try (c) {
                c.setSoTimeout(20_000);
                InputStream in = c.getInputStream();
                StringBuilder head = new StringBuilder();
                while (!head.toString().endsWith("\r\n\r\n")) {
                    int b = in.read();
                    if (b < 0) {
                        return;
                    }
                    head.append((char) b);
                }
                String[] line = head.toString().split("\r\n", 2)[0].split(" ");
                OutputStream out = c.getOutputStream();
                if (line.length != 3 || !line[0].equals("CONNECT")) {
                    out.write("HTTP/1.1 405 No\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
                    return;
                }
                connects.add(line[1]);
                int port = Integer.parseInt(line[1].substring(line[1].lastIndexOf(':') + 1));
                try (Socket up = new Socket(InetAddress.getLoopbackAddress(), routes.getOrDefault(port, port))) {
                    out.write("HTTP/1.1 200 Connection established\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
                    out.flush();
                    Thread pump = new Thread(() -> {
                        try {
                            in.transferTo(up.getOutputStream());
                        } catch (IOException e) {
                            // the other direction ends the tunnel
                        }
                    });
                    pump.setDaemon(true);
                    pump.start();
                    up.getInputStream().transferTo(out);
                }
            } catch (IOException e) {
                // a test's connection went away
            }
        }

        int port() {
            return socket.getLocalPort();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    record Scene(TestServers.Server genuine, TestServers.Server forged, ConnectProxy good, ConnectProxy evil,
            List<TestServers.Server> notaries, Client client) {}

    Scene scene() throws Exception {
        TestServers.Server genuine = new TestServers.Server(genuineId, r -> TestServers.response(200, "text/plain",
                "genuine".getBytes(StandardCharsets.US_ASCII)));
        TestServers.Server forged = new TestServers.Server(forgedId, r -> TestServers.response(200, "text/plain",
                "forged".getBytes(StandardCharsets.US_ASCII)));
        open.add(genuine);
        open.add(forged);
        ConnectProxy good = new ConnectProxy(Map.of());
        ConnectProxy evil = new ConnectProxy(Map.of(genuine.port(), forged.port()));
        open.add(good);
        open.add(evil);
        List<TestServers.Server> notaries = new ArrayList<>();
        List<Bundle> bundles = new ArrayList<>();
        for (String name : List.of("Org A", "Org B")) {
            TestServers.Server n = new TestServers.Server(forgedId,
                    TestServers.legacyNotary(forgedId, genuineId.sha1()));
            open.add(n);
            notaries.add(n);
            bundles.add(TestServers.bundle(name, n.port(), forgedId, null));
        }
        return new Scene(genuine, forged, good, evil, notaries, client(bundles));
    }

    /** A client of {@code bundles} (consensus, no cache file), closed after the test. */
    Client client(List<Bundle> bundles) {
        Config c = new Config();
        c.directory = dir;
        c.db = null;
        c.bundles = bundles;
        c.agreement = Policy.CONSENSUS;
        c.connectTimeout = 5;
        c.notaryTimeout = 5;
        c.totalTimeout = 10;
        Client client = new Client(c, new Random(7), () -> System.currentTimeMillis() / 1000.0);
        open.add(client);
        return client;
    }

    static String origin(Scene s) {
        return "proxied.test:" + s.genuine().port();
    }

    static void assertAskedAboutTheOrigin(Scene s) {
        for (TestServers.Server n : s.notaries()) {
            for (TestServers.Request r : n.requests) {
                assertEquals("/target/proxied.test+" + s.genuine().port(), r.path());
            }
        }
    }

    String viaUrlConnection(Scene s, ConnectProxy proxy) throws Exception {
        return get(ConvergeTrustManager.sslContext(s.client()).getSocketFactory(), proxy, s.genuine().port());
    }

    @Test
    void urlConnectionThroughAProxyAsksAboutTheOrigin() throws Exception {
        Scene s = scene();
        assertEquals("genuine", viaUrlConnection(s, s.good()));
        assertEquals(List.of(origin(s)), s.good().connects);
        assertAskedAboutTheOrigin(s);
        assertTrue(s.notaries().get(0).requests.size() >= 1);
    }

    @Test
    void urlConnectionThroughTheAttackersProxyIsRefused() throws Exception {
        Scene s = scene();
        SSLHandshakeException e = assertThrows(SSLHandshakeException.class, () -> viaUrlConnection(s, s.evil()));
        Throwable t = e;
        while (t != null && !(t instanceof ConvergeTrustManager.NotTrusted)) {
            t = t.getCause();
        }
        ConvergeTrustManager.NotTrusted nt = assertInstanceOf(ConvergeTrustManager.NotTrusted.class, t);
        assertEquals(s.genuine().port(), nt.verdict.port());
        assertTrue(s.forged().requests.isEmpty(), "the request reached the forged server");
        assertAskedAboutTheOrigin(s);
    }

    @Test
    void twinAPlainContextInATunnelAsksAboutTheProxyPort() throws Exception {
        // the JDK's own context with the converge trust manager but without the origin-aware
        // socket factory: the session reports the proxy's port, so the notaries are asked about
        // proxied.test:<proxy port> (a real notary would find nothing there and the genuine
        // server would be refused; these stand-ins answer whatever they are asked)
        Scene s = scene();
        javax.net.ssl.SSLContext plain = javax.net.ssl.SSLContext.getInstance("TLS");
        plain.init(null, new javax.net.ssl.TrustManager[] {new ConvergeTrustManager(s.client())}, null);
        Proxy p = new Proxy(Proxy.Type.HTTP, new InetSocketAddress(InetAddress.getLoopbackAddress(), s.good().port()));
        HttpsURLConnection conn = (HttpsURLConnection) URI.create("https://" + origin(s) + "/").toURL()
                .openConnection(p);
        conn.setSSLSocketFactory(plain.getSocketFactory());
        conn.setHostnameVerifier((h, session) -> true);
        conn.getInputStream().close();
        String asked = s.notaries().get(0).requests.get(0).path();
        assertEquals("/target/proxied.test+" + s.good().port(), asked);
    }

    /**
     * The attacker's site at {@code proxied.test:Q} (the notaries vouch for its certificate
     * there) and his server at {@code proxied.test:P} (another origin: the notaries see another
     * certificate there) share one TLS server context, so a session made at Q can be resumed at
     * P. Both are reached through one CONNECT proxy.
     */
    record Resumption(TestServers.Server q, TestServers.Server p, ConnectProxy proxy, Client client) {}

    Resumption resumption() throws Exception {
        return resumption(r -> text("q"), r -> text("p"));
    }

    static byte[] text(String body) {
        return TestServers.response(200, "text/plain", body.getBytes(StandardCharsets.US_ASCII));
    }

    /** The same scene, the servers at Q and P answering with {@code atQ} and {@code atP}. */
    Resumption resumption(java.util.function.Function<TestServers.Request, byte[]> atQ,
            java.util.function.Function<TestServers.Request, byte[]> atP) throws Exception {
        javax.net.ssl.SSLContext shared = genuineId.serverContext();
        TestServers.Server q = new TestServers.Server(shared, atQ);
        TestServers.Server p = new TestServers.Server(shared, atP);
        open.add(q);
        open.add(p);
        ConnectProxy proxy = new ConnectProxy(Map.of());
        open.add(proxy);
        java.util.function.Function<TestServers.Request, byte[]> vouchesAtQ = TestServers.legacyNotary(forgedId,
                genuineId.sha1());
        java.util.function.Function<TestServers.Request, byte[]> seesAnother = TestServers.legacyNotary(forgedId,
                "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33");
        List<Bundle> bundles = new ArrayList<>();
        for (String name : List.of("Org A", "Org B")) {
            TestServers.Server n = new TestServers.Server(forgedId,
                    r -> r.path().equals("/target/proxied.test+" + q.port()) ? vouchesAtQ.apply(r) : seesAnother.apply(r));
            open.add(n);
            bundles.add(TestServers.bundle(name, n.port(), forgedId, null));
        }
        return new Resumption(q, p, proxy, client(bundles));
    }

    static String get(javax.net.ssl.SSLSocketFactory sf, ConnectProxy proxy, int port) throws Exception {
        return get(sf, proxy, port, "/");
    }

    /** GET https://proxied.test:PORT/PATH through {@code proxy}, redirects followed by the JDK. */
    static String get(javax.net.ssl.SSLSocketFactory sf, ConnectProxy proxy, int port, String path) throws Exception {
        Proxy via = new Proxy(Proxy.Type.HTTP, new InetSocketAddress(InetAddress.getLoopbackAddress(), proxy.port()));
        HttpsURLConnection conn = (HttpsURLConnection) URI.create("https://proxied.test:" + port + path).toURL()
                .openConnection(via);
        conn.setSSLSocketFactory(sf);
        conn.setInstanceFollowRedirects(true);
        conn.setHostnameVerifier((h, session) -> true);
        conn.setConnectTimeout(10_000);
        conn.setReadTimeout(10_000);
        try (InputStream in = conn.getInputStream()) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } finally {
            conn.disconnect();
        }
    }

    @Test
    void urlConnectionSessionsDoNotResumeAcrossPortsInATunnel() throws Exception {
        Resumption r = resumption();
        javax.net.ssl.SSLSocketFactory sf = ConvergeTrustManager.sslContext(r.client()).getSocketFactory();
        assertEquals("q", get(sf, r.proxy(), r.q().port()));
        assertEquals("q", get(sf, r.proxy(), r.q().port()), "a second connection to the same origin works");
        SSLHandshakeException e = assertThrows(SSLHandshakeException.class, () -> get(sf, r.proxy(), r.p().port()));
        Throwable t = e;
        while (t != null && !(t instanceof ConvergeTrustManager.NotTrusted)) {
            t = t.getCause();
        }
        ConvergeTrustManager.NotTrusted nt = assertInstanceOf(ConvergeTrustManager.NotTrusted.class, t);
        assertEquals(r.p().port(), nt.verdict.port());
        assertTrue(r.p().requests.isEmpty(), "the request reached the server at the other port");
    }

    @Test
    void twinOneSharedSessionCacheResumesAcrossPortsWithoutACheck() throws Exception {
        // the JDK's own context (one client session cache) behind the same proxy: the session
        // made at Q is resumed at P, the trust manager is called once, P reads the request
        Resumption r = resumption();
        List<String> checked = new CopyOnWriteArrayList<>();
        javax.net.ssl.X509ExtendedTrustManager recording = new javax.net.ssl.X509ExtendedTrustManager() {
            @Override
            public void checkServerTrusted(java.security.cert.X509Certificate[] chain, String a, Socket s) {
                checked.add(String.valueOf(s.getPort()));
            }

            @Override
            public void checkServerTrusted(java.security.cert.X509Certificate[] chain, String a,
                    javax.net.ssl.SSLEngine e) {
                checked.add("engine");
            }

            @Override
            public void checkServerTrusted(java.security.cert.X509Certificate[] chain, String a) {
                checked.add("none");
            }

            @Override
            public void checkClientTrusted(java.security.cert.X509Certificate[] chain, String a, Socket s) {}

            @Override
            public void checkClientTrusted(java.security.cert.X509Certificate[] chain, String a,
                    javax.net.ssl.SSLEngine e) {}

            @Override
            public void checkClientTrusted(java.security.cert.X509Certificate[] chain, String a) {}

            @Override
            public java.security.cert.X509Certificate[] getAcceptedIssuers() {
                return new java.security.cert.X509Certificate[0];
            }
        };
        javax.net.ssl.SSLContext plain = javax.net.ssl.SSLContext.getInstance("TLS");
        plain.init(null, new javax.net.ssl.TrustManager[] {recording}, null);
        assertEquals("q", get(plain.getSocketFactory(), r.proxy(), r.q().port()));
        assertEquals("p", get(plain.getSocketFactory(), r.proxy(), r.p().port()));
        assertEquals(1, checked.size(), "checks: " + checked);
        assertEquals(1, r.p().requests.size());
    }

    /** The {@link ConvergeTrustManager.NotTrusted} behind {@code e}. */
    static ConvergeTrustManager.NotTrusted notTrusted(Throwable e) {
        Throwable t = e;
        while (t != null && !(t instanceof ConvergeTrustManager.NotTrusted)) {
            t = t.getCause();
        }
        return assertInstanceOf(ConvergeTrustManager.NotTrusted.class, t);
    }

    /** Q's {@code /go/PORT} answers 302 to https://proxied.test:PORT/ (Connection: close). */
    static java.util.function.Function<TestServers.Request, byte[]> redirecting(String body) {
        return r -> {
            if (!r.path().startsWith("/go/")) {
                return text(body);
            }
            String head = "HTTP/1.1 302 Found\r\nLocation: https://proxied.test:" + r.path().substring(4)
                    + "/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            return head.getBytes(StandardCharsets.US_ASCII);
        };
    }

    /**
     * Code without the hook: the JDK's checks with the test identity's certificate as the only
     * CA and any host name accepted (the attacker's certificate passes CA validation).
     */
    static javax.net.ssl.SSLSocketFactory unhooked() throws Exception {
        java.security.KeyStore ks = java.security.KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        ks.setCertificateEntry("ca", genuineId.cert);
        javax.net.ssl.TrustManagerFactory tmf = javax.net.ssl.TrustManagerFactory.getInstance("PKIX");
        tmf.init(ks);
        javax.net.ssl.SSLContext c = javax.net.ssl.SSLContext.getInstance("TLS");
        c.init(null, tmf.getTrustManagers(), null);
        return c.getSocketFactory();
    }

    @Test
    void urlConnectionRedirectHopIsCheckedForItsOwnOrigin() throws Exception {
        // the attacker's site at Q (vouched for) redirects to P on the same host name: the JDK
        // follows with a new connection through the same factory, checked for P and refused
        Resumption r = resumption(redirecting("q"), x -> text("p"));
        javax.net.ssl.SSLSocketFactory sf = ConvergeTrustManager.sslContext(r.client()).getSocketFactory();
        SSLHandshakeException e = assertThrows(SSLHandshakeException.class,
                () -> get(sf, r.proxy(), r.q().port(), "/go/" + r.p().port()));
        assertEquals(r.p().port(), notTrusted(e).verdict.port());
        assertEquals(1, r.q().requests.size());
        assertTrue(r.p().requests.isEmpty(), "the redirected request reached the server at P");
        assertEquals(List.of("proxied.test:" + r.q().port(), "proxied.test:" + r.p().port()), r.proxy().connects);
    }

    @Test
    void twinARedirectIsFollowedToItsTarget() throws Exception {
        // the same redirect to Q itself is followed through the hook (a new connection, checked
        // for Q: trusted); without the hook the redirect to P delivers P's page: the refusal
        // above is the hook's check of the hop, not a redirect that was never followed
        Resumption r = resumption(redirecting("q"), x -> text("p"));
        javax.net.ssl.SSLSocketFactory sf = ConvergeTrustManager.sslContext(r.client()).getSocketFactory();
        assertEquals("q", get(sf, r.proxy(), r.q().port(), "/go/" + r.q().port()));
        assertEquals(2, r.q().requests.size());
        assertEquals("p", get(unhooked(), r.proxy(), r.q().port(), "/go/" + r.p().port()));
        assertEquals(1, r.p().requests.size());
    }

    @Test
    void urlConnectionDoesNotReuseAKeepAliveSocketOpenedWithoutTheHook() throws Exception {
        // code without the hook leaves a keep-alive connection to P in the JDK's cache; the
        // hooked request to P opens its own connection (the cache is keyed by socket factory)
        Resumption r = resumption(x -> text("q"), x -> keepAlive("p"));
        javax.net.ssl.SSLSocketFactory sf = ConvergeTrustManager.sslContext(r.client()).getSocketFactory();
        assertEquals("p", get(unhooked(), r.proxy(), r.p().port()));
        SSLHandshakeException e = assertThrows(SSLHandshakeException.class, () -> get(sf, r.proxy(), r.p().port()));
        assertEquals(r.p().port(), notTrusted(e).verdict.port());
        assertEquals(1, r.p().requests.size(), "the hooked request went over the unhooked connection");
        assertEquals(2, r.proxy().connects.size());
    }

    @Test
    void twinTheUnhookedKeepAliveSocketIsReusedByItsOwnFactory() throws Exception {
        // the connection above really stays alive: the same unhooked factory sends its second
        // request over it (one tunnel, one TLS connection, two requests)
        Resumption r = resumption(x -> text("q"), x -> keepAlive("p"));
        javax.net.ssl.SSLSocketFactory plain = unhooked();
        assertEquals("p", get(plain, r.proxy(), r.p().port()));
        assertEquals("p", get(plain, r.proxy(), r.p().port()));
        assertEquals(2, r.p().requests.size());
        assertEquals(1, r.p().connections.get());
        assertEquals(1, r.proxy().connects.size());
    }

    /** An HTTP/1.1 answer that keeps the connection open ({@link TestServers.Server} serves on). */
    static byte[] keepAlive(String body) {
        return ("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + body.length() + "\r\n\r\n"
                + body).getBytes(StandardCharsets.US_ASCII);
    }

    HttpResponse<String> viaHttpClient(Scene s, ConnectProxy proxy) throws Exception {
        HttpClient http = HttpClient.newBuilder()
                .proxy(ProxySelector.of(new InetSocketAddress(InetAddress.getLoopbackAddress(), proxy.port())))
                .sslContext(ConvergeTrustManager.sslContext(s.client()))
                .connectTimeout(Duration.ofSeconds(10)).build();
        HttpRequest req = HttpRequest.newBuilder(URI.create("https://" + origin(s) + "/"))
                .timeout(Duration.ofSeconds(20)).build();
        return http.send(req, HttpResponse.BodyHandlers.ofString());
    }

    @Test
    void httpClientThroughAProxy() throws Exception {
        Scene s = scene();
        assertEquals("genuine", viaHttpClient(s, s.good()).body());
        assertAskedAboutTheOrigin(s);
        assertThrows(IOException.class, () -> viaHttpClient(s, s.evil()));
        assertTrue(s.forged().requests.isEmpty(), "the request reached the forged server");
    }
}
