<?php
declare(strict_types=1);

namespace Converge\Tests;

use Converge\Client;
use Converge\Http\Psr18Client;
use Converge\Http\UnsafeClientException;
use PHPUnit\Framework\TestCase;
use Psr\Http\Client\ClientExceptionInterface;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * The PSR-18 decorator sends only where the checked connection is the one carrying the
 * request (issue #37): Guzzle on cURL with the pin, through a relay that hands the check to the
 * genuine site and the request to a forged one (refused before a byte of the request; twin: a
 * relay that does not switch); every configuration it cannot pin is refused with a clear
 * exception (twin: the same Guzzle on cURL is accepted).
 */
final class Psr18Test extends TestCase
{
    private World $w;
    private Client $c;
    /** @var list<Relay> */
    private array $relays = [];

    protected function setUp(): void
    {
        if (!class_exists(\GuzzleHttp\Client::class)) {
            $this->markTestSkipped('Guzzle is not installed (php-guzzlehttp-guzzle)');
        }
        $this->w = new World(['Org A:listed', 'Org B:listed', '--site', 'genuine=genuine', '--site', 'forged=forged']);
        $this->c = Client::load($this->w->configDir(['notary-agreement' => 'consensus']));
    }

    protected function tearDown(): void
    {
        foreach ($this->relays as $r) {
            $r->stop();
        }
        if (isset($this->w)) {
            $this->w->stop();
        }
    }

    private function relay(string $first, string $then): string
    {
        $this->relays[] = $r = new Relay($this->w->info['sites'][$first], $this->w->info['sites'][$then]);
        return "https://127.0.0.1:{$r->port}/";
    }

    private function forgedRequests(): int
    {
        return $this->w->ask('count')['sites']['forged'];
    }

    private static function get(string $url): RequestInterface
    {
        return new \GuzzleHttp\Psr7\Request('GET', $url, ['Authorization' => 'Bearer secret']);
    }

    public function testARelaySwitchingUpstreamAfterTheCheckIsRefusedBeforeTheRequest(): void
    {
        $http = new Psr18Client(new \GuzzleHttp\Client(), $this->c);
        try {
            $http->sendRequest(self::get($this->relay('genuine', 'forged')));
            $this->fail('the request went out on a connection to the forged site');
        } catch (ClientExceptionInterface $e) {
            $this->assertNotInstanceOf(UnsafeClientException::class, $e);
        }
        $this->assertSame(0, $this->forgedRequests(), 'not a byte of the request reached the forged site');
        // the relay does switch: an unpinned client through a fresh one reaches the forged site on its second connection
        $url = $this->relay('genuine', 'forged');
        $insecure = stream_context_create(['ssl' => ['verify_peer' => false, 'verify_peer_name' => false]]);
        $this->assertSame('genuine', file_get_contents($url, false, $insecure));
        $this->assertSame('forged', file_get_contents($url, false, $insecure));
    }

    public function testTwinARelayThatDoesNotSwitchCarriesTheRequest(): void
    {
        $http = new Psr18Client(new \GuzzleHttp\Client(), $this->c);
        $this->assertSame('genuine', (string) $http->sendRequest(self::get($this->relay('genuine', 'genuine')))->getBody());
    }

    public function testRedirectsAreNotFollowedWithTheFirstOriginsPin(): void
    {
        $site = new Responder(Responder::KEYS . '/test-notary-cert.pem', Responder::KEYS . '/test-notary-key.pem');
        try {
            $site->answer("HTTP/1.1 302 Found\r\nLocation: https://127.0.0.1:{$this->w->info['sites']['forged']}/\r\nContent-Length: 0\r\n\r\n");
            $http = new Psr18Client(new \GuzzleHttp\Client(['allow_redirects' => true]), $this->c);
            $r = $http->sendRequest(self::get("https://127.0.0.1:{$site->port}/"));
            $this->assertSame([302, 1], [$r->getStatusCode(), $site->count()], 'the redirect is the answer: the next hop is a request of its own');
            $this->assertSame(0, $this->forgedRequests());
        } finally {
            $site->stop();
        }
    }

    /** @return array<string, array{\Closure(): ClientInterface}> */
    public static function unsafeClients(): array
    {
        return [
            'another PSR-18 client' => [static fn () => new class () implements ClientInterface {
                public function sendRequest(RequestInterface $request): ResponseInterface
                {
                    return new \GuzzleHttp\Psr7\Response(200, [], (string) file_get_contents((string) $request->getUri(), false,
                        stream_context_create(['ssl' => ['verify_peer' => false, 'verify_peer_name' => false]])));
                }
            }],
            'Guzzle with stream => true' => [static fn () => new \GuzzleHttp\Client(['stream' => true])],
            "Guzzle on its stream handler" => [static fn () => new \GuzzleHttp\Client(['handler' => \GuzzleHttp\HandlerStack::create(new \GuzzleHttp\Handler\StreamHandler())])],
            'Guzzle on a handler of its own' => [static fn () => new \GuzzleHttp\Client(['handler' => static fn () => throw new \LogicException('never called')])],
        ];
    }

    /** @dataProvider unsafeClients */
    public function testEveryClientThatCannotBePinnedIsRefused(\Closure $make): void
    {
        try {
            new Psr18Client($make(), $this->c);
            $this->fail('an unpinnable client was accepted');
        } catch (UnsafeClientException $e) {
            $this->assertStringContainsString('cannot be', $e->getMessage());
        }
        $this->assertSame(0, $this->forgedRequests());
    }

    /** @return array<string, array{\Closure(): ClientInterface}> */
    public static function safeClients(): array
    {
        return [
            'Guzzle by default' => [static fn () => new \GuzzleHttp\Client()],
            'Guzzle on its cURL handler' => [static fn () => new \GuzzleHttp\Client(['handler' => \GuzzleHttp\HandlerStack::create(new \GuzzleHttp\Handler\CurlHandler())])],
            'Guzzle on its cURL multi handler' => [static fn () => new \GuzzleHttp\Client(['handler' => new \GuzzleHttp\Handler\CurlMultiHandler()])],
        ];
    }

    /** @dataProvider safeClients */
    public function testTwinGuzzleOnCurlIsAcceptedAndPinned(\Closure $make): void
    {
        $http = new Psr18Client($make(), $this->c);
        $this->assertSame('genuine', (string) $http->sendRequest(self::get("https://127.0.0.1:{$this->w->info['sites']['genuine']}/"))->getBody());
        $this->expectException(ClientExceptionInterface::class);
        try {
            $http->sendRequest(self::get($this->relay('genuine', 'forged')));
        } finally {
            $this->assertSame(0, $this->forgedRequests());
        }
    }

    public function testAHandlerSwappedAfterConstructionIsRefusedBeforeTheRequest(): void
    {
        $stack = \GuzzleHttp\HandlerStack::create();
        $http = new Psr18Client(new \GuzzleHttp\Client(['handler' => $stack]), $this->c);
        $stack->setHandler(new \GuzzleHttp\Handler\StreamHandler());
        $this->expectException(UnsafeClientException::class);
        $http->sendRequest(self::get("https://127.0.0.1:{$this->w->info['sites']['genuine']}/"));
    }
}
