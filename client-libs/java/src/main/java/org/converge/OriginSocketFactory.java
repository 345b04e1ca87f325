package org.converge;

import java.io.IOException;
import java.net.InetAddress;
import java.net.Socket;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.function.Supplier;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocketFactory;

/**
 * The socket factory of {@link ConvergeTrustManager#sslContext}: it remembers, for every
 * socket it makes, the host and port the caller asked for. Inside a proxy's CONNECT tunnel
 * (a socket layered over the proxy connection, as {@code HttpsURLConnection} makes one) the
 * handshake session reports the proxy's port; the notaries must be asked about the origin's.
 * Such a socket is made by a context of that origin's own, so that its TLS session can be
 * resumed only by a later connection to the same host and port (the JDK keys client sessions by
 * the host and the port the session reports: in a tunnel, the proxy's).
 */
final class OriginSocketFactory extends SSLSocketFactory {
    /** What a socket was made for; {@code layered}: over another connection (a tunnel). */
    record Origin(String host, int port, boolean layered) {}

    private static final Map<Socket, Origin> ORIGINS = Collections.synchronizedMap(new WeakHashMap<>());

    /** Tunnel contexts kept (least recently used dropped; a dropped origin starts afresh). */
    static final int MAX_TUNNEL_ORIGINS = 64;

    private final SSLSocketFactory delegate;
    private final Supplier<SSLContext> fresh;
    private final Map<String, SSLSocketFactory> tunnels = Collections.synchronizedMap(
            new LinkedHashMap<>(16, 0.75f, true) {
                private static final long serialVersionUID = 1L;

                @Override
                protected boolean removeEldestEntry(Map.Entry<String, SSLSocketFactory> e) {
                    return size() > MAX_TUNNEL_ORIGINS;
                }
            });

    /** {@code fresh}: a new context like the delegate's (one per origin inside tunnels). */
    OriginSocketFactory(SSLSocketFactory delegate, Supplier<SSLContext> fresh) {
        this.delegate = delegate;
        this.fresh = fresh;
    }

    private SSLSocketFactory tunnelFactory(String host, int port) {
        String key = String.valueOf(host).toLowerCase(java.util.Locale.ROOT) + ":" + port;
        return tunnels.computeIfAbsent(key, k -> fresh.get().getSocketFactory());
    }

    /** The origin a socket of this factory was made for, or null. */
    static Origin originOf(Socket s) {
        return s == null ? null : ORIGINS.get(s);
    }

    private static Socket remember(Socket s, String host, int port, boolean layered) {
        if (host != null && port > 0) {
            ORIGINS.put(s, new Origin(host, port, layered));
        }
        return s;
    }

    @Override
    public Socket createSocket(Socket s, String host, int port, boolean autoClose) throws IOException {
        return remember(tunnelFactory(host, port).createSocket(s, host, port, autoClose), host, port, true);
    }

    @Override
    public Socket createSocket(String host, int port) throws IOException {
        return remember(delegate.createSocket(host, port), host, port, false);
    }

    @Override
    public Socket createSocket(String host, int port, InetAddress localHost, int localPort) throws IOException {
        return remember(delegate.createSocket(host, port, localHost, localPort), host, port, false);
    }

    @Override
    public Socket createSocket(InetAddress host, int port) throws IOException {
        return remember(delegate.createSocket(host, port), host.getHostAddress(), port, false);
    }

    @Override
    public Socket createSocket(InetAddress address, int port, InetAddress localAddress, int localPort)
            throws IOException {
        return remember(delegate.createSocket(address, port, localAddress, localPort), address.getHostAddress(),
                port, false);
    }

    @Override
    public Socket createSocket() throws IOException {
        return delegate.createSocket(); // connected later: the session's host and port apply
    }

    @Override
    public String[] getDefaultCipherSuites() {
        return delegate.getDefaultCipherSuites();
    }

    @Override
    public String[] getSupportedCipherSuites() {
        return delegate.getSupportedCipherSuites();
    }
}
