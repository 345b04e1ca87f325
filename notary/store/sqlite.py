"""The embedded default store: SQLite in WAL mode, on one dedicated thread.

Every operation is one complete transaction run by one call on the store's own thread (one
hop from the event loop to the thread and back). A probe's ``observe`` used to be seven such
hops through aiosqlite, five of them inside an open transaction; one hop cut the notary's
CPU per live probe by about a fifth. A transaction never spans an ``await``, so reads cannot
see half-applied writes and a cancelled request cannot leave a transaction open (the call
runs to completion on the thread either way).

Safe for several worker processes on one file: writes take the database's write lock with
``BEGIN IMMEDIATE`` and apply the pure history rules inside that transaction, so concurrent
observations of one target from different processes all land in one consistent history.
With WAL and ``synchronous=NORMAL`` a committed transaction survives the death of the
process (SIGKILL); only an operating-system crash can lose the last commits.

Schema version 2 added the ``chains`` table (the chain presented with each observed leaf).
Schema version 3 changed what ``location`` means: the record key of
:attr:`notary.core.target.Target.key` (``host:port`` for the notary's own resolution,
``host:port/ip`` for a client-named address). Before it, observations made at an address a
client named were stored under ``host:port`` too, and nothing in a version 1 or 2 database
tells them apart, so opening one drops every cached record (targets, observations, chains)
in the same transaction that records version 3, and logs how many. The cache refills from
live probes; the signing keys are not in the database and are unaffected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from notary.core.fingerprint import CertDigests
from notary.core.history import History, Observation, observe, ordered
from notary.errors import BadData, StoreUnavailable
from notary.rootstore.chain import decode_chain, encode_chain
from notary.store.base import StoredChain, TargetRecord

T = TypeVar("T")

SCHEMA_VERSION = 3
log = logging.getLogger("notary.store")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS targets (
    location TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    body BLOB
);
CREATE TABLE IF NOT EXISTS observations (
    location TEXT NOT NULL,
    sha256 BLOB NOT NULL,
    sha1 BLOB NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL,
    PRIMARY KEY (location, sha256)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chains (
    location TEXT NOT NULL,
    sha256 BLOB NOT NULL,
    chain BLOB NOT NULL,
    seen INTEGER NOT NULL,
    PRIMARY KEY (location, sha256)
) WITHOUT ROWID;
"""
_GET = """
SELECT t.version, t.body, o.sha1, o.sha256, o.first_seen, o.last_seen
FROM targets t LEFT JOIN observations o ON o.location = t.location
WHERE t.location = ?
"""
_OBS = "SELECT sha1, sha256, first_seen, last_seen FROM observations WHERE location = ?"
_UPSERT_OBS = (
    "INSERT INTO observations(location, sha256, sha1, first_seen, last_seen)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT(location, sha256) DO UPDATE SET"
    " first_seen = excluded.first_seen, last_seen = excluded.last_seen"
)
_BUMP = (
    "INSERT INTO targets(location, version, body) VALUES (?, 1, NULL)"
    " ON CONFLICT(location) DO UPDATE SET version = version + 1, body = NULL RETURNING version"
)


def _history(rows: Iterable[sqlite3.Row | tuple[object, ...]]) -> History:
    return ordered(
        Observation(bytes(r[0]), bytes(r[1]), int(r[2]), int(r[3]))  # type: ignore[arg-type]
        for r in rows
    )


