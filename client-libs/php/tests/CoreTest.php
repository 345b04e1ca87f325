<?php
declare(strict_types=1);

namespace Converge\Tests;

use Converge\BundleException;
use Converge\Ed25519;
use Converge\Fingerprint;
use Converge\Legacy;
use Converge\Policy;
use Converge\Json;
use Converge\ResponseException;
use Converge\TargetException;
use Converge\Transparency;
use PHPUnit\Framework\TestCase;

/**
 * The stock JSON parser and the bounds scan, framing, policies, weak Ed25519 keys, one transparency
 * key named twice; a fixed-seed fuzz.
 */
final class CoreTest extends TestCase
{
    public function testJsonIsTheStrictStockParser(): void
    {
        $this->assertSame(2, Json::parse('{"a": 1, "a": 2}')->a);
        $this->assertInstanceOf(\stdClass::class, Json::parse('{"e": {}}')->e);
        foreach (['{', '[NaN]', '[1,]', '{1: 2}', '[1] // c', "[\"\xff\"]", '["\\q"]'] as $bad) {
            $this->assertSame(Json::invalid(), Json::parse($bad), $bad);
        }
        $this->assertSame([1], Json::parse('[1]'));
    }

    public function testTheBoundsScan(): void
    {
        foreach (['{"a": [1, -12, 0]}', '["[[[", "\\"]', str_repeat('[', 32) . str_repeat(']', 32), '[123456789012345]', '["1.5e999"]'] as $ok) {
            $this->assertTrue(Json::withinBounds($ok), $ok);
        }
        foreach ([str_repeat('[', 33) . str_repeat(']', 33), '[1234567890123456]', '[1.5]', '[1e2]', '[-0.0]', '[01]', '{"a": 1E5}'] as $bad) {
            $this->assertFalse(Json::withinBounds($bad), $bad);
        }
    }

    public function testIpLiteralsInTheNotarysForm(): void
    {
        $this->assertSame('2001:db8::1', Legacy::checkIp('2001:0db8:0:0:0:0:0:1'));
        $this->assertSame('::ffff:102:304', Legacy::checkIp('::ffff:1.2.3.4'));
        $this->expectException(TargetException::class);
        Legacy::checkIp('01.2.3.4');
    }

    public function testFramingRefusesWhatANotaryMustNotSend(): void
    {
        $r = Legacy::parseHttpResponse("HTTP/1.0 200 X\r\nA: 1\r\na: 2\r\nContent-Length: 2\r\n\r\nokEXTRA");
        $this->assertSame('1, 2', $r->headers['a']);
        $this->assertSame('ok', $r->body);
        $this->expectException(ResponseException::class);
        Legacy::parseHttpResponse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    }

    public function testPolicies(): void
    {
        $this->assertTrue(Policy::decide('consensus', ['success', 'unreachable'], true));
        $this->assertFalse(Policy::decide('consensus', ['success', 'unreachable'], false));
        $this->assertFalse(Policy::settled('consensus', ['failure'], 2, true));
        $this->assertNull(Policy::settled('majority', ['success'], 2, true));
    }

    public function testWeakEd25519KeysAreRefused(): void
    {
        $small = 'an Ed25519 public key of small order';
        foreach ([
            '0100000000000000000000000000000000000000000000000000000000000000' => $small, // the identity
            '0100000000000000000000000000000000000000000000000000000000000080' => $small, // with the sign bit
            '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05' => $small, // y8, order 8
            'f0ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f' => 'an Ed25519 public key not in canonical form', // p + 3
            '0100' => 'an Ed25519 public key has 32 bytes',
        ] as $hex => $why) {
            $this->assertSame($why, Ed25519::weakKey((string) hex2bin($hex)), $hex);
        }
        // the twins: generated keys and the largest canonical y (p - 1 is of small order, p - 2 is not)
        for ($i = 0; $i < 16; $i++) {
            $pub = sodium_crypto_sign_publickey(sodium_crypto_sign_keypair());
            $this->assertNull(Ed25519::weakKey($pub), bin2hex($pub));
        }
        $this->assertNull(Ed25519::weakKey((string) hex2bin('ebffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f')));
    }

