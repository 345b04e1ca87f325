<?php
declare(strict_types=1);

namespace Converge;

/** One Ed25519 key of the extended format. */
final class SigningKey
{
    public function __construct(
        public readonly string $keyId,
        public readonly string $publicKey,
        public readonly bool $current,
        public readonly int $validUntil,
    ) {
    }

    /** A current key always, a retired one while $now <= valid_until. */
    public function trustedAt(int $now): bool
    {
        return $this->current || $now <= $this->validUntil;
    }
}
