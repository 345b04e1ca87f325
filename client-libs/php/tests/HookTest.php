<?php
declare(strict_types=1);

namespace Converge\Tests;

use Converge\Client;
use Converge\Curl;
use Converge\NotTrusted;
use Converge\Tls;
use PHPUnit\Framework\TestCase;

/**
 * End to end through every hook: the genuine site loads; the forged one fails before a single
 * byte of the request reaches it (the must-fail twin): stream contexts (file_get_contents),
 * cURL, the PSR-18 decorator on Guzzle, Tls::connect; through a CONNECT proxy the origin is
 * asked about and an attacker's proxy is caught.
 */
final class HookTest extends TestCase
{
    private World $w;
    private Client $c;

    protected function setUp(): void
    {
        $this->w = new World(['Org A:listed', 'Org B:listed', '--site', 'genuine=genuine', '--site', 'forged=forged',
            '--proxy', 'honest=honest', '--proxy', 'evil=forged']);
        $this->c = Client::load($this->w->configDir(['notary-agreement' => 'consensus']));
    }

    protected function tearDown(): void
    {
        $this->w->stop();
    }

    private function url(string $site): string
    {
        return 'https://127.0.0.1:' . $this->w->info['sites'][$site] . '/';
    }

    private function forgedRequests(): int
    {
        return $this->w->ask('count')['sites']['forged'];
    }

    public function testStreamContextGenuineLoadsForgedRefusedBeforeTheRequest(): void
    {
        $this->assertSame('genuine', file_get_contents($this->url('genuine'), false, Tls::context($this->url('genuine'), $this->c)));
        try {
            Tls::context($this->url('forged'), $this->c);
            $this->fail('the forged site was accepted');
        } catch (NotTrusted $e) {
            $this->assertNotNull($e->verdict);
            $this->assertFalse($e->verdict->trusted);
        }
        $this->assertSame(0, $this->forgedRequests());
    }

    public function testThePinnedContextRefusesAnotherCertificate(): void
    {
        // a context pinned to the genuine certificate, used against the forged server
        $ctx = Tls::context($this->url('genuine'), $this->c);
        $this->assertFalse(@file_get_contents($this->url('forged'), false, $ctx));
        $this->assertSame(0, $this->forgedRequests());
    }

    public function testARedirectIsNotFollowedWithThePinOfTheFirstOrigin(): void
    {
        // a vouched server redirecting to another origin that happens to present the same key
        $site = new Responder(Responder::KEYS . '/test-notary-cert.pem', Responder::KEYS . '/test-notary-key.pem');
        try {
            $site->answer("HTTP/1.0 302 Found\r\nLocation: {$this->url('genuine')}\r\nContent-Length: 0\r\n\r\n");
            $url = "https://127.0.0.1:{$site->port}/";
            $this->assertSame('', file_get_contents($url, false, Tls::context($url, $this->c)));
            $this->assertStringContainsString(' 302 ', $http_response_header[0]);
            $ch = curl_init($url);
            curl_setopt_array($ch, Curl::options($url, $this->c) + [CURLOPT_RETURNTRANSFER => true]);
            $this->assertSame('', curl_exec($ch));
            $this->assertSame(302, curl_getinfo($ch, CURLINFO_RESPONSE_CODE));
            $this->assertSame([0, 2], [$this->w->ask('count')['sites']['genuine'], $site->count()], 'the next origin was not asked for');
        } finally {
            $site->stop();
        }
        // twin: asked for with a context of its own, the next origin loads
        $this->assertSame('genuine', file_get_contents($this->url('genuine'), false, Tls::context($this->url('genuine'), $this->c)));
    }

