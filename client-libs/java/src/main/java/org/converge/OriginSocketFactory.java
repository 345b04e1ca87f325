package org.converge;

import java.io.IOException;
import java.net.InetAddress;
import java.net.Socket;
import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;
import javax.net.ssl.SSLSocketFactory;

/**
 * The socket factory of {@link ConvergeTrustManager#sslContext}: it remembers, for every
 * socket it makes, the host and port the caller asked for. Inside a proxy's CONNECT tunnel
 * (a socket layered over the proxy connection, as {@code HttpsURLConnection} makes one) the
 * handshake session reports the proxy's port; the notaries must be asked about the origin's.
 */
final class OriginSocketFactory extends SSLSocketFactory {
    /** What a socket was made for; {@code layered}: over another connection (a tunnel). */
    record Origin(String host, int port, boolean layered) {}

    private static final Map<Socket, Origin> ORIGINS = Collections.synchronizedMap(new WeakHashMap<>());

    private final SSLSocketFactory delegate;

    OriginSocketFactory(SSLSocketFactory delegate) {
        this.delegate = delegate;
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
        return remember(delegate.createSocket(s, host, port, autoClose), host, port, true);
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
