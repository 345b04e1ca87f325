//! The local cache, in the schema of the 2011 add-on so that one file serves every client:
//! `fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)`
//! with a unique index on (location, fingerprint). WAL journal and a busy timeout let several
//! processes share it.

use crate::error::{Error, Kind, Result};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One open connection to a cache file.
pub struct LocalCache {
    pub path: PathBuf,
    pub read_only: bool,
    db: Connection,
}

fn cache_err(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(Kind::CacheIo, format!("{what} {}: {e}", path.display()))
}

impl LocalCache {
    /// Opens (and, unless `read_only`, creates) a cache file.
    pub fn open(path: &Path, read_only: bool) -> Result<LocalCache> {
        let flags = if read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| cache_err("cannot open cache", path, e))?;
            }
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let db = Connection::open_with_flags(path, flags).map_err(|e| cache_err("cannot open cache", path, e))?;
        db.busy_timeout(Duration::from_secs(5)).map_err(|e| cache_err("cannot open cache", path, e))?;
        if !read_only {
            db.pragma_update(None, "journal_mode", "WAL").map_err(|e| cache_err("cannot open cache", path, e))?;
            db.pragma_update(None, "synchronous", "NORMAL").map_err(|e| cache_err("cannot open cache", path, e))?;
            db.execute_batch(
                "CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER);
                 CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints (location, fingerprint);",
            )
            .map_err(|e| cache_err("cannot open cache", path, e))?;
        }
        Ok(LocalCache { path: path.to_path_buf(), read_only, db })
    }

    /// The entry's timestamp, or `None` when there is none (or it is not an integer).
    pub fn lookup(&self, location: &str, fingerprint: &str) -> Result<Option<i64>> {
        let mut st = self
            .db
            .prepare_cached(
                "SELECT timestamp, typeof(timestamp) FROM fingerprints WHERE location = ?1 AND fingerprint = ?2",
            )
            .map_err(|e| cache_err("cache lookup failed on", &self.path, e))?;
        let row: Option<(rusqlite::types::Value, String)> = st
            .query_row((location, fingerprint), |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(|e| cache_err("cache lookup failed on", &self.path, e))?;
        Ok(match row {
            Some((rusqlite::types::Value::Integer(n), t)) if t == "integer" => Some(n),
            _ => None,
        })
    }

    /// Records a trusted fingerprint at `timestamp` (unix seconds).
    pub fn store(&self, location: &str, fingerprint: &str, timestamp: i64) -> Result<()> {
        if self.read_only {
            return Err(Error::new(Kind::CacheIo, "cache opened read-only"));
        }
        self.db
            .prepare_cached(
                "INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (location, fingerprint) DO UPDATE SET timestamp = excluded.timestamp",
            )
            .and_then(|mut st| st.execute((location, fingerprint, timestamp)))
            .map_err(|e| cache_err("cache write failed on", &self.path, e))?;
        Ok(())
    }
}
