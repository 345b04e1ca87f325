<?php
declare(strict_types=1);

namespace Converge\Tests;

use Converge\Client;
use Converge\ConfigException;
use Converge\FingerprintException;
use Converge\TargetException;
use PHPUnit\Framework\TestCase;

/**
 * The client against real TLS notaries on 127.0.0.1 (fake_world.py): votes, the cache, every
 * notary asked at once, early decisions, every timeout, pins, both formats.
 */
final class ClientTest extends TestCase
{
    private ?World $w = null;

    protected function tearDown(): void
    {
        $this->w?->stop();
    }

    private function world(string ...$args): World
    {
        return $this->w = new World($args);
    }

    /** @return list<string> */
    private static function kinds(\Converge\Verdict $v): array
    {
        return array_map(static fn ($r) => $r->kind, $v->results);
    }

    public function testThreeNotariesConfirmThenACacheHitWithoutNetwork(): void
    {
        $w = $this->world('Org A:listed', 'Org B:listed', 'Org C:listed');
        $c = Client::load($w->configDir(['early-return' => false]));
        $v = $c->check('www.example.org', 443, $w->info['genuine']);
        $this->assertTrue($v->trusted);
        $this->assertSame(['listed', 'listed', 'listed'], self::kinds($v));
        $want = \Converge\Legacy::requestBytes('www.example.org', 443, \Converge\Fingerprint::parse($w->info['genuine']));
        $this->assertSame([$want], $w->ask('requests 0'));
        $again = $c->check('WWW.example.org', 443, strtolower($w->info['genuine']));
        $this->assertTrue($again->fromCache && $again->trusted);
        $this->assertSame([1, 1, 1], $w->ask('count')['notaries']);
        $this->assertFalse($c->check('www.example.org', 8443, $w->info['genuine'])->fromCache); // twin
    }

    public function testAForgedCertificateIsUntrustedAndNeverCached(): void
    {
        $w = $this->world('Org A:listed', 'Org B:listed');
        $c = Client::load($w->configDir());
        $this->assertFalse($c->check('bank.example', 443, $w->info['forged'])->trusted);
        $this->assertFalse($c->check('bank.example', 443, $w->info['forged'])->fromCache);
    }

    public function testNotariesAreAskedAtOnce(): void
    {
        $w = $this->world('Org A:listed', 'Org B:listed', 'Org C:listed');
        foreach ([0, 1, 2] as $i) {
            $w->ask("delay {$i} 400");
        }
        $c = Client::load($w->configDir(['early-return' => false]));
        $t0 = microtime(true);
        $this->assertTrue($c->check('par.example', 443, $w->info['genuine'])->trusted);
        $this->assertLessThan(1.1, microtime(true) - $t0);
    }

    public function testEarlyReturnAndItsTwin(): void
    {
        $w = $this->world('Org A:mismatch', 'Org B:hang', 'Org C:hang');
        $c = Client::load($w->configDir(['notary-agreement' => 'consensus', 'notary-timeout' => 3, 'total-timeout' => 5]));
        $t0 = microtime(true);
        $v = $c->check('early.example', 443, $w->info['genuine']);
        $this->assertFalse($v->trusted);
        $this->assertLessThan(1.5, microtime(true) - $t0);
        $this->assertSame(['mismatch', 'settled', 'settled'], self::kinds($v));
        $late = Client::load($w->configDir(['notary-agreement' => 'consensus', 'early-return' => false, 'notary-timeout' => 0.5]));
        $this->assertSame(['mismatch', 'timeout', 'timeout'], self::kinds($late->check('early.example', 443, $w->info['genuine'])));
    }

    public function testTheTotalTimeoutBoundsEverything(): void
    {
        $w = $this->world('Org A:hang', 'Org B:hang');
        $c = Client::load($w->configDir(['notary-timeout' => 10, 'total-timeout' => 0.6]));
        $t0 = microtime(true);
        $v = $c->check('slow.example', 443, $w->info['genuine']);
        $took = microtime(true) - $t0;
        $this->assertFalse($v->trusted);
        $this->assertTrue($took >= 0.55 && $took < 2, (string) $took);
        $this->assertSame(['timeout', 'timeout'], self::kinds($v));
    }

    public function testAWrongPinAndGarbageAreFailures(): void
    {
        $w = $this->world('Org Impostor:listed:other', 'Org A:garbage', 'Org B:listed');
        $dir = $w->configDir(['notary-agreement' => 'consensus', 'early-return' => false]);
        $f = glob("{$dir}/notaries-available/*Impostor*")[0];
        $other = (string) file_get_contents(__DIR__ . '/../../vectors/keys/test-other-cert.pem');
        $mine = (string) file_get_contents(__DIR__ . '/../../vectors/keys/test-notary-cert.pem');
        file_put_contents($f, str_replace(substr(json_encode($other, JSON_UNESCAPED_SLASHES), 1, -1), substr(json_encode($mine, JSON_UNESCAPED_SLASHES), 1, -1), (string) file_get_contents($f)));
        $v = Client::load($dir)->check('pin.example', 443, $w->info['genuine']);
        $this->assertFalse($v->trusted);
        $this->assertSame(['pin', 'response', 'listed'], self::kinds($v));
        $this->assertSame(0, $w->ask('count')['notaries'][0]);
    }

    public function testExtendedAnswersAreBoundAndFresh(): void
    {
        $w = $this->world('Org A:extended', 'Org B:extended', 'Org C:extended-stale');
        $c = Client::load($w->configDir(['early-return' => false], true));
        $v = $c->check('ext.example', 443, $w->info['genuine']);
        $this->assertSame(['match', 'match', 'stale'], self::kinds($v));
        $this->assertTrue($v->trusted);
        $this->assertMatchesRegularExpression('/"nonce":"[A-Za-z0-9_-]{22}"/', $w->ask('requests 0')[0]);
        $off = Client::load($w->configDir(['extended' => 'off'], true, [0]));
        $this->assertSame('convergence-v1', $off->check('ext.example', 443, $w->info['genuine'])->results[0]->protocol);
    }

    public function testBadInputIsATypedErrorBeforeAnyNotaryIsAsked(): void
    {
        $w = $this->world('Org A:listed');
        $c = Client::load($w->configDir());
        foreach ([['a b', 443, $w->info['genuine'], TargetException::class], ['ok.example', 0, $w->info['genuine'], TargetException::class],
            ['ok.example', 443, 'zz', FingerprintException::class]] as [$h, $p, $f, $cls]) {
            try {
                $c->check($h, $p, $f);
                $this->fail("{$h} {$p} {$f} accepted");
            } catch (\Converge\ConvergeException $e) {
                $this->assertInstanceOf($cls, $e);
            }
        }
        $this->assertSame([0], $w->ask('count')['notaries']);
        $this->expectException(ConfigException::class);
        Client::load($w->configDir([], false, []))->check('ok.example', 443, $w->info['genuine']);
    }

    public function testAStaleCacheEntryIsAskedAgain(): void
    {
        $w = $this->world('Org A:listed');
        $now = 2_000_000_000.0;
        $c = Client::load($w->configDir(['cache-lifetime' => 60]), static function () use (&$now): float {
            return $now;
        });
        $this->assertFalse($c->check('stale.example', 443, $w->info['genuine'])->fromCache);
        $now += 30;
        $this->assertTrue($c->check('stale.example', 443, $w->info['genuine'])->fromCache);
        $now += 61;
        $this->assertFalse($c->check('stale.example', 443, $w->info['genuine'])->fromCache);
        $this->assertSame([2], $w->ask('count')['notaries']);
    }
}
