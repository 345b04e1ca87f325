<?php
declare(strict_types=1);

namespace Converge\Tests;

/** A TCP relay on 127.0.0.1 whose first connection goes to one port and every later one to another (tests/relay.php). */
final class Relay
{
    /** @var resource */
    private $proc;
    /** @var array<int, resource> */
    private array $pipes = [];
    public int $port;

    public function __construct(int $first, int $then)
    {
        $this->proc = proc_open([PHP_BINARY, __DIR__ . '/relay.php', (string) $first, (string) $then], [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => STDERR], $this->pipes);
        $this->port = (int) fgets($this->pipes[1]);
    }

    public function stop(): void
    {
        @fclose($this->pipes[0]);
        @fclose($this->pipes[1]);
        proc_close($this->proc);
    }
}
