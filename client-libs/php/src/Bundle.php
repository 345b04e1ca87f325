<?php
declare(strict_types=1);

namespace Converge;

/** One logical notary (an organisation), parsed from a .notary file (v1, or the v0 form). */
final class Bundle
{
    public const EXTENDED_FORMAT = 'converge-answer/1';
    public const LEGACY_FORMAT = 'convergence-v1';
    public const MAX_BYTES = 65536;
    public const MAX_HOSTS = 16;
    public const MAX_SIGNING_KEYS = 8;
    public const HOST_RE = '/\A[A-Za-z0-9._:-]{1,253}\z/';
    private const PEM_RE = '/\A[\t\n\f\r ]*-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+\/=\r\n]+)-----END CERTIFICATE-----[\t\n\f\r ]*\z/';

    /** @param list<NotaryHost> $hosts @param list<string> $protocols @param list<SigningKey> $signingKeys */
    public function __construct(
        public readonly string $name,
        public readonly int $version,
        public readonly array $hosts,
        public readonly ?string $bundleLocation = null,
        public readonly ?string $region = null,
        public readonly array $protocols = [],
        public readonly array $signingKeys = [],
        /** The notary's transparency log (Transparency::parsePolicy), or null. @var ?array<string,mixed> */
        public readonly ?array $transparency = null,
    ) {
    }

    /** Whether the bundle advertises converge-answer/1 and carries its signing keys. */
    public function offersExtended(): bool
    {
        return in_array(self::EXTENDED_FORMAT, $this->protocols, true) && $this->signingKeys !== [];
    }

    /** Standard base64 with padding (alphabet and padding checked, trailing bits not), or null. */
    public static function strictBase64(string $text): ?string
    {
        if (strlen($text) % 4 !== 0 || !preg_match('/\A[A-Za-z0-9+\/]*(?:[A-Za-z0-9+\/]{2}==|[A-Za-z0-9+\/]{3}=)?\z/', $text)) {
            return null;
        }
        $b = base64_decode($text, true);
        return $b === false ? null : $b;
    }

    /** Unpadded base64url (trailing bits not checked), or null. */
    public static function unb64url(mixed $text): ?string
    {
        if (!is_string($text) || strlen($text) % 4 === 1 || !preg_match('/\A[A-Za-z0-9_-]*\z/', $text)) {
            return null;
        }
        $b = base64_decode(strtr($text, '-_', '+/') . str_repeat('=', (4 - strlen($text) % 4) % 4), true);
        return $b === false ? null : $b;
    }

    public static function b64url(string $bytes): string
    {
        return rtrim(strtr(base64_encode($bytes), '+/', '-_'), '=');
    }

    /** The PEM of DER bytes. */
    public static function pem(string $der): string
    {
        return "-----BEGIN CERTIFICATE-----\n" . chunk_split(base64_encode($der), 64, "\n") . "-----END CERTIFICATE-----\n";
    }

    /** Whether DER bytes are exactly one certificate (OpenSSL reads it, nothing after it). */
    public static function certificateParses(string $der): bool
    {
        $x = @openssl_x509_read(self::pem($der));
        if ($x === false) {
            return false;
        }
        openssl_x509_export($x, $out);
        return Bundle::pemToDer($out) === $der;
    }

    /** The DER of a PEM public key (SubjectPublicKeyInfo). */
    public static function pemToDerKey(string $pem): string
    {
        return (string) base64_decode(preg_replace('/-----[^-]+-----|\s+/', '', $pem), true);
    }

    public static function pemToDer(string $pem): ?string
    {
        if (!preg_match('/-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----/s', $pem, $m)) {
            return null;
        }
        $b = base64_decode(preg_replace('/\s+/', '', $m[1]), true);
        return $b === false ? null : $b;
    }

    private static function port(mixed $obj, string $key): int
    {
        $n = Json::get($obj, $key);
        if (!is_int($n) || $n < 1 || $n > 65535) {
            throw new BundleException("{$key} must be an integer port 1..65535");
        }
        return $n;
    }

    private static function parseHost(mixed $v): NotaryHost
    {
        if (!$v instanceof \stdClass) {
            throw new BundleException('a host entry must be an object');
        }
        $host = Json::get($v, 'host');
        if (!is_string($host) || !preg_match(self::HOST_RE, $host)) {
            throw new BundleException('host must be a DNS name or an IP address');
        }
        $pem = Json::get($v, 'certificate');
        if (!is_string($pem) || !preg_match(self::PEM_RE, $pem, $m)) {
            throw new BundleException("certificate of {$host} is not one PEM certificate");
        }
        $der = self::strictBase64(str_replace(["\r", "\n"], '', $m[1]));
        if ($der === null || !self::certificateParses($der)) {
            throw new BundleException("certificate of {$host} does not parse");
        }
        return new NotaryHost($host, self::port($v, 'ssl_port'), self::port($v, 'http_port'), $pem, $der, Fingerprint::of($der));
    }

    /** The key id of a raw Ed25519 public key: the first 8 bytes of its SHA-256, lower-case hex. */
    public static function keyIdOf(string $raw): string
    {
        return bin2hex(substr(hash('sha256', $raw, true), 0, 8));
    }