    public function testTheConformanceCliFollowsRedirectsHopByHopThroughTheHook(): void
    {
        $site = new Responder(Responder::KEYS . '/test-notary-cert.pem', Responder::KEYS . '/test-notary-key.pem');
        $dir = $this->w->configDir(['notary-agreement' => 'consensus']);
        $hook = static fn (string $flags = ' --follow-redirects') => json_decode((string) shell_exec(escapeshellarg(PHP_BINARY) . ' '
            . escapeshellarg(__DIR__ . '/../bin/converge-conformance') . ' hook --config-dir ' . escapeshellarg($dir) . "{$flags} 127.0.0.1 {$site->port}"), true);
        try {
            $site->answer("HTTP/1.0 302 Found\r\nLocation: {$this->url('forged')}\r\nContent-Length: 0\r\n\r\n");
            $this->assertSame(['connected' => false, 'error' => 'untrusted'], array_intersect_key($hook(), ['connected' => 1, 'error' => 1]));
            $this->assertSame(0, $this->forgedRequests());
            // without --follow-redirects the 302 is the answer
            $this->assertSame(['connected' => true, 'status' => 302, 'body' => ''], $hook(''));
            $this->assertSame(0, $this->forgedRequests());
            $site->answer("HTTP/1.0 302 Found\r\nLocation: {$this->url('genuine')}\r\nContent-Length: 0\r\n\r\n"); // twin
            $this->assertSame(['connected' => true, 'status' => 200, 'body' => 'genuine'], $hook());
        } finally {
            $site->stop();
        }
    }

    public function testCurl(): void
    {
        $ch = curl_init($this->url('genuine'));
        curl_setopt_array($ch, Curl::options($this->url('genuine'), $this->c) + [CURLOPT_RETURNTRANSFER => true]);
        $this->assertSame('genuine', curl_exec($ch));
        $this->expectException(NotTrusted::class);
        try {
            Curl::options($this->url('forged'), $this->c);
        } finally {
            $this->assertSame(0, $this->forgedRequests());
        }
    }

    public function testPsr18DecoratorOnGuzzle(): void
    {
        if (!class_exists(\GuzzleHttp\Client::class)) {
            $this->markTestSkipped('Guzzle is not installed (php-guzzlehttp-guzzle)');
        }
        $http = new \Converge\Http\Psr18Client(new \GuzzleHttp\Client(), $this->c);
        $r = $http->sendRequest(new \GuzzleHttp\Psr7\Request('GET', $this->url('genuine')));
        $this->assertSame('genuine', (string) $r->getBody());
        $this->expectException(\Psr\Http\Client\ClientExceptionInterface::class);
        try {
            $http->sendRequest(new \GuzzleHttp\Psr7\Request('GET', $this->url('forged')));
        } finally {
            $this->assertSame(0, $this->forgedRequests());
        }
    }

    public function testThroughAConnectProxyTheOriginIsAskedAboutAndAnAttackersProxyIsCaught(): void
    {
        $honest = 'tcp://127.0.0.1:' . $this->w->info['proxies']['honest'];
        $url = $this->url('genuine');
        $this->assertSame('genuine', file_get_contents($url, false, Tls::context($url, $this->c, $honest)));
        $port = $this->w->info['sites']['genuine'];
        $this->assertStringStartsWith("CONNECT 127.0.0.1:{$port} ", $this->w->ask('count')['proxies']['honest'][0]);
        $this->assertStringContainsString("+{$port} HTTP", $this->w->ask('requests 0')[0]);
        $this->expectException(NotTrusted::class);
        try {
            Tls::context($url, $this->c, 'tcp://127.0.0.1:' . $this->w->info['proxies']['evil']);
        } finally {
            $this->assertSame(0, $this->forgedRequests());
        }
    }

    public function testTlsConnectGivesOnlyAVouchedForStream(): void
    {
        $s = Tls::connect('127.0.0.1', $this->w->info['sites']['genuine'], $this->c);
        fwrite($s, "GET / HTTP/1.0\r\n\r\n");
        $this->assertStringEndsWith('genuine', stream_get_contents($s));
        $this->expectException(NotTrusted::class);
        Tls::connect('127.0.0.1', $this->w->info['sites']['forged'], $this->c);
    }
}
