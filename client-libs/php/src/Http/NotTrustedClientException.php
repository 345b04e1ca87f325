<?php
declare(strict_types=1);

namespace Converge\Http;

use Converge\NotTrusted;
use Psr\Http\Client\ClientExceptionInterface;

/** PSR-18's client exception for a refused certificate; getNotTrusted() says why. */
final class NotTrustedClientException extends \RuntimeException implements ClientExceptionInterface
{
    public function __construct(private readonly NotTrusted $notTrusted)
    {
        parent::__construct($notTrusted->getMessage(), 0, $notTrusted);
    }

    public function getNotTrusted(): NotTrusted
    {
        return $this->notTrusted;
    }
}
