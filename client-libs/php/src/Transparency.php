<?php
declare(strict_types=1);

namespace Converge;

/**
 * The notary's transparency log, client side (docs/transparency.md, "Clients"): the bundle's
 * `transparency` member, RFC 6962 hashing with RFC 9162 proof verification, signed-note
 * checkpoints (c2sp.org/signed-note, tlog-checkpoint, tlog-cosignature; Ed25519 by sodium) and
 * the six checks of an answer's member, each failure an AnswerRejected of the kind log-missing,
 * log-proof, log-checkpoint, log-witness or log-entry. Pure: no IO.
 */
final class Transparency
{
    public const MAX_PROOF = 63;
    public const MAX_NOTE = 65536;
    public const MAX_SIGNATURE_LINES = 100;
    public const MAX_WITNESSES = 32;
    public const ENTRY_TYPE = 'converge-observation/1';
    private const SIG_PREFIX = "\u{2014} ";

    /**
     * A signed-note verifier key `<name>+<8 hex key id>+<base64(type || 32-byte key)>`.
     *
     * @return array{name: string, id: string, pub: string}
     * @throws \InvalidArgumentException
     */
    public static function parseVkey(mixed $text, int $type): array
    {
        if (!is_string($text) || strlen($text) > 1024) {
            throw new \InvalidArgumentException('a verifier key is a short string');
        }
        $parts = explode('+', $text, 3);
        if (count($parts) !== 3 || !self::validName($parts[0]) || !preg_match('/\A[0-9a-f]{8}\z/', $parts[1])) {
            throw new \InvalidArgumentException('not <name>+<8 hex>+<base64 key>');
        }
        $raw = Bundle::strictBase64($parts[2]);
        if ($raw === null || strlen($raw) !== 33 || ord($raw[0]) !== $type) {
            throw new \InvalidArgumentException(sprintf('not a type 0x%02x Ed25519 key', $type));
        }
        $weak = Ed25519::weakKey(substr($raw, 1));
        if ($weak !== null) {
            throw new \InvalidArgumentException($weak);
        }
        $id = substr(hash('sha256', $parts[0] . "\n" . $raw, true), 0, 4);
        if (bin2hex($id) !== $parts[1]) {
            throw new \InvalidArgumentException('the key id does not match the key');
        }
        return ['name' => $parts[0], 'id' => $id, 'pub' => substr($raw, 1)];
    }

    private static function validName(string $name): bool
    {
        return $name !== '' && mb_check_encoding($name, 'UTF-8') && !preg_match('/[\s+\p{C}]/u', $name);
    }

