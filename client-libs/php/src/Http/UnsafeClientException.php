<?php
declare(strict_types=1);

namespace Converge\Http;

use Psr\Http\Client\ClientExceptionInterface;

/**
 * A PSR-18 client this library cannot bind to the checked connection: its request would go out
 * on a connection other than the one the notaries were asked about (another PSR-18 client,
 * Guzzle's stream handler, `stream => true`, a handler that is not Guzzle's cURL handler).
 */
final class UnsafeClientException extends \LogicException implements ClientExceptionInterface
{
}
