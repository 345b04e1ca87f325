<?php
declare(strict_types=1);

namespace Converge;

/**
 * The configuration directory shared by every converge client. Discovery: an explicit
 * directory (must exist); $CONVERGE_CONFIG_DIR (must exist when set); ~/.config/converge
 * ($XDG_CONFIG_HOME/converge), if it exists; /usr/local/etc/converge, if it exists. Layout:
 * converge.config (JSON, every key optional), notaries-available/*.notary and
 * notaries-enabled/ symlinks; the 2014 layout (notaries-dir naming the enabled folder) too.
 */
final class Config
{
    public const CONFIG_FILE = 'converge.config';
    public const ENV_VAR = 'CONVERGE_CONFIG_DIR';
    public const SYSTEM_DIR = '/usr/local/etc/converge';
    public const DEFAULT_CACHE_LIFETIME = 604800;
    private const MAX_CONFIG_BYTES = 65536;
    private const MAX_NOTARY_FILES = 64;
    private const KNOWN = ['db', 'userdb', 'notaries-dir', 'notary-agreement', 'quorum', 'connect-timeout', 'notary-timeout',
        'total-timeout', 'cache-lifetime', 'stand-aside', 'early-return', 'bounce', 'bounce-port', 'max-response-bytes',
        'extended', 'extended-nonce', 'max-skew'];

    public ?string $directory = null;
    public ?string $db = null;
    public ?string $userDb = null;
    public ?string $notariesDir = null;
    public string $agreement = 'majority';
    public int $quorum = 3;
    public float $connectTimeout = 3.0;
    public float $notaryTimeout = 5.0;
    public float $totalTimeout = 10.0;
    public ?float $cacheLifetime = self::DEFAULT_CACHE_LIFETIME;
    public bool $standAside = true;
    public bool $earlyReturn = true;
    public int $maxResponseBytes = Legacy::MAX_RESPONSE_BYTES;
    public bool $bounce = false;
    public int $bouncePort = 4242;
    public string $extended = 'prefer';
    public bool $extendedNonce = true;
    public int $maxSkew = Extended::DEFAULT_MAX_SKEW;
    /** @var list<Bundle>|null used instead of notariesDir when set */
    public ?array $bundles = null;

    /** Finds the configuration directory ($explicit may be null). @param array<string,string|false> $env */
    public static function discover(?string $explicit = null, ?array $env = null): string
    {
        $get = static fn (string $k) => $env === null ? getenv($k) : ($env[$k] ?? false);
        if ($explicit !== null && $explicit !== '') {
            if (!is_dir($explicit)) {
                throw new ConfigException("configuration directory {$explicit} does not exist");
            }
            return $explicit;
        }
        $d = $get(self::ENV_VAR);
        if (is_string($d) && $d !== '') {
            if (!is_dir($d)) {
                throw new ConfigException('$' . self::ENV_VAR . "={$d} is not a directory");
            }
            return $d;
        }
        $xdg = $get('XDG_CONFIG_HOME');
        $user = is_string($xdg) && $xdg !== '' ? "{$xdg}/converge" : (($get('HOME') ?: '') . '/.config/converge');
        foreach ([$user, self::SYSTEM_DIR] as $x) {
            if (is_dir($x)) {
                return $x;
            }
        }
        throw new ConfigException('no configuration: set $' . self::ENV_VAR . ", or create {$user} or " . self::SYSTEM_DIR);
    }

    private static function number(\stdClass $raw, string $key, float $default, float $low, float $high): float
    {
        if (!property_exists($raw, $key)) {
            return $default;
        }
        $v = $raw->{$key};
        if (!(is_int($v) || is_float($v)) || is_nan((float) $v) || $v < $low || $v > $high) {
            throw new ConfigException("{$key} must be a number in [{$low}, {$high}]");
        }
        return (float) $v;
    }

    private static function int(\stdClass $raw, string $key, int $default, int $low, int $high, string $what): int
    {
        if (!property_exists($raw, $key)) {
            return $default;
        }
        $v = $raw->{$key};
        if (!is_int($v) || $v < $low || $v > $high) {
            throw new ConfigException("{$key} must be {$what}");
        }
        return $v;
    }

