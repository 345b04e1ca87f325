package org.converge;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.math.BigInteger;
import java.net.InetSocketAddress;
import java.net.Proxy;
import java.net.URI;
import java.net.URL;
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
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManagerFactory;

/**
 * The conformance CLI's {@code hook} command (CLIENT-CLI.md): {@code GET https://HOST:PORT/P}
 * with {@link HttpsURLConnection} whose socket factory comes from {@link
 * ConvergeTrustManager#sslContext}, through an HTTP proxy ({@link Proxy}) when given. The
 * CA file becomes the JVM's default trust, so that a bypassed hook would show as a forged
 * server accepted. {@code --follow-redirects}: the JDK's own redirect following ({@code
 * setInstanceFollowRedirects}, at most 5 hops); {@code --first URL}: a request with the same
 * socket factory (the same {@code SSLContext}, session caches and keep-alive cache entry)
 * first; {@code --unhooked-first}: a request as code without the hook makes it (the default
 * socket factory, CA validation only) first, in the same JVM-wide keep-alive cache.
 */
final class Hook {
    private static final int BODY_MAX = 1024;
    private static final int MAX_REDIRECTS = 5;
    /** The flags and whether each takes a value. */
    private static final Map<String, Boolean> FLAGS = Map.of("--proxy", true, "--ca-file", true,
            "--path", true, "--first", true, "--follow-redirects", false, "--unhooked-first", false);

    private Hook() {}

    /** A failed request: the failure line's error kind and message. */
    private static final class Failed extends Exception {
        private static final long serialVersionUID = 1L;
        final String kind;

        Failed(String kind, String message) {
            super(message);
            this.kind = kind;
        }
    }

    /** The exit status, or null for bad usage. */
    static Integer run(String dir, List<String> rest, PrintStream out) {
        Map<String, String> opts = new HashMap<>();
        int i = 0;
        while (i < rest.size() && FLAGS.containsKey(rest.get(i))) {
            boolean valued = FLAGS.get(rest.get(i));
            if (valued && i + 1 >= rest.size()) {
                return null;
            }
            opts.put(rest.get(i), valued ? rest.get(i + 1) : "");
            i += valued ? 2 : 1;
        }
        String path = opts.getOrDefault("--path", "/");
        if (rest.size() - i != 2 || !path.startsWith("/")) {
            return null;
        }
        String host = rest.get(i);
        int port;
        try {
            port = Integer.parseInt(rest.get(i + 1));
        } catch (NumberFormatException e) {
            return null;
        }
        if (port <= 0 || port > 65535) {
            return null;
        }
        // read once, when HttpURLConnection is first loaded (below)
        System.setProperty("http.maxRedirects", String.valueOf(MAX_REDIRECTS));
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
            URL url = URI.create("https://" + authority + ":" + port + path).toURL();
            // one hooked factory for every request: one SSLContext, one keep-alive cache key
            SSLSocketFactory hooked = ConvergeTrustManager.sslContext(client).getSocketFactory();
            int timeoutMs = (int) ((client.config().totalTimeout + 10) * 1000);
            String step = "first request: ";
            try {
                if (opts.containsKey("--unhooked-first")) {
                    get(url, proxy, null, false, timeoutMs);
                }
                if (opts.containsKey("--first")) {
                    URL first = URI.create(opts.get("--first")).toURL();
                    if (!"https".equals(first.getProtocol())) {
                        return null;
                    }
                    get(first, proxy, hooked, false, timeoutMs);
                }
                step = "";
                Object[] r = get(url, proxy, hooked, opts.containsKey("--follow-redirects"), timeoutMs);
                ConformanceCli.emit(out, ConformanceCli.obj("connected", true, "status", r[0], "body", r[1]));
                return 0;
            } catch (Failed e) {
                ConformanceCli.emit(out, ConformanceCli.obj("connected", false, "error", e.kind,
                        "message", step + e.getMessage()));
                return 1;
            }
        } catch (GeneralSecurityException | IOException | IllegalArgumentException e) {
            ConformanceCli.emit(out, ConformanceCli.obj("error", "usage", "message", String.valueOf(e)));
            return 2;
        }
    }

    /**
     * GET {@code url}: with {@code factory} (null: the default one, as code without the hook),
     * the body read to its end and the stream closed so that the connection stays in the JDK's
     * keep-alive cache. Returns the status and the body's first KiB as text.
     */
    private static Object[] get(URL url, Proxy proxy, SSLSocketFactory factory, boolean follow, int timeoutMs)
            throws Failed, IOException {
        HttpsURLConnection conn = (HttpsURLConnection) url.openConnection(proxy);
        if (factory != null) {
            conn.setSSLSocketFactory(factory);
        }
        conn.setInstanceFollowRedirects(follow);
        conn.setConnectTimeout(timeoutMs);
        conn.setReadTimeout(timeoutMs);
        try {
            int status = conn.getResponseCode();
            byte[] body;
            try (InputStream in = status < 400 ? conn.getInputStream() : conn.getErrorStream()) {
                body = in == null ? new byte[0] : in.readNBytes(BODY_MAX); // close() drains the rest (keep-alive)
            }
            String text = new String(body, StandardCharsets.UTF_8);
            return new Object[] {BigInteger.valueOf(status), text};
        } catch (SSLHandshakeException e) {
            String kind = causedBy(e, ConvergeTrustManager.NotTrusted.class)
                    || causedBy(e, java.security.cert.CertificateException.class) ? "untrusted" : "io";
            throw new Failed(kind, String.valueOf(e.getMessage()));
        } catch (IOException e) {
            throw new Failed("io", String.valueOf(e));
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
