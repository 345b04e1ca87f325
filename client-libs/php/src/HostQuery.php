<?php
declare(strict_types=1);

namespace Converge;

/**
 * One question to one physical notary host, as a non-blocking state machine so that every
 * host of every notary is asked at once from one PHP thread (NotaryIO drives them with
 * stream_select): connect, (through a bounce relay: CONNECT and its reply head,) TLS with the
 * certificate captured, the pin checked before anything is sent, the request, the response read
 * until the server closes. Every step is bounded by the connect and notary deadlines.
 */
final class HostQuery
{
    public ?Outcome $outcome = null;
    public string $label;
    public readonly string $protocol;
    /** @var resource|null */
    private $stream = null;
    private string $state = 'connect';
    private string $buffer = '';
    private int $written = 0;
    private string $request = '';
    private string $head = '';
    private string $nonce = '';
    private Fingerprint $asked;
    private float $connectDeadline;

    /**
     * @param list<Fingerprint> $wanted
     * @param array{connect_timeout: float, max_bytes: int, relay: ?Bundle, relay_dests: list<NotaryHost>, bounce_port: int, ip: ?string} $o
     * @param array{keys: list<SigningKey>, nonce: bool, max_skew: int, now: callable}|null $ext
     */
    public function __construct(
        private NotaryHost $nh,
        private readonly string $target,
        private readonly int $port,
        private readonly array $wanted,
        private readonly array $o,
        public readonly ?array $ext,
        private readonly float $deadline,
    ) {
        $this->protocol = $ext !== null ? Bundle::EXTENDED_FORMAT : Bundle::LEGACY_FORMAT;
        $relay = $o['relay'];
        $this->label = $relay !== null ? "{$nh->host}:{$o['bounce_port']} via {$relay->name}" : "{$nh->host}:{$nh->sslPort}";
        $this->connectDeadline = min($deadline, microtime(true) + $o['connect_timeout']);
        $this->asked = $wanted[0];
        try {
            if ($ext === null) {
                $this->request = Legacy::requestBytes($target, $port, $this->asked, $o['ip']);
            } else {
                $this->asked = Extended::requestFingerprint($wanted);
                $this->nonce = $ext['nonce'] ? Extended::newNonce() : '';
                $this->request = Extended::requestBytes($target, $port, $this->asked, $this->nonce, $o['ip'], isset($ext['log']));
            }
        } catch (ConvergeException $e) {
            $this->outcome = Outcome::failureOf($e, null);
            return;
        }
        [$host, $port2] = $relay !== null ? [$relay->hosts[0]->host, $relay->hosts[0]->httpPort] : [$nh->host, $nh->sslPort];
        $ctx = stream_context_create(['ssl' => self::sslOptions($nh->host)]);
        $addr = str_contains($host, ':') ? "tcp://[{$host}]:{$port2}" : "tcp://{$host}:{$port2}";
        $s = @stream_socket_client($addr, $errno, $errstr, 0, STREAM_CLIENT_CONNECT | STREAM_CLIENT_ASYNC_CONNECT, $ctx);
        if ($s === false) {
            $this->unreachable("{$this->label}: {$errstr}");
            return;
        }
        stream_set_blocking($s, false);
        $this->stream = $s;
    }

    /** @return array<string,mixed> */
    public static function sslOptions(string $host): array
    {
        $name = filter_var($host, FILTER_VALIDATE_IP) === false;
        return [
            // the bundle's pin replaces CA and host name checks; it is checked before sending
            'verify_peer' => false, 'verify_peer_name' => false, 'allow_self_signed' => true,
            'capture_peer_cert' => true, 'SNI_enabled' => $name, 'peer_name' => $host,
            'crypto_method' => STREAM_CRYPTO_METHOD_TLSv1_2_CLIENT | STREAM_CRYPTO_METHOD_TLSv1_3_CLIENT,
        ];
    }

    private function unreachable(string $detail): void
    {
        $this->outcome = new Outcome('unreachable', 'unreachable', null, $detail);
        $this->close();
    }

    public function close(): void
    {
        if (is_resource($this->stream)) {
            fclose($this->stream);
        }
        $this->stream = null;
    }

    public function done(): bool
    {
        return $this->outcome !== null;
    }

    /** The stream and whether to wait for reading, writing. @return array{0: resource|null, 1: bool, 2: bool} */
    public function waitsOn(): array
    {
        return match ($this->state) {
            'connect', 'relay-write', 'write' => [$this->stream, false, true],
            'tls' => [$this->stream, true, true],
            default => [$this->stream, true, false],
        };
    }

    /** The time by which this query must progress. */
    public function nextDeadline(): float
    {
        return in_array($this->state, ['connect', 'relay-write', 'relay-read', 'tls'], true) ? $this->connectDeadline : $this->deadline;
    }

    /** Called when the clock passed nextDeadline(). */
    public function expire(): void
    {
        if ($this->done()) {
            return;
        }
        $this->unreachable("{$this->label}: timed out");
    }

