<?php
declare(strict_types=1);

namespace Converge;

/** What one logical notary said. */
final class NotaryResult
{
    public function __construct(
        public readonly string $name,
        /** success, failure, unreachable, or skipped (settled before it answered) */
        public readonly string $vote,
        /** listed, mismatch, match, signature, pin, unreachable, timeout, settled, ... */
        public readonly string $kind,
        public readonly ?int $status,
        public readonly string $host,
        public readonly string $detail,
        public readonly float $elapsed,
        /** convergence-v1 or converge-answer/1; null when it was not asked */
        public readonly ?string $protocol,
        public readonly ?string $answer = null,
    ) {
    }
}
