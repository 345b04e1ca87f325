<?php
declare(strict_types=1);

namespace Converge;

/**
 * Every error this library throws. getKind() is a stable word shared with the other
 * languages' libraries and the test vectors; getFamily() is "bad-input" or "io".
 */
class ConvergeException extends \RuntimeException
{
    private const IO_KINDS = ['unreachable', 'pin', 'cache-io', 'timeout'];

    public function __construct(private readonly string $kind, private readonly string $detail, ?\Throwable $previous = null)
    {
        parent::__construct("converge: {$kind}: {$detail}", 0, $previous);
    }

    public function getKind(): string
    {
        return $this->kind;
    }

    /** "bad-input" (the data is wrong) or "io" (a connection, handshake, pin, timeout or the cache failed). */
    public function getFamily(): string
    {
        return in_array($this->kind, self::IO_KINDS, true) ? 'io' : 'bad-input';
    }

    /** The message without the kind. */
    public function getDetail(): string
    {
        return $this->detail;
    }
}
