"""The local fingerprint cache on SQLite (IO), with the 2011 add-on's schema::

    fingerprints(id integer primary key, location TEXT, fingerprint TEXT, timestamp INTEGER)
    unique index on (location, fingerprint)

``location`` is ``host:port``; ``fingerprint`` is the canonical colon-hex form; ``timestamp``
is unix seconds of the last trusted verdict. Several processes may share the file: WAL
journal, a busy timeout, and one write per trusted verdict. The connection stays open for
the life of the :class:`LocalCache` (reopening costs ~100 ms on slow disks; a lookup on an
open connection costs microseconds). Whether an entry is usable is decided by
:func:`converge.cachepolicy.cache_decision`, not here.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from .errors import CacheIOError

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS fingerprints (id integer primary key, location TEXT, "
    "fingerprint TEXT, timestamp INTEGER)",
    "CREATE UNIQUE INDEX IF NOT EXISTS location_fingerprint on fingerprints "
    "(location, fingerprint)",
)
BUSY_TIMEOUT_MS = 5000


class LocalCache:
    """One open connection to a cache file (thread-safe; a lock serialises use)."""

    def __init__(self, path: Path | str, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        try:
            if readonly:
                uri = f"file:{self.path}?mode=ro"
                self._db = sqlite3.connect(
                    uri, uri=True, check_same_thread=False, isolation_level=None
                )
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not readonly:
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
                for stmt in SCHEMA:
                    self._db.execute(stmt)
        except (sqlite3.Error, OSError) as e:
            raise CacheIOError(f"cannot open cache {self.path}: {e}") from e

    def lookup(self, location: str, fingerprint: str) -> int | None:
        """Timestamp of the entry, or ``None`` when there is none (a miss is not an error)."""
        with self._lock:
            try:
                row = self._db.execute(
                    "SELECT timestamp FROM fingerprints WHERE location = ? AND fingerprint = ?",
                    (location, fingerprint),
                ).fetchone()
            except sqlite3.Error as e:
                raise CacheIOError(f"cache lookup failed: {e}") from e
        if row is None or not isinstance(row[0], int):
            return None
        return int(row[0])

    def store(self, location: str, fingerprint: str, timestamp: int) -> None:
        if self.readonly:
            raise CacheIOError("cache opened read-only")
        with self._lock:
            try:
                self._db.execute(
                    "INSERT INTO fingerprints (location, fingerprint, timestamp) "
                    "VALUES (?, ?, ?) ON CONFLICT (location, fingerprint) "
                    "DO UPDATE SET timestamp = excluded.timestamp",
                    (location, fingerprint, timestamp),
                )
            except sqlite3.Error as e:
                raise CacheIOError(f"cache write failed: {e}") from e

    def entries(self, limit: int = 10_000) -> list[tuple[str, str, int]]:
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT location, fingerprint, timestamp FROM fingerprints "
                    "ORDER BY location, fingerprint LIMIT ?",
                    (limit,),
                ).fetchall()
            except sqlite3.Error as e:
                raise CacheIOError(f"cache read failed: {e}") from e
        return [(str(a), str(b), int(c)) for a, b, c in rows]

    def clear(self, location: str | None = None) -> int:
        with self._lock:
            try:
                if location is None:
                    cur = self._db.execute("DELETE FROM fingerprints")
                else:
                    cur = self._db.execute(
                        "DELETE FROM fingerprints WHERE location = ?", (location,)
                    )
            except sqlite3.Error as e:
                raise CacheIOError(f"cache clear failed: {e}") from e
        return cur.rowcount

    def close(self) -> None:
        with self._lock:
            self._db.close()
