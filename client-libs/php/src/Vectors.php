<?php
declare(strict_types=1);

namespace Converge;

/** The shared test vectors through this library: runCase() gives this implementation's output. */
final class Vectors
{
    public const SCHEMAS = ['converge-vectors/fingerprints/1', 'converge-vectors/requests/1', 'converge-vectors/legacy-signatures/1',
        'converge-vectors/notary-responses/1', 'converge-vectors/bundles/1', 'converge-vectors/consensus/1',
        'converge-vectors/cache/1', 'converge-vectors/extended-answers/1', 'converge-vectors/config/1',
        'converge-vectors/transparency/1'];
    public const COMPARED = ['result', 'error', 'kind', 'algorithm', 'canonical', 'request', 'signed_bytes', 'name', 'version', 'hosts', 'verdict', 'extended', 'enabled'];

    /**
     * The fields compared for a case: COMPARED, and the outputs of the transparency case types
     * (a tree's root, a checkpoint's size and root; inputs of the other types).
     *
     * @param array<string,mixed> $c @return list<string>
     */
    public static function compared(array $c): array
    {
        return [...self::COMPARED, ...match ($c['type'] ?? null) {
            'tree' => ['root'], 'checkpoint' => ['size', 'root'], default => [],
        }];
    }

    /** @param array<string,mixed> $c */
    private static function bytes(array $c, string $name): string
    {
        if (is_string($c["{$name}_hex"] ?? null)) {
            return hex2bin($c["{$name}_hex"]);
        }
        if (!is_string($c[$name] ?? null)) {
            throw new \InvalidArgumentException("case has no {$name}");
        }
        return $c[$name];
    }

    /** @param array<string,mixed> $doc */
    private static function certificate(array $doc, string $name): string
    {
        $der = Bundle::pemToDer($doc['certificates'][$name] ?? '');
        if ($der === null) {
            throw new \InvalidArgumentException("certificate {$name} missing");
        }
        return $der;
    }

    /**
     * This implementation's output for one case of a vector file ($doc: the whole file, decoded
     * as arrays).
     *
     * @param array<string,mixed> $doc @param array<string,mixed> $c @return array<string,mixed>
     */
    public static function runCase(array $doc, array $c): array
    {
        $out = ['id' => $c['id'] ?? null];
        try {
            switch ($doc['schema'] ?? '') {
                case 'converge-vectors/fingerprints/1':
                    $fp = Fingerprint::parse($c['input'] ?? null);
                    return $out + ['result' => 'valid', 'algorithm' => $fp->algorithm, 'canonical' => $fp->colonHex()];
                case 'converge-vectors/requests/1':
                    $fp = Fingerprint::parse($c['fingerprint'] ?? null);
                    return $out + ['result' => 'valid', 'request' => Legacy::requestBytes($c['host'] ?? null, $c['port'] ?? null, $fp, $c['ip'] ?? null)];
                case 'converge-vectors/legacy-signatures/1':
                    $s = Legacy::splitSignedBody(self::bytes($c, 'body'));
                    Legacy::verifySigned($s['signed'], $s['signature'], self::certificate($doc, $c['certificate']));
                    Legacy::parseSignedList($s['signed']);
                    return $out + ['result' => 'valid', 'signed_bytes' => $s['signed']];
                case 'converge-vectors/notary-responses/1':
                    $wanted = array_map([Fingerprint::class, 'parse'], $c['fingerprints'] ?? []);
                    [$o] = Legacy::outcomeFromHttp(self::bytes($c, 'raw'), $wanted, self::certificate($doc, $c['certificate']));
                    return $out + ['result' => $o->vote, 'kind' => $o->kind];
                case 'converge-vectors/bundles/1':
                    $b = Bundle::parse(self::bytes($c, 'bundle'));
                    return $out + ['result' => 'valid', 'name' => $b->name, 'version' => $b->version, 'hosts' => array_map(
                        static fn (NotaryHost $h) => ['host' => $h->host, 'ssl_port' => $h->sslPort, 'http_port' => $h->httpPort, 'pin' => $h->pin->colonHex()],
                        $b->hosts,
                    )];
                case 'converge-vectors/consensus/1':
                    $policy = Policy::parse($c['policy'] ?? '');
                    $aside = ($c['stand_aside'] ?? false) === true;
                    $pending = $c['pending'] ?? 0;
                    if ($pending > 0) {
                        $v = Policy::settled($policy, $c['votes'] ?? [], $pending, $aside);
                        return $out + ['result' => $v === null ? 'unsettled' : ($v ? 'trusted' : 'untrusted')];
                    }
                    return $out + ['result' => Policy::decide($policy, $c['votes'] ?? [], $aside) ? 'trusted' : 'untrusted'];
                case 'converge-vectors/cache/1':
                    $l = $c['lifetime'] ?? null;
                    return $out + ['result' => Policy::cacheDecision($c['timestamp'] ?? null, (float) $c['now'], $l === null ? null : (float) $l)];
                case 'converge-vectors/extended-answers/1':
                    return self::extended($doc, $c, $out);
                case 'converge-vectors/config/1':
                    return $out + ['result' => 'valid', 'enabled' => self::config($c)];
                case 'converge-vectors/transparency/1':
                    return $out + self::transparency($doc, $c);
                default:
                    throw new \InvalidArgumentException('unknown vector schema ' . json_encode($doc['schema'] ?? null));
            }
        } catch (ConvergeException $e) {
            return $out + ['result' => 'invalid', 'error' => $e->getKind()];
        }
    }

