package org.converge;

import java.io.IOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;

/**
 * A configuration directory: discovery, {@code converge.config} and the notary bundles.
 *
 * <p>Discovery (first that applies): an explicit directory (must exist); {@code
 * $CONVERGE_CONFIG_DIR} (must exist when set); {@code ~/.config/converge} ({@code
 * $XDG_CONFIG_HOME/converge}) if it exists; {@code /usr/local/etc/converge} if it exists.
 *
 * <p>Layout: {@code converge.config} (JSON, every key optional), {@code
 * notaries-available/*.notary}, {@code notaries-enabled/*.notary} (symlinks). Keys and defaults
 * are the reference client's: {@code db} (cache.sqlite3), {@code userdb}, {@code notaries-dir}
 * (.), {@code notary-agreement} (majority), {@code quorum} (3), {@code connect-timeout} (3),
 * {@code notary-timeout} (5), {@code total-timeout} (10), {@code cache-lifetime} (604800; null
 * = ever), {@code stand-aside} (true), {@code early-return} (true), {@code bounce} (false),
 * {@code bounce-port} (4242), {@code max-response-bytes} (262144), {@code extended} (prefer),
 * {@code extended-nonce} (true), {@code max-skew} (300).
 */
public final class Config {
    public static final String CONFIG_FILE = "converge.config";
    public static final String ENV_VAR = "CONVERGE_CONFIG_DIR";
    public static final Path SYSTEM_DIR = Paths.get("/usr/local/etc/converge");
    public static final int MAX_CONFIG_BYTES = 64 * 1024;
    public static final int MAX_NOTARIES = 64;
    public static final double DEFAULT_CACHE_LIFETIME = 7 * 24 * 3600;
    static final Set<String> KNOWN_KEYS = Set.of("db", "userdb", "notaries-dir", "notary-agreement",
            "quorum", "connect-timeout", "notary-timeout", "total-timeout", "cache-lifetime",
            "stand-aside", "early-return", "bounce", "bounce-port", "max-response-bytes", "extended",
            "extended-nonce", "max-skew");

    public Path directory;
    public Path db;
    public Path userdb;
    public Path notariesDir;
    public Policy agreement = Policy.MAJORITY;
    public int quorum = 3;
    public double connectTimeout = 3.0;
    public double notaryTimeout = 5.0;
    public double totalTimeout = 10.0;
    public Double cacheLifetime = DEFAULT_CACHE_LIFETIME;
    public boolean standAside = true;
    public boolean earlyReturn = true;
    public int maxResponseBytes = 256 * 1024;
    public boolean bounce = false;
    public int bouncePort = 4242;
    public String extended = "prefer";
    public boolean extendedNonce = true;
    public int maxSkew = Extended.DEFAULT_MAX_SKEW;
    /** Bundles given directly (tests, embedding); null: read the notaries directory. */
    public List<Bundle> bundles;

    private static ConvergeException.BadInput bad(String m) {
        return ConvergeException.bad("config", m);
    }

    /** The enabled logical notaries, de-duplicated by name (first file name wins). */
    public List<Bundle> notaries() throws ConvergeException.BadInput {
        List<Bundle> found = new ArrayList<>();
        if (bundles != null) {
            found.addAll(bundles);
        } else if (notariesDir != null) {
            for (Listed l : listNotaries(notariesDir)) {
                if (l.enabled) {
                    found.add(l.bundle);
                }
            }
        }
        Set<String> seen = new HashSet<>();
        List<Bundle> out = new ArrayList<>();
        for (Bundle b : found) {
            if (seen.add(b.name)) {
                out.add(b);
            }
        }
        return out;
    }

    static Path userDir(Map<String, String> env) {
        String xdg = env.get("XDG_CONFIG_HOME");
        Path base = xdg != null && !xdg.isEmpty() ? Paths.get(xdg)
                : Paths.get(env.getOrDefault("HOME", System.getProperty("user.home")), ".config");
        return base.resolve("converge");
    }

    /** Find the configuration directory (see the class documentation for the order). */
    public static Path discover(Path explicit, Map<String, String> env) throws ConvergeException.BadInput {
        if (explicit != null) {
            if (!Files.isDirectory(explicit)) {
                throw bad("configuration directory " + explicit + " does not exist");
            }
            return explicit;
        }
        String e = env.get(ENV_VAR);
        if (e != null && !e.isEmpty()) {
            Path p = Paths.get(e);
            if (!Files.isDirectory(p)) {
                throw bad("$" + ENV_VAR + "=" + p + " is not a directory");
            }
            return p;
        }
        for (Path p : List.of(userDir(env), SYSTEM_DIR)) {
            if (Files.isDirectory(p)) {
                return p;
            }
        }
        throw bad("no configuration: set $" + ENV_VAR + ", or create " + userDir(env) + " or " + SYSTEM_DIR);
    }

    /** Discover ({@code directory} may be null) and load a configuration directory. */
    public static Config load(Path directory) throws ConvergeException.BadInput {
        return load(directory, System.getenv());
    }

