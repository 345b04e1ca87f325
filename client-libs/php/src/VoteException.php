<?php
declare(strict_types=1);

namespace Converge;

/** A converge error of kind "vote". */
final class VoteException extends ConvergeException
{
    public function __construct(string $detail, ?\Throwable $previous = null)
    {
        parent::__construct('vote', $detail, $previous);
    }
}
