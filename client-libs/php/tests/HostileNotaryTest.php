<?php
declare(strict_types=1);

namespace Converge\Tests;

use Converge\Client;
use PHPUnit\Framework\TestCase;

/**
 * One hostile notary among honest ones (issue #31): a genuine notary (fake_world.py) and a
 * notary holding its real keys that answers each hostile form over real TLS. Every form comes
 * back as that notary's vote with the documented kind, the genuine notary's vote is kept and a
 * verdict is returned; each form has a twin that the same notary answers cleanly.
 */
final class HostileNotaryTest extends TestCase
{
    private const START_PORT = 10443;
    private World $w;
    private Responder $h;
    private string $ed;
    private int $port = self::START_PORT;

    protected function setUp(): void
    {
        $this->w = new World(['Org A:listed']);
        $this->h = new Responder();
        $this->ed = sodium_crypto_sign_keypair();
    }

    protected function tearDown(): void
    {
        $this->h->stop();
        $this->w->stop();
    }

    private function client(bool $extended): Client
    {
        $dir = sys_get_temp_dir() . '/converge-php-' . bin2hex(random_bytes(6));
        mkdir("{$dir}/notaries-enabled", 0o755, true);
        file_put_contents("{$dir}/notaries-enabled/a.notary", $this->w->info['notaries'][0]['bundle']);
        file_put_contents("{$dir}/notaries-enabled/h.notary", $this->h->bundle('Hostile', $extended ? sodium_crypto_sign_publickey($this->ed) : null));
        file_put_contents("{$dir}/converge.config", json_encode(['notary-agreement' => 'majority', 'early-return' => false,
            'extended-nonce' => false, 'connect-timeout' => 2, 'notary-timeout' => 2, 'total-timeout' => 4]));
        return Client::load($dir);
    }

    private static function http(int $status, string $body, string $type = 'application/json'): string
    {
        return "HTTP/1.0 {$status} X\r\nContent-Type: {$type}\r\nContent-Length: " . strlen($body) . "\r\n\r\n" . $body;
    }

    private static function list(string ...$fps): string
    {
        return '{"fingerprintList": [' . implode(', ', array_map(
            static fn ($fp) => '{"timestamp": {"start": "1323389219", "finish": "1324691510"}, "fingerprint": "' . $fp . '"}',
            $fps,
        )) . ']}';
    }

    /** $signed without its final }, then the signature over $signed (RSA/SHA-1 with the notary's key). */
    private function sign(string $signed): string
    {
        openssl_sign($signed, $sig, (string) file_get_contents($this->h->key), OPENSSL_ALGO_SHA1);
        return substr($signed, 0, -1) . ', "signature": "' . base64_encode($sig) . '"}';
    }

    /**
     * Asks about the genuine certificate (a new port each time: nothing cached) with the hostile
     * notary answering $response; returns [trusted, genuine notary's vote/kind, hostile notary's vote/kind].
     *
     * @return array{0: bool, 1: string, 2: string}
     */
    private function ask(Client $c, string $response): array
    {
        $this->h->answer($response);
        $v = $c->check('www.example.org', $this->port++, $this->w->info['genuine']);
        $by = [];
        foreach ($v->results as $r) {
            $by[$r->name] = "{$r->vote}/{$r->kind}";
        }
        return [$v->trusted, $by['Org A'] ?? '-', $by['Hostile'] ?? '-'];
    }