    public static Config load(Path directory, Map<String, String> env) throws ConvergeException.BadInput {
        Path d = discover(directory, env);
        Path f = d.resolve(CONFIG_FILE);
        Object raw = Map.of();
        if (Files.exists(f)) {
            byte[] data;
            try {
                if (Files.size(f) > MAX_CONFIG_BYTES) {
                    throw bad(f + " larger than " + MAX_CONFIG_BYTES + " bytes");
                }
                data = Files.readAllBytes(f);
            } catch (IOException e) {
                throw bad("cannot read " + f + ": " + e.getMessage());
            }
            try {
                raw = Json.parse(Json.utf8(data));
            } catch (Json.JsonException e) {
                throw bad(f + " is not JSON: " + e.getMessage());
            }
            if (!(raw instanceof Map<?, ?>)) {
                throw bad(f + " must hold a JSON object");
            }
        }
        return parse(d, (Map<?, ?>) raw);
    }

    private static double number(Map<?, ?> raw, String key, double dflt, double low, double high)
            throws ConvergeException.BadInput {
        Object v = raw.containsKey(key) ? raw.get(key) : Double.valueOf(dflt);
        double d;
        if (v instanceof BigInteger n) {
            BigDecimal bd = new BigDecimal(n);
            if (bd.compareTo(BigDecimal.valueOf(low)) < 0 || bd.compareTo(BigDecimal.valueOf(high)) > 0) {
                throw bad(key + " must be a number in [" + low + ", " + high + "]");
            }
            d = n.doubleValue();
        } else if (v instanceof Double x) {
            d = x;
        } else {
            throw bad(key + " must be a number in [" + low + ", " + high + "]");
        }
        if (!(low <= d && d <= high)) {
            throw bad(key + " must be a number in [" + low + ", " + high + "]");
        }
        return d;
    }

    private static boolean bool(Map<?, ?> raw, String key, boolean dflt) throws ConvergeException.BadInput {
        Object v = raw.containsKey(key) ? raw.get(key) : Boolean.valueOf(dflt);
        if (!(v instanceof Boolean b)) {
            throw bad(key + " must be true or false");
        }
        return b;
    }

    private static Path path(Path base, Map<?, ?> raw, String key, String dflt) throws ConvergeException.BadInput {
        Object v = raw.containsKey(key) ? raw.get(key) : dflt;
        if (v == null) {
            return null;
        }
        if (!(v instanceof String s) || s.isEmpty()) {
            throw bad(key + " must be a path");
        }
        if (s.equals("~") || s.startsWith("~/")) {
            s = System.getProperty("user.home") + s.substring(1);
        }
        Path p = Paths.get(s);
        return p.isAbsolute() ? p : base.resolve(p);
    }

    private static int integer(Map<?, ?> raw, String key, int dflt, long low, long high, String msg)
            throws ConvergeException.BadInput {
        if (!raw.containsKey(key)) {
            return dflt;
        }
        BigInteger v = Json.asInt(raw.get(key));
        if (v == null || v.compareTo(BigInteger.valueOf(low)) < 0 || v.compareTo(BigInteger.valueOf(high)) > 0) {
            throw bad(msg);
        }
        return v.intValue();
    }

    /** Validate a decoded {@code converge.config} of {@code directory}. */
    public static Config parse(Path directory, Map<?, ?> raw) throws ConvergeException.BadInput {
        Set<String> unknown = new TreeSet<>();
        for (Object k : raw.keySet()) {
            if (!KNOWN_KEYS.contains(k)) {
                unknown.add(String.valueOf(k));
            }
        }
        if (!unknown.isEmpty()) {
            throw bad("unknown configuration keys: " + String.join(", ", unknown));
        }
        Config c = new Config();
        c.directory = directory;
        c.bouncePort = integer(raw, "bounce-port", 4242, 1, 65535, "bounce-port must be an integer port 1..65535");
        if (raw.containsKey("cache-lifetime") && raw.get("cache-lifetime") == null) {
            c.cacheLifetime = null;
        } else {
            c.cacheLifetime = number(raw, "cache-lifetime", DEFAULT_CACHE_LIFETIME, 0, 10.0 * 365 * 86400);
        }
        c.quorum = integer(raw, "quorum", 3, 1, 16, "quorum must be an integer 1..16");
        c.maxResponseBytes = integer(raw, "max-response-bytes", 256 * 1024, 1024, 16 * 1024 * 1024,
                "max-response-bytes must be an integer 1024..16777216");
        Object ext = raw.containsKey("extended") ? raw.get("extended") : "prefer";
        if (!(ext instanceof String es) || !Extended.MODES.contains(es)) {
            throw bad("extended must be one of " + String.join(", ", Extended.MODES));
        }
        c.extended = es;
        c.maxSkew = integer(raw, "max-skew", Extended.DEFAULT_MAX_SKEW, 0, 86400,
                "max-skew must be an integer 0..86400 (seconds)");
        Object agreement = raw.containsKey("notary-agreement") ? raw.get("notary-agreement") : "majority";
        if (!(agreement instanceof String as)) {
            throw bad("notary-agreement must be a string");
        }
        c.db = path(directory, raw, "db", "cache.sqlite3");
        c.userdb = path(directory, raw, "userdb", null);
        c.notariesDir = path(directory, raw, "notaries-dir", ".");
        c.agreement = Policy.parse(as);
        c.connectTimeout = number(raw, "connect-timeout", 3.0, 0.01, 600);
        c.notaryTimeout = number(raw, "notary-timeout", 5.0, 0.01, 600);
        c.totalTimeout = number(raw, "total-timeout", 10.0, 0.01, 3600);
        c.standAside = bool(raw, "stand-aside", true);
        c.earlyReturn = bool(raw, "early-return", true);
        c.bounce = bool(raw, "bounce", false);
        c.extendedNonce = bool(raw, "extended-nonce", true);
        return c;
    }