    private static function bool(\stdClass $raw, string $key, bool $default): bool
    {
        if (!property_exists($raw, $key)) {
            return $default;
        }
        if (!is_bool($raw->{$key})) {
            throw new ConfigException("{$key} must be true or false");
        }
        return $raw->{$key};
    }

    private static function path(string $dir, \stdClass $raw, string $key, ?string $default): ?string
    {
        if (!property_exists($raw, $key)) {
            return $default === null ? null : "{$dir}/{$default}";
        }
        $v = $raw->{$key};
        if ($v === null) {
            return null;
        }
        if (!is_string($v) || $v === '') {
            throw new ConfigException("{$key} must be a path");
        }
        if ($v === '~' || str_starts_with($v, '~/')) {
            $v = (getenv('HOME') ?: '') . substr($v, 1);
        }
        return str_starts_with($v, '/') ? $v : "{$dir}/{$v}";
    }

    /** Validates the decoded converge.config of $dir. */
    public static function fromRaw(string $dir, \stdClass $raw): self
    {
        $unknown = array_values(array_diff(array_map('strval', array_keys(get_object_vars($raw))), self::KNOWN));
        if ($unknown !== []) {
            sort($unknown);
            throw new ConfigException('unknown configuration keys: ' . implode(', ', $unknown));
        }
        $c = new self();
        $c->directory = $dir;
        $c->bouncePort = self::int($raw, 'bounce-port', 4242, 1, 65535, 'an integer port 1..65535');
        $c->cacheLifetime = property_exists($raw, 'cache-lifetime') && $raw->{'cache-lifetime'} === null ? null
            : self::number($raw, 'cache-lifetime', self::DEFAULT_CACHE_LIFETIME, 0, 10 * 365 * 86400);
        $c->quorum = self::int($raw, 'quorum', 3, 1, 16, 'an integer 1..16');
        $c->maxResponseBytes = self::int($raw, 'max-response-bytes', Legacy::MAX_RESPONSE_BYTES, 1024, 16 * 1024 * 1024, 'an integer 1024..16777216');
        if (property_exists($raw, 'extended')) {
            if (!in_array($raw->extended, ['off', 'prefer', 'fallback', 'require'], true)) {
                throw new ConfigException('extended must be one of off, prefer, fallback, require');
            }
            $c->extended = $raw->extended;
        }
        $c->maxSkew = self::int($raw, 'max-skew', Extended::DEFAULT_MAX_SKEW, 0, 86400, 'an integer 0..86400 (seconds)');
        $c->extendedNonce = self::bool($raw, 'extended-nonce', true);
        if (property_exists($raw, 'notary-agreement')) {
            if (!is_string($raw->{'notary-agreement'})) {
                throw new ConfigException('notary-agreement must be a string');
            }
            $c->agreement = Policy::parse($raw->{'notary-agreement'});
        }
        $c->db = self::path($dir, $raw, 'db', 'cache.sqlite3');
        $c->userDb = self::path($dir, $raw, 'userdb', null);
        $c->notariesDir = self::path($dir, $raw, 'notaries-dir', '.');
        $c->connectTimeout = self::number($raw, 'connect-timeout', 3.0, 0.01, 600);
        $c->notaryTimeout = self::number($raw, 'notary-timeout', 5.0, 0.01, 600);
        $c->totalTimeout = self::number($raw, 'total-timeout', 10.0, 0.01, 3600);
        $c->standAside = self::bool($raw, 'stand-aside', true);
        $c->earlyReturn = self::bool($raw, 'early-return', true);
        $c->bounce = self::bool($raw, 'bounce', false);
        return $c;
    }