    /**
     * The bundle's `transparency` member; throws BundleException.
     *
     * @return array{log: array{name: string, id: string, pub: string}, url: ?string, witnesses: list<array{name: string, id: string, pub: string}>, min: int}
     */
    public static function parsePolicy(mixed $obj): array
    {
        if (!$obj instanceof \stdClass) {
            throw new BundleException('transparency must be an object');
        }
        $unknown = array_diff(array_keys(get_object_vars($obj)), ['log', 'url', 'witnesses', 'min_cosignatures']);
        if ($unknown !== []) {
            throw new BundleException('unknown transparency fields: ' . implode(', ', $unknown));
        }
        try {
            $log = self::parseVkey(Json::get($obj, 'log'), 0x01);
        } catch (\InvalidArgumentException $e) {
            throw new BundleException('transparency log key: ' . $e->getMessage());
        }
        $url = Json::get($obj, 'url');
        if ($url !== null && !(is_string($url) && str_starts_with($url, 'https://') && strlen($url) <= 2048)) {
            throw new BundleException('transparency url must be an https:// URL');
        }
        $ws = Json::has($obj, 'witnesses') ? $obj->witnesses : [];
        if (!is_array($ws) || count($ws) > self::MAX_WITNESSES) {
            throw new BundleException('transparency witnesses must be a list of at most ' . self::MAX_WITNESSES);
        }
        $witnesses = [];
        $seen = [];
        foreach ($ws as $w) {
            $vars = $w instanceof \stdClass ? array_keys(get_object_vars($w)) : [];
            sort($vars);
            if ($vars !== ['name', 'vkey']) {
                throw new BundleException('a witness is an object with name and vkey');
            }
            try {
                $k = self::parseVkey($w->vkey, 0x04);
            } catch (\InvalidArgumentException $e) {
                throw new BundleException('witness key: ' . $e->getMessage());
            }
            if ($w->name !== $k['name']) {
                throw new BundleException('witness name is not its key\'s name');
            }
            if (isset($seen[$k['name'] . "\n" . $k['id']])) {
                throw new BundleException('a witness is listed twice');
            }
            $seen[$k['name'] . "\n" . $k['id']] = true;
            $witnesses[] = $k;
        }
        // One key under two names: a cosignature does not sign the witness's name, so one key
        // would count as two witnesses (or the log would cosign its own checkpoints).
        $raws = array_map(static fn (array $k): string => $k['pub'], [$log, ...$witnesses]);
        if (count(array_unique($raws)) !== count($raws)) {
            throw new BundleException('transparency names one key twice (two witnesses, or a witness and the log)');
        }
        $need = Json::has($obj, 'min_cosignatures') ? $obj->min_cosignatures : 0;
        if (!is_int($need) || $need < 0 || $need > count($witnesses)) {
            throw new BundleException('min_cosignatures must be an integer from 0 to ' . count($witnesses));
        }
        return ['log' => $log, 'url' => $url, 'witnesses' => $witnesses, 'min' => $need];
    }

    public static function leafHash(string $entry): string
    {
        return hash('sha256', "\x00" . $entry, true);
    }

    private static function node(string $l, string $r): string
    {
        return hash('sha256', "\x01" . $l . $r, true);
    }

    /** RFC 6962 2.1: the root of the leaf hashes. @param list<string> $leaves */
    public static function treeRoot(array $leaves): string
    {
        $n = count($leaves);
        if ($n === 0) {
            return hash('sha256', '', true);
        }
        if ($n === 1) {
            return $leaves[0];
        }
        $k = 1;
        while ($k * 2 < $n) {
            $k *= 2;
        }
        return self::node(self::treeRoot(array_slice($leaves, 0, $k)), self::treeRoot(array_slice($leaves, $k)));
    }

    /** RFC 9162 2.1.3.2. @param list<string> $proof */
    public static function verifyInclusion(string $leaf, int $index, int $size, array $proof, string $root): bool
    {
        if ($index < 0 || $index >= $size) {
            return false;
        }
        foreach ($proof as $p) {
            if (strlen($p) !== 32) {
                return false;
            }
        }
        [$fn, $sn, $r] = [$index, $size - 1, $leaf];
        foreach ($proof as $p) {
            if ($sn === 0) {
                return false;
            }
            if (($fn & 1) || $fn === $sn) {
                $r = self::node($p, $r);
                while (!($fn & 1) && $fn) {
                    $fn >>= 1;
                    $sn >>= 1;
                }
            } else {
                $r = self::node($r, $p);
            }
            $fn >>= 1;
            $sn >>= 1;
        }
        return $sn === 0 && hash_equals($root, $r);
    }

    /** RFC 9162 2.1.4.2. @param list<string> $proof */
    public static function verifyConsistency(int $old, int $new, string $oldRoot, string $newRoot, array $proof): bool
    {
        if ($old < 0 || $old > $new) {
            return false;
        }
        foreach ($proof as $p) {
            if (strlen($p) !== 32) {
                return false;
            }
        }
        if ($old === $new || $old === 0) {
            return $proof === [] && ($old !== $new || $oldRoot === $newRoot);
        }
        $path = ($old & ($old - 1)) === 0 ? [$oldRoot, ...$proof] : $proof;
        if ($path === []) {
            return false;
        }
        [$fn, $sn] = [$old - 1, $new - 1];
        while ($fn & 1) {
            $fn >>= 1;
            $sn >>= 1;
        }
        $fr = $sr = $path[0];
        foreach (array_slice($path, 1) as $c) {
            if ($sn === 0) {
                return false;
            }
            if (($fn & 1) || $fn === $sn) {
                [$fr, $sr] = [self::node($c, $fr), self::node($c, $sr)];
                while (!($fn & 1) && $fn) {
                    $fn >>= 1;
                    $sn >>= 1;
                }
            } else {
                $sr = self::node($sr, $c);
            }
            $fn >>= 1;
            $sn >>= 1;
        }
        return $sn === 0 && $fr === $oldRoot && $sr === $newRoot;
    }