    // ------------------------------------------------------------------ bundle files

    /** One bundle file of {@code notaries-available/} (or placed in {@code notaries-enabled/}). */
    public record Listed(Bundle bundle, boolean enabled, Path file) {
        public Listed {
            // record of a parsed bundle file
        }
    }

    private static List<Path> notaryFiles(Path dir) throws ConvergeException.BadInput {
        if (!Files.isDirectory(dir)) {
            return List.of();
        }
        try (Stream<Path> s = Files.list(dir)) {
            return s.filter(p -> p.getFileName().toString().endsWith(".notary"))
                    .sorted((a, b) -> a.getFileName().toString().compareTo(b.getFileName().toString()))
                    .toList();
        } catch (IOException e) {
            throw bad("cannot list " + dir + ": " + e.getMessage());
        }
    }

    private static boolean hasSubfolders(Path notariesDir) {
        return Files.isDirectory(notariesDir.resolve("notaries-available"))
                || Files.isDirectory(notariesDir.resolve("notaries-enabled"));
    }

    /**
     * Whether {@code notariesDir} is the 2014 libraries' layout: {@code notaries-dir} names the
     * enabled folder itself, which holds {@code .notary} files and neither subfolder.
     */
    public static boolean isFlatLayout(Path notariesDir) throws ConvergeException.BadInput {
        return !hasSubfolders(notariesDir) && !notaryFiles(notariesDir).isEmpty();
    }

    /** Where {@link #listNotaries} looks, for "no notaries enabled" messages. */
    public static String whereNotariesAreRead(Path notariesDir) {
        if (notariesDir == null) {
            return "no notaries-dir";
        }
        String standard = notariesDir.resolve("notaries-enabled") + "/";
        return hasSubfolders(notariesDir) ? standard : standard + " and " + notariesDir.resolve("*.notary");
    }

    /**
     * Every bundle file, sorted by file name, with whether it is enabled. In the 2014 layout
     * ({@link #isFlatLayout}) every {@code .notary} file of the folder itself is enabled.
     */
    public static List<Listed> listNotaries(Path notariesDir) throws ConvergeException.BadInput {
        Path avail = notariesDir.resolve("notaries-available");
        Path enabledDir = notariesDir.resolve("notaries-enabled");
        Set<Path> targets = new LinkedHashSet<>();
        List<Path> extra = new ArrayList<>();
        boolean flat = isFlatLayout(notariesDir);
        if (flat) {
            for (Path p : notaryFiles(notariesDir)) {
                if (Files.exists(p)) { // a dangling link is ignored
                    extra.add(p);
                }
            }
        }
        for (Path p : flat ? List.<Path>of() : notaryFiles(enabledDir)) {
            if (Files.isSymbolicLink(p)) {
                if (Files.exists(p)) {
                    try {
                        targets.add(p.toRealPath());
                    } catch (IOException e) {
                        // a link that vanished meanwhile enables nothing
                    }
                }
            } else {
                extra.add(p);
            }
        }
        List<Path> files = flat ? List.of() : notaryFiles(avail);
        if (files.size() + extra.size() > MAX_NOTARIES) {
            throw bad("more than " + MAX_NOTARIES + " notary bundles");
        }
        List<Listed> out = new ArrayList<>();
        List<Path> all = new ArrayList<>(files);
        all.addAll(extra);
        for (Path p : all) {
            Bundle b;
            try {
                if (Files.size(p) > Bundle.MAX_BUNDLE_BYTES) {
                    throw ConvergeException.bad("bundle", "bundle larger than " + Bundle.MAX_BUNDLE_BYTES + " bytes");
                }
                b = Bundle.parse(Files.readAllBytes(p));
            } catch (ConvergeException.BadInput e) {
                throw ConvergeException.bad("bundle", p + ": " + e.getMessage());
            } catch (IOException e) {
                throw bad("cannot read " + p + ": " + e.getMessage());
            }
            boolean enabled = extra.contains(p);
            if (!enabled) {
                try {
                    enabled = targets.contains(p.toRealPath());
                } catch (IOException e) {
                    enabled = false;
                }
            }
            out.add(new Listed(b, enabled, p));
        }
        return out;
    }
}
