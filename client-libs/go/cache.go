package converge

import (
	"database/sql"
	"net/url"
	"os"
	"path/filepath"
	"sync"

	_ "modernc.org/sqlite" // pure-Go SQLite driver
)

// The local cache has the schema of the 2011 add-on, so one file serves every client:
//
//	fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)
//	unique index location_fingerprint on (location, fingerprint)
//
// location is "host:port", fingerprint the canonical colon hex, timestamp unix seconds of
// the last trusted verdict. WAL journal and a busy timeout let several processes share it.
var cacheSchema = []string{
	"CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, " +
		"fingerprint TEXT, timestamp INTEGER)",
	"CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints " +
		"(location, fingerprint)",
}

const cacheBusyTimeoutMS = 5000

// LocalCache is one open connection to a cache file; safe for concurrent use.
type LocalCache struct {
	Path     string
	ReadOnly bool
	mu       sync.Mutex
	db       *sql.DB
	lookup   *sql.Stmt
}

func cacheErr(err error, format string, args ...any) error {
	return ioFailure(KindCacheIO, err, format, args...)
}

// OpenCache opens (and, unless readOnly, creates) a cache file.
func OpenCache(path string, readOnly bool) (*LocalCache, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	if readOnly {
		q.Add("mode", "ro")
	} else {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, cacheErr(err, "cannot open cache %s", path)
		}
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
	}
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, cacheErr(err, "cannot open cache %s", path)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	if !readOnly {
		for _, stmt := range cacheSchema {
			if _, err := db.Exec(stmt); err != nil {
				db.Close()
				return nil, cacheErr(err, "cannot open cache %s", path)
			}
		}
	}
	st, err := db.Prepare("SELECT timestamp FROM fingerprints WHERE location = ? AND fingerprint = ?")
	if err != nil {
		db.Close()
		return nil, cacheErr(err, "cannot open cache %s", path)
	}
	return &LocalCache{Path: path, ReadOnly: readOnly, db: db, lookup: st}, nil
}

// Lookup returns the entry's timestamp, or nil when there is none (a miss is not an error).
func (c *LocalCache) Lookup(location, fingerprint string) (*int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ts any
	err := c.lookup.QueryRow(location, fingerprint).Scan(&ts)
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, cacheErr(err, "cache lookup failed")
	}
	n, ok := ts.(int64)
	if !ok {
		return nil, nil // not an integer: unusable, as in the Python client
	}
	return &n, nil
}

// Store records a trusted fingerprint at timestamp (unix seconds).
func (c *LocalCache) Store(location, fingerprint string, timestamp int64) error {
	if c.ReadOnly {
		return cacheErr(nil, "cache opened read-only")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.db.Exec("INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (?, ?, ?) "+
		"ON CONFLICT (location, fingerprint) DO UPDATE SET timestamp = excluded.timestamp",
		location, fingerprint, timestamp)
	if err != nil {
		return cacheErr(err, "cache write failed")
	}
	return nil
}

// Close closes the connection.
func (c *LocalCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookup.Close()
	return c.db.Close()
}
