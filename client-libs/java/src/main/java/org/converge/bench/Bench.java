package org.converge.bench;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import javax.net.ssl.SSLSocket;
import org.converge.Bundle;
import org.converge.Client;
import org.converge.Config;
import org.converge.Json;
import org.converge.LocalCache;
import org.converge.PinningTrustManager;
import org.converge.Verdict;

/**
 * Benchmarks (not tests): the local-cache hit and a loopback notary round trip, each next to
 * a baseline measured in the same run. Bounded: a fixed number of iterations.
 *
 * <pre>
 * java -cp ... org.converge.bench.Bench BUNDLE CACHE_ITERATIONS ROUND_TRIPS OUT.json
 * </pre>
 *
 * The target asked about is the notary itself (its own certificate, which it sees), so each
 * round trip is a real legacy (or extended) answer: pinned TLS, parse, signature check.
 * Baselines: a bare SQLite lookup on the open cache connection (for the cache hit) and a
 * pinned TLS handshake to the notary without a request (for the round trip).
 */
public final class Bench {
    private Bench() {}

    interface Op {
        void run() throws Exception;
    }

    static double[] measure(int n, Op op) throws Exception {
        for (int i = 0; i < Math.min(n / 10 + 1, 200); i++) {
            op.run(); // warm-up
        }
        double[] us = new double[n];
        for (int i = 0; i < n; i++) {
            long t0 = System.nanoTime();
            op.run();
            us[i] = (System.nanoTime() - t0) / 1e3;
        }
        Arrays.sort(us);
        return us;
    }

    static Map<String, Object> row(double[] us) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("n", us.length);
        m.put("p50_us", Math.round(us[us.length / 2] * 10) / 10.0);
        m.put("p99_us", Math.round(us[(int) Math.min(us.length - 1, Math.floor(us.length * 0.99))] * 10) / 10.0);
        m.put("mean_us", Math.round(Arrays.stream(us).average().orElse(0) * 10) / 10.0);
        return m;
    }

    static Config config(Path dir, Bundle b, Path db, String extended) {
        Config c = new Config();
        c.directory = dir;
        c.db = db;
        c.bundles = List.of(b);
        c.quorum = 1;
        c.extended = extended;
        return c;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: Bench BUNDLE CACHE_ITERATIONS ROUND_TRIPS OUT.json");
            System.exit(2);
        }
        Bundle b = Bundle.parse(Files.readAllBytes(Paths.get(args[0])));
        int nCache = Integer.parseInt(args[1]);
        int nRt = Integer.parseInt(args[2]);
        Bundle.Host h = b.hosts.get(0);
        String host = h.host;
        int port = h.sslPort;
        String fp = h.pin.colonHex();
        Path dir = Files.createTempDirectory("converge-bench");
        Map<String, Object> rows = new LinkedHashMap<>();

        // readiness: a pinned TLS handshake succeeds (bounded to 30 s)
        javax.net.ssl.SSLSocketFactory pinned = PinningTrustManager.context(h.pin).getSocketFactory();
        Op handshake = () -> {
            try (SSLSocket s = (SSLSocket) pinned.createSocket(host, port)) {
                s.setSoTimeout(5000);
                s.startHandshake();
            }
        };
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            try {
                handshake.run();
                break;
            } catch (Exception e) {
                if (System.nanoTime() > deadline) {
                    throw e;
                }
                Thread.sleep(100);
            }
        }

        // local cache hit: converge() answered by the open SQLite cache, baseline a bare lookup
        Path db = dir.resolve("cache.sqlite3");
        try (Client c = new Client(config(dir, b, db, "off"), new Random(), () -> System.currentTimeMillis() / 1000.0)) {
            Verdict first = c.check(host, port, fp);
            if (!first.trusted()) {
                throw new IllegalStateException("the notary does not confirm its own certificate: " + first);
            }
            double[] hit = measure(nCache, () -> {
                if (!c.check(host, port, fp).fromCache()) {
                    throw new IllegalStateException("expected a cache hit");
                }
            });
            rows.put("cache_hit", row(hit));
        }
        try (LocalCache lc = new LocalCache(db, false)) {
            String loc = host.toLowerCase() + ":" + port;
            rows.put("baseline_sqlite_lookup", row(measure(nCache, () -> lc.lookup(loc, fp))));
        }

        // round trips: no cache, one notary; legacy, then extended when the bundle offers it
        rows.put("baseline_pinned_handshake", row(measure(nRt, handshake)));
        for (String mode : b.offersExtended() ? List.of("off", "require") : List.of("off")) {
            try (Client c = new Client(config(dir, b, null, mode), new Random(), () -> System.currentTimeMillis() / 1000.0)) {
                String key = mode.equals("off") ? "round_trip_legacy" : "round_trip_extended";
                rows.put(key, row(measure(nRt, () -> {
                    Verdict v = c.check(host, port, fp);
                    if (!v.trusted() || v.fromCache()) {
                        throw new IllegalStateException("unexpected verdict " + v);
                    }
                })));
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("suite", "client-java");
        out.put("when", Instant.now().toString());
        out.put("java", System.getProperty("java.version"));
        out.put("results", rows);
        Map<String, Object> ratios = new LinkedHashMap<>();
        ratios.put("cache_hit_over_sqlite_lookup", ratio(rows, "cache_hit", "baseline_sqlite_lookup"));
        ratios.put("round_trip_over_handshake", ratio(rows, "round_trip_legacy", "baseline_pinned_handshake"));
        if (rows.containsKey("round_trip_extended")) {
            ratios.put("extended_over_legacy", ratio(rows, "round_trip_extended", "round_trip_legacy"));
        }
        out.put("ratios_p50", ratios);
        String text = toJson(out);
        Files.writeString(Paths.get(args[3]), text + "\n");
        for (Map.Entry<String, Object> e : rows.entrySet()) {
            System.out.println(String.format("%-28s %s", e.getKey(), toJson(e.getValue())));
        }
        System.out.println("ratios (p50): " + toJson(ratios));
        List<Path> leftovers = new ArrayList<>();
        try (var s = Files.list(dir)) {
            s.forEach(leftovers::add);
        }
        for (Path p : leftovers) {
            Files.deleteIfExists(p);
        }
        Files.deleteIfExists(dir);
    }

    static double ratio(Map<String, Object> rows, String a, String b) {
        double x = (Double) ((Map<?, ?>) rows.get(a)).get("p50_us");
        double y = (Double) ((Map<?, ?>) rows.get(b)).get("p50_us");
        return Math.round(x / y * 100) / 100.0;
    }

    static String toJson(Object o) {
        return Json.compact(convert(o));
    }

    static Object convert(Object o) {
        if (o instanceof Map<?, ?> m) {
            Map<String, Object> out = new LinkedHashMap<>();
            m.forEach((k, v) -> out.put((String) k, convert(v)));
            return out;
        }
        if (o instanceof Integer i) {
            return java.math.BigInteger.valueOf(i);
        }
        return o;
    }
}
