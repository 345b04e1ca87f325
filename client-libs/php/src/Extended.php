<?php
declare(strict_types=1);

namespace Converge;

/**
 * The extended answer format converge-answer/1, client side: verification of a signed answer
 * in the documented order, each failure named; the request; the reduction to a vote.
 */
final class Extended
{
    public const DEFAULT_MAX_SKEW = 300;
    public const MEDIA_TYPE = 'application/vnd.converge.answer+json';
    public const PATH = '/v2/answer';
    private const MAX_ANSWER_BYTES = 65536;
    /** The signed-answer frame: fixed ASCII prefix, key id K, signature V, statement bytes T, final }. */
    private const FRAME = '/\A\{"signature":\{"alg":"ed25519","key_id":"([\x20\x21\x23-\x5b\x5d-\x7e]+)","value":"([\x20\x21\x23-\x5b\x5d-\x7e]+)"\},"statement":(.*)\}\z/s';
    private const MEMBER = ',"transparency":';
    private const VERDICT_STATUS = ['match' => 200, 'mismatch' => 409, 'unreachable' => 503, 'refused' => 403];
    private const VOTES = ['match' => ['success', 'match'], 'mismatch' => ['failure', 'mismatch'],
        'unreachable' => ['unreachable', 'target-unreachable'], 'refused' => ['unreachable', 'refused']];

    /** The bundle's signing keys trusted at $now, by key id. @param list<SigningKey> $keys @return array<string,string> */
    public static function trustedKeys(array $keys, int $now): array
    {
        $out = [];
        foreach ($keys as $k) {
            if ($k->trustedAt($now)) {
                $out[$k->keyId] = $k->publicKey;
            }
        }
        return $out;
    }

    /** The host as a notary names it in target.host. */
    public static function expectedHost(string $host): string
    {
        try {
            return Legacy::checkIp(trim($host, '[]'));
        } catch (TargetException) {
            $name = strtolower($host);
            return str_ends_with($name, '.') ? substr($name, 0, -1) : $name;
        }
    }

    private static function reject(string $reason, string $message): never
    {
        throw new AnswerRejected($reason, $message);
    }

    /**
     * Checks an extended answer body in the documented order. $exp: host, port, fingerprint
     * (Fingerprint), nonce, now, max_skew, bind_ip, ip (each optional).
     *
     * @param array<string,string> $keys
     * @param array<string,mixed> $exp
     * @return array{verdict: string, detail: string, key_id: string, answered_at: int, target: \stdClass, request: ?\stdClass, member: ?string}
     */
    public static function verifyAnswer(string $raw, array $keys, array $exp): array
    {
        if (strlen($raw) > self::MAX_ANSWER_BYTES || !preg_match(self::FRAME, $raw, $m)) {
            self::reject('malformed', 'answer is not the signed-answer frame');
        }
        [, $kid, $value, $statement] = $m;
        // T ends at the first ,"transparency": (the log's member runs from there to the final })
        $cut = strpos($statement, self::MEMBER);
        $member = $cut === false ? null : substr($statement, $cut + strlen(self::MEMBER));
        $statement = $cut === false ? $statement : substr($statement, 0, $cut);
        $pub = $keys[$kid] ?? null;
        if ($pub === null) {
            self::reject('unknown-key', "signing key {$kid} is not trusted");
        }
        $signature = Bundle::unb64url($value);
        $ok = $signature !== null && strlen($signature) === 64 && strlen($pub) === 32;
        try {
            $ok = $ok && sodium_crypto_sign_verify_detached($signature, $statement, $pub);
        } catch (\SodiumException) {
            $ok = false;
        }
        if (!$ok) {
            self::reject('bad-signature', 'signature does not verify');
        }
        $stmt = Json::verifiedObject($statement);
        if ($stmt === null) {
            self::reject('malformed', 'statement is not a JSON object within the bounds');
        }
        if (Json::get($stmt, 'type') !== Bundle::EXTENDED_FORMAT || Json::get($stmt, 'key_id') !== $kid) {
            self::reject('malformed', 'not a ' . Bundle::EXTENDED_FORMAT . ' statement by key ' . $kid);
        }
        $verdict = Json::get($stmt, 'verdict');
        $target = Json::get($stmt, 'target');
        if (!is_string($verdict) || !isset(self::VERDICT_STATUS[$verdict]) || !$target instanceof \stdClass) {
            self::reject('malformed', 'statement lacks a verdict or target');
        }
        $at = Json::get($stmt, 'answered_at');
        if (!is_int($at)) {
            self::reject('malformed', 'answered_at must be an integer');
        }
        if (($exp['host'] ?? '') !== '') {
            $th = Json::get($target, 'host');
            $tp = Json::get($target, 'port');
            if (!is_string($th) || !is_int($tp) || $th !== self::expectedHost($exp['host']) || $tp !== ($exp['port'] ?? null)) {
                self::reject('wrong-target', "answer is about another target, not {$exp['host']}:" . ($exp['port'] ?? ''));
            }
        }
        if (!empty($exp['bind_ip'])) {
            $tip = Json::get($target, 'ip');
            if (($exp['ip'] ?? '') === '') {
                if ($tip !== null) {
                    self::reject('wrong-target', 'answer is about a probe of an address the client did not name');
                }
            } elseif ($tip !== self::expectedHost($exp['ip'])) {
                self::reject('wrong-target', "answer is about a probe of another address, not {$exp['ip']}");
            }
        }
        $req = Json::get($stmt, 'request');
        $req = $req instanceof \stdClass ? $req : null;
        $fp = $exp['fingerprint'] ?? null;
        if ($fp instanceof Fingerprint && !($req !== null && Json::get($req, 'alg') === $fp->algorithm && Json::get($req, 'fingerprint') === $fp->colonHex())) {
            self::reject('wrong-target', 'answer is about another certificate fingerprint');
        }
        if (($exp['nonce'] ?? '') !== '' && !($req !== null && Json::get($req, 'nonce') === $exp['nonce'])) {
            self::reject('nonce-mismatch', 'answer does not echo our nonce');
        }
        if (isset($exp['now'])) {
            $skew = $exp['max_skew'] ?? self::DEFAULT_MAX_SKEW;
            if (abs($exp['now'] - $at) > $skew) {
                self::reject('stale', 'answer time is ' . ($exp['now'] - $at) . " s from now (max skew {$skew} s)");
            }
        }
        $detail = Json::get($stmt, 'detail');
        return ['verdict' => $verdict, 'detail' => is_string($detail) ? $detail : '', 'key_id' => $kid, 'answered_at' => $at,
            'target' => $target, 'request' => $req, 'member' => $member];
    }

