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
        return new Scene(genuine, forged, good, evil, notaries, client);
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
        Proxy p = new Proxy(Proxy.Type.HTTP, new InetSocketAddress(InetAddress.getLoopbackAddress(), proxy.port()));
        HttpsURLConnection conn = (HttpsURLConnection) URI.create("https://" + origin(s) + "/").toURL()
                .openConnection(p);
        conn.setSSLSocketFactory(ConvergeTrustManager.sslContext(s.client()).getSocketFactory());
        conn.setHostnameVerifier((h, session) -> true); // converge replaces the name check
        conn.setConnectTimeout(10_000);
        conn.setReadTimeout(10_000);
        try (InputStream in = conn.getInputStream()) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } finally {
            conn.disconnect();
        }
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