    private static function parseSigningKey(mixed $k): SigningKey
    {
        if (!$k instanceof \stdClass) {
            throw new BundleException('a signing key entry must be an object');
        }
        foreach (array_keys(get_object_vars($k)) as $name) {
            if (!in_array((string) $name, ['alg', 'key_id', 'public_key', 'status', 'valid_until'], true)) {
                throw new BundleException('unknown signing key field ' . json_encode((string) $name));
            }
        }
        if (Json::get($k, 'alg') !== 'ed25519') {
            throw new BundleException('signing key alg must be ed25519');
        }
        $raw = self::unb64url(Json::get($k, 'public_key'));
        if ($raw === null) {
            throw new BundleException('signing key public_key must be unpadded base64url');
        }
        if (strlen($raw) !== 32) {
            throw new BundleException('an Ed25519 public key has 32 bytes');
        }
        $weak = Ed25519::weakKey($raw);
        if ($weak !== null) {
            throw new BundleException('signing key: ' . $weak);
        }
        $kid = Json::get($k, 'key_id');
        if ($kid !== self::keyIdOf($raw)) {
            throw new BundleException('signing key id ' . json_encode($kid) . ' does not match its public key');
        }
        $until = Json::get($k, 'valid_until');
        return match (Json::get($k, 'status')) {
            'current' => $until === null ? new SigningKey($kid, $raw, true, 0)
                : throw new BundleException('a current signing key has no valid_until'),
            'retired' => is_int($until) && $until > 0 && $until <= Json::MAX_SAFE_INTEGER ? new SigningKey($kid, $raw, false, $until)
                : throw new BundleException('a retired signing key needs valid_until (unix seconds)'),
            default => throw new BundleException('signing key status must be current or retired'),
        };
    }

    /** Parses a list of signing key entries (a bundle's signing_keys). @return list<SigningKey> */
    public static function parseSigningKeys(mixed $v): array
    {
        if (!is_array($v) || $v === []) {
            throw new BundleException('signing_keys must be a non-empty list');
        }
        if (count($v) > self::MAX_SIGNING_KEYS) {
            throw new BundleException('more than ' . self::MAX_SIGNING_KEYS . ' signing keys');
        }
        $out = [];
        foreach ($v as $x) {
            $k = self::parseSigningKey($x);
            foreach ($out as $o) {
                if ($o->keyId === $k->keyId) {
                    throw new BundleException('signing key ids repeat');
                }
            }
            $out[] = $k;
        }
        if (count(array_filter($out, static fn (SigningKey $k) => $k->current)) !== 1) {
            throw new BundleException('signing_keys must hold exactly one current key');
        }
        return $out;
    }

    /** Parses and validates a .notary file. @throws BundleException */
    public static function parse(string $data): self
    {
        if (strlen($data) > self::MAX_BYTES) {
            throw new BundleException('bundle larger than ' . self::MAX_BYTES . ' bytes');
        }
        $obj = Json::parse($data);
        if (!$obj instanceof \stdClass || $obj === Json::invalid()) {
            throw new BundleException('bundle is not a JSON object');
        }
        $version = 0;
        if (Json::has($obj, 'version')) {
            $v = $obj->version;
            if (!((is_int($v) || is_float($v)) && ($v == 0 || $v == 1))) {
                throw new BundleException('unsupported bundle version');
            }
            $version = (int) $v;
        }
        if ($version === 0) {
            $h = self::parseHost($obj);
            return new self($h->host, 0, [$h]);
        }
        $name = Json::get($obj, 'name');
        if (!is_string($name) || trim($name) === '' || mb_strlen($name, 'UTF-8') > 200) {
            throw new BundleException('name must be a non-empty string');
        }
        $hosts = Json::get($obj, 'hosts');
        if (!is_array($hosts) || $hosts === []) {
            throw new BundleException('hosts must be a non-empty list');
        }
        if (count($hosts) > self::MAX_HOSTS) {
            throw new BundleException('more than ' . self::MAX_HOSTS . ' hosts');
        }
        $loc = Json::get($obj, 'bundle_location');
        if ($loc !== null && !(is_string($loc) && str_starts_with($loc, 'https://') && str_ends_with($loc, '.notary') && mb_strlen($loc, 'UTF-8') <= 2048)) {
            throw new BundleException('bundle_location must be an https:// URL ending in .notary');
        }
        $region = Json::get($obj, 'region');
        if ($region !== null && !(is_string($region) && preg_match('/\A[A-Za-z]{2}\z/', $region))) {
            throw new BundleException('region must be an ISO-3166 alpha-2 code');
        }
        $parsed = array_map([self::class, 'parseHost'], $hosts);
        $protocols = [];
        if (Json::has($obj, 'protocols')) {
            $p = $obj->protocols;
            if (!is_array($p) || count($p) > 16) {
                throw new BundleException('protocols must be a list of at most 16 strings');
            }
            foreach ($p as $x) {
                if (!is_string($x) || mb_strlen($x, 'UTF-8') < 1 || mb_strlen($x, 'UTF-8') > 64) {
                    throw new BundleException('protocols must be a list of short strings');
                }
                $protocols[] = $x;
            }
        }
        $keys = Json::has($obj, 'signing_keys') ? self::parseSigningKeys($obj->signing_keys) : [];
        if (in_array(self::EXTENDED_FORMAT, $protocols, true) && $keys === []) {
            throw new BundleException('protocols lists ' . self::EXTENDED_FORMAT . ' but the bundle has no signing_keys');
        }
        $log = Json::has($obj, 'transparency') ? Transparency::parsePolicy($obj->transparency) : null;
        return new self($name, 1, $parsed, $loc, $region === null ? null : strtoupper($region), $protocols, $keys, $log);
    }
}
