<?php
declare(strict_types=1);

namespace Converge;

/** An extended answer that failed verification; $reason names the check. */
final class AnswerRejected extends \RuntimeException
{
    public function __construct(public readonly string $reason, string $message)
    {
        parent::__construct("converge: answer rejected ({$reason}): {$message}");
    }
}
