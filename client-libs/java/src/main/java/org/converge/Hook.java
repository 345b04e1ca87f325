package org.converge;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.math.BigInteger;
import java.net.InetSocketAddress;
import java.net.Proxy;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import javax.net.ssl.HttpsURLConnection;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLHandshakeException;
import javax.net.ssl.TrustManagerFactory;

/**
 * The conformance CLI's {@code hook} command (CLIENT-CLI.md): {@code GET https://HOST:PORT/}
 * with {@link HttpsURLConnection} whose socket factory comes from {@link
 * ConvergeTrustManager#sslContext}, through an HTTP proxy ({@link Proxy}) when given. The
 * CA file becomes the JVM's default trust, so that a bypassed hook would show as a forged
 * server accepted.
 */
final class Hook {
    private static final int BODY_MAX = 1024;

    private Hook() {}

    /** The exit status, or null for bad usage. */
    static Integer run(String dir, List<String> rest, PrintStream out) {
        Map<String, String> opts = new HashMap<>();
        int i = 0;
        while (i + 1 < rest.size() && (rest.get(i).equals("--proxy") || rest.get(i).equals("--ca-file"))) {
            opts.put(rest.get(i), rest.get(i + 1));
            i += 2;
        }
        if (rest.size() - i != 2) {
            return null;
        }
        String host = rest.get(i);
        int port;
        try {
            port = Integer.parseInt(rest.get(i + 1));
        } catch (NumberFormatException e) {
            return null;
        }
        Client client;
        try {
            client = new Client(Config.load(Paths.get(dir), Map.of()));
        } catch (ConvergeException e) {
            ConformanceCli.emit(out, ConformanceCli.obj("error", e.kind(), "message", String.valueOf(e.getMessage())));
            return 2;
        }
        try (client) {
            if (opts.containsKey("--ca-file")) {
                SSLContext.setDefault(caContext(opts.get("--ca-file")));
            }
            Proxy proxy = Proxy.NO_PROXY;
            if (opts.containsKey("--proxy")) {
                URI u = URI.create(opts.get("--proxy"));
                proxy = new Proxy(Proxy.Type.HTTP, new InetSocketAddress(u.getHost(), u.getPort()));
            }
            String authority = host.contains(":") ? "[" + host + "]" : host;
            HttpsURLConnection conn = (HttpsURLConnection) URI.create("https://" + authority + ":" + port + "/")
                    .toURL().openConnection(proxy);
            conn.setSSLSocketFactory(ConvergeTrustManager.sslContext(client).getSocketFactory());
            int timeoutMs = (int) ((client.config().totalTimeout + 10) * 1000);
            conn.setConnectTimeout(timeoutMs);
            conn.setReadTimeout(timeoutMs);
            try {
                int status = conn.getResponseCode();
                InputStream in = status < 400 ? conn.getInputStream() : conn.getErrorStream();
                byte[] body = in == null ? new byte[0] : in.readNBytes(BODY_MAX);
                ConformanceCli.emit(out, ConformanceCli.obj("connected", true, "status", BigInteger.valueOf(status),
                        "body", new String(body, StandardCharsets.UTF_8)));
                return 0;
            } catch (SSLHandshakeException e) {
                String kind = causedBy(e, ConvergeTrustManager.NotTrusted.class)
                        || causedBy(e, java.security.cert.CertificateException.class) ? "untrusted" : "io";
                ConformanceCli.emit(out, ConformanceCli.obj("connected", false, "error", kind,
                        "message", String.valueOf(e.getMessage())));
                return 1;
            } catch (IOException e) {
                ConformanceCli.emit(out, ConformanceCli.obj("connected", false, "error", "io",
                        "message", String.valueOf(e)));
                return 1;
            } finally {
                conn.disconnect();
            }
        } catch (GeneralSecurityException | IOException e) {
            ConformanceCli.emit(out, ConformanceCli.obj("error", "usage", "message", String.valueOf(e)));
            return 2;
        }
    }

    private static boolean causedBy(Throwable t, Class<? extends Throwable> cls) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (cls.isInstance(c)) {
                return true;
            }
        }
        return false;
    }

    private static SSLContext caContext(String pemFile) throws GeneralSecurityException, IOException {
        KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
        ks.load(null, null);
        CertificateFactory cf = CertificateFactory.getInstance("X.509");
        int n = 0;
        try (InputStream in = Files.newInputStream(Paths.get(pemFile))) {
            for (Certificate c : cf.generateCertificates(in)) {
                ks.setCertificateEntry("ca" + n++, c);
            }
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ks);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(null, tmf.getTrustManagers(), null);
        return ctx;
    }
}
