<?php
declare(strict_types=1);

namespace Converge;

/** A converge error of kind "fingerprint". */
final class FingerprintException extends ConvergeException
{
    public function __construct(string $detail, ?\Throwable $previous = null)
    {
        parent::__construct('fingerprint', $detail, $previous);
    }
}
