package org.converge;

import java.net.InetAddress;
import java.net.Socket;
import java.security.GeneralSecurityException;
import java.security.SecureRandom;
import java.security.cert.CertificateException;
import java.security.cert.X509Certificate;
import java.util.function.Supplier;
import javax.net.ssl.KeyManager;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLContextSpi;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLServerSocketFactory;
import javax.net.ssl.SSLSession;
import javax.net.ssl.SSLSessionContext;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedTrustManager;

/**
 * An {@link X509ExtendedTrustManager} that asks notaries instead of checking CAs: the server's
 * leaf certificate is trusted when {@link Client#check} trusts its fingerprint for the peer's
 * host and port (taken from the handshake session of the {@link SSLSocket} or {@link
 * SSLEngine}). Install it with {@link #sslContext(Client)}:
 *
 * <pre>{@code
 * SSLContext ctx = ConvergeTrustManager.sslContext(Converge.client(null));
 * HttpsURLConnection c = (HttpsURLConnection) url.openConnection();
 * c.setSSLSocketFactory(ctx.getSocketFactory());
 * }</pre>
 *
 * <p>No CA and no host name check are made unless {@code requireCa} (see {@link
 * #sslContext(Client, boolean)}). Without a socket or engine the peer is unknown and nothing is
 * trusted.
 */
public final class ConvergeTrustManager extends X509ExtendedTrustManager {
    /** The notaries did not confirm the certificate; {@link #verdict} says why. */
    public static final class NotTrusted extends CertificateException {
        private static final long serialVersionUID = 1L;
        public final transient Verdict verdict;

        NotTrusted(String message, Verdict verdict) {
            super(message);
            this.verdict = verdict;
        }
    }

    private final Client client;
    private final boolean bindAddress;
    private final X509ExtendedTrustManager ca;

    public ConvergeTrustManager(Client client) {
        this(client, false, null);
    }

    public ConvergeTrustManager(Client client, boolean bindAddress) {
        this(client, bindAddress, null);
    }

    /**
     * {@code bindAddress}: also ask the notaries to probe the address this connection reached
     * (extended answers must then name it), which detects an attacker who redirects the
     * connection but not a notary's view of the name.
     */
    public ConvergeTrustManager(Client client, boolean bindAddress, X509ExtendedTrustManager ca) {
        this.client = client;
        this.bindAddress = bindAddress;
        this.ca = ca;
    }

    /**
     * A TLS client context whose server certificates are checked with notaries only: no CA and
     * no host name check (the notaries' confirmation for this host and port replaces both; the
     * JDK leaves endpoint identification to an {@link X509ExtendedTrustManager}).
     */
    public static SSLContext sslContext(Client client) throws GeneralSecurityException {
        return sslContext(client, false);
    }

    /**
     * As {@link #sslContext(Client)}; with {@code requireCa} the JDK's default trust manager
     * (CA path and, where the connection asks for it, host name) must accept the certificate
     * too, before the notaries are asked.
     */
    public static SSLContext sslContext(Client client, boolean requireCa) throws GeneralSecurityException {
        X509ExtendedTrustManager ca = null;
        if (requireCa) {
            TrustManagerFactory f = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            f.init((java.security.KeyStore) null);
            for (TrustManager tm : f.getTrustManagers()) {
                if (tm instanceof X509ExtendedTrustManager x) {
                    ca = x;
                }
            }
            if (ca == null) {
                throw new GeneralSecurityException("no default X509ExtendedTrustManager");
            }
        }
        TrustManager[] tm = {new ConvergeTrustManager(client, false, ca)};
        return withOriginSockets(context(tm), () -> {
            try {
                return context(tm);
            } catch (GeneralSecurityException e) {
                throw new IllegalStateException(e);
            }
        });
    }

    private static SSLContext context(TrustManager[] tm) throws GeneralSecurityException {
        SSLContext c = SSLContext.getInstance("TLS");
        c.init(null, tm, null);
        return c;
    }

