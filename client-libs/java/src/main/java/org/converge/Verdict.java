package org.converge;

import java.util.List;

/** The decision for one (host, port, fingerprint), with every notary's result. */
public record Verdict(boolean trusted, String host, int port, String fingerprint, Policy policy,
        boolean standAside, boolean fromCache, List<NotaryResult> results, String reason,
        double elapsed, String relay) {}
