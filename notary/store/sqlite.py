"""The embedded default store: SQLite through aiosqlite, in WAL mode.

Safe for several worker processes on one file: writes take the database's write lock with
``BEGIN IMMEDIATE`` and apply the pure history rules inside that transaction, so concurrent
observations of one target from different processes all land in one consistent history.
With WAL and ``synchronous=NORMAL`` a committed transaction survives the death of the
process (SIGKILL); only an operating-system crash can lose the last commits.

Schema version 2 adds the ``chains`` table (the chain presented with each observed leaf);
opening a version-1 database creates it and records version 2, nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import aiosqlite

from notary.core.fingerprint import CertDigests
from notary.core.history import History, Observation, observe, ordered
from notary.errors import BadData, StoreUnavailable
from notary.rootstore.chain import decode_chain, encode_chain
from notary.store.base import StoredChain, TargetRecord

SCHEMA_VERSION = 2
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


def _history(rows: Iterable[sqlite3.Row | tuple[object, ...]]) -> History:
    return ordered(
        Observation(bytes(r[0]), bytes(r[1]), int(r[2]), int(r[3]))  # type: ignore[arg-type]
        for r in rows
    )


class SQLiteStore:
    def __init__(self, db: aiosqlite.Connection, path: str) -> None:
        self._db = db
        self.path = path
        self._write_lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str | Path, *, busy_timeout_ms: int = 5000) -> SQLiteStore:
        path = str(path)
        db: aiosqlite.Connection | None = None
        try:
            db = await aiosqlite.connect(path, isolation_level=None)
            await db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            await db.execute("PRAGMA journal_mode = WAL")
            await db.execute("PRAGMA synchronous = NORMAL")
            await db.executescript(_SCHEMA)
            await db.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            await db.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'"
                " AND CAST(value AS INTEGER) < ?",
                (str(SCHEMA_VERSION), SCHEMA_VERSION),
            )
        except sqlite3.Error as exc:
            if db is not None:  # its worker thread would keep the interpreter from exiting
                with contextlib.suppress(sqlite3.Error):
                    await db.close()
            raise StoreUnavailable(f"cannot open SQLite store {path}: {exc}") from exc
        return cls(db, path)

    async def get(self, location: str) -> TargetRecord | None:
        # The connection is shared with observe(), whose transaction spans several awaits:
        # without the lock a read could see its uncommitted, half-applied rows.
        try:
            async with self._write_lock:
                rows = list(await self._db.execute_fetchall(_GET, (location,)))
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"store read failed: {exc}") from exc
        if not rows:
            return None
        version, body = int(rows[0][0]), rows[0][1]
        obs_rows = [r[2:] for r in rows if r[2] is not None]
        return TargetRecord(
            location, _history(obs_rows), version, bytes(body) if body is not None else None
        )

    async def observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord:
        db = self._db
        async with self._write_lock:
            try:
                await db.execute("BEGIN IMMEDIATE")
                try:
                    old = _history(await db.execute_fetchall(_OBS, (location,)))
                    new = observe(old, seen, now)
                    keep = {o.sha256 for o in new}
                    gone = [(location, o.sha256) for o in old if o.sha256 not in keep]
                    if gone:
                        await db.executemany(
                            "DELETE FROM observations WHERE location = ? AND sha256 = ?", gone
                        )
                        await db.executemany(
                            "DELETE FROM chains WHERE location = ? AND sha256 = ?", gone
                        )
                    changed = [o for o in new if o not in old]
                    await db.executemany(
                        "INSERT INTO observations(location, sha256, sha1, first_seen, last_seen)"
                        " VALUES (?, ?, ?, ?, ?) ON CONFLICT(location, sha256) DO UPDATE SET"
                        " first_seen = excluded.first_seen, last_seen = excluded.last_seen",
                        [(location, o.sha256, o.sha1, o.first_seen, o.last_seen) for o in changed],
                    )
                    rows = list(
                        await db.execute_fetchall(
                            "INSERT INTO targets(location, version, body) VALUES (?, 1, NULL)"
                            " ON CONFLICT(location) DO UPDATE SET version = version + 1,"
                            " body = NULL RETURNING version",
                            (location,),
                        )
                    )
                    await db.execute("COMMIT")
                except BaseException:
                    await db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"store write failed: {exc}") from exc
        return TargetRecord(location, new, int(rows[0][0]), None)

    async def save_body(self, location: str, version: int, body: bytes) -> None:
        try:
            async with self._write_lock:  # never inside observe()'s open transaction
                await self._db.execute(
                    "UPDATE targets SET body = ? WHERE location = ? AND version = ?",
                    (body, location, version),
                )
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"store write failed: {exc}") from exc

    async def close(self) -> None:
        try:
            await self._db.close()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"store close failed: {exc}") from exc

    async def save_chain(
        self, location: str, sha256: bytes, chain: tuple[bytes, ...], now: int
    ) -> None:
        raw = encode_chain(chain)
        try:
            async with self._write_lock:
                await self._db.execute(
                    "INSERT INTO chains(location, sha256, chain, seen) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT(location, sha256) DO UPDATE SET chain = excluded.chain,"
                    " seen = excluded.seen",
                    (location, sha256, raw, now),
                )
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"store write failed: {exc}") from exc

    async def get_chain(self, location: str, sha256: bytes) -> tuple[bytes, ...] | None:
        try:
            async with self._write_lock:
                rows = list(await self._db.execute_fetchall(
                    "SELECT chain FROM chains WHERE location = ? AND sha256 = ?",
                    (location, sha256),
                ))
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"store read failed: {exc}") from exc
        return _decode(location, rows[0][0]) if rows else None

    async def chains(self, limit: int) -> list[StoredChain]:
        try:
            async with self._write_lock:
                rows = list(await self._db.execute_fetchall(
                    "SELECT location, sha256, chain, seen FROM chains ORDER BY location, sha256"
                    " LIMIT ?",
                    (max(0, limit),),
                ))
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"store read failed: {exc}") from exc
        return [StoredChain(str(r[0]), bytes(r[1]), _decode(str(r[0]), r[2]), int(r[3]))
                for r in rows]


def _decode(location: str, raw: bytes) -> tuple[bytes, ...]:
    try:
        return decode_chain(bytes(raw))
    except BadData as exc:
        raise StoreUnavailable(f"{location}: stored chain is corrupt ({exc.message})") from exc


__all__ = ["SQLiteStore"]