    /**
     * {@code ctx} whose socket factory remembers the host and port each socket is made for
     * (see {@link OriginSocketFactory}): {@code HttpsURLConnection} through a proxy layers its
     * socket over the tunnel, and the session then reports the proxy's port. A socket in a
     * tunnel is made by a context of its origin's own ({@code fresh}, one per host and port):
     * the JDK keys client sessions by host and the port the session reports, which in a tunnel
     * is the proxy's, so with one shared cache a session checked for host:Q would be resumed at
     * host:P through the same proxy and the trust manager never called.
     */
    static SSLContext withOriginSockets(SSLContext ctx, Supplier<SSLContext> fresh) {
        OriginSocketFactory factory = new OriginSocketFactory(ctx.getSocketFactory(), fresh);
        SSLContextSpi spi = new SSLContextSpi() {
            @Override
            protected void engineInit(KeyManager[] km, TrustManager[] tm, SecureRandom sr) {
                throw new IllegalStateException("already initialised");
            }

            @Override
            protected SSLSocketFactory engineGetSocketFactory() {
                return factory;
            }

            @Override
            protected SSLServerSocketFactory engineGetServerSocketFactory() {
                return ctx.getServerSocketFactory();
            }

            @Override
            protected SSLEngine engineCreateSSLEngine() {
                return ctx.createSSLEngine();
            }

            @Override
            protected SSLEngine engineCreateSSLEngine(String host, int port) {
                return ctx.createSSLEngine(host, port);
            }

            @Override
            protected SSLSessionContext engineGetServerSessionContext() {
                return ctx.getServerSessionContext();
            }

            @Override
            protected SSLSessionContext engineGetClientSessionContext() {
                return ctx.getClientSessionContext();
            }

            @Override
            protected SSLParameters engineGetDefaultSSLParameters() {
                return ctx.getDefaultSSLParameters();
            }

            @Override
            protected SSLParameters engineGetSupportedSSLParameters() {
                return ctx.getSupportedSSLParameters();
            }
        };
        return new SSLContext(spi, ctx.getProvider(), ctx.getProtocol()) {};
    }

    /** Check {@code chain} for {@code host:port} (what the socket and engine variants call). */
    public Verdict check(X509Certificate[] chain, String host, int port, String ip) throws CertificateException {
        if (chain == null || chain.length == 0) {
            throw new CertificateException("no server certificate");
        }
        if (host == null || port <= 0) {
            throw new CertificateException("the peer's host and port are unknown: use an SSLSocket "
                    + "or SSLEngine created with a host name and port");
        }
        byte[] der = chain[0].getEncoded();
        Verdict v;
        try {
            v = client.check(host, port, Fingerprint.of(der, "sha1").colonHex(), der, ip);
        } catch (ConvergeException e) {
            CertificateException ce = new CertificateException("converge: " + e.kind() + ": " + e.getMessage());
            ce.initCause(e);
            throw ce;
        }
        if (!v.trusted()) {
            throw new NotTrusted("converge does not trust " + host + ":" + port + ": " + v.reason(), v);
        }
        return v;
    }

    private static String peerHost(SSLSession s) {
        return s == null ? null : s.getPeerHost();
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket)
            throws CertificateException {
        if (!(socket instanceof SSLSocket ssl)) {
            throw new CertificateException("not a TLS socket");
        }
        if (ca != null) {
            ca.checkServerTrusted(chain, authType, socket);
        }
        InetAddress a = socket.getInetAddress();
        OriginSocketFactory.Origin origin = OriginSocketFactory.originOf(socket);
        if (origin != null) {
            // the host and port the socket was made for: the origin, also inside a proxy's
            // tunnel, where the session reports the proxy's port and the proxy's address
            check(chain, origin.host(), origin.port(),
                    bindAddress && !origin.layered() && a != null ? a.getHostAddress() : null);
            return;
        }
        SSLSession s = ssl.getHandshakeSession();
        String host = peerHost(s);
        int port = s == null ? -1 : s.getPeerPort();
        if (host == null && a != null) {
            host = a.getHostAddress();
        }
        if (port <= 0) {
            port = socket.getPort();
        }
        check(chain, host, port, bindAddress && a != null ? a.getHostAddress() : null);
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
            throws CertificateException {
        if (engine == null) {
            throw new CertificateException("no SSLEngine");
        }
        if (ca != null) {
            ca.checkServerTrusted(chain, authType, engine);
        }
        SSLSession s = engine.getHandshakeSession();
        String host = s != null && s.getPeerHost() != null ? s.getPeerHost() : engine.getPeerHost();
        int port = s != null && s.getPeerPort() > 0 ? s.getPeerPort() : engine.getPeerPort();
        check(chain, host, port, null);
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType) throws CertificateException {
        throw new CertificateException("the peer's host and port are unknown without a socket or engine");
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType) throws CertificateException {
        throw new CertificateException("client certificates are not checked with notaries");
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket)
            throws CertificateException {
        throw new CertificateException("client certificates are not checked with notaries");
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
            throws CertificateException {
        throw new CertificateException("client certificates are not checked with notaries");
    }

    @Override
    public X509Certificate[] getAcceptedIssuers() {
        return new X509Certificate[0];
    }
}