def _connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        _migrate(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the schema to :data:`SCHEMA_VERSION` in one write transaction (see module).

    Several workers may open the file at once: ``BEGIN IMMEDIATE`` makes one of them migrate
    and the others find version 3 already recorded.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row is not None else None
        dropped = 0
        if version is None or version < 3:
            dropped = int(conn.execute("SELECT count(*) FROM targets").fetchone()[0])
            if dropped:
                conn.execute("DELETE FROM observations")
                conn.execute("DELETE FROM chains")
                conn.execute("DELETE FROM targets")
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    if dropped:
        log.warning(
            "%s: schema %s -> %d: dropped %d cached target records (an older schema could "
            "hold observations made at client-named addresses under host:port); they refill "
            "from live probes", path, version, SCHEMA_VERSION, dropped,
        )


def _get(conn: sqlite3.Connection, location: str) -> TargetRecord | None:
    rows = conn.execute(_GET, (location,)).fetchall()
    if not rows:
        return None
    version, body = int(rows[0][0]), rows[0][1]
    obs_rows = [r[2:] for r in rows if r[2] is not None]
    return TargetRecord(
        location, _history(obs_rows), version, bytes(body) if body is not None else None
    )


def _observe(
    conn: sqlite3.Connection, location: str, seen: CertDigests, now: int
) -> TargetRecord:
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = _history(conn.execute(_OBS, (location,)).fetchall())
        new = observe(old, seen, now)
        keep = {o.sha256 for o in new}
        gone = [(location, o.sha256) for o in old if o.sha256 not in keep]
        if gone:
            conn.executemany("DELETE FROM observations WHERE location = ? AND sha256 = ?", gone)
            conn.executemany("DELETE FROM chains WHERE location = ? AND sha256 = ?", gone)
        conn.executemany(
            _UPSERT_OBS,
            [(location, o.sha256, o.sha1, o.first_seen, o.last_seen) for o in new if o not in old],
        )
        version = int(conn.execute(_BUMP, (location,)).fetchall()[0][0])
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    return TargetRecord(location, new, version, None)


class SQLiteStore:
    def __init__(self, conn: sqlite3.Connection, thread: ThreadPoolExecutor, path: str) -> None:
        self._conn = conn
        self._thread = thread
        self.path = path

    @classmethod
    async def open(cls, path: str | Path, *, busy_timeout_ms: int = 5000) -> SQLiteStore:
        path = str(path)
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="notary-sqlite")
        try:
            conn = await asyncio.get_running_loop().run_in_executor(
                thread, _connect, path, busy_timeout_ms
            )
        except sqlite3.Error as exc:
            thread.shutdown(wait=False)
            raise StoreUnavailable(f"cannot open SQLite store {path}: {exc}") from exc
        return cls(conn, thread, path)

    async def _run(self, what: str, fn: Callable[..., T], *args: object) -> T:
        """``fn(connection, *args)`` on the store thread; SQLite errors -> StoreUnavailable."""
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._thread, fn, self._conn, *args
            )
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"store {what} failed: {exc}") from exc
        except RuntimeError as exc:  # the thread was shut down: the store is closed
            raise StoreUnavailable(f"store {what} failed: the store is closed") from exc

    async def get(self, location: str) -> TargetRecord | None:
        return await self._run("read", _get, location)

    async def observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord:
        return await self._run("write", _observe, location, seen, now)

    async def save_body(self, location: str, version: int, body: bytes) -> None:
        await self._run(
            "write",
            lambda conn: conn.execute(
                "UPDATE targets SET body = ? WHERE location = ? AND version = ?",
                (body, location, version),
            ),
        )

    async def close(self) -> None:
        try:
            await self._run("close", lambda conn: conn.close())
        finally:
            self._thread.shutdown(wait=False)

    async def save_chain(
        self, location: str, sha256: bytes, chain: tuple[bytes, ...], now: int
    ) -> None:
        raw = encode_chain(chain)
        await self._run(
            "write",
            lambda conn: conn.execute(
                "INSERT INTO chains(location, sha256, chain, seen) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(location, sha256) DO UPDATE SET chain = excluded.chain,"
                " seen = excluded.seen",
                (location, sha256, raw, now),
            ),
        )

    async def get_chain(self, location: str, sha256: bytes) -> tuple[bytes, ...] | None:
        rows = await self._run(
            "read",
            lambda conn: conn.execute(
                "SELECT chain FROM chains WHERE location = ? AND sha256 = ?", (location, sha256)
            ).fetchall(),
        )
        return _decode(location, rows[0][0]) if rows else None

    async def chains(self, limit: int) -> list[StoredChain]:
        rows = await self._run(
            "read",
            lambda conn: conn.execute(
                "SELECT location, sha256, chain, seen FROM chains ORDER BY location, sha256"
                " LIMIT ?",
                (max(0, limit),),
            ).fetchall(),
        )
        return [StoredChain(str(r[0]), bytes(r[1]), _decode(str(r[0]), r[2]), int(r[3]))
                for r in rows]


def _decode(location: str, raw: bytes) -> tuple[bytes, ...]:
    try:
        return decode_chain(bytes(raw))
    except BadData as exc:
        raise StoreUnavailable(f"{location}: stored chain is corrupt ({exc.message})") from exc


__all__ = ["SQLiteStore"]