    /** Progresses as far as the stream allows without blocking. */
    public function step(): void
    {
        if ($this->done() || !is_resource($this->stream)) {
            return;
        }
        $s = $this->stream;
        switch ($this->state) {
            case 'connect':
                if (@stream_socket_get_name($s, true) === false) {
                    $this->unreachable("{$this->label}: connection refused or reset");
                    return;
                }
                if ($this->o['relay'] !== null) {
                    $this->head = NotaryIO::connectHead($this->o['relay_dests'], $this->o['bounce_port']);
                    $this->state = 'relay-write';
                } else {
                    $this->state = 'tls';
                }
                $this->step();
                return;
            case 'relay-write':
                $n = @fwrite($s, substr($this->head, $this->written));
                if ($n === false) {
                    $this->unreachable("{$this->label}: relay: write failed");
                    return;
                }
                $this->written += $n;
                if ($this->written >= strlen($this->head)) {
                    $this->written = 0;
                    $this->state = 'relay-read';
                }
                return;
            case 'relay-read':
                while (!str_ends_with($this->buffer, "\r\n\r\n")) {
                    if (strlen($this->buffer) >= 8192) {
                        $this->unreachable('relay reply head too large');
                        return;
                    }
                    $c = @fread($s, 1); // one byte at a time: TLS starts right after the head
                    if ($c === false || ($c === '' && feof($s))) {
                        $this->unreachable('relay closed the connection');
                        return;
                    }
                    if ($c === '') {
                        return;
                    }
                    $this->buffer .= $c;
                }
                try {
                    $this->nh = NotaryIO::parseConnectReply($this->buffer, $this->o['relay_dests']);
                } catch (\RuntimeException $e) {
                    $this->unreachable($e->getMessage());
                    return;
                }
                $this->label = "{$this->nh->host}:{$this->o['bounce_port']} via {$this->o['relay']->name}";
                foreach (self::sslOptions($this->nh->host) as $k => $v) {
                    stream_context_set_option($s, 'ssl', $k, $v);
                }
                $this->buffer = '';
                $this->state = 'tls';
                $this->step();
                return;
            case 'tls':
                $r = @stream_socket_enable_crypto($s, true, STREAM_CRYPTO_METHOD_TLSv1_2_CLIENT | STREAM_CRYPTO_METHOD_TLSv1_3_CLIENT);
                if ($r === 0) {
                    return; // needs more IO
                }
                if ($r === false) {
                    $err = error_get_last()['message'] ?? 'handshake failed';
                    $this->unreachable("{$this->label}: TLS: {$err}");
                    return;
                }
                $cert = stream_context_get_params($s)['options']['ssl']['peer_certificate'] ?? null;
                $der = null;
                if ($cert !== null && openssl_x509_export($cert, $pem)) {
                    $der = Bundle::pemToDer($pem);
                }
                if ($der === null || !Fingerprint::of($der)->equals($this->nh->pin)) {
                    $this->outcome = new Outcome('failure', 'pin', null, "{$this->label} presented a certificate other than the pinned one");
                    $this->close();
                    return;
                }
                $this->state = 'write';
                $this->step();
                return;
            case 'write':
                $n = @fwrite($s, substr($this->request, $this->written));
                if ($n === false) {
                    $this->unreachable("{$this->label}: write failed");
                    return;
                }
                $this->written += $n;
                if ($this->written >= strlen($this->request)) {
                    $this->state = 'read';
                }
                return;
            case 'read':
                while (true) {
                    $chunk = @fread($s, 65536);
                    if ($chunk === false || ($chunk === '' && feof($s))) {
                        $this->finish();
                        return;
                    }
                    if ($chunk === '') {
                        return;
                    }
                    $this->buffer .= $chunk;
                    if (strlen($this->buffer) > $this->o['max_bytes']) {
                        $this->outcome = new Outcome('failure', 'response', null, "response larger than {$this->o['max_bytes']} bytes");
                        $this->close();
                        return;
                    }
                }
        }
    }

    private function finish(): void
    {
        $this->close();
        try {
            $this->outcome = $this->read($this->buffer);
        } catch (ConvergeException $e) {
            $this->outcome = Outcome::failureOf($e, null);
        } catch (\ValueError | \TypeError | \ArithmeticError $e) {
            // the one parse boundary: nothing a notary sends leaves as an exception
            $this->outcome = new Outcome('failure', 'response', null, 'unreadable answer: ' . $e->getMessage());
        }
    }

    /** This notary's answer as a vote (every check of either format). @throws ConvergeException */
    private function read(string $raw): Outcome
    {
        if ($this->ext === null) {
            return Legacy::outcomeFromHttp($raw, $this->wanted, $this->nh->certificateDer, $this->o['max_bytes'])[0];
        }
        $now = (int) ($this->ext['now'])();
        $resp = Legacy::parseHttpResponse($raw, $this->o['max_bytes']);
        return Extended::evaluate($resp, Extended::trustedKeys($this->ext['keys'], $now), [
            'host' => $this->target, 'port' => $this->port, 'fingerprint' => $this->asked, 'nonce' => $this->nonce,
            'now' => $now, 'max_skew' => $this->ext['max_skew'], 'bind_ip' => true, 'ip' => $this->o['ip'] ?? '',
        ] + (isset($this->ext['log']) ? ['log' => $this->ext['log']] : []));
    }

    /** A fresh legacy query for the same host (extended fallback). */
    public function legacyTwin(): self
    {
        return new self($this->nh, $this->target, $this->port, $this->wanted, $this->o, null, $this->deadline);
    }
}
