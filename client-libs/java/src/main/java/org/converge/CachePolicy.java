package org.converge;

/**
 * Local cache decisions (pure): {@code miss} without an entry; {@code stale} when older than
 * the lifetime (null lifetime: never) or more than {@value #FUTURE_SKEW} s in the future;
 * {@code hit} otherwise. Timestamps above {@value #MILLISECONDS_ABOVE} are milliseconds.
 */
public final class CachePolicy {
    public static final long FUTURE_SKEW = 300;
    public static final long MILLISECONDS_ABOVE = 100_000_000_000L;

    private CachePolicy() {}

    public static long normalise(long ts) {
        return ts > MILLISECONDS_ABOVE ? Math.floorDiv(ts, 1000) : ts;
    }

    /** {@code hit}, {@code stale} or {@code miss}. */
    public static String decide(Long timestamp, double now, Double lifetime) {
        if (timestamp == null) {
            return "miss";
        }
        double age = now - normalise(timestamp);
        if (age < -FUTURE_SKEW) {
            return "stale";
        }
        if (lifetime != null && age > lifetime) {
            return "stale";
        }
        return "hit";
    }
}
