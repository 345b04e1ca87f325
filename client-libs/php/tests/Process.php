<?php
declare(strict_types=1);

namespace Converge\Tests;

/** A helper process of a test (servers on 127.0.0.1) talked to by lines on its stdin and stdout. */
final class Process
{
    /** @var resource */
    private $proc;
    /** @var array<int, resource> */
    private array $pipes = [];

    /** @param list<string> $cmd */
    public function __construct(array $cmd)
    {
        $this->proc = proc_open($cmd, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => STDERR], $this->pipes);
    }

    /** The next line it prints. */
    public function line(): string
    {
        return (string) fgets($this->pipes[1]);
    }

    /** Sends one line, returns the line it answers. */
    public function send(string $line): string
    {
        fwrite($this->pipes[0], $line . "\n");
        fflush($this->pipes[0]);
        return $this->line();
    }

    /** Ends its input (after $farewell, if any) and waits for it. */
    public function stop(string $farewell = ''): void
    {
        if ($farewell !== '') {
            @fwrite($this->pipes[0], $farewell . "\n");
        }
        @fclose($this->pipes[0]);
        @fclose($this->pipes[1]);
        proc_close($this->proc);
    }
}
