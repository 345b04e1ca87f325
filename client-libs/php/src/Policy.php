<?php
declare(strict_types=1);

namespace Converge;

/**
 * Votes, consensus policies and the local-cache rule (pure functions). With stand-aside on,
 * unreachable notaries do not count; off, they count as failures. With n counted notaries and
 * s successes: consensus s == n, majority s >= ceil(n/2), minority s >= 1; never trusted
 * without a success.
 */
final class Policy
{
    public const CACHE_FUTURE_SKEW = 300;
    private const CACHE_MILLISECONDS_ABOVE = 100_000_000_000;

    /** Accepts the three policy names, any case, surrounding space ignored. */
    public static function parse(mixed $text): string
    {
        $p = strtolower(trim((string) $text));
        if (in_array($p, ['consensus', 'majority', 'minority'], true)) {
            return $p;
        }
        throw new ConfigException('notary-agreement must be consensus, majority or minority, not ' . json_encode($text));
    }

    private static function trusted(string $p, int $s, int $f, int $u, bool $standAside): bool
    {
        $counted = $s + $f + ($standAside ? 0 : $u);
        if ($s < 1) {
            return false;
        }
        return match ($p) {
            'consensus' => $s === $counted,
            'majority' => $s >= intdiv($counted + 1, 2),
            default => true,
        };
    }

    /** @param list<string> $votes @return array{int,int,int} */
    private static function count(array $votes): array
    {
        $s = $f = $u = 0;
        foreach ($votes as $v) {
            match ($v) {
                'success' => $s++,
                'failure' => $f++,
                'unreachable' => $u++,
                'skipped' => null,
                default => throw new VoteException('unknown vote ' . json_encode($v)),
            };
        }
        return [$s, $f, $u];
    }

    /** The verdict for a complete set of votes. @param list<string> $votes */
    public static function decide(string $policy, array $votes, bool $standAside): bool
    {
        [$s, $f, $u] = self::count($votes);
        return self::trusted($policy, $s, $f, $u, $standAside);
    }

    /** The verdict when no outcome of the pending notaries can change it, else null. @param list<string> $votes */
    public static function settled(string $policy, array $votes, int $pending, bool $standAside): ?bool
    {
        [$s, $f, $u] = self::count($votes);
        $first = self::trusted($policy, $s, $f, $u + $pending, $standAside);
        for ($ps = 0; $ps <= $pending; $ps++) {
            for ($pf = 0; $pf <= $pending - $ps; $pf++) {
                if (self::trusted($policy, $s + $ps, $f + $pf, $u + $pending - $ps - $pf, $standAside) !== $first) {
                    return null;
                }
            }
        }
        return $first;
    }

    /** "hit", "stale" or "miss" for a stored timestamp (null: none) at $now; $lifetime null = forever. */
    public static function cacheDecision(?int $timestamp, float $now, ?float $lifetime): string
    {
        if ($timestamp === null) {
            return 'miss';
        }
        $ts = $timestamp > self::CACHE_MILLISECONDS_ABOVE ? intdiv($timestamp, 1000) : $timestamp;
        $age = $now - $ts;
        if ($age < -self::CACHE_FUTURE_SKEW) {
            return 'stale';
        }
        if ($lifetime !== null && $age > $lifetime) {
            return 'stale';
        }
        return 'hit';
    }
}
