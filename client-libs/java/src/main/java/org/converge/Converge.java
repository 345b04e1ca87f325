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
}
