<?php
declare(strict_types=1);

namespace Converge;

/**
 * TLS hooks for PHP streams: the notaries' verdict before any application data is sent.
 *
 * - Tls::context($url): a stream context for fopen / file_get_contents / any https:// stream
 *   wrapper use. It first completes a handshake with the server (capture_peer_cert, nothing
 *   sent), asks the notaries about that certificate for host:port, and returns a context pinned
 *   to it (peer_fingerprint, SHA-256): the real request's handshake fails unless the server
 *   presents exactly the certificate the notaries vouched for. Redirects are not followed
 *   (follow_location 0): the next URL is checked with a context of its own.
 * - Tls::connect($host, $port): a TLS stream the notaries vouch for, nothing sent yet.
 *
 * A refused certificate is a NotTrusted exception saying why. HTTP proxies (CONNECT) are
 * supported; the notaries are asked about the origin.
 */
final class Tls
{
    /**
     * Opens TCP to $host:$port (through $proxy, "tcp://h:p" or "http://h:p", with CONNECT),
     * completes TLS with the peer certificate captured and returns [stream, DER].
     *
     * @param array<string,mixed> $ssl extra ssl context options
     * @return array{0: resource, 1: string}
     */
    public static function handshake(string $host, int $port, ?string $proxy = null, float $timeout = 10.0, array $ssl = []): array
    {
        $opts = HostQuery::sslOptions($host) + $ssl;
        $ctx = stream_context_create(['ssl' => $opts]);
        $authority = str_contains($host, ':') ? "[{$host}]:{$port}" : "{$host}:{$port}";
        if ($proxy !== null && $proxy !== '') {
            $p = parse_url($proxy);
            $s = @stream_socket_client('tcp://' . ($p['host'] ?? '') . ':' . ($p['port'] ?? 80), $errno, $errstr, $timeout, STREAM_CLIENT_CONNECT, $ctx);
            if ($s === false) {
                throw new \RuntimeException("proxy {$proxy}: {$errstr}");
            }
            stream_set_timeout($s, (int) ceil($timeout));
            $auth = isset($p['user']) ? 'Proxy-Authorization: Basic ' . base64_encode(urldecode($p['user']) . ':' . urldecode($p['pass'] ?? '')) . "\r\n" : '';
            fwrite($s, "CONNECT {$authority} HTTP/1.1\r\nHost: {$authority}\r\n{$auth}\r\n");
            $head = '';
            while (!str_ends_with($head, "\r\n\r\n")) {
                $c = fread($s, 1);
                if ($c === false || $c === '' || strlen($head) > 16384) {
                    fclose($s);
                    throw new \RuntimeException("proxy {$proxy}: no reply to CONNECT");
                }
                $head .= $c;
            }
            if (!preg_match('/\AHTTP\/1\.[01] 2\d\d/', $head)) {
                fclose($s);
                throw new \RuntimeException("proxy refused CONNECT {$authority}: " . strtok($head, "\r\n"));
            }
            if (!@stream_socket_enable_crypto($s, true, $opts['crypto_method'])) {
                fclose($s);
                throw new \RuntimeException("{$authority}: TLS: " . (error_get_last()['message'] ?? 'handshake failed'));
            }
        } else {
            $addr = str_contains($host, ':') ? "tls://[{$host}]:{$port}" : "tls://{$host}:{$port}";
            $s = @stream_socket_client($addr, $errno, $errstr, $timeout, STREAM_CLIENT_CONNECT, $ctx);
            if ($s === false) {
                throw new \RuntimeException("{$authority}: " . ($errstr !== '' ? $errstr : (error_get_last()['message'] ?? 'connection failed')));
            }
        }
        $cert = stream_context_get_params($s)['options']['ssl']['peer_certificate'] ?? null;
        if ($cert === null || !openssl_x509_export($cert, $pem) || ($der = Bundle::pemToDer($pem)) === null) {
            fclose($s);
            throw new \RuntimeException("{$authority}: no peer certificate");
        }
        return [$s, $der];
    }

    /** Asks the notaries about $der for $host:$port; throws NotTrusted unless they vouch for it. */
    public static function requireTrusted(Client $client, string $host, int $port, string $der): Verdict
    {
        try {
            $v = $client->checkCertificate($host, $port, $der);
        } catch (ConvergeException $e) {
            throw new NotTrusted($host, $port, null, $e->getMessage());
        }
        if (!$v->trusted) {
            throw new NotTrusted($host, $port, $v);
        }
        return $v;
    }

    /**
     * A TLS stream to $host:$port (optionally through $proxy) whose certificate the notaries
     * vouch for; nothing has been sent on it. @return resource
     */
    public static function connect(string $host, int $port, ?Client $client = null, ?string $proxy = null)
    {
        $client ??= Client::shared();
        [$s, $der] = self::handshake($host, $port, $proxy, $client->config->totalTimeout);
        try {
            self::requireTrusted($client, $host, $port, $der);
        } catch (NotTrusted $e) {
            fclose($s);
            throw $e;
        }
        return $s;
    }

    /** [host, port] of an https:// URL. @return array{0: string, 1: int} */
    public static function origin(string $url): array
    {
        $u = parse_url($url);
        if (($u['scheme'] ?? '') !== 'https' || !isset($u['host'])) {
            throw new TargetException("not an https:// URL: {$url}");
        }
        return [trim($u['host'], '[]'), (int) ($u['port'] ?? 443)];
    }

    /**
     * A stream context for https://$url pinned to the certificate the notaries vouch for
     * ($options: more context options, e.g. ['http' => ['method' => 'POST']]; $proxy: an HTTP
     * proxy "tcp://h:p"). @return resource
     */
    public static function context(string $url, ?Client $client = null, ?string $proxy = null, array $options = [])
    {
        $client ??= Client::shared();
        [$host, $port] = self::origin($url);
        [$s, $der] = self::handshake($host, $port, $proxy, $client->config->totalTimeout);
        fclose($s);
        self::requireTrusted($client, $host, $port, $der);
        $ssl = HostQuery::sslOptions($host);
        unset($ssl['capture_peer_cert']);
        $ssl['peer_fingerprint'] = ['sha256' => hash('sha256', $der)];
        $options['ssl'] = ($options['ssl'] ?? []) + $ssl;
        // the context is pinned for this origin: a redirect elsewhere is a URL of its own, checked with its own context
        $options['http'] = ($options['http'] ?? []) + ['follow_location' => 0];
        if ($proxy !== null && $proxy !== '') {
            $options['http'] += ['proxy' => 'tcp://' . preg_replace('#^[a-z]+://#', '', rtrim($proxy, '/')), 'request_fulluri' => false];
        }
        return stream_context_create($options);
    }
}
