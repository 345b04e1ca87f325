<?php
declare(strict_types=1);

namespace Converge;

/** A converge error of kind "config". */
final class ConfigException extends ConvergeException
{
    public function __construct(string $detail, ?\Throwable $previous = null)
    {
        parent::__construct('config', $detail, $previous);
    }
}
