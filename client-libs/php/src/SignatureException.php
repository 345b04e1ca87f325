<?php
declare(strict_types=1);

namespace Converge;

/** A converge error of kind "signature". */
final class SignatureException extends ConvergeException
{
    public function __construct(string $detail, ?\Throwable $previous = null)
    {
        parent::__construct('signature', $detail, $previous);
    }
}
