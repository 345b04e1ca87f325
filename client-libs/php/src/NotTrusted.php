<?php
declare(strict_types=1);

namespace Converge;

/**
 * The notaries did not vouch for a TLS peer's certificate (or it could not be checked); thrown
 * by the TLS hooks before any application data is written. Implements PSR-18's
 * ClientExceptionInterface when that interface is loaded.
 */
class NotTrusted extends \RuntimeException
{
    public function __construct(public readonly string $host, public readonly int $port, public readonly ?Verdict $verdict, ?string $cause = null)
    {
        $what = $verdict !== null ? "certificate not trusted: {$verdict->reason}" : "certificate not checked: {$cause}";
        parent::__construct("converge does not trust {$host}:{$port}: {$what}");
    }
}
