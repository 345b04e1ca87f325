<?php
declare(strict_types=1);

namespace Converge;

/** One physical host of a notary; $pin is the SHA-1 of its certificate. */
final class NotaryHost
{
    public function __construct(
        public readonly string $host,
        public readonly int $sslPort,
        public readonly int $httpPort,
        public readonly string $certificatePem,
        public readonly string $certificateDer,
        public readonly Fingerprint $pin,
    ) {
    }
}
