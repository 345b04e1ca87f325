package org.converge;

import java.net.Socket;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.cert.CertificateException;
import java.security.cert.X509Certificate;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManager;
import javax.net.ssl.X509ExtendedTrustManager;

/**
 * Trusts exactly one certificate: the server's leaf must have the pinned SHA-1 (of its DER).
 * No CA, validity or host name check: a notary bundle names the certificate itself.
 */
public final class PinningTrustManager extends X509ExtendedTrustManager {
    /** Thrown by the handshake when the leaf is not the pinned certificate. */
    public static final class PinException extends CertificateException {
        private static final long serialVersionUID = 1L;

        PinException(String message) {
            super(message);
        }
    }

    private final byte[] pin;

    public PinningTrustManager(Fingerprint pin) {
        if (!pin.algorithm().equals("sha1")) {
            throw new IllegalArgumentException("pins are SHA-1");
        }
        this.pin = pin.digest();
    }

    /** A TLS 1.2+ client context trusting only {@code pin}. */
    public static SSLContext context(Fingerprint pin) {
        try {
            SSLContext c = SSLContext.getInstance("TLS");
            c.init(null, new TrustManager[] {new PinningTrustManager(pin)}, null);
            return c;
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    private void check(X509Certificate[] chain) throws CertificateException {
        if (chain == null || chain.length == 0) {
            throw new PinException("no server certificate");
        }
        try {
            byte[] d = MessageDigest.getInstance("SHA-1").digest(chain[0].getEncoded());
            if (!MessageDigest.isEqual(d, pin)) {
                throw new PinException("the server certificate is not the pinned one");
            }
        } catch (GeneralSecurityException e) {
            if (e instanceof PinException p) {
                throw p;
            }
            throw new PinException("cannot fingerprint the server certificate: " + e);
        }
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType) throws CertificateException {
        check(chain);
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket)
            throws CertificateException {
        check(chain);
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
            throws CertificateException {
        check(chain);
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType) throws CertificateException {
        throw new CertificateException("client certificates are not accepted");
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket)
            throws CertificateException {
        throw new CertificateException("client certificates are not accepted");
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
            throws CertificateException {
        throw new CertificateException("client certificates are not accepted");
    }

    @Override
    public X509Certificate[] getAcceptedIssuers() {
        return new X509Certificate[0];
    }
}
