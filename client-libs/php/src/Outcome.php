<?php
declare(strict_types=1);

namespace Converge;

/**
 * One notary's answer reduced to a vote; $kind says why (listed, status-only, mismatch,
 * not-listed, response, signature, inconclusive, status, the extended kinds, or an IO kind).
 */
final class Outcome
{
    public function __construct(
        public readonly string $vote,
        public readonly string $kind,
        public readonly ?int $status,
        public readonly string $detail,
        public readonly ?string $answer = null,
    ) {
    }

    public static function failureOf(ConvergeException $e, ?int $status): self
    {
        return new self('failure', $e->getKind(), $status, $e->getDetail());
    }
}
