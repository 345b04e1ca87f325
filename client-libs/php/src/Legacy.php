<?php
declare(strict_types=1);

namespace Converge;

/**
 * The legacy (Convergence v1) protocol, client side (pure): the request bytes, the response
 * framing, the signed bytes, RSA/SHA-1 verification, the parse of what was verified and the reduction of an
 * answer to a vote.
 */
final class Legacy
{
    public const MAX_RESPONSE_BYTES = 262144;
    private const MAX_HEADER_BYTES = 16384;
    private const MAX_HISTORY_ENTRIES = 1000;
    private const SIGNATURE_MEMBER = ', "signature": "';
    private const PY_SPACE = "[ \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0]";

    /** Refuses a host or port that cannot be put into /target/<host>+<port>. */
    public static function checkTarget(mixed $host, mixed $port): void
    {
        if (!is_string($host) || !preg_match(Bundle::HOST_RE, $host) || str_starts_with($host, '.') || str_starts_with($host, '-')) {
            throw new TargetException('invalid target host ' . json_encode($host));
        }
        if (!is_int($port) || $port < 1 || $port > 65535) {
            throw new TargetException('invalid target port ' . json_encode($port));
        }
    }

    /** The cache and record key host:port (host lower-cased). */
    public static function location(string $host, int $port): string
    {
        return strtolower($host) . ':' . $port;
    }

    /** An IP address literal in its compressed form (IPv6 every group in hex), or a TargetException. */
    public static function checkIp(string $ip): string
    {
        if (str_contains($ip, '.') && !str_contains($ip, ':')) {
            foreach (explode('.', $ip) as $o) {
                if (strlen($o) > 1 && $o[0] === '0') {
                    throw new TargetException('invalid target address ' . json_encode($ip));
                }
            }
        }
        $bin = @inet_pton($ip);
        if ($bin === false || str_contains($ip, '%')) {
            throw new TargetException('invalid target address ' . json_encode($ip));
        }
        if (strlen($bin) === 4) {
            return inet_ntop($bin);
        }
        $w = array_values(unpack('n8', $bin));
        [$best, $bestLen] = [-1, 0];
        for ($i = 0; $i < 8;) {
            if ($w[$i] !== 0) {
                $i++;
                continue;
            }
            $j = $i;
            while ($j < 8 && $w[$j] === 0) {
                $j++;
            }
            if ($j - $i > $bestLen) {
                [$best, $bestLen] = [$i, $j - $i];
            }
            $i = $j;
        }
        $hex = static fn (array $ws) => implode(':', array_map('dechex', $ws));
        return $bestLen < 2 ? $hex($w) : $hex(array_slice($w, 0, $best)) . '::' . $hex(array_slice($w, $best + $bestLen));
    }

    /** The exact request the 2011 add-on sends; $ip asks the notary to connect to that address. */
    public static function requestBytes(mixed $host, mixed $port, Fingerprint $fp, ?string $ip = null): string
    {
        self::checkTarget($host, $port);
        $suffix = ($ip === null || $ip === '') ? '' : '/' . self::checkIp($ip);
        $body = 'fingerprint=' . $fp->colonHex();
        return 'POST /target/' . strtolower($host) . '+' . $port . $suffix . " HTTP/1.0\r\n"
            . "Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n"
            . 'Content-Length: ' . strlen($body) . "\r\n\r\n" . $body;
    }

    /** What Python's str.strip() strips from latin-1 text. */
    public static function pyStrip(string $s): string
    {
        return preg_replace('/\A' . self::PY_SPACE . '+|' . self::PY_SPACE . '+\z/', '', $s);
    }