    /** @return array<string, array{string, string}> form => [body, the hostile notary's vote/kind] */
    private function legacyForms(): array
    {
        $g = $this->w->info['genuine'];
        $x = $this->w->info['forged'];
        $good = self::list($g);
        $withMember = static fn (string $member) => substr($good, 0, -1) . ', ' . $member . '}';
        $deep = static fn (int $levels) => $withMember('"d": ' . str_repeat('[', $levels - 1) . str_repeat(']', $levels - 1));
        return [
            'genuine (twin)' => [$this->sign($good), 'success/listed'],
            'list spliced after the signature' => [substr($this->sign(self::list($x)), 0, -1) . ', "fingerprintList": ' . substr($good, 20, -1) . '}', 'failure/response'],
            'member after the signature' => [substr($this->sign($good), 0, -1) . ', "x": 1}', 'failure/response'],
            'bytes after the closing brace' => [$this->sign($good) . "\n", 'failure/response'],
            'malformed JSON after the signature' => [substr($this->sign($good), 0, -1) . ', ]}', 'failure/response'],
            'duplicate list inside S, the last one counts' => [$this->sign(substr(self::list($g), 0, -1) . ', ' . substr(self::list($x), 1)), 'failure/not-listed'],
            'duplicate list inside S, twin' => [$this->sign(substr(self::list($x), 0, -1) . ', ' . substr(self::list($g), 1)), 'success/listed'],
            'a 5000-digit integer' => [$this->sign($withMember('"n": 1' . str_repeat('0', 4999))), 'failure/response'],
            'a 15-digit integer (twin)' => [$this->sign($withMember('"n": 1' . str_repeat('0', 14))), 'success/listed'],
            'a number as member name' => [$this->sign($withMember('1: 2')), 'failure/response'],
            'nesting 33 levels' => [$this->sign($deep(33)), 'failure/response'],
            'nesting 32 levels (twin)' => [$this->sign($deep(32)), 'success/listed'],
            'a lone surrogate in the fingerprint' => [$this->sign(self::list('\ud800')), 'failure/response'],
            'NaN' => [$this->sign($withMember('"n": NaN')), 'failure/response'],
            'a comment' => [$this->sign($withMember('"n": 1 /* c */')), 'failure/response'],
            'a signature over other bytes' => [substr($good, 0, -1) . substr($this->sign(self::list($x)), strlen(self::list($x)) - 1), 'failure/signature'],
        ];
    }

    public function testEveryHostileLegacyFormIsThatNotarysFailureAndTheVerdictComesBack(): void
    {
        $c = $this->client(false);
        foreach ($this->legacyForms() as $form => [$body, $want]) {
            [$trusted, $genuine, $hostile] = $this->ask($c, self::http(200, $body));
            $this->assertSame([true, 'success/listed', $want], [$trusted, $genuine, $hostile], $form);
        }
        $this->assertSame(count($this->legacyForms()), $this->h->count());
    }

    /** The canonical statement T the notary would sign for this check, with $extra members before the final }. */
    private function statement(int $port, string $extra = ''): string
    {
        $kid = Responder::keyId(sodium_crypto_sign_publickey($this->ed));
        return '{"answered_at":' . time() . ',"cache":"miss","detail":null,"key_id":"' . $kid . '","observations":[],'
            . '"request":{"alg":"sha1","fingerprint":"' . $this->w->info['genuine'] . '","nonce":null},'
            . '"target":{"host":"www.example.org","ip":null,"port":' . $port . '},"type":"converge-answer/1","verdict":"match"' . $extra . '}';
    }

    private function answer(string $t, string $after = '}'): string
    {
        $kid = Responder::keyId(sodium_crypto_sign_publickey($this->ed));
        $v = \Converge\Bundle::b64url(sodium_crypto_sign_detached($t, sodium_crypto_sign_secretkey($this->ed)));
        return self::http(200, '{"signature":{"alg":"ed25519","key_id":"' . $kid . '","value":"' . $v . '"},"statement":' . $t . $after,
            'application/vnd.converge.answer+json');
    }

    public function testEveryHostileExtendedFormIsThatNotarysFailureAndTheVerdictComesBack(): void
    {
        $c = $this->client(true);
        $forms = [
            'genuine (twin)' => fn ($p) => [$this->answer($this->statement($p)), 'success/match'],
            'a member spliced after the statement' => fn ($p) => [$this->answer($this->statement($p), ',"statement":{}}'), 'failure/bad-signature'],
            'bytes after the closing brace' => fn ($p) => [$this->answer($this->statement($p), "}\n"), 'failure/malformed'],
            'a 5000-digit integer' => fn ($p) => [$this->answer($this->statement($p, ',"n":1' . str_repeat('0', 4999))), 'failure/malformed'],
            'NaN' => fn ($p) => [$this->answer($this->statement($p, ',"n":NaN')), 'failure/malformed'],
            'a number as member name' => fn ($p) => [$this->answer($this->statement($p, ',1:2')), 'failure/malformed'],
            'nesting 33 levels' => fn ($p) => [$this->answer($this->statement($p, ',"d":' . str_repeat('[', 32) . str_repeat(']', 32))), 'failure/malformed'],
            'repeated verdict, the last one counts (twin of nothing outside T)' => fn ($p) => [$this->answer($this->statement($p, ',"verdict":"mismatch"')), 'failure/response'],
        ];
        foreach ($forms as $form => $make) {
            [$response, $want] = $make($this->port);
            [$trusted, $genuine, $hostile] = $this->ask($c, $response);
            $this->assertSame([true, 'success/listed', $want], [$trusted, $genuine, $hostile], $form);
        }
    }
}