    private static function ed25519(string $pub, string $sig, string $msg): bool
    {
        try {
            return strlen($sig) === 64 && sodium_crypto_sign_verify_detached($sig, $msg, $pub);
        } catch (\SodiumException) {
            return false;
        }
    }

    /**
     * 1 when the key signed (its first line verifies), 0 without a line; -1 when it fails.
     *
     * @param array{name: string, id: string, pub: string} $key @param list<array{string, string}> $sigs
     */
    private static function signedBy(array $key, array $sigs, string $text, bool $cosig): int
    {
        foreach ($sigs as [$name, $raw]) {
            if ($name !== $key['name'] || substr($raw, 0, 4) !== $key['id']) {
                continue;
            }
            $sig = substr($raw, 4);
            if (!$cosig) {
                return self::ed25519($key['pub'], $sig, $text) ? 1 : -1;
            }
            if (strlen($sig) !== 72) {
                return -1;
            }
            $t = unpack('J', substr($sig, 0, 8))[1];
            $time = $t < 0 ? sprintf('%u', $t) : (string) $t;
            return self::ed25519($key['pub'], substr($sig, 8), "cosignature/v1\ntime {$time}\n" . $text) ? 1 : -1;
        }
        return 0;
    }

    /**
     * Steps 3 and 4: the checkpoint signed by the log and cosigned by enough witnesses.
     *
     * @param array{log: array{name: string, id: string, pub: string}, witnesses: list<array{name: string, id: string, pub: string}>, min: int} $policy
     * @return array{size: int, root: string, cosigned: int}
     * @throws AnswerRejected
     */
    public static function openCheckpoint(mixed $note, array $policy): array
    {
        $bad = static fn (string $m): never => throw new AnswerRejected('log-checkpoint', "checkpoint: {$m}");
        if (!is_string($note) || strlen($note) > self::MAX_NOTE || !mb_check_encoding($note, 'UTF-8')) {
            $bad('not a UTF-8 note of at most ' . self::MAX_NOTE . ' bytes');
        }
        if (preg_match('/[\x00-\x09\x0b-\x1f\x7f-\x{9f}]/u', $note)) {
            $bad('control character in the note');
        }
        $cut = strrpos($note, "\n\n");
        if ($cut === false || !str_ends_with($note, "\n")) {
            $bad('not a signed note');
        }
        $text = substr($note, 0, $cut + 1);
        $lines = explode("\n", substr($note, $cut + 2, -1));
        if (count($lines) > self::MAX_SIGNATURE_LINES) {
            $bad('too many signature lines');
        }
        $sigs = [];
        foreach ($lines as $line) {
            $rest = str_starts_with($line, self::SIG_PREFIX) ? substr($line, strlen(self::SIG_PREFIX)) : '';
            $parts = explode(' ', $rest, 2);
            if (count($parts) !== 2 || !self::validName($parts[0])) {
                $bad('malformed signature line');
            }
            $raw = Bundle::strictBase64($parts[1]);
            if ($raw === null || strlen($raw) < 5) {
                $bad('a signature is not base64 of a key id and a signature');
            }
            $sigs[] = [$parts[0], $raw];
        }
        $tl = explode("\n", substr($text, 0, -1));
        if (count($tl) < 3 || in_array('', $tl, true)) {
            $bad('a checkpoint has origin, size and root lines');
        }
        if (!preg_match('/\A(?:0|[1-9][0-9]{0,18})\z/', $tl[1]) || (strlen($tl[1]) === 19 && $tl[1] > '9223372036854775807')) {
            $bad('size is not a decimal without leading zeros');
        }
        $root = Bundle::strictBase64($tl[2]);
        if ($root === null || strlen($root) !== 32) {
            $bad('root is not 32 bytes');
        }
        if ($tl[0] !== $policy['log']['name']) {
            $bad("origin is not the log's name");
        }
        $r = self::signedBy($policy['log'], $sigs, $text, false);
        if ($r !== 1) {
            $bad($r < 0 ? "the log's signature does not verify" : "no signature by the log's key");
        }
        $cosigned = 0;
        foreach ($policy['witnesses'] as $w) {
            $r = self::signedBy($w, $sigs, $text, true);
            if ($r < 0) {
                throw new AnswerRejected('log-witness', "checkpoint: the cosignature of {$w['name']} does not verify");
            }
            $cosigned += $r;
        }
        if ($cosigned < $policy['min']) {
            throw new AnswerRejected('log-witness', "checkpoint cosigned by {$cosigned} of the bundle's witnesses, {$policy['min']} required");
        }
        return ['size' => (int) $tl[1], 'root' => $root, 'cosigned' => $cosigned];
    }