    /** Unpadded base64url of 16 random bytes. */
    public static function newNonce(): string
    {
        return Bundle::b64url(random_bytes(16));
    }

    /** The JSON body of an extended request. */
    public static function requestBody(mixed $host, mixed $port, Fingerprint $fp, string $nonce, ?string $ip = null, bool $transparency = false): string
    {
        Legacy::checkTarget($host, $port);
        $body = '{"host":' . json_encode($host) . ',"port":' . $port . ',"fingerprint":"' . $fp->colonHex() . '","alg":"' . $fp->algorithm . '"';
        if ($ip !== null && $ip !== '') {
            $body .= ',"ip":"' . Legacy::checkIp($ip) . '"';
        }
        if ($nonce !== '') {
            $body .= ',"nonce":"' . $nonce . '"';
        }
        return $body . ($transparency ? ',"transparency":true}' : '}');
    }

    /** The whole HTTP/1.0 request of the extended format. */
    public static function requestBytes(mixed $host, mixed $port, Fingerprint $fp, string $nonce, ?string $ip = null, bool $transparency = false): string
    {
        $body = self::requestBody($host, $port, $fp, $nonce, $ip, $transparency);
        return 'POST ' . self::PATH . " HTTP/1.0\r\nContent-Type: application/json\r\nAccept: " . self::MEDIA_TYPE
            . "\r\nConnection: close\r\nContent-Length: " . strlen($body) . "\r\n\r\n" . $body;
    }

    /** The fingerprint form to ask about: SHA-256 when known, else the first. @param list<Fingerprint> $forms */
    public static function requestFingerprint(array $forms): Fingerprint
    {
        foreach ($forms as $f) {
            if ($f->algorithm === 'sha256') {
                return $f;
            }
        }
        return $forms[0];
    }

    /** Statuses meaning "this notary does not speak the extended format here". */
    public static function notOffered(?int $status): bool
    {
        return in_array($status, [400, 404, 405, 501], true);
    }

    /** Reduces one extended response to a vote. @param array<string,string> $keys @param array<string,mixed> $exp */
    public static function evaluate(HttpResponse $resp, array $keys, array $exp): Outcome
    {
        $ctype = strtolower(trim(explode(';', $resp->headers['content-type'] ?? '')[0]));
        if (!in_array($resp->status, self::VERDICT_STATUS, true) || $ctype !== self::MEDIA_TYPE) {
            return new Outcome('unreachable', 'status', $resp->status, "HTTP status {$resp->status}");
        }
        try {
            $v = self::verifyAnswer($resp->body, $keys, $exp);
        } catch (AnswerRejected $r) {
            return new Outcome('failure', $r->reason, $resp->status, $r->getMessage());
        }
        if (self::VERDICT_STATUS[$v['verdict']] !== $resp->status) {
            return new Outcome('failure', 'response', $resp->status, "status {$resp->status} with signed verdict {$v['verdict']}");
        }
        // a bundle that names a log: a match needs a valid proof of inclusion (docs/transparency.md)
        if (isset($exp['log']) && $v['verdict'] === 'match') {
            try {
                $fp = $exp['fingerprint'] ?? null;
                if (!$fp instanceof Fingerprint) {
                    try {
                        $fp = Fingerprint::parse(Json::get($v['request'], 'fingerprint'));
                    } catch (ConvergeException) {
                        throw new AnswerRejected('log-entry', 'the statement names no fingerprint');
                    }
                }
                Transparency::checkMember($v['member'], $exp['log'], $v['target'], $fp);
            } catch (AnswerRejected $r) {
                return new Outcome('failure', $r->reason, $resp->status, $r->getMessage());
            }
        }
        [$vote, $kind] = self::VOTES[$v['verdict']];
        return new Outcome($vote, $kind, $resp->status, $v['detail'], $resp->body);
    }
}
