package org.converge;

/**
 * What one logical notary said. {@code vote}: success, failure, unreachable or skipped (the
 * verdict was settled before it answered). {@code kind}: why (see CLIENT-CLI.md). {@code
 * protocol}: {@code convergence-v1} or {@code converge-answer/1}, null when it did not answer.
 */
public record NotaryResult(String name, String vote, String kind, Integer status, String host,
        String detail, double elapsed, String cacheStatus, String protocol) {}
