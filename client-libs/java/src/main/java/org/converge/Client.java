package org.converge;

import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletionService;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorCompletionService;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.DoubleSupplier;

/**
 * A configuration plus its open cache connections; thread-safe, reuse it.
 *
 * <p>{@link #check}: parse the fingerprint; a local cache {@code hit} is trusted without asking;
 * otherwise up to {@code quorum} distinct logical notaries picked at random are asked in
 * parallel (extended format where the bundle offers it and {@code extended} allows), and the
 * wait stops as soon as no further answer can change the verdict (early return). The cache is
 * written only after a trusted verdict.
 */
public final class Client implements AutoCloseable {
    private final Config config;
    private final Random rng;
    private final DoubleSupplier clock;
    private List<LocalCache> caches;
    private LocalCache writer;

    public Client(Config config) {
        this(config, new SecureRandom(), () -> System.currentTimeMillis() / 1000.0);
    }

    /** {@code clock}: unix seconds (tests pass a fixed one). */
    public Client(Config config, Random rng, DoubleSupplier clock) {
        this.config = config;
        this.rng = rng;
        this.clock = clock;
    }

    /** Discover and load a configuration directory ({@code dir} may be null). */
    public static Client open(Path dir) throws ConvergeException.BadInput {
        return new Client(Config.load(dir));
    }

    public Config config() {
        return config;
    }

    private synchronized List<LocalCache> openCaches() throws ConvergeException.IoFailure {
        if (caches == null) {
            List<LocalCache> cs = new ArrayList<>();
            if (config.userdb != null) {
                writer = new LocalCache(config.userdb, false);
                cs.add(writer);
            }
            if (config.db != null) {
                if (writer == null) {
                    writer = new LocalCache(config.db, false);
                    cs.add(writer);
                } else if (Files.exists(config.db)) {
                    try {
                        cs.add(new LocalCache(config.db, true));
                    } catch (ConvergeException.IoFailure e) {
                        // an unreadable shared cache only costs notary queries
                    }
                }
            }
            caches = cs;
        }
        return caches;
    }

    private boolean cached(String loc, List<Fingerprint> forms, double now) throws ConvergeException.IoFailure {
        for (LocalCache c : openCaches()) {
            for (Fingerprint fp : forms) {
                Long ts = c.lookup(loc, fp.colonHex());
                if (CachePolicy.decide(ts, now, config.cacheLifetime).equals("hit")) {
                    return true;
                }
            }
        }
        return false;
    }

    private void remember(String loc, List<Fingerprint> forms, double now) throws ConvergeException.IoFailure {
        openCaches();
        if (writer != null) {
            for (Fingerprint fp : forms) {
                writer.store(loc, fp.colonHex(), (long) Math.floor(now));
            }
        }
    }

    @Override
    public synchronized void close() {
        if (caches != null) {
            for (LocalCache c : caches) {
                c.close();
            }
        }
        caches = null;
        writer = null;
    }

    private static List<Fingerprint> forms(String fingerprint, byte[] certificate) throws ConvergeException.BadInput {
        Fingerprint fp = Fingerprint.parse(fingerprint);
        List<Fingerprint> forms = new ArrayList<>(List.of(fp));
        if (certificate != null) {
            for (String alg : List.of("sha1", "sha256")) {
                Fingerprint alt = Fingerprint.of(certificate, alg);
                if (alt.algorithm().equals(fp.algorithm()) && !alt.equals(fp)) {
                    throw ConvergeException.bad("fingerprint", "the certificate does not match the fingerprint");
                }
                if (!forms.contains(alt)) {
                    forms.add(alt);
                }
            }
        }
        return forms;
    }

    public Verdict check(String host, int port, String fingerprint) throws ConvergeException {
        return check(host, port, fingerprint, null, null);
    }

    /**
     * Is {@code fingerprint} the certificate the notaries see for {@code host:port}? {@code
     * certificate} (DER, optional) lets SHA-1 and SHA-256 forms both match; {@code ip}
     * (optional) asks the notaries to connect to that address. Bad arguments or configuration
     * throw {@link ConvergeException.BadInput}; notary failures are votes, not exceptions.
     */
    public Verdict check(String host, int port, String fingerprint, byte[] certificate, String ip)
            throws ConvergeException {
        long t0 = System.nanoTime();
        Legacy.checkTarget(host, port);
        if (ip != null) {
            IpAddress.compressed(ip);
        }
        List<Fingerprint> forms = forms(fingerprint, certificate);
        String loc = Legacy.location(host, port);
        if (cached(loc, forms, clock.getAsDouble())) {
            return new Verdict(true, host, port, forms.get(0).colonHex(), config.agreement, config.standAside,
                    true, List.of(), "local cache hit", (System.nanoTime() - t0) / 1e9, null);
        }
        return ask(host, port, forms, t0, ip);
    }

    private NotaryIo.ExtQuery extQuery(Bundle b) {
        if (config.extended.equals("off") || !b.offersExtended()) {
            return null;
        }
        return new NotaryIo.ExtQuery(b.signingKeys, config.extendedNonce, config.maxSkew,
                config.extended.equals("fallback") && b.transparency == null, clock, b.transparency);
    }

