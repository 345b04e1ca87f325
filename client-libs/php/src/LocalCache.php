<?php
declare(strict_types=1);

namespace Converge;

/**
 * The local cache, in the schema of the 2011 add-on so that one file serves every client:
 * fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER) with
 * a unique index on (location, fingerprint). WAL and a busy timeout let processes share it.
 */
final class LocalCache
{
    private \SQLite3 $db;
    private \SQLite3Stmt $lookup;

    /** Opens (and, unless $readOnly, creates) a cache file. @throws CacheIOException */
    public function __construct(public readonly string $path, public readonly bool $readOnly = false)
    {
        try {
            if (!$readOnly && !is_dir(dirname($path))) {
                @mkdir(dirname($path), 0o755, true);
            }
            $this->db = new \SQLite3($path, $readOnly ? SQLITE3_OPEN_READONLY : SQLITE3_OPEN_READWRITE | SQLITE3_OPEN_CREATE);
            $this->db->enableExceptions(true);
            $this->db->busyTimeout(5000);
            if (!$readOnly) {
                $this->db->exec('PRAGMA journal_mode = WAL');
                $this->db->exec('PRAGMA synchronous = NORMAL');
                $this->db->exec('CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)');
                $this->db->exec('CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints (location, fingerprint)');
            }
            $this->lookup = $this->db->prepare('SELECT timestamp, typeof(timestamp) AS t FROM fingerprints WHERE location = :l AND fingerprint = :f');
        } catch (\Exception $e) {
            throw new CacheIOException("cannot open cache {$path}: " . $e->getMessage(), $e);
        }
    }

    /** The entry's timestamp, or null when there is none (or it is not an integer). */
    public function lookup(string $location, string $fingerprint): ?int
    {
        try {
            $this->lookup->reset();
            $this->lookup->bindValue(':l', $location, SQLITE3_TEXT);
            $this->lookup->bindValue(':f', $fingerprint, SQLITE3_TEXT);
            $row = $this->lookup->execute()->fetchArray(SQLITE3_NUM);
        } catch (\Exception $e) {
            throw new CacheIOException('cache lookup failed: ' . $e->getMessage(), $e);
        }
        return $row !== false && $row[1] === 'integer' ? (int) $row[0] : null;
    }

    /** Records a trusted fingerprint at $timestamp (unix seconds). */
    public function store(string $location, string $fingerprint, int $timestamp): void
    {
        if ($this->readOnly) {
            throw new CacheIOException('cache opened read-only');
        }
        try {
            $st = $this->db->prepare('INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (:l, :f, :t) '
                . 'ON CONFLICT (location, fingerprint) DO UPDATE SET timestamp = excluded.timestamp');
            $st->bindValue(':l', $location, SQLITE3_TEXT);
            $st->bindValue(':f', $fingerprint, SQLITE3_TEXT);
            $st->bindValue(':t', $timestamp, SQLITE3_INTEGER);
            $st->execute();
        } catch (\Exception $e) {
            throw new CacheIOException('cache write failed: ' . $e->getMessage(), $e);
        }
    }

    public function close(): void
    {
        $this->db->close();
    }
}
