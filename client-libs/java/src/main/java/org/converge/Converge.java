package org.converge;

import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * {@code converge(host, port, fingerprint)}: the drop-in call. The configuration directory is
 * discovered ({@code $CONVERGE_CONFIG_DIR}, {@code ~/.config/converge}, {@code
 * /usr/local/etc/converge}) or given; one {@link Client} per directory is kept open.
 */
public final class Converge {
    private static final Map<String, Client> CLIENTS = new ConcurrentHashMap<>();

    private Converge() {}

    /** The shared client of a configuration directory (null: discover). */
    public static Client client(Path configDir) throws ConvergeException.BadInput {
        String key = configDir == null ? "env:" + System.getenv(Config.ENV_VAR) : configDir.toString();
        Client c = CLIENTS.get(key);
        if (c == null) {
            synchronized (CLIENTS) {
                c = CLIENTS.get(key);
                if (c == null) {
                    c = Client.open(configDir);
                    CLIENTS.put(key, c);
                }
            }
        }
        return c;
    }

    /** True when the notaries confirm {@code sha1} (or a SHA-256) for {@code host:port}. */
    public static boolean converge(String host, int port, String sha1) throws ConvergeException {
        return verdict(host, port, sha1, null).trusted();
    }

    /** The full verdict, with each notary's result. */
    public static Verdict verdict(String host, int port, String fingerprint, Path configDir)
            throws ConvergeException {
        return client(configDir).check(host, port, fingerprint);
    }

    /** Options of one check: {@code Converge.options().configDir(dir).certificate(der).check(h, p, fp)}. */
    public static Options options() {
        return new Options();
    }

    /** A builder for one check returning the full {@link Verdict}. */
    public static final class Options {
        private Path configDir;
        private Client client;
        private byte[] certificate;
        private String ip;

        Options() {}

        /** The configuration directory (default: discovered). */
        public Options configDir(Path dir) {
            this.configDir = dir;
            return this;
        }

        /** An explicit client (a configuration built in code); overrides {@link #configDir}. */
        public Options client(Client c) {
            this.client = c;
            return this;
        }

        /** The DER certificate: lets SHA-1 and SHA-256 forms both match. */
        public Options certificate(byte[] der) {
            this.certificate = der == null ? null : der.clone();
            return this;
        }

        /** Ask the notaries to connect to this address (extended answers must name it). */
        public Options ip(String address) {
            this.ip = address;
            return this;
        }

        public Verdict check(String host, int port, String fingerprint) throws ConvergeException {
            Client c = client != null ? client : Converge.client(configDir);
            return c.check(host, port, fingerprint, certificate, ip);
        }
    }
}
