<?php
declare(strict_types=1);

namespace Converge;

/** A configuration and its open cache connections; keep one per configuration. */
final class Client
{
    /** @var list<LocalCache>|null */
    private ?array $caches = null;
    private ?LocalCache $writer = null;
    /** @var \Closure(): float */
    private \Closure $clock;
    /** @var \Closure(int): int */
    private \Closure $random;
    /** @var array<string, Client> */
    private static array $shared = [];

    public function __construct(public readonly Config $config, ?callable $clock = null, ?callable $random = null)
    {
        $this->clock = \Closure::fromCallable($clock ?? static fn (): float => microtime(true));
        $this->random = \Closure::fromCallable($random ?? static fn (int $n): int => random_int(0, max(0, $n - 1)));
    }

    /** Loads a configuration directory (discovered when $dir is null). */
    public static function load(?string $dir = null, ?callable $clock = null): self
    {
        return new self(Config::load($dir), $clock);
    }

    /** The client converge() uses for a configuration directory (null: discovered), loaded once. */
    public static function shared(?string $dir = null): self
    {
        $key = $dir ?? ('env:' . (getenv(Config::ENV_VAR) ?: ''));
        return self::$shared[$key] ??= self::load($dir);
    }

    /** @return list<LocalCache> */
    private function caches(): array
    {
        if ($this->caches !== null) {
            return $this->caches;
        }
        $caches = [];
        $writer = null;
        if ($this->config->userDb !== null) {
            $caches[] = $writer = new LocalCache($this->config->userDb);
        }
        if ($this->config->db !== null) {
            if ($writer === null) {
                $caches[] = $writer = new LocalCache($this->config->db);
            } elseif (file_exists($this->config->db)) {
                try {
                    $caches[] = new LocalCache($this->config->db, true); // an unreadable shared cache only costs queries
                } catch (CacheIOException) {
                }
            }
        }
        $this->writer = $writer;
        return $this->caches = $caches;
    }

    /** Closes the cache connections (reopened when used again). */
    public function close(): void
    {
        foreach ($this->caches ?? [] as $c) {
            $c->close();
        }
        $this->caches = null;
        $this->writer = null;
    }

    /** @return list<Fingerprint> */
    private static function forms(string $fingerprint, ?string $der): array
    {
        $fp = Fingerprint::parse($fingerprint);
        $out = [$fp];
        if ($der !== null) {
            foreach (['sha1', 'sha256'] as $alg) {
                $alt = Fingerprint::of($der, $alg);
                if ($alt->algorithm === $fp->algorithm && !$alt->equals($fp)) {
                    throw new FingerprintException('the certificate does not match the fingerprint');
                }
                $dup = false;
                foreach ($out as $f) {
                    $dup = $dup || $f->equals($alt);
                }
                if (!$dup) {
                    $out[] = $alt;
                }
            }
        }
        return $out;
    }

    /** @param list<Fingerprint> $fps */
    private function cached(string $loc, array $fps): bool
    {
        $now = ($this->clock)();
        foreach ($this->caches() as $cache) {
            foreach ($fps as $fp) {
                if (Policy::cacheDecision($cache->lookup($loc, $fp->colonHex()), $now, $this->config->cacheLifetime) === 'hit') {
                    return true;
                }
            }
        }
        return false;
    }

    /** The local cache's answer for a DER certificate, without asking any notary. */
    public function cachedCertificate(string $host, int $port, string $der): bool
    {
        Legacy::checkTarget($host, $port);
        return $this->cached(Legacy::location($host, $port), self::forms(Fingerprint::of($der)->colonHex(), $der));
    }

    /**
     * Asks for a verdict on ($host, $port, $fingerprint). A local cache hit costs one indexed
     * SQLite lookup. Throws ConvergeException for bad input or cache IO; notary failures are
     * votes. $certificate: the DER (matched by SHA-1 and SHA-256); $ip: ask the notaries to
     * connect to this address.
     */
    public function check(mixed $host, mixed $port, string $fingerprint, ?string $certificate = null, ?string $ip = null): Verdict
    {
        $t0 = microtime(true);
        Legacy::checkTarget($host, $port);
        if ($ip !== null && $ip !== '') {
            Legacy::checkIp($ip);
        }
        $fps = self::forms($fingerprint, $certificate);
        $cfg = $this->config;
        if ($this->cached(Legacy::location($host, $port), $fps)) {
            return new Verdict(true, $host, $port, $fps[0]->colonHex(), $cfg->agreement, $cfg->standAside, true, [],
                'local cache hit', microtime(true) - $t0, null);
        }
        return $this->ask($host, $port, $fps, $t0, ($ip === '' ? null : $ip));
    }

