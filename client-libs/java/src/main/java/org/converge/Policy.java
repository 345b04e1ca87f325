package org.converge;

import java.util.Collection;
import java.util.HashSet;
import java.util.Locale;
import java.util.Set;

/**
 * Consensus rules (pure). Votes are {@code success}, {@code failure}, {@code unreachable}.
 * With stand-aside, unreachable notaries do not count; without it they count as failures. With
 * {@code n} counted and {@code s} successes: consensus {@code s == n}, majority {@code s >=
 * ceil(n/2)}, minority {@code s >= 1}; always {@code s >= 1}.
 */
public enum Policy {
    CONSENSUS,
    MAJORITY,
    MINORITY;

    public String value() {
        return name().toLowerCase(Locale.ROOT);
    }

    public static Policy parse(String value) throws ConvergeException.BadInput {
        if (value != null) {
            switch (value.strip().toLowerCase(Locale.ROOT)) {
                case "consensus":
                    return CONSENSUS;
                case "majority":
                    return MAJORITY;
                case "minority":
                    return MINORITY;
                default:
                    break;
            }
        }
        throw ConvergeException.bad(
                "config", "notary-agreement must be consensus, majority or minority, not " + value);
    }

    boolean trusted(int s, int f, int u, boolean standAside) {
        int counted = s + f + (standAside ? 0 : u);
        if (s < 1) {
            return false;
        }
        return switch (this) {
            case CONSENSUS -> s == counted;
            case MAJORITY -> s >= (counted + 1) / 2;
            case MINORITY -> true;
        };
    }

    private static int[] count(Collection<String> votes) {
        int[] c = new int[3];
        for (String v : votes) {
            switch (v) {
                case "success" -> c[0]++;
                case "failure" -> c[1]++;
                case "unreachable" -> c[2]++;
                default -> throw new IllegalArgumentException("unknown vote " + v);
            }
        }
        return c;
    }

    /** The verdict for a complete set of votes. */
    public boolean decide(Collection<String> votes, boolean standAside) {
        int[] c = count(votes);
        return trusted(c[0], c[1], c[2], standAside);
    }

    /** The verdict if no outcome of {@code pending} notaries can change it, else null. */
    public Boolean settled(Collection<String> votes, int pending, boolean standAside) {
        int[] c = count(votes);
        Set<Boolean> seen = new HashSet<>();
        for (int ps = 0; ps <= pending; ps++) {
            for (int pf = 0; pf <= pending - ps; pf++) {
                int pu = pending - ps - pf;
                seen.add(trusted(c[0] + ps, c[1] + pf, c[2] + pu, standAside));
                if (seen.size() > 1) {
                    return null;
                }
            }
        }
        return seen.iterator().next();
    }
}
