<?php
declare(strict_types=1);

namespace Converge\Tests;

/** A TCP relay on 127.0.0.1 whose first connection goes to one port and every later one to another (tests/relay.php). */
final class Relay
{
    private Process $p;
    public int $port;

    public function __construct(int $first, int $then)
    {
        $this->p = new Process([PHP_BINARY, __DIR__ . '/relay.php', (string) $first, (string) $then]);
        $this->port = (int) $this->p->line();
    }

    public function stop(): void
    {
        $this->p->stop();
    }
}
