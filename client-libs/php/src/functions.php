<?php
declare(strict_types=1);

namespace Converge;

/**
 * Asks whether $fingerprint (SHA-1 or SHA-256, any case, colons optional) is the certificate
 * the notaries see for $host:$port, with the discovered configuration ($CONVERGE_CONFIG_DIR,
 * ~/.config/converge, /usr/local/etc/converge) or $configDir. The client behind it is kept.
 *
 *     $v = \Converge\converge('www.example.org', 443, '8F:C0:79:...');
 *     if (!$v->trusted) { throw new \RuntimeException($v->reason); }
 */
function converge(string $host, int $port, string $fingerprint, ?string $configDir = null): Verdict
{
    return Client::shared($configDir)->check($host, $port, $fingerprint);
}