    /** check() with the DER certificate: matched by SHA-1 and SHA-256 both. */
    public function checkCertificate(string $host, int $port, string $der, ?string $ip = null): Verdict
    {
        return $this->check($host, $port, Fingerprint::of($der)->colonHex(), $der, $ip);
    }

    /** @param list<Fingerprint> $fps */
    private function ask(string $host, int $port, array $fps, float $t0, ?string $ip): Verdict
    {
        $cfg = $this->config;
        $notaries = $cfg->notaries();
        if ($notaries === []) {
            throw new ConfigException('no notaries enabled (looked in ' . Config::whereRead($cfg->notariesDir) . ')');
        }
        if ($cfg->extended === 'require') {
            $notaries = array_values(array_filter($notaries, static fn (Bundle $b) => $b->offersExtended()));
            if ($notaries === []) {
                throw new ConfigException("extended is require but no enabled notary's bundle offers " . Bundle::EXTENDED_FORMAT);
            }
        }
        $relay = null;
        if ($cfg->bounce) {
            if (count($notaries) < 2) {
                throw new ConfigException('bounce needs two enabled notaries: one relays, one votes');
            }
            $relay = array_splice($notaries, ($this->random)(count($notaries)), 1)[0];
        }
        $idx = array_keys($notaries);
        $k = min($cfg->quorum, count($notaries));
        for ($i = 0; $i < $k; $i++) {
            $j = $i + ($this->random)(count($idx) - $i);
            [$idx[$i], $idx[$j]] = [$idx[$j], $idx[$i]];
        }
        $picked = array_slice($idx, 0, $k);
        sort($picked);
        $chosen = array_map(static fn ($i) => $notaries[$i], $picked);
        $totalDeadline = $t0 + $cfg->totalTimeout;
        $jobs = [];
        foreach ($chosen as $b) {
            $ext = $cfg->extended !== 'off' && $b->offersExtended()
                ? ['keys' => $b->signingKeys, 'nonce' => $cfg->extendedNonce, 'max_skew' => $cfg->maxSkew, 'now' => $this->clock]
                    + ($b->transparency !== null ? ['log' => $b->transparency] : [])
                : null;
            $deadline = min($totalDeadline, microtime(true) + $cfg->notaryTimeout);
            $o = ['connect_timeout' => $cfg->connectTimeout, 'max_bytes' => $cfg->maxResponseBytes, 'relay' => $relay,
                'relay_dests' => $b->hosts, 'bounce_port' => $cfg->bouncePort, 'ip' => $ip];
            $hosts = $relay !== null ? [$b->hosts[0]] : $b->hosts;
            $queries = array_map(static fn (NotaryHost $h) => new HostQuery($h, $host, $port, $fps, $o, $ext, $deadline), $hosts);
            $jobs[] = ['bundle' => $b, 'queries' => $queries, 'deadline' => $deadline, 'fallback' => $cfg->extended === 'fallback' && $b->transparency === null];
        }
        $settle = $cfg->earlyReturn
            ? static fn (array $results, int $pending) => Policy::settled($cfg->agreement,
                array_map(static fn ($r) => $r->vote, array_values(array_filter($results))), $pending, $cfg->standAside)
            : static fn () => null;
        $run = NotaryIO::run($jobs, $totalDeadline, $settle);
        $ordered = [];
        foreach ($run['results'] as $i => $r) {
            $ordered[] = $r ?? ($run['timed_out']
                ? new NotaryResult($chosen[$i]->name, 'unreachable', 'timeout', null, '', "no answer within {$cfg->totalTimeout} s", microtime(true) - $t0, null)
                : new NotaryResult($chosen[$i]->name, 'skipped', 'settled', null, '', 'verdict settled before this notary answered', 0.0, null));
        }
        $votes = array_values(array_filter(array_map(static fn ($r) => $r->vote, $ordered), static fn ($v) => $v !== 'skipped'));
        $verdict = ($run['early'] !== null && !$run['timed_out']) ? $run['early'] : Policy::decide($cfg->agreement, $votes, $cfg->standAside);
        if ($verdict && $this->caches() !== [] && $this->writer !== null) {
            foreach ($fps as $fp) {
                $this->writer->store(Legacy::location($host, $port), $fp->colonHex(), (int) ($this->clock)());
            }
        }
        $s = count(array_filter($votes, static fn ($v) => $v === 'success'));
        $aside = $cfg->standAside ? 'unreachable stand aside' : 'unreachable count as failure';
        return new Verdict($verdict, $host, $port, $fps[0]->colonHex(), $cfg->agreement, $cfg->standAside, false, $ordered,
            "{$s} of {$k} notaries confirm ({$cfg->agreement}, {$aside})", microtime(true) - $t0, $relay?->name);
    }
}
