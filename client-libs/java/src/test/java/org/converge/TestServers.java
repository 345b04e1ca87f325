package org.converge;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.math.BigInteger;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.Signature;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLServerSocket;

/**
 * Loopback TLS servers for the IO tests: a notary speaking the legacy and extended formats
 * (signing with the test-only keys of {@code vectors/keys/}) and a plain HTTPS target. Real
 * sockets and real TLS on 127.0.0.1; each server runs until closed.
 */
final class TestServers {
    private TestServers() {}

    /** One of the test-only identities: {@code notary} or {@code other}. */
    static final class Identity {
        final X509Certificate cert;
        final String pem;
        final PrivateKey key;

        Identity(String name) throws Exception {
            Path dir = VectorsTest.vectorsDir().resolve("keys");
            pem = Files.readString(dir.resolve("test-" + name + "-cert.pem"));
            cert = (X509Certificate) CertificateFactory.getInstance("X.509")
                    .generateCertificate(new java.io.ByteArrayInputStream(pem.getBytes(StandardCharsets.US_ASCII)));
            String k = Files.readString(dir.resolve("test-" + name + "-key.pem"))
                    .replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", "");
            key = KeyFactory.getInstance("RSA").generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(k)));
        }

        String sha1() throws Exception {
            return Fingerprint.of(cert.getEncoded(), "sha1").colonHex();
        }

        SSLContext serverContext() throws Exception {
            return TestServers.serverContext(cert, key);
        }

        /** A legacy 200/409 body listing {@code fingerprint}: the signed bytes, the signature member. */
        byte[] signedBody(String fingerprint) throws Exception {
            return signedBody(listing(fingerprint, ""), "");
        }

        /** The body for signed bytes {@code s} (Latin-1 text), {@code after} added after it. */
        byte[] signedBody(String s, String after) throws Exception {
            Signature sig = Signature.getInstance("SHA1withRSA");
            sig.initSign(key);
            sig.update(s.getBytes(StandardCharsets.ISO_8859_1));
            String b64 = Base64.getEncoder().encodeToString(sig.sign());
            return (s.substring(0, s.length() - 1) + ", \"signature\": \"" + b64 + "\"" + after + "}")
                    .getBytes(StandardCharsets.ISO_8859_1);
        }
    }

    /** A TLS server context presenting {@code cert} with {@code key}. */
    static SSLContext serverContext(X509Certificate cert, PrivateKey key) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        ks.setKeyEntry("k", key, new char[0], new X509Certificate[] {cert});
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, new char[0]);
        SSLContext c = SSLContext.getInstance("TLS");
        c.init(kmf.getKeyManagers(), null, null);
        return c;
    }

    /** One history entry of a legacy list. */
    static String entry(String fingerprint) {
        return "{\"timestamp\": {\"start\": \"1323389219\", \"finish\": \"1324691510\"}, \"fingerprint\": \""
                + fingerprint + "\"}";
    }

    /** A legacy list of one entry, {@code extra} members added after it. */
    static String listing(String fingerprint, String extra) {
        return "{\"fingerprintList\": [" + entry(fingerprint) + "]" + extra + "}";
    }

    /** A received request: head and body. */
    record Request(String head, byte[] body) {
        String path() {
            return head.split(" ", 3)[1];
        }
    }

    static byte[] response(int status, String contentType, byte[] body) {
        String head = "HTTP/1.0 " + status + " X\r\nContent-Type: " + contentType + "\r\nContent-Length: "
                + body.length + "\r\nCache-Status: converge-notary; hit\r\n\r\n";
        byte[] h = head.getBytes(StandardCharsets.US_ASCII);
        byte[] out = Arrays.copyOf(h, h.length + body.length);
        System.arraycopy(body, 0, out, h.length, body.length);
        return out;
    }

    /** A TLS server on 127.0.0.1 answering each request with {@code handler} (null: hang). */
    static final class Server implements AutoCloseable {
        final ServerSocket socket;
        final List<Request> requests = new CopyOnWriteArrayList<>();
        final AtomicInteger connections = new AtomicInteger();
        private final List<Socket> open = new CopyOnWriteArrayList<>();
        private final Thread thread;

        Server(Identity id, Function<Request, byte[]> handler) throws Exception {
            this(id.serverContext(), handler);
        }

        /** A server with context {@code ctx} (servers sharing one share its session cache and keys). */
        Server(SSLContext ctx, Function<Request, byte[]> handler) throws Exception {
            SSLServerSocket s = (SSLServerSocket) ctx.getServerSocketFactory()
                    .createServerSocket(0, 50, InetAddress.getLoopbackAddress());
            socket = s;
            thread = new Thread(() -> loop(handler), "test-server");
            thread.setDaemon(true);
            thread.start();
        }

        int port() {
            return socket.getLocalPort();
        }

        private void loop(Function<Request, byte[]> handler) {
            while (!socket.isClosed()) {
                Socket c;
                try {
                    c = socket.accept();
                } catch (IOException e) {
                    return;
                }
                connections.incrementAndGet();
                open.add(c);
                Thread t = new Thread(() -> serve(c, handler));
                t.setDaemon(true);
                t.start();
            }
        }

        /**
         * Answers the requests of one connection: after an answer that starts {@code HTTP/1.1 200}
         * the next request is read from the same connection (keep-alive, at most 16 requests),
         * after any other the connection is closed.
         */
        private void serve(Socket c, Function<Request, byte[]> handler) {
            try {
                c.setSoTimeout(10_000);
                for (int i = 0; i < 16 && serveOne(c, handler); i++) {
                    // the next request on this connection
                }
            } catch (IOException e) {
                // the client went away
            } finally {
                try {
                    c.close();
                } catch (IOException e) {
                    // already closed
                }
            }
        }

        /** One request and its answer; whether the connection stays open. */
        private boolean serveOne(Socket c, Function<Request, byte[]> handler) {
            try {
                InputStream in = c.getInputStream();
                ByteArrayOutputStream head = new ByteArrayOutputStream();
                while (!head.toString(StandardCharsets.ISO_8859_1).endsWith("\r\n\r\n")) {
                    int b = in.read();
                    if (b < 0 || head.size() > 16384) {
                        return false;
                    }
                    head.write(b);
                }
                String h = head.toString(StandardCharsets.ISO_8859_1);
                int n = 0;
                for (String line : h.split("\r\n")) {
                    if (line.toLowerCase().startsWith("content-length:")) {
                        n = Integer.parseInt(line.substring(15).strip());
                    }
                }
                byte[] body = in.readNBytes(Math.min(n, 65536));
                Request r = new Request(h, body);
                requests.add(r);
                if (handler == null) {
                    Thread.sleep(30_000);
                    return false;
                }
                byte[] answer = handler.apply(r);
                c.getOutputStream().write(answer);
                c.getOutputStream().flush();
                return new String(answer, 0, Math.min(answer.length, 12), StandardCharsets.US_ASCII)
                        .equals("HTTP/1.1 200");
            } catch (IOException | InterruptedException e) {
                return false; // the client went away; nothing to answer
            }
        }

        @Override
        public void close() throws IOException {
            socket.close();
            for (Socket s : open) {
                s.close();
            }
        }
    }

    /** A legacy notary that sees {@code seen} for every target. */
    static Function<Request, byte[]> legacyNotary(Identity id, String seen) {
        return r -> {
            try {
                String asked = new String(r.body(), StandardCharsets.US_ASCII).replace("fingerprint=", "");
                boolean match = Fingerprint.parse(asked).equals(Fingerprint.parse(seen));
                return response(match ? 200 : 409, "application/json", id.signedBody(seen));
            } catch (Exception e) {
                return response(400, "text/plain", new byte[0]);
            }
        };
    }

    /** An Ed25519 signing key of the extended format, with its bundle entry. */
    static final class SigningKey {
        final KeyPair pair;
        final byte[] raw;
        final String keyId;

        SigningKey() throws Exception {
            pair = KeyPairGenerator.getInstance("Ed25519").generateKeyPair();
            byte[] spki = pair.getPublic().getEncoded();
            raw = Arrays.copyOfRange(spki, spki.length - 32, spki.length);
            keyId = Extended.keyIdOf(raw);
        }

        Map<String, Object> bundleEntry() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("alg", "ed25519");
            m.put("key_id", keyId);
            m.put("public_key", Extended.b64url(raw));
            m.put("status", "current");
            return m;
        }

        /** A canonical signed answer; {@code tweak} may change the statement before signing. */
        byte[] answer(Map<String, Object> request, String verdict, long now,
                java.util.function.Consumer<Map<String, Object>> tweak) throws Exception {
            Map<String, Object> target = new LinkedHashMap<>();
            target.put("host", IpAddress.expectedHost((String) request.get("host")));
            target.put("port", request.get("port"));
            if (request.containsKey("ip")) {
                target.put("ip", request.get("ip"));
            }
            Map<String, Object> rq = new LinkedHashMap<>();
            rq.put("fingerprint", request.get("fingerprint"));
            rq.put("alg", request.get("alg"));
            if (request.containsKey("nonce")) {
                rq.put("nonce", request.get("nonce"));
            }
            Map<String, Object> st = new LinkedHashMap<>();
            st.put("type", Extended.FORMAT);
            st.put("key_id", keyId);
            st.put("target", target);
            st.put("request", rq);
            st.put("verdict", verdict);
            st.put("answered_at", BigInteger.valueOf(now));
            tweak.accept(st);
            // the statement's compact form with sorted keys: canonical for these ASCII values
            return signed(Json.compact(st).getBytes(StandardCharsets.UTF_8));
        }

        /** An answer carrying statement bytes {@code t} as they are, signed. */
        byte[] signed(byte[] t) throws Exception {
            Signature s = Signature.getInstance("Ed25519");
            s.initSign(pair.getPrivate());
            s.update(t);
            byte[] prefix = ("{\"signature\":{\"alg\":\"ed25519\",\"key_id\":\"" + keyId + "\",\"value\":\""
                    + Extended.b64url(s.sign()) + "\"},\"statement\":").getBytes(StandardCharsets.US_ASCII);
            byte[] out = Arrays.copyOf(prefix, prefix.length + t.length + 1);
            System.arraycopy(t, 0, out, prefix.length, t.length);
            out[out.length - 1] = '}';
            return out;
        }
    }

    /** An extended notary that sees {@code seen}; {@code tweak} alters each statement. */
    @SuppressWarnings("unchecked")
    static Function<Request, byte[]> extendedNotary(SigningKey k, String seen,
            java.util.function.Consumer<Map<String, Object>> tweak) {
        return r -> {
            try {
                if (!r.path().equals(Extended.ANSWER_PATH)) {
                    return response(404, "text/plain", new byte[0]);
                }
                Map<String, Object> req = (Map<String, Object>) Json.parse(r.body());
                boolean match = Fingerprint.parse((String) req.get("fingerprint")).equals(Fingerprint.parse(seen));
                byte[] a = k.answer(req, match ? "match" : "mismatch", System.currentTimeMillis() / 1000, tweak);
                return response(match ? 200 : 409, Extended.MEDIA_TYPE, a);
            } catch (Exception e) {
                return response(400, "text/plain", new byte[0]);
            }
        };
    }

    /** A bundle for one host on 127.0.0.1 pinned to {@code id}; {@code key} adds the extended fields. */
    static Bundle bundle(String name, int port, Identity id, SigningKey key) throws Exception {
        Map<String, Object> host = new LinkedHashMap<>();
        host.put("host", "127.0.0.1");
        host.put("ssl_port", BigInteger.valueOf(port));
        host.put("http_port", BigInteger.valueOf(port));
        host.put("certificate", id.pem);
        Map<String, Object> b = new LinkedHashMap<>();
        b.put("version", BigInteger.ONE);
        b.put("name", name);
        b.put("hosts", List.of(host));
        if (key != null) {
            b.put("protocols", List.of("convergence-v1", Extended.FORMAT));
            b.put("signing_keys", List.of(key.bundleEntry()));
        }
        return Bundle.parse(b);
    }

    /** A free port with nothing listening on it. */
    static int deadPort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }
}