    /** Splits a complete response read until the server closed. @throws ResponseException */
    public static function parseHttpResponse(string $raw, int $maxBytes = self::MAX_RESPONSE_BYTES): HttpResponse
    {
        if (strlen($raw) > $maxBytes) {
            throw new ResponseException("response larger than {$maxBytes} bytes");
        }
        [$sep, $sepLen] = [strpos($raw, "\r\n\r\n"), 4];
        if ($sep === false) {
            [$sep, $sepLen] = [strpos($raw, "\n\n"), 2];
        }
        if ($sep === false) {
            throw new ResponseException('response has no end of headers');
        }
        if ($sep > self::MAX_HEADER_BYTES) {
            throw new ResponseException('response headers too large');
        }
        $lines = explode("\n", str_replace("\r\n", "\n", substr($raw, 0, $sep)));
        if (!preg_match('/\AHTTP\/1\.[01] ([0-9]{3})(?: .*)?\z/s', $lines[0], $m)) {
            throw new ResponseException('bad status line ' . json_encode(mb_convert_encoding(substr($lines[0], 0, 80), 'UTF-8', 'ISO-8859-1')));
        }
        $headers = [];
        foreach (array_slice($lines, 1) as $line) {
            $colon = strpos($line, ':');
            $name = $colon === false ? '' : substr($line, 0, $colon);
            if ($colon === false || $name === '' || $name !== self::pyStrip($name)) {
                throw new ResponseException('bad header line ' . json_encode(mb_convert_encoding(substr($line, 0, 80), 'UTF-8', 'ISO-8859-1')));
            }
            $key = strtolower($name);
            $value = self::pyStrip(substr($line, $colon + 1));
            $headers[$key] = isset($headers[$key]) ? $headers[$key] . ', ' . $value : $value;
        }
        $body = (string) substr($raw, $sep + $sepLen);
        if (str_contains(strtolower($headers['transfer-encoding'] ?? ''), 'chunked')) {
            throw new ResponseException('chunked transfer coding is not allowed on notary responses');
        }
        if (isset($headers['content-length'])) {
            $cl = $headers['content-length'];
            if (!preg_match('/\A[0-9]{1,12}\z/', $cl)) {
                throw new ResponseException('bad Content-Length ' . json_encode(mb_convert_encoding(substr($cl, 0, 20), 'UTF-8', 'ISO-8859-1')));
            }
            if ((int) $cl > strlen($body)) {
                throw new ResponseException('truncated response body');
            }
            $body = substr($body, 0, (int) $cl);
        }
        return new HttpResponse((int) $m[1], $headers, $body);
    }

    private static function timestamp(mixed $v, string $what): int
    {
        if (is_string($v) && preg_match('/\A[0-9]{1,12}\z/', $v)) {
            return (int) $v;
        }
        if (is_int($v) && $v >= 0 && $v < 1_000_000_000_000) {
            return $v;
        }
        throw new ResponseException("{$what} is not a decimal unix time");
    }

    /**
     * Splits a 200/409 body into the signed bytes S and the signature: the body must be S
     * without its final }, then `, "signature": "<base64>"}` and nothing after it.
     *
     * @return array{signed: string, signature: string}
     * @throws ResponseException when the body does not have that shape
     */
    public static function splitSignedBody(string $body, int $maxBytes = self::MAX_RESPONSE_BYTES): array
    {
        if (strlen($body) > $maxBytes) {
            throw new ResponseException("body larger than {$maxBytes} bytes");
        }
        $i = strrpos($body, self::SIGNATURE_MEMBER);
        if ($i === false || !preg_match('/\A([A-Za-z0-9+\/]+={0,2})"\}\z/', substr($body, $i + strlen(self::SIGNATURE_MEMBER)), $m)) {
            throw new ResponseException('body does not end with the signature member');
        }
        return ['signed' => substr($body, 0, $i) . '}', 'signature' => $m[1]];
    }

    /** Checks the RSASSA-PKCS1-v1_5 SHA-1 signature (base64) over the signed bytes. @throws SignatureException */
    public static function verifySigned(string $signed, string $signature, string $certificateDer): void
    {
        $key = openssl_pkey_get_public(Bundle::pem($certificateDer));
        $details = $key === false ? false : openssl_pkey_get_details($key);
        if ($details === false || $details['type'] !== OPENSSL_KEYTYPE_RSA) {
            throw new SignatureException('the notary certificate does not hold an RSA key');
        }
        $raw = Bundle::strictBase64($signature);
        $ok = $raw !== null && openssl_verify($signed, $raw, $key, OPENSSL_ALGO_SHA1) === 1;
        while (openssl_error_string() !== false) {
            // drain OpenSSL's error queue
        }
        if (!$ok) {
            throw new SignatureException("signature does not verify against the notary's certificate");
        }
    }