    private Verdict ask(String host, int port, List<Fingerprint> forms, long t0, String ip) throws ConvergeException {
        Config cfg = config;
        List<Bundle> notaries = new ArrayList<>(cfg.notaries());
        if (notaries.isEmpty()) {
            throw ConvergeException.bad("config",
                    "no notaries enabled (looked in " + Config.whereNotariesAreRead(cfg.notariesDir) + ")");
        }
        if (cfg.extended.equals("require")) {
            notaries.removeIf(b -> !b.offersExtended());
            if (notaries.isEmpty()) {
                throw ConvergeException.bad("config",
                        "extended is require but no enabled notary's bundle offers converge-answer/1");
            }
        }
        Bundle relay = null;
        if (cfg.bounce) {
            if (notaries.size() < 2) {
                throw ConvergeException.bad("config", "bounce needs two enabled notaries: one relays, one votes");
            }
            relay = notaries.remove(rng.nextInt(notaries.size()));
        }
        List<Integer> idx = new ArrayList<>();
        for (int i = 0; i < notaries.size(); i++) {
            idx.add(i);
        }
        java.util.Collections.shuffle(idx, rng);
        List<Integer> picked = new ArrayList<>(idx.subList(0, Math.min(cfg.quorum, notaries.size())));
        java.util.Collections.sort(picked);
        List<Bundle> chosen = new ArrayList<>();
        for (int i : picked) {
            chosen.add(notaries.get(i));
        }
        NotaryIo.Settings st = new NotaryIo.Settings(cfg.connectTimeout, cfg.notaryTimeout,
                cfg.maxResponseBytes, relay, cfg.bouncePort, ip);
        CompletionService<NotaryResult> cs = new ExecutorCompletionService<>(NotaryIo.POOL);
        Map<Future<NotaryResult>, Bundle> tasks = new LinkedHashMap<>();
        Map<Bundle, NotaryIo.Cancel> cancels = new HashMap<>();
        for (Bundle b : chosen) {
            NotaryIo.Cancel c = new NotaryIo.Cancel();
            cancels.put(b, c);
            NotaryIo.ExtQuery ext = extQuery(b);
            tasks.put(cs.submit(() -> NotaryIo.askNotary(b, host, port, forms, ext, st, c)), b);
        }
        Map<String, NotaryResult> results = new HashMap<>();
        Boolean verdict = null;
        long deadline = t0 + (long) (cfg.totalTimeout * 1e9);
        int pending = tasks.size();
        boolean timedOut = false;
        try {
            while (pending > 0) {
                long left = deadline - System.nanoTime();
                Future<NotaryResult> f = left > 0 ? cs.poll(left, TimeUnit.NANOSECONDS) : null;
                if (f == null) {
                    timedOut = true;
                    break;
                }
                pending--;
                NotaryResult r;
                try {
                    r = f.get();
                } catch (ExecutionException e) {
                    Bundle b = tasks.get(f);
                    r = new NotaryResult(b.name, "unreachable", "unreachable", null, null,
                            String.valueOf(e.getCause()), 0, null, null);
                }
                results.put(r.name(), r);
                if (cfg.earlyReturn) {
                    List<String> votes = new ArrayList<>();
                    for (NotaryResult x : results.values()) {
                        votes.add(x.vote());
                    }
                    verdict = cfg.agreement.settled(votes, pending, cfg.standAside);
                    if (verdict != null) {
                        break;
                    }
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            timedOut = true;
        } finally {
            for (Map.Entry<Future<NotaryResult>, Bundle> e : tasks.entrySet()) {
                if (!e.getKey().isDone()) {
                    cancels.get(e.getValue()).cancel();
                    e.getKey().cancel(true);
                }
            }
        }
        for (Bundle b : chosen) {
            if (!results.containsKey(b.name)) {
                results.put(b.name, timedOut
                        ? new NotaryResult(b.name, "unreachable", "timeout", null, null,
                                "no answer within " + cfg.totalTimeout + " s", (System.nanoTime() - t0) / 1e9, null, null)
                        : new NotaryResult(b.name, "skipped", "settled", null, null,
                                "verdict settled before this notary answered", 0, null, null));
            }
        }
        List<NotaryResult> ordered = new ArrayList<>();
        List<String> votes = new ArrayList<>();
        int s = 0;
        for (Bundle b : chosen) {
            NotaryResult r = results.get(b.name);
            ordered.add(r);
            if (!r.vote().equals("skipped")) {
                votes.add(r.vote());
                if (r.vote().equals("success")) {
                    s++;
                }
            }
        }
        if (verdict == null) {
            verdict = cfg.agreement.decide(votes, cfg.standAside);
        }
        String reason = s + " of " + chosen.size() + " notaries confirm (" + cfg.agreement.value() + ", "
                + (cfg.standAside ? "unreachable stand aside" : "unreachable count as failure") + ")";
        if (verdict) {
            remember(Legacy.location(host, port), forms, clock.getAsDouble());
        }
        return new Verdict(verdict, host, port, forms.get(0).colonHex(), cfg.agreement, cfg.standAside,
                false, List.copyOf(ordered), reason, (System.nanoTime() - t0) / 1e9,
                relay == null ? null : relay.name);
    }
}
