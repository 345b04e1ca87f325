<?php
declare(strict_types=1);

namespace Converge;

/** The decision for one (host, port, fingerprint). */
final class Verdict
{
    /** @param list<NotaryResult> $results one per notary asked, in configuration order */
    public function __construct(
        public readonly bool $trusted,
        public readonly string $host,
        public readonly int $port,
        public readonly string $fingerprint,
        public readonly string $policy,
        public readonly bool $standAside,
        public readonly bool $fromCache,
        public readonly array $results,
        public readonly string $reason,
        public readonly float $elapsed,
        public readonly ?string $relay,
    ) {
    }
}