    private static function same(mixed $a, mixed $b): bool
    {
        return $a === $b;
    }

    /**
     * The six checks of an answer's member ($member: its raw bytes, null when absent) for the
     * statement's target and the fingerprint asked about.
     *
     * @param array{log: array{name: string, id: string, pub: string}, witnesses: list<array{name: string, id: string, pub: string}>, min: int} $policy
     * @return array{index: int, size: int, root: string, cosigned: int}
     * @throws AnswerRejected
     */
    public static function checkMember(?string $member, array $policy, mixed $target, Fingerprint $fp): array
    {
        if ($member === null) {
            throw new AnswerRejected('log-missing', 'the answer carries no proof of inclusion in the log');
        }
        $obj = Json::verifiedObject($member);
        $index = Json::get($obj, 'index');
        $proof = Json::get($obj, 'proof');
        $shaped = $obj !== null && is_string(Json::get($obj, 'checkpoint')) && is_string(Json::get($obj, 'entry'))
            && is_int($index) && $index >= 0 && is_array($proof) && count($proof) <= self::MAX_PROOF;
        foreach ($shaped ? $proof : [] as $p) {
            $shaped = $shaped && is_string($p);
        }
        if (!$shaped) {
            throw new AnswerRejected('log-proof', 'transparency member lacks checkpoint, entry, index or proof');
        }
        $ck = self::openCheckpoint($obj->checkpoint, $policy);
        $raw = Bundle::strictBase64($obj->entry);
        $entry = $raw === null ? null : Json::verifiedObject($raw);
        if ($entry === null || Json::get($entry, 'type') !== self::ENTRY_TYPE) {
            throw new AnswerRejected('log-entry', 'the logged entry is not base64 of a ' . self::ENTRY_TYPE . ' object');
        }
        foreach (['host', 'port', 'ip'] as $k) {
            if (!self::same(Json::get($entry, $k), Json::get($target, $k))) {
                throw new AnswerRejected('log-entry', "the logged entry's {$k} is not the statement's");
            }
        }
        if (Json::get($entry, $fp->algorithm) !== $fp->colonHex()) {
            throw new AnswerRejected('log-entry', 'the logged entry is about another certificate');
        }
        $hashes = [];
        foreach ($proof as $p) {
            $h = Bundle::strictBase64($p);
            if ($h === null || strlen($h) !== 32) {
                throw new AnswerRejected('log-proof', 'inclusion proof: a hash is not 32 bytes in base64');
            }
            $hashes[] = $h;
        }
        if (!self::verifyInclusion(self::leafHash($raw), $index, $ck['size'], $hashes, $ck['root'])) {
            throw new AnswerRejected('log-proof', "inclusion proof does not put the entry at {$index} in the tree of {$ck['size']}");
        }
        return ['index' => $index] + $ck;
    }
}
