package org.converge.example;

import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocket;
import org.converge.Client;
import org.converge.Converge;
import org.converge.ConvergeTrustManager;

/**
 * A TLS client whose server certificate is checked with notaries instead of CAs:
 *
 * <pre>
 * java -cp ... org.converge.example.TlsClient HOST PORT [CONFIG_DIR]
 * </pre>
 *
 * It connects, sends {@code HEAD / HTTP/1.0} and prints the status line; the handshake fails
 * with {@link ConvergeTrustManager.NotTrusted} when the notaries do not confirm the certificate.
 */
public final class TlsClient {
    private TlsClient() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: TlsClient HOST PORT [CONFIG_DIR]");
            System.exit(2);
        }
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        Path dir = args.length > 2 ? Paths.get(args[2]) : null;
        Client client = Converge.client(dir);
        SSLContext ctx = ConvergeTrustManager.sslContext(client);
        try (SSLSocket s = (SSLSocket) ctx.getSocketFactory().createSocket(host, port)) {
            s.setSoTimeout(10_000);
            s.startHandshake();
            OutputStream out = s.getOutputStream();
            out.write(("HEAD / HTTP/1.0\r\nHost: " + host + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = s.getInputStream();
            StringBuilder line = new StringBuilder();
            int c;
            while ((c = in.read()) >= 0 && c != '\n' && line.length() < 200) {
                line.append((char) c);
            }
            System.out.println("trusted by the notaries; " + line.toString().strip());
        }
    }
}
