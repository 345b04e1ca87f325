<?php
declare(strict_types=1);

namespace Converge\Tests;

use Converge\Client;
use Converge\Config;
use PHPUnit\Framework\TestCase;

/**
 * The transparency log, live: a real `notary serve` keeps its log (on by default) and
 * `notary bundle` names it in the bundle. A match with its proof is trusted, directly and
 * through a relay that passes answers as they are (tests/log_relay.php, the notary's own
 * certificate); twins: the relay strips the member, moves the index, changes the checkpoint's
 * root or the logged entry, and that notary's vote is a failure of the kind the check names.
 */
final class LogTest extends TestCase
{
    private static string $root;
    private static string $tmp;
    private static int $port = 0;
    /** @var resource|null */
    private static $notary = null;

    public static function setUpBeforeClass(): void
    {
        self::$root = dirname(__DIR__, 3);
        self::$tmp = sys_get_temp_dir() . '/converge-php-log-' . bin2hex(random_bytes(6));
        mkdir(self::$tmp);
        $s = stream_socket_server('tcp://127.0.0.1:0');
        self::$port = (int) substr((string) strrchr(stream_socket_get_name($s, false), ':'), 1);
        fclose($s);
        $log = self::$tmp . '/notary.log';
        self::$notary = proc_open([self::$root . '/.venv/bin/notary', 'serve', '--data-dir', self::$tmp . '/data',
            '--listen', '127.0.0.1:' . self::$port, '--allow-target', '127.0.0.0/8'], [0 => ['file', '/dev/null', 'r'],
            1 => ['file', $log, 'a'], 2 => ['file', $log, 'a']], $pipes);
        for ($i = 0; $i < 300; $i++) { // at most 30 s
            $c = @stream_socket_client('tcp://127.0.0.1:' . self::$port, $errno, $error, 1);
            if ($c !== false && is_file(self::$tmp . '/data/notary.key')) {
                fclose($c);
                return;
            }
            usleep(100000);
        }
        self::fail('the notary did not start: ' . @file_get_contents($log));
    }

    public static function tearDownAfterClass(): void
    {
        if (self::$notary !== null) {
            proc_terminate(self::$notary);
            proc_close(self::$notary);
        }
        exec('rm -rf ' . escapeshellarg(self::$tmp));
    }

    /** A configuration directory whose one bundle, made by `notary bundle`, points at $port. */
    private static function config(int $port): string
    {
        $dir = self::$tmp . '/cfg-' . bin2hex(random_bytes(4));
        mkdir("{$dir}/notaries-available", 0o755, true);
        mkdir("{$dir}/notaries-enabled");
        static $bundle = null;
        if ($bundle === null) {
            exec(implode(' ', array_map('escapeshellarg', [self::$root . '/.venv/bin/notary', 'bundle', '--data-dir',
                self::$tmp . '/data', '--host', '127.0.0.1', '--ssl-port', (string) self::$port, '--name', 'Org Log'])), $out, $rc);
            self::assertSame(0, $rc);
            $bundle = json_decode(implode("\n", $out), true, 512, JSON_THROW_ON_ERROR);
            self::assertArrayHasKey('transparency', $bundle);
        }
        $bundle['hosts'][0]['ssl_port'] = $port; // the relay, with the notary's certificate
        file_put_contents("{$dir}/notaries-available/log.notary", json_encode($bundle, JSON_UNESCAPED_SLASHES));
        symlink('../notaries-available/log.notary', "{$dir}/notaries-enabled/log.notary");
        file_put_contents("{$dir}/converge.config", '{"db": null, "connect-timeout": 3, "notary-timeout": 12, "total-timeout": 15}');
        return $dir;
    }

    /** @return array<string, array{?string, bool, string}> */
    public static function cases(): array
    {
        return [
            'a match with a valid proof, asked directly' => [null, true, 'match'],
            'the same through a relay that passes it as it is' => ['pass', true, 'match'],
            'twin: a relay strips the member' => ['strip', false, 'log-missing'],
            'twin: a relay moves the index' => ['index', false, 'log-proof'],
            "twin: a relay changes the checkpoint's root" => ['root', false, 'log-checkpoint'],
            'twin: a relay changes the logged entry' => ['entry', false, 'log-entry'],
        ];
    }

    /** @dataProvider cases */
    public function testTheLogsProofDecides(?string $mode, bool $trusted, string $kind): void
    {
        $relay = $mode === null ? null
            : new Process([PHP_BINARY, __DIR__ . '/log_relay.php', self::$tmp . '/data', (string) self::$port, $mode]);
        $port = $relay === null ? self::$port : (int) $relay->line();
        try {
            $client = new Client(Config::load(self::config($port), []));
            $fp = openssl_x509_fingerprint((string) file_get_contents(self::$tmp . '/data/notary.pem'), 'sha256');
            $v = $client->check('127.0.0.1', self::$port, implode(':', str_split(strtoupper((string) $fp), 2)));
            $this->assertSame([$kind], array_map(static fn ($r) => $r->kind, $v->results));
            $this->assertSame($trusted, $v->trusted);
        } finally {
            $relay?->stop();
        }
    }
}
