<?php
declare(strict_types=1);

namespace Converge;

/**
 * Asking notaries over the network: every host of every chosen notary at once, from one
 * thread, with non-blocking streams and stream_select (HostQuery). Within a notary the first
 * definitive answer wins; the verdict is decided as soon as no pending answer can change it.
 */
final class NotaryIO
{
    private const DEFINITIVE = ['listed', 'status-only', 'mismatch', 'not-listed', 'match'];
    private const SEVERITY = ['signature' => 3, 'response' => 3, 'malformed' => 3, 'unknown-key' => 3,
        'bad-signature' => 3, 'wrong-target' => 3, 'nonce-mismatch' => 3, 'stale' => 3, 'pin' => 2];

    /** The CONNECT head sent to a bounce relay for one notary's hosts. @param list<NotaryHost> $dests */
    public static function connectHead(array $dests, int $port): string
    {
        $first = $dests[0]->host;
        $lines = ["CONNECT {$first}:{$port} HTTP/1.1", "Host: {$first}"];
        foreach (array_slice($dests, 1) as $d) {
            $lines[] = "X-Convergence-Notary: {$d->host}+{$port}";
        }
        return implode("\r\n", $lines) . "\r\n\r\n";
    }

    /** Which destination a relay connected to. @param list<NotaryHost> $dests */
    public static function parseConnectReply(string $head, array $dests): NotaryHost
    {
        $lines = explode("\r\n", $head);
        $parts = explode(' ', $lines[0], 3);
        if (count($parts) < 2 || !str_starts_with($parts[0], 'HTTP/1.') || $parts[1] !== '200') {
            throw new \RuntimeException('relay refused the tunnel: ' . json_encode(substr($lines[0], 0, 80)));
        }
        $connected = null;
        foreach (array_slice($lines, 1) as $line) {
            $colon = strpos($line, ':');
            $name = $colon === false ? $line : substr($line, 0, $colon);
            if (strcasecmp(Legacy::pyStrip($name), 'x-convergence-notary') === 0) {
                $connected = strtolower(Legacy::pyStrip($colon === false ? '' : substr($line, $colon + 1)));
            }
        }
        if ($connected === null) {
            if (count($dests) === 1) {
                return $dests[0];
            }
            throw new \RuntimeException('relay did not name the notary host it connected to');
        }
        $host = explode('+', $connected, 2)[0];
        foreach ($dests as $d) {
            if (in_array(strtolower($d->host), [$host, $connected], true)) {
                return $d;
            }
        }
        throw new \RuntimeException('relay connected to an unknown notary host ' . json_encode($connected));
    }

    /**
     * Asks the chosen notaries at once. $jobs: per notary, its bundle, host queries and
     * deadline. $settle(list<?NotaryResult>, int $pending): ?bool decides early (null: go on).
     *
     * @param list<array{bundle: Bundle, queries: list<HostQuery>, deadline: float, fallback: bool}> $jobs
     * @return array{results: list<?NotaryResult>, timed_out: bool, early: ?bool}
     */
    public static function run(array $jobs, float $totalDeadline, callable $settle): array
    {
        $t0 = microtime(true);
        $n = count($jobs);
        $results = array_fill(0, $n, null);
        $early = null;
        $timedOut = false;
        while (true) {
            $now = microtime(true);
            $pending = 0;
            foreach ($jobs as $i => &$job) {
                if ($results[$i] !== null) {
                    continue;
                }
                foreach ($job['queries'] as $qi => $q) {
                    // a connect step that ran out of time is an unreachable host; the notary's own
                    // deadline leaves what is still pending unanswered (a timeout, below)
                    if (!$q->done() && $now >= $q->nextDeadline() && $q->nextDeadline() < $job['deadline']) {
                        $q->expire();
                    }
                    if ($q->done() && $job['fallback'] && $q->ext !== null && $q->outcome->kind === 'status' && Extended::notOffered($q->outcome->status)) {
                        $job['queries'][$qi] = $q->legacyTwin();
                    }
                }
                $results[$i] = self::notaryResult($job, $now, $t0);
                if ($results[$i] !== null) {
                    foreach ($job['queries'] as $q) {
                        $q->close();
                    }
                    $early = $settle($results, self::countPending($results));
                    if ($early !== null) {
                        break;
                    }
                } else {
                    $pending++;
                }
            }
            unset($job);
            if ($early !== null || $pending === 0) {
                break;
            }
            if ($now >= $totalDeadline) {
                $timedOut = true;
                break;
            }
            $read = $write = [];
            $next = $totalDeadline;
            foreach ($jobs as $i => $job) {
                if ($results[$i] !== null) {
                    continue;
                }
                $next = min($next, $job['deadline']);
                foreach ($job['queries'] as $q) {
                    if ($q->done()) {
                        continue;
                    }
                    [$s, $r, $w] = $q->waitsOn();
                    $next = min($next, $q->nextDeadline());
                    if ($s !== null) {
                        if ($r) {
                            $read[] = $s;
                        }
                        if ($w) {
                            $write[] = $s;
                        }
                    }
                }
            }
            $wait = max(0.0, $next - microtime(true));
            if ($read !== [] || $write !== []) {
                $except = null;
                @stream_select($read, $write, $except, (int) $wait, (int) (($wait - (int) $wait) * 1e6));
            } else {
                usleep((int) min(50000, $wait * 1e6));
            }
            foreach ($jobs as $i => $job) {
                if ($results[$i] === null) {
                    foreach ($job['queries'] as $q) {
                        $q->step();
                    }
                }
            }
        }
        foreach ($jobs as $job) {
            foreach ($job['queries'] as $q) {
                $q->close();
            }
        }
        return ['results' => $results, 'timed_out' => $timedOut, 'early' => $early];
    }

    /** @param list<?NotaryResult> $results */
    private static function countPending(array $results): int
    {
        return count(array_filter($results, static fn ($r) => $r === null));
    }

    /** The notary's result when it is decided, else null. @param array{bundle: Bundle, queries: list<HostQuery>, deadline: float} $job */
    private static function notaryResult(array $job, float $now, float $t0): ?NotaryResult
    {
        $done = array_values(array_filter($job['queries'], static fn (HostQuery $q) => $q->done()));
        $winner = null;
        foreach ($done as $q) {
            if (in_array($q->outcome->kind, self::DEFINITIVE, true)) {
                $winner = $q;
                break;
            }
        }
        $all = count($done) === count($job['queries']);
        if ($winner === null && !$all && $now < $job['deadline']) {
            return null;
        }
        if ($winner === null) {
            foreach ($done as $q) {
                if ($winner === null || (self::SEVERITY[$q->outcome->kind] ?? 0) > (self::SEVERITY[$winner->outcome->kind] ?? 0)) {
                    $winner = $q;
                }
            }
        }
        $elapsed = $now - $t0;
        if ($winner === null) {
            return new NotaryResult($job['bundle']->name, 'unreachable', 'timeout', null, '', 'no answer in time', $elapsed, null);
        }
        $o = $winner->outcome;
        return new NotaryResult($job['bundle']->name, $o->vote, $o->kind, $o->status, $winner->label, $o->detail, $elapsed, $winner->protocol, $o->answer);
    }
}
