<?php
declare(strict_types=1);

namespace Converge\Http;

use Converge\Client;
use Converge\NotTrusted;
use Psr\Http\Client\ClientExceptionInterface;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * A PSR-18 decorator around Guzzle on its cURL handler that refuses https:// requests to
 * origins whose certificate the notaries do not vouch for. The request is bound to the vouched
 * certificate: cURL's pinned public key makes the request's own handshake fail unless that
 * very connection presents it, before a byte of the request is written, so a relay that hands
 * the check to the genuine server and the request to another is refused. Redirects are not
 * followed (PSR-18's sendRequest semantics): each hop is a request of its own, checked for its
 * own origin.
 *
 * Only that configuration can be bound, so every other one is refused with an
 * UnsafeClientException, at construction and again before each request: another PSR-18
 * client (its connection is not ours to pin), Guzzle without ext-curl or on its stream handler,
 * a client configured with `stream => true`, any base handler that is not Guzzle's cURL one.
 *
 *     $http = new \Converge\Http\Psr18Client(new \GuzzleHttp\Client());
 *     $response = $http->sendRequest($request);   // or a ClientException saying why
 */
final class Psr18Client implements ClientInterface
{
    public function __construct(private readonly ClientInterface $inner, private readonly ?Client $converge = null, private readonly ?string $proxy = null)
    {
        self::requireBindable($inner);
    }

    /** Refuses a client whose request would not travel on the checked, pinned connection. @throws UnsafeClientException */
    public static function requireBindable(ClientInterface $inner): void
    {
        if (!$inner instanceof \GuzzleHttp\Client) {
            throw new UnsafeClientException(get_class($inner) . ' cannot be bound to the checked connection: '
                . 'only Guzzle on its cURL handler can (use Converge\Curl::options or Converge\Tls::context for other stacks)');
        }
        if (!function_exists('curl_exec')) {
            throw new UnsafeClientException('Guzzle without ext-curl sends on its stream handler, which cannot be pinned: install ext-curl');
        }
        /** @psalm-suppress DeprecatedMethod getConfig is the only way to read a Guzzle 7 client's defaults */
        if (!empty($inner->getConfig('stream'))) {
            throw new UnsafeClientException('a Guzzle client with stream => true sends on its stream handler, which cannot be pinned');
        }
        $handler = $inner->getConfig('handler');
        if ($handler instanceof \GuzzleHttp\HandlerStack) {
            $handler = (new \ReflectionProperty(\GuzzleHttp\HandlerStack::class, 'handler'))->getValue($handler);
        }
        if (!self::curlHandler($handler, true)) {
            throw new UnsafeClientException('the Guzzle client does not send on its cURL handler ('
                . (is_object($handler) ? get_class($handler) : gettype($handler)) . '), so the request cannot be pinned');
        }
    }

    /**
     * Whether $h sends on cURL: Guzzle's cURL handlers, or Guzzle's own Proxy choosing between
     * them (wrapSync), or choosing them unless a request asks to stream (wrapStreaming; this
     * decorator never does).
     */
    private static function curlHandler(mixed $h, bool $top): bool
    {
        if ($h instanceof \GuzzleHttp\Handler\CurlHandler || $h instanceof \GuzzleHttp\Handler\CurlMultiHandler) {
            return true;
        }
        if (!$h instanceof \Closure) {
            return false;
        }
        $f = new \ReflectionFunction($h);
        if ($f->getClosureScopeClass()?->getName() !== \GuzzleHttp\Handler\Proxy::class) {
            return false;
        }
        $v = $f->getStaticVariables();
        if (array_key_exists('streaming', $v)) {
            return $top && self::curlHandler($v['default'] ?? null, false);
        }
        return self::curlHandler($v['default'] ?? null, false) && self::curlHandler($v['sync'] ?? null, false);
    }

    public function sendRequest(RequestInterface $request): ResponseInterface
    {
        self::requireBindable($this->inner);
        $uri = $request->getUri();
        if (strtolower($uri->getScheme()) !== 'https') {
            return $this->inner->sendRequest($request);
        }
        try {
            $curl = \Converge\Curl::options((string) $uri, $this->converge, $this->proxy);
        } catch (NotTrusted $e) {
            throw new NotTrustedClientException($e);
        } catch (\RuntimeException $e) {
            if ($e instanceof ClientExceptionInterface) {
                throw $e;
            }
            throw new NotTrustedClientException(new NotTrusted($uri->getHost(), $uri->getPort() ?? 443, null, $e->getMessage()));
        }
        \assert($this->inner instanceof \GuzzleHttp\Client);
        return $this->inner->send($request, ['curl' => $curl, 'verify' => false, 'stream' => false, 'allow_redirects' => false,
            'http_errors' => false, 'synchronous' => true]);
    }
}
