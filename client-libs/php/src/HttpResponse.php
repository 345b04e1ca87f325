<?php
declare(strict_types=1);

namespace Converge;

/** A split HTTP/1.x response; header names lower-cased, repeated headers joined by ", ". */
final class HttpResponse
{
    /** @param array<string,string> $headers */
    public function __construct(public readonly int $status, public readonly array $headers, public readonly string $body)
    {
    }
}
