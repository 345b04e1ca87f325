<?php
declare(strict_types=1);

namespace Converge;

/** A converge error of kind "bundle". */
final class BundleException extends ConvergeException
{
    public function __construct(string $detail, ?\Throwable $previous = null)
    {
        parent::__construct('bundle', $detail, $previous);
    }
}