    public function testATransparencyMemberNamingOneKeyTwiceIsRefused(): void
    {
        $keys = json_decode((string) file_get_contents(__DIR__ . '/../../vectors/transparency.json'), true)['keys'];
        // witness-1's key under a second name, with that name's key id
        $raw = (string) base64_decode(explode('+', $keys['witness-1'], 3)[2], true);
        $vkey = static function (string $name, string $raw): string {
            return $name . '+' . substr(hash('sha256', $name . "\n" . $raw), 0, 8) . '+' . base64_encode($raw);
        };
        $policy = static fn (array $ws): \stdClass => Json::parse((string) json_encode(['log' => $keys['log'],
            'witnesses' => array_map(static fn (string $v): array => ['name' => explode('+', $v)[0], 'vkey' => $v], $ws),
            'min_cosignatures' => count($ws)], JSON_UNESCAPED_SLASHES));
        $logRaw = "\x04" . substr((string) base64_decode(explode('+', $keys['log'], 3)[2], true), 1);
        foreach ([
            'one key under two witness names' => [$keys['witness-1'], $vkey('witness.test/witness-1b', $raw)],
            "the log's key as a witness's" => [$keys['witness-1'], $vkey('witness.test/log-twin', $logRaw)],
        ] as $why => $ws) {
            try {
                Transparency::parsePolicy($policy($ws));
                $this->fail("parsed: {$why}");
            } catch (BundleException $e) {
                $this->assertSame('transparency names one key twice (two witnesses, or a witness and the log)', $e->getDetail(), $why);
            }
        }
        // the twin: two witnesses with their own keys
        $p = Transparency::parsePolicy($policy([$keys['witness-1'], $keys['witness-2']]));
        $this->assertCount(2, $p['witnesses']);
        $this->assertSame(2, $p['min']);
    }

    public function testFuzzTheResponseParserWithAFixedSeed(): void
    {
        $cert = (string) file_get_contents(__DIR__ . '/../../vectors/keys/test-notary-cert.pem');
        $key = openssl_pkey_get_private((string) file_get_contents(__DIR__ . '/../../vectors/keys/test-notary-key.pem'));
        $der = \Converge\Bundle::pemToDer($cert);
        $fp = Fingerprint::of($der)->colonHex();
        $list = '{"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "' . $fp . '"}]}';
        openssl_sign($list, $sig, $key, OPENSSL_ALGO_SHA1);
        $body = substr($list, 0, -1) . ', "signature": "' . base64_encode($sig) . '"}';
        $good = "HTTP/1.0 200 X\r\nContent-Type: application/json\r\nContent-Length: " . strlen($body) . "\r\n\r\n" . $body;
        $wanted = [Fingerprint::parse($fp)];
        $this->assertSame('listed', Legacy::outcomeFromHttp($good, $wanted, $der)[0]->kind);
        mt_srand(20111206);
        $tokens = ['{', '}', '[', ']', '"', ',', ':', '\\', "\r\n", 'NaN', '1e999', '-0', "\xff"];
        $kinds = [];
        for ($i = 0; $i < 3000; $i++) {
            $b = $good;
            for ($e = 0, $n = mt_rand(1, 4); $e < $n; $e++) {
                $at = mt_rand(0, strlen($b) - 1);
                $b = match (mt_rand(0, 9)) {
                    0, 1, 2 => substr_replace($b, chr(mt_rand(0, 255)), $at, 1),
                    3, 4 => substr_replace($b, '', $at, mt_rand(1, 8)),
                    5, 6, 7 => substr_replace($b, $tokens[mt_rand(0, count($tokens) - 1)], $at, 0),
                    default => substr_replace($b, substr($b, mt_rand(0, strlen($b) - 1), mt_rand(0, 40)), $at, 0),
                };
                if ($b === '') {
                    $b = 'x';
                }
            }
            [$o, $r] = Legacy::outcomeFromHttp($b, $wanted, $der);
            $kinds[$o->kind] = ($kinds[$o->kind] ?? 0) + 1;
            if ($o->vote === 'success') {
                $this->assertSame(200, $r->status, 'only a signed 200 may vote success');
            }
        }
        $this->assertGreaterThan(100, $kinds['response'] ?? 0, json_encode($kinds));
        $this->assertGreaterThan(10, $kinds['signature'] ?? 0, json_encode($kinds));
    }
}