    /** @return list<string> */
    private static function config(array $c): array
    {
        $root = sys_get_temp_dir() . '/converge-vector-' . bin2hex(random_bytes(6));
        mkdir($root);
        try {
            foreach ($c['files'] ?? [] as $rel => $text) {
                @mkdir(dirname("{$root}/{$rel}"), 0o755, true);
                file_put_contents("{$root}/{$rel}", $text);
            }
            foreach ($c['links'] ?? [] as $rel => $target) {
                @mkdir(dirname("{$root}/{$rel}"), 0o755, true);
                symlink($target, "{$root}/{$rel}");
            }
            $names = array_map(static fn (Bundle $b) => $b->name, Config::load($root, [])->notaries());
            sort($names, SORT_STRING);
            return $names;
        } finally {
            exec('rm -rf ' . escapeshellarg($root));
        }
    }

    /** @param list<mixed> $list @return ?list<string> */
    private static function hashes(mixed $list): ?array
    {
        $out = [];
        foreach (is_array($list) ? $list : [null] as $t) {
            $h = is_string($t) ? Bundle::strictBase64($t) : null;
            if ($h === null || strlen($h) !== 32) {
                return null;
            }
            $out[] = $h;
        }
        return $out;
    }

    /** converge-vectors/transparency/1: tree, inclusion, consistency, checkpoint, answer. */
    private static function transparency(array $doc, array $c): array
    {
        switch ($c['type'] ?? '') {
            case 'tree':
                $leaves = array_map(static fn ($e) => Transparency::leafHash((string) base64_decode($e, true)),
                    array_slice($doc['entries'], 0, $c['size']));
                return ['result' => 'valid', 'root' => base64_encode(Transparency::treeRoot($leaves))];
            case 'inclusion':
                $h = self::hashes([$c['leaf'] ?? null, $c['root'] ?? null]);
                $p = self::hashes($c['proof'] ?? null);
                $ok = $h !== null && $p !== null && Transparency::verifyInclusion($h[0], $c['index'], $c['size'], $p, $h[1]);
                return ['result' => $ok ? 'valid' : 'invalid'];
            case 'consistency':
                $h = self::hashes([$c['old_root'] ?? null, $c['new_root'] ?? null]);
                $p = self::hashes($c['proof'] ?? null);
                $ok = $h !== null && $p !== null && Transparency::verifyConsistency($c['old_size'], $c['new_size'], $h[0], $h[1], $p);
                return ['result' => $ok ? 'valid' : 'invalid'];
            case 'checkpoint':
                $policy = ['log' => Transparency::parseVkey($c['log'], 0x01),
                    'witnesses' => array_map(static fn ($w) => Transparency::parseVkey($w, 0x04), $c['witnesses']),
                    'min' => $c['min_cosignatures']];
                try {
                    $ck = Transparency::openCheckpoint($c['checkpoint'], $policy);
                } catch (AnswerRejected $r) {
                    return ['result' => 'invalid', 'kind' => $r->reason];
                }
                return ['result' => 'valid', 'size' => $ck['size'], 'root' => base64_encode($ck['root'])];
            case 'answer':
                $exp = $c['expect'];
                $fp = Fingerprint::parse($exp['sha256'] ?? $exp['sha1'] ?? null);
                $member = $c['transparency'] === null ? null : json_encode($c['transparency'], JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
                $policy = Transparency::parsePolicy(Json::parse(json_encode($c['bundle'])));
                $target = (object) ['host' => $exp['host'], 'port' => $exp['port'], 'ip' => $exp['ip'] ?? null];
                try {
                    Transparency::checkMember($member, $policy, $target, $fp);
                } catch (AnswerRejected $r) {
                    return ['result' => 'rejected', 'kind' => $r->reason];
                }
                return ['result' => 'valid'];
            default:
                throw new \InvalidArgumentException('unknown transparency case type ' . json_encode($c['type'] ?? null));
        }
    }

    private static function extended(array $doc, array $c, array $out): array
    {
        switch ($c['type'] ?? '') {
            case 'bundle':
                try {
                    return $out + ['result' => 'valid', 'extended' => Bundle::parse(self::bytes($c, 'bundle'))->offersExtended()];
                } catch (ConvergeException $e) {
                    return $out + ['result' => 'invalid', 'kind' => $e->getKind()];
                }
            case 'answer':
                $exp = $c['expect'] ?? [];
                $entries = array_map(static fn ($n) => $doc['signing_keys'][$n] ?? null, $c['bundle_keys'] ?? []);
                $keys = Bundle::parseSigningKeys(Json::parse(json_encode($entries)));
                $now = $exp['now'] ?? 0;
                $e = ['host' => $exp['host'] ?? '', 'port' => $exp['port'] ?? null, 'nonce' => $exp['nonce'] ?? '', 'now' => $now,
                    'max_skew' => $exp['max_skew'] ?? Extended::DEFAULT_MAX_SKEW, 'bind_ip' => array_key_exists('ip', $exp), 'ip' => $exp['ip'] ?? ''];
                if (is_string($exp['fingerprint'] ?? null)) {
                    $e['fingerprint'] = Fingerprint::parse($exp['fingerprint']);
                }
                try {
                    $v = Extended::verifyAnswer(self::bytes($c, 'answer'), Extended::trustedKeys($keys, $now), $e);
                    return $out + ['result' => 'valid', 'verdict' => $v['verdict']];
                } catch (AnswerRejected $r) {
                    return $out + ['result' => 'rejected', 'kind' => $r->reason];
                }
            default:
                throw new \InvalidArgumentException('unknown case type ' . json_encode($c['type'] ?? null));
        }
    }
}
