<?php
declare(strict_types=1);

namespace Converge;

/** A converge error of kind "cache-io". */
final class CacheIOException extends ConvergeException
{
    public function __construct(string $detail, ?\Throwable $previous = null)
    {
        parent::__construct('cache-io', $detail, $previous);
    }
}
