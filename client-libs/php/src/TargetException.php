<?php
declare(strict_types=1);

namespace Converge;

/** A converge error of kind "target". */
final class TargetException extends ConvergeException
{
    public function __construct(string $detail, ?\Throwable $previous = null)
    {
        parent::__construct('target', $detail, $previous);
    }
}
