package org.converge;

import java.io.ByteArrayInputStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.PublicKey;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Pattern;
import javax.net.ssl.SSLContext;

/**
 * A notary bundle ({@code .notary} file): one logical notary and its physical hosts (pure
 * parsing). v1 {@code {"version": 1, "name", "hosts": [...], "bundle_location"?, "region"?,
 * "protocols"?, "signing_keys"?, "transparency"?}} and v0 {@code {host, ssl_port, http_port,
 * certificate}}. {@code transparency} names the notary's log, its witnesses and how many
 * cosignatures a client requires ({@link Transparency#parseLogPolicy}; malformed: a bundle error).
 * Each host's pin is the SHA-1 of the DER certificate of its PEM.
 */
public final class Bundle {
    public static final int MAX_BUNDLE_BYTES = 64 * 1024;
    public static final int MAX_HOSTS = 16;
    public static final int MAX_NAME = 200;
    private static final Pattern PEM = Pattern.compile(
            "\\s*-----BEGIN CERTIFICATE-----\\r?\\n[A-Za-z0-9+/=\\r\\n]+-----END CERTIFICATE-----\\s*");

    /** One physical notary host. */
    public static final class Host {
        public final String host;
        public final int sslPort;
        public final int httpPort;
        public final String certificatePem;
        public final X509Certificate certificate;
        public final byte[] certificateDer;
        public final Fingerprint pin;
        private volatile SSLContext sslContext;

        Host(String host, int sslPort, int httpPort, String pem, X509Certificate cert, byte[] der) {
            this.host = host;
            this.sslPort = sslPort;
            this.httpPort = httpPort;
            this.certificatePem = pem;
            this.certificate = cert;
            this.certificateDer = der;
            this.pin = Fingerprint.of(der, "sha1");
        }

        public PublicKey publicKey() {
            return certificate.getPublicKey();
        }

        /** A TLS context that accepts exactly this host's pinned certificate. */
        SSLContext sslContext() {
            SSLContext c = sslContext;
            if (c == null) {
                c = PinningTrustManager.context(pin);
                sslContext = c;
            }
            return c;
        }
    }

    public final String name;
    public final int version;
    public final List<Host> hosts;
    public final String bundleLocation;
    public final String region;
    public final List<String> protocols;
    public final List<Extended.SigningKey> signingKeys;
    /** The notary's transparency log, or null when the bundle names none. */
    public final Transparency.LogPolicy transparency;

    Bundle(String name, int version, List<Host> hosts, String location, String region,
            List<String> protocols, List<Extended.SigningKey> keys, Transparency.LogPolicy log) {
        this.name = name;
        this.version = version;
        this.hosts = List.copyOf(hosts);
        this.bundleLocation = location;
        this.region = region;
        this.protocols = protocols;
        this.signingKeys = keys;
        this.transparency = log;
    }

    /** The bundle advertises {@code converge-answer/1} and carries its signing keys. */
    public boolean offersExtended() {
        return protocols.contains(Extended.FORMAT) && !signingKeys.isEmpty();
    }

    private static ConvergeException.BadInput bad(String message) {
        return ConvergeException.bad("bundle", message);
    }

    private static int port(Map<?, ?> obj, String key) throws ConvergeException.BadInput {
        BigInteger v = Json.asInt(obj.get(key));
        if (v == null || v.signum() <= 0 || v.compareTo(BigInteger.valueOf(65536)) >= 0) {
            throw bad(key + " must be an integer port 1..65535");
        }
        return v.intValue();
    }

    private static Host host(Object o) throws ConvergeException.BadInput {
        if (!(o instanceof Map<?, ?> obj)) {
            throw bad("a host entry must be an object");
        }
        if (!(obj.get("host") instanceof String name) || !Legacy.HOST_RE.matcher(name).matches()) {
            throw bad("host must be a DNS name or an IP address");
        }
        if (!(obj.get("certificate") instanceof String pem) || !PEM.matcher(pem).matches()) {
            throw bad("certificate of " + name + " is not one PEM certificate");
        }
        X509Certificate cert;
        byte[] der;
        try {
            cert = (X509Certificate) CertificateFactory.getInstance("X.509")
                    .generateCertificate(new ByteArrayInputStream(pem.getBytes(StandardCharsets.US_ASCII)));
            der = cert.getEncoded();
        } catch (CertificateException | RuntimeException e) {
            throw bad("certificate of " + name + " does not parse: " + e.getMessage());
        }
        return new Host(name, port(obj, "ssl_port"), port(obj, "http_port"), pem, cert, der);
    }

    public static Bundle parse(byte[] data) throws ConvergeException.BadInput {
        if (data.length > MAX_BUNDLE_BYTES) {
            throw bad("bundle larger than " + MAX_BUNDLE_BYTES + " bytes");
        }
        Object obj;
        try {
            obj = Json.parse(Json.utf8(data));
        } catch (Json.JsonException e) {
            throw bad("bundle is not JSON: " + e.getMessage());
        }
        return parse(obj);
    }

    public static Bundle parse(Object o) throws ConvergeException.BadInput {
        if (!(o instanceof Map<?, ?> obj)) {
            throw bad("bundle is not a JSON object");
        }
        Object version = obj.containsKey("version") ? obj.get("version") : BigInteger.ZERO;
        boolean v0 = !(version instanceof Boolean) && Json.sameValue(version, BigInteger.ZERO);
        boolean v1 = !(version instanceof Boolean) && Json.sameValue(version, BigInteger.ONE);
        if (!v0 && !v1) {
            throw bad("unsupported bundle version " + version);
        }
        if (v0) {
            Host h = host(obj);
            return new Bundle(h.host, 0, List.of(h), null, null, List.of(), List.of(), null);
        }
        if (!(obj.get("name") instanceof String name) || name.strip().isEmpty()
                || name.codePointCount(0, name.length()) > MAX_NAME) {
            throw bad("name must be a non-empty string");
        }
        if (!(obj.get("hosts") instanceof List<?> hosts) || hosts.isEmpty()) {
            throw bad("hosts must be a non-empty list");
        }
        if (hosts.size() > MAX_HOSTS) {
            throw bad("more than " + MAX_HOSTS + " hosts");
        }
        Object location = obj.get("bundle_location");
        if (location != null && (!(location instanceof String loc) || !loc.startsWith("https://")
                || !loc.endsWith(".notary") || loc.length() > 2048)) {
            throw bad("bundle_location must be an https:// URL ending in .notary");
        }
        Object region = obj.get("region");
        if (region != null && (!(region instanceof String r) || !r.matches("[A-Za-z]{2}"))) {
            throw bad("region must be an ISO-3166 alpha-2 code");
        }
        List<String> protocols = obj.containsKey("protocols")
                ? Extended.parseProtocols(obj.get("protocols")) : List.of();
        List<Extended.SigningKey> keys = obj.containsKey("signing_keys")
                ? Extended.parseSigningKeys(obj.get("signing_keys")) : List.of();
        if (protocols.contains(Extended.FORMAT) && keys.isEmpty()) {
            throw bad("protocols lists " + Extended.FORMAT + " but the bundle has no signing_keys");
        }
        Transparency.LogPolicy log = obj.containsKey("transparency")
                ? Transparency.parseLogPolicy(obj.get("transparency")) : null;
        List<Host> hs = new ArrayList<>();
        for (Object h : hosts) {
            hs.add(host(h));
        }
        String reg = region == null || ((String) region).isEmpty() ? null
                : ((String) region).toUpperCase(Locale.ROOT);
        return new Bundle(name, 1, hs, (String) location, reg, protocols, keys, log);
    }
}
