<?php
declare(strict_types=1);

namespace Converge;

/** A converge error of kind "response". */
final class ResponseException extends ConvergeException
{
    public function __construct(string $detail, ?\Throwable $previous = null)
    {
        parent::__construct('response', $detail, $previous);
    }
}