    /**
     * The history in verified signed bytes: the bounds scan, the stock parser, the shape.
     *
     * @return list<array{0: Fingerprint, 1: int, 2: int}>
     * @throws ResponseException
     */
    public static function parseSignedList(string $signed): array
    {
        $obj = Json::verifiedObject($signed);
        if ($obj === null) {
            throw new ResponseException('signed bytes are not a JSON object within the bounds');
        }
        $fl = Json::get($obj, 'fingerprintList');
        if (!is_array($fl)) {
            throw new ResponseException('fingerprintList missing or not a list');
        }
        if (count($fl) > self::MAX_HISTORY_ENTRIES) {
            throw new ResponseException('more than ' . self::MAX_HISTORY_ENTRIES . ' history entries');
        }
        $entries = [];
        foreach ($fl as $item) {
            $ts = Json::get($item, 'timestamp');
            if (!$ts instanceof \stdClass) {
                throw new ResponseException('history entry is not an object with a timestamp object');
            }
            $fpText = Json::get($item, 'fingerprint');
            if (!is_string($fpText)) {
                throw new ResponseException('history entry has no fingerprint');
            }
            try {
                $fp = Fingerprint::parse($fpText);
            } catch (FingerprintException $e) {
                throw new ResponseException('history entry fingerprint: ' . $e->getDetail());
            }
            $entries[] = [$fp, self::timestamp(Json::get($ts, 'start'), 'start'), self::timestamp(Json::get($ts, 'finish'), 'finish')];
        }
        return $entries;
    }

    /**
     * Reads a 200/409 body (the one parse boundary of legacy answers): framing, signature,
     * bounds, parse and shape, in that order.
     *
     * @return list<array{0: Fingerprint, 1: int, 2: int}>
     * @throws ResponseException|SignatureException
     */
    public static function readSignedBody(string $body, string $certificateDer, int $maxBytes = self::MAX_RESPONSE_BYTES): array
    {
        ['signed' => $signed, 'signature' => $signature] = self::splitSignedBody($body, $maxBytes);
        self::verifySigned($signed, $signature, $certificateDer);
        return self::parseSignedList($signed);
    }

    /** Reduces one response (status and body) to a vote; $wanted: the asked certificate's forms. @param list<Fingerprint> $wanted */
    public static function evaluate(int $status, string $body, array $wanted, string $certificateDer, int $maxBytes = self::MAX_RESPONSE_BYTES): Outcome
    {
        if ($status === 200 || $status === 409) {
            try {
                $entries = self::readSignedBody($body, $certificateDer, $maxBytes);
            } catch (ConvergeException $e) {
                return Outcome::failureOf($e, $status);
            }
            if ($status === 409) {
                return new Outcome('failure', 'mismatch', $status, 'notary sees another certificate');
            }
            foreach ($wanted as $fp) {
                foreach ($entries as [$e]) {
                    if ($e->equals($fp)) {
                        return new Outcome('success', 'listed', $status, '');
                    }
                }
            }
            $algs = array_map(static fn ($e) => $e[0]->algorithm, $entries);
            $any = false;
            foreach ($wanted as $fp) {
                $any = $any || in_array($fp->algorithm, $algs, true);
            }
            if (!$any && $entries !== []) {
                return new Outcome('success', 'status-only', $status, 'list holds no fingerprint of the asked kind');
            }
            return new Outcome('failure', 'not-listed', $status, '200 without the fingerprint in the signed list');
        }
        if ($status === 303) {
            return new Outcome('unreachable', 'inconclusive', $status, 'notary could not decide');
        }
        return new Outcome('unreachable', 'status', $status, "HTTP status {$status}");
    }

    /** Reduces a whole response to [outcome, response or null]. @param list<Fingerprint> $wanted @return array{0: Outcome, 1: ?HttpResponse} */
    public static function outcomeFromHttp(string $raw, array $wanted, string $certificateDer, int $maxBytes = self::MAX_RESPONSE_BYTES): array
    {
        try {
            $r = self::parseHttpResponse($raw, $maxBytes);
        } catch (ConvergeException $e) {
            return [Outcome::failureOf($e, null), null];
        }
        return [self::evaluate($r->status, $r->body, $wanted, $certificateDer, self::MAX_RESPONSE_BYTES), $r];
    }
}
