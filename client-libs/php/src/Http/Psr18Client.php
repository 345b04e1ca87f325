<?php
declare(strict_types=1);

namespace Converge\Http;

use Converge\Client;
use Converge\NotTrusted;
use Converge\Tls;
use Psr\Http\Client\ClientExceptionInterface;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * A PSR-18 decorator that refuses https:// requests to origins whose certificate the notaries
 * do not vouch for. With a Guzzle client the request is bound to the vouched certificate
 * (cURL's pinned public key), so a server that swaps certificates between the check and the
 * request is refused too; with another PSR-18 client the check is a handshake of its own just
 * before the request.
 *
 *     $http = new \Converge\Http\Psr18Client(new \GuzzleHttp\Client());
 *     $response = $http->sendRequest($request);   // or a ClientException saying why
 */
final class Psr18Client implements ClientInterface
{
    public function __construct(private readonly ClientInterface $inner, private readonly ?Client $converge = null, private readonly ?string $proxy = null)
    {
    }

    public function sendRequest(RequestInterface $request): ResponseInterface
    {
        $uri = $request->getUri();
        if (strtolower($uri->getScheme()) !== 'https') {
            return $this->inner->sendRequest($request);
        }
        try {
            $url = (string) $uri;
            if ($this->inner instanceof \GuzzleHttp\ClientInterface) {
                $curl = \Converge\Curl::options($url, $this->converge, $this->proxy);
                return $this->inner->send($request, ['curl' => $curl, 'http_errors' => false, 'verify' => false]);
            }
            [$host, $port] = Tls::origin($url);
            $c = $this->converge ?? Client::shared();
            [$s, $der] = Tls::handshake($host, $port, $this->proxy, $c->config->totalTimeout);
            fclose($s);
            Tls::requireTrusted($c, $host, $port, $der);
        } catch (NotTrusted $e) {
            throw new NotTrustedClientException($e);
        } catch (\RuntimeException $e) {
            if ($e instanceof ClientExceptionInterface) {
                throw $e;
            }
            throw new NotTrustedClientException(new NotTrusted($uri->getHost(), $uri->getPort() ?? 443, null, $e->getMessage()));
        }
        return $this->inner->sendRequest($request);
    }
}
