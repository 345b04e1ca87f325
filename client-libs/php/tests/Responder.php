<?php
declare(strict_types=1);

namespace Converge\Tests;

/** A TLS notary on 127.0.0.1 answering whatever raw response it is given (tests/responder.php, a process of its own). */
final class Responder
{
    public const KEYS = __DIR__ . '/../../vectors/keys';
    private Process $p;
    public int $port;

    public function __construct(public readonly string $cert = self::KEYS . '/test-other-cert.pem', public readonly string $key = self::KEYS . '/test-other-key.pem')
    {
        $this->p = new Process([PHP_BINARY, __DIR__ . '/responder.php', $cert, $key]);
        $this->port = (int) $this->p->line();
    }

    /** Every connection from now on gets $response. */
    public function answer(string $response): void
    {
        $this->p->send('answer ' . base64_encode($response));
    }

    /** The number of requests read so far. */
    public function count(): int
    {
        return (int) $this->p->send('count');
    }

    /** A v1 bundle pinning this notary; $signingKey (raw Ed25519 public key) makes it offer converge-answer/1. */
    public function bundle(string $name, ?string $signingKey = null): string
    {
        $doc = ['version' => 1, 'name' => $name, 'hosts' => [['host' => '127.0.0.1', 'ssl_port' => $this->port, 'http_port' => $this->port,
            'certificate' => (string) file_get_contents($this->cert)]]];
        if ($signingKey !== null) {
            $doc['protocols'] = ['converge-answer/1'];
            $doc['signing_keys'] = [['alg' => 'ed25519', 'key_id' => self::keyId($signingKey), 'public_key' => \Converge\Bundle::b64url($signingKey), 'status' => 'current']];
        }
        return (string) json_encode($doc);
    }

    public static function keyId(string $publicKey): string
    {
        return bin2hex(substr(hash('sha256', $publicKey, true), 0, 8));
    }

    public function stop(): void
    {
        $this->p->stop();
    }
}