    /** Discovers ($explicit may be null) and loads a configuration directory. @param array<string,string|false> $env */
    public static function load(?string $explicit = null, ?array $env = null): self
    {
        $dir = self::discover($explicit, $env);
        $f = $dir . '/' . self::CONFIG_FILE;
        $raw = new \stdClass();
        if (file_exists($f)) {
            if (filesize($f) > self::MAX_CONFIG_BYTES) {
                throw new ConfigException("{$f} larger than " . self::MAX_CONFIG_BYTES . ' bytes');
            }
            $text = @file_get_contents($f);
            if ($text === false) {
                throw new ConfigException("cannot read {$f}");
            }
            $v = Json::parse($text);
            if (!$v instanceof \stdClass || $v === Json::invalid()) {
                throw new ConfigException("{$f} must hold a JSON object");
            }
            $raw = $v;
        }
        return self::fromRaw($dir, $raw);
    }

    private static function subfolders(string $dir): bool
    {
        return is_dir("{$dir}/notaries-available") || is_dir("{$dir}/notaries-enabled");
    }

    /** @return list<string> */
    private static function notaryFiles(string $dir): array
    {
        $names = @scandir($dir) ?: [];
        $out = [];
        foreach ($names as $n) {
            if (str_ends_with($n, '.notary')) {
                $out[] = "{$dir}/{$n}";
            }
        }
        sort($out, SORT_STRING);
        return $out;
    }

    /** Whether $dir is the 2014 libraries' layout: .notary files and neither subfolder. */
    public static function isFlat(string $dir): bool
    {
        return !self::subfolders($dir) && self::notaryFiles($dir) !== [];
    }

    /** Where listNotaries looks, for "no notaries enabled" messages. */
    public static function whereRead(?string $dir): string
    {
        if ($dir === null) {
            return 'no notaries-dir';
        }
        $standard = "{$dir}/notaries-enabled/";
        return self::subfolders($dir) ? $standard : "{$standard} and {$dir}/*.notary";
    }

    /** Every bundle in $dir, sorted by file name, with whether it is enabled. @return list<array{bundle: Bundle, enabled: bool, path: string}> */
    public static function listNotaries(string $dir): array
    {
        $targets = [];
        $extra = [];
        $flat = self::isFlat($dir);
        if ($flat) {
            $extra = array_values(array_filter(self::notaryFiles($dir), 'file_exists'));
        } elseif (is_dir("{$dir}/notaries-enabled")) {
            foreach (self::notaryFiles("{$dir}/notaries-enabled") as $p) {
                if (is_link($p)) {
                    $r = realpath($p);
                    if ($r !== false) {
                        $targets[$r] = true;
                    }
                } elseif (file_exists($p)) {
                    $extra[] = $p;
                }
            }
        }
        $files = !$flat && is_dir("{$dir}/notaries-available") ? self::notaryFiles("{$dir}/notaries-available") : [];
        if (count($files) + count($extra) > self::MAX_NOTARY_FILES) {
            throw new ConfigException('more than ' . self::MAX_NOTARY_FILES . ' notary bundles');
        }
        $out = [];
        foreach (array_merge($files, $extra) as $p) {
            $data = @file_get_contents($p);
            if ($data === false) {
                throw new ConfigException("cannot read {$p}");
            }
            try {
                $b = Bundle::parse($data);
            } catch (BundleException $e) {
                throw new BundleException("{$p}: " . $e->getDetail());
            }
            $r = realpath($p);
            $out[] = ['bundle' => $b, 'enabled' => in_array($p, $extra, true) || ($r !== false && isset($targets[$r])), 'path' => $p];
        }
        return $out;
    }

    /** The enabled logical notaries, de-duplicated by name (the first file wins). @return list<Bundle> */
    public function notaries(): array
    {
        $found = $this->bundles ?? ($this->notariesDir !== null
            ? array_map(static fn ($f) => $f['bundle'], array_filter(self::listNotaries($this->notariesDir), static fn ($f) => $f['enabled']))
            : []);
        $seen = [];
        $out = [];
        foreach ($found as $b) {
            if (!isset($seen[$b->name])) {
                $seen[$b->name] = true;
                $out[] = $b;
            }
        }
        return $out;
    }
}
