"""The embedded default store: SQLite in WAL mode, driven through aiosqlite.

Every operation is **one SQL statement**; the statements asked for in one turn of the event
loop (and those asked for while a batch is on the driver's thread) run in order as one
transaction, in one hop from the event loop to the driver's thread and back
(:class:`SQLiteStore`'s queue). No transaction ever spans an ``await``, so reads cannot see
half-applied writes and a cancelled request cannot leave one open. A record is read on the
event loop's own thread, from a read-only connection that never waits for a lock, whenever
no write this process asked for about that location is still on its way (otherwise through
the queue, after those writes): a hop costs far more than the read. Writes stay on the
driver's thread: an observation written on the loop's own connection (``busy_timeout`` 0,
checkpoints left to the driver's thread, the queue as the fallback) was measured on
2026-11-26 against this design, paired, 3 runs each at load average 8-11: 2,294-2,510 against
2,202-2,276 us of CPU per forced probe and fewer probes a second (the loop waits for every
commit's WAL writes), so it was not kept.
Recording an observation is a single upsert: triggers apply the history rules of
:mod:`notary.core.history` inside that statement (bump the record's version and clear its
signed body, keep the :data:`~notary.core.history.MAX_HISTORY` most recently seen
certificates, drop the chains of the ones let go), and its ``RETURNING`` clause hands back
the new version and history. Earlier versions ran a seven-statement transaction on the
store's own one-thread executor; the same single statement can still run that way
(``driver="thread"``), which the benchmark uses to compare the two drivers side by side.

Safe for several worker processes on one file: each statement takes the database's write
lock for its own duration (``busy_timeout`` waits for it), and the history merge happens
inside the statement (``min(first_seen)``, ``max(last_seen)``), so concurrent observations
of one target from different processes all land in one consistent history. With WAL and
``synchronous=NORMAL`` a committed statement survives the death of the process (SIGKILL);
only an operating-system crash can lose the last commits.

Schema versions: 2 added the ``chains`` table (the chain presented with each observed leaf).
3 changed what ``location`` means: the record key of :attr:`notary.core.target.Target.key`
(``host:port`` for the notary's own resolution, ``host:port/ip`` for a client-named
address). Before it, observations made at an address a client named were stored under
``host:port`` too, and nothing in a version 1 or 2 database tells them apart, so opening
one drops every cached record (targets, observations, chains) in the same transaction that
records the new version, and logs how many. The cache refills from live probes; the signing
keys are not in the database and are unaffected. 4 added the triggers; a version 3 file
keeps its records. 5 added the budget (notary/store/budget.py): ``named``, ``useful`` and
``last_used`` on targets, the ``usage`` table kept by triggers (records and accounted bytes
per class) and the eviction indexes; older files gain them and their counts on first open.
6 deduplicated chain certificates: each certificate's DER is stored once in ``certs``, keyed
by its SHA-256, with the number of chains that refer to it; a chain row holds its
certificates' digests (32 bytes each, leaf first) and how many DER bytes it stands for.
Saving a chain is one statement (an insert into the view ``chain_in``, whose trigger
writes the certificates and then the chain); triggers keep the reference counts and delete a
certificate in the statement that drops its last reference, so an evicted chain's
certificates go with it. The budget charges every chain its whole DER, as if it were stored
alone, so the accounted bytes stay an upper bound of the stored ones and a shared
certificate never moves bytes between the two classes. Older files are converted on first open.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import aiosqlite

from notary.ca.verify import MAX_CHAIN_CERTS
from notary.core.fingerprint import CertDigests
from notary.core.history import MAX_HISTORY, History, Observation, ordered
from notary.errors import BadData, StoreUnavailable
from notary.store.base import StoredChain, TargetRecord
from notary.store.budget import (
    EVICT_ROUNDS,
    EXPIRE_EVERY,
    OBSERVATION_BYTES,
    ROW_OVERHEAD,
    UNBOUNDED,
    Budget,
    is_named,
)
from notary.store.chain import DIGEST, chain_digests, check_chain, decode_chain

SCHEMA_VERSION = 6
Driver = Literal["aiosqlite", "thread"]
DRIVERS: tuple[Driver, ...] = ("aiosqlite", "thread")
log = logging.getLogger("notary.store")

_ORDER = "last_seen DESC, first_seen DESC, sha256"  # history.ordered, in SQL
_TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS targets (
    location TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    body BLOB,
    named INTEGER NOT NULL DEFAULT 0,
    useful INTEGER NOT NULL DEFAULT 0,
    last_used INTEGER NOT NULL DEFAULT 0
)""",
    """CREATE TABLE IF NOT EXISTS observations (
    location TEXT NOT NULL,
    sha256 BLOB NOT NULL,
    sha1 BLOB NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL,
    PRIMARY KEY (location, sha256)
) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS chains (
    location TEXT NOT NULL,
    sha256 BLOB NOT NULL,
    chain BLOB NOT NULL,
    seen INTEGER NOT NULL,
    der_bytes INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (location, sha256)
) WITHOUT ROWID""",
    # each chain certificate once (schema 6); refs: chains referring to it, kept by triggers
    """CREATE TABLE IF NOT EXISTS certs (
    sha256 BLOB PRIMARY KEY,
    der BLOB NOT NULL,
    refs INTEGER NOT NULL DEFAULT 0,
    seen INTEGER NOT NULL
) WITHOUT ROWID""",
    "CREATE TABLE IF NOT EXISTS seq (n INTEGER PRIMARY KEY)",  # 0 .. MAX_CHAIN_CERTS - 1
    # the budget's accounting, per class (0: own records, 1: client-named), kept by triggers
    """CREATE TABLE IF NOT EXISTS usage (
    named INTEGER PRIMARY KEY,
    records INTEGER NOT NULL,
    bytes INTEGER NOT NULL
)""",
)
# columns schema 5 added to targets (older files gain them by ALTER TABLE)
_TARGET_COLUMNS = {
    "named": "INTEGER NOT NULL DEFAULT 0",
    "useful": "INTEGER NOT NULL DEFAULT 0",
    "last_used": "INTEGER NOT NULL DEFAULT 0",
}
_NAMED = "(instr({0}.location, '/') > 0)"  # budget.is_named, in SQL
# the digests of a chain row's certificates, one per row of seq (no WITH inside triggers)
_DIGESTS = (f"SELECT substr({{0}}.chain, n * {DIGEST} + 1, {DIGEST}) FROM seq"
            f" WHERE n < length({{0}}.chain) / {DIGEST}")
_R = ROW_OVERHEAD
_TRIGGERS = (
    # Every upsert of an observation is a change of the record: new version, body unsigned,
    # used now (a second observation means a client asked again). BEFORE, so that the
    # statement's RETURNING clause sees the new version.
    f"""CREATE TRIGGER IF NOT EXISTS observation_bumps_version
BEFORE INSERT ON observations BEGIN
    INSERT INTO targets(location, version, body, named, useful, last_used)
    VALUES (NEW.location, 1, NULL, {_NAMED.format("NEW")}, 0, NEW.last_seen)
    ON CONFLICT(location) DO UPDATE SET version = version + 1, body = NULL, useful = 1,
        last_used = max(last_used, excluded.last_used);
END""",
    f"""CREATE TRIGGER IF NOT EXISTS history_keeps_the_latest
AFTER INSERT ON observations
WHEN (SELECT count(*) FROM observations WHERE location = NEW.location) > {MAX_HISTORY} BEGIN
    DELETE FROM observations WHERE location = NEW.location AND sha256 NOT IN (
        SELECT sha256 FROM observations WHERE location = NEW.location
        ORDER BY {_ORDER} LIMIT {MAX_HISTORY});
END""",
    """CREATE TRIGGER IF NOT EXISTS forgotten_certificate_drops_chain
AFTER DELETE ON observations BEGIN
    DELETE FROM chains WHERE location = OLD.location AND sha256 = OLD.sha256;
END""",
    # an evicted record takes its history and chains with it
    """CREATE TRIGGER IF NOT EXISTS evicted_record_drops_rows
AFTER DELETE ON targets BEGIN
    DELETE FROM observations WHERE location = OLD.location;
    DELETE FROM chains WHERE location = OLD.location;
END""",
    # the accounting (notary/store/budget.py): records and bytes per class
    f"""CREATE TRIGGER IF NOT EXISTS usage_target_in AFTER INSERT ON targets BEGIN
    UPDATE usage SET records = records + 1, bytes = bytes + {_R} + length(NEW.location)
        + coalesce(length(NEW.body), 0) WHERE named = NEW.named;
END""",
    f"""CREATE TRIGGER IF NOT EXISTS usage_target_out AFTER DELETE ON targets BEGIN
    UPDATE usage SET records = records - 1, bytes = bytes - {_R} - length(OLD.location)
        - coalesce(length(OLD.body), 0) WHERE named = OLD.named;
END""",
    """CREATE TRIGGER IF NOT EXISTS usage_body AFTER UPDATE OF body ON targets BEGIN
    UPDATE usage SET bytes = bytes + coalesce(length(NEW.body), 0)
        - coalesce(length(OLD.body), 0) WHERE named = NEW.named;
END""",
    f"""CREATE TRIGGER IF NOT EXISTS usage_observation_in AFTER INSERT ON observations BEGIN
    UPDATE usage SET bytes = bytes + {_R + OBSERVATION_BYTES} + length(NEW.location)
        WHERE named = {_NAMED.format("NEW")};
END""",
    f"""CREATE TRIGGER IF NOT EXISTS usage_observation_out AFTER DELETE ON observations BEGIN
    UPDATE usage SET bytes = bytes - {_R + OBSERVATION_BYTES} - length(OLD.location)
        WHERE named = {_NAMED.format("OLD")};
END""",
    f"""CREATE TRIGGER IF NOT EXISTS usage_chain_in AFTER INSERT ON chains BEGIN
    UPDATE usage SET bytes = bytes + {_R} + length(NEW.location) + NEW.der_bytes
        WHERE named = {_NAMED.format("NEW")};
    UPDATE certs SET refs = refs + 1 WHERE sha256 IN ({_DIGESTS.format("NEW")});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS usage_chain_change AFTER UPDATE OF chain ON chains BEGIN
    UPDATE usage SET bytes = bytes + NEW.der_bytes - OLD.der_bytes
        WHERE named = (instr(NEW.location, '/') > 0);
    UPDATE certs SET refs = refs + 1 WHERE sha256 IN ({_DIGESTS.format("NEW")});
    UPDATE certs SET refs = refs - 1 WHERE sha256 IN ({_DIGESTS.format("OLD")});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS usage_chain_out AFTER DELETE ON chains BEGIN
    UPDATE usage SET bytes = bytes - {_R} - length(OLD.location) - OLD.der_bytes
        WHERE named = {_NAMED.format("OLD")};
    UPDATE certs SET refs = refs - 1 WHERE sha256 IN ({_DIGESTS.format("OLD")});
END""",
    # a certificate goes with its last reference (references are added before others are
    # taken away, in usage_chain_change, so a kept certificate never reaches 0 on the way)
    """CREATE TRIGGER IF NOT EXISTS unreferenced_certificate_goes
AFTER UPDATE OF refs ON certs WHEN NEW.refs <= 0 BEGIN
    DELETE FROM certs WHERE sha256 = NEW.sha256;
END""",
    # saving a chain, one statement: its certificates (each once), then the chain itself
    f"""CREATE VIEW IF NOT EXISTS chain_in AS SELECT location, sha256, chain, seen, der_bytes,
    {", ".join(f"NULL AS c{i}" for i in range(MAX_CHAIN_CERTS))} FROM chains WHERE 0""",
    f"""CREATE TRIGGER IF NOT EXISTS chain_in_saves INSTEAD OF INSERT ON chain_in BEGIN
    INSERT INTO certs(sha256, der, refs, seen)
        SELECT substr(NEW.chain, n * {DIGEST} + 1, {DIGEST}), CASE n
            {" ".join(f"WHEN {i} THEN NEW.c{i}" for i in range(MAX_CHAIN_CERTS))} END, 0,
            NEW.seen
        FROM seq WHERE n < length(NEW.chain) / {DIGEST}
        ON CONFLICT(sha256) DO UPDATE SET seen = max(seen, excluded.seen);
    INSERT INTO chains(location, sha256, chain, seen, der_bytes)
        VALUES (NEW.location, NEW.sha256, NEW.chain, NEW.seen, NEW.der_bytes)
        ON CONFLICT(location, sha256) DO UPDATE SET chain = excluded.chain,
            seen = excluded.seen, der_bytes = excluded.der_bytes;
END""",
    "CREATE INDEX IF NOT EXISTS targets_eviction ON targets(named, useful, last_used)",
    "CREATE INDEX IF NOT EXISTS targets_last_used ON targets(named, last_used)",
)
# the accounting recomputed from the rows (a new or upgraded file)
_RECOUNT = f"""
INSERT OR REPLACE INTO usage(named, records, bytes)
SELECT c.named,
    (SELECT count(*) FROM targets t WHERE t.named = c.named),
    coalesce((SELECT sum({_R} + length(location) + coalesce(length(body), 0))
              FROM targets t WHERE t.named = c.named), 0)
  + coalesce((SELECT sum({_R + OBSERVATION_BYTES} + length(location)) FROM observations o
              WHERE {_NAMED.format("o")} = c.named), 0)
  + coalesce((SELECT sum({_R} + length(location) + der_bytes) FROM chains h
              WHERE {_NAMED.format("h")} = c.named), 0)
FROM (SELECT 0 AS named UNION ALL SELECT 1) c
"""
_GET = """
SELECT t.version, t.body, o.sha1, o.sha256, o.first_seen, o.last_seen
FROM targets t LEFT JOIN observations o ON o.location = t.location
WHERE t.location = ?
"""
# One statement: the upsert (history merge), the triggers (version, pruning, chains), and
# the record as it stands after them. RETURNING is computed before AFTER triggers run, so
# the history is read with the same LIMIT the pruning trigger applies.
_OBSERVE = f"""
INSERT INTO observations(location, sha256, sha1, first_seen, last_seen)
VALUES (?1, ?2, ?3, ?4, ?4)
ON CONFLICT(location, sha256) DO UPDATE SET
    first_seen = min(first_seen, excluded.first_seen),
    last_seen = max(last_seen, excluded.last_seen)
RETURNING
    (SELECT version FROM targets WHERE targets.location = ?1),
    (SELECT group_concat(hex(sha1) || ' ' || hex(sha256) || ' ' || first_seen || ' '
                         || last_seen, ',')
     FROM (SELECT sha1, sha256, first_seen, last_seen FROM observations
           WHERE observations.location = ?1 ORDER BY {_ORDER} LIMIT {MAX_HISTORY})),
    (SELECT records || ' ' || bytes FROM usage WHERE named = (instr(?1, '/') > 0))
"""
_SAVE_BODY = "UPDATE targets SET body = ? WHERE location = ? AND version = ?"
_SAVE_CERT = (  # the schema-6 conversion of an older file
    "INSERT INTO certs(sha256, der, refs, seen) VALUES (?, ?, 0, ?)"
    " ON CONFLICT(sha256) DO UPDATE SET seen = max(seen, excluded.seen)"
)
_SAVE_CHAIN = (
    "INSERT INTO chain_in(location, sha256, chain, seen, der_bytes, "
    + ", ".join(f"c{i}" for i in range(MAX_CHAIN_CERTS)) + ") VALUES ("
    + ", ".join("?" * (5 + MAX_CHAIN_CERTS)) + ")"
)
# a chain's certificates in order, with how many it names (a missing one: corrupt)
_CHAIN_ROWS = f"""
SELECT h.location, h.sha256, h.seen, length(h.chain) / {DIGEST}, length(h.chain) % {DIGEST},
    s.n, c.der
FROM ({{}}) h LEFT JOIN seq s ON s.n < length(h.chain) / {DIGEST}
LEFT JOIN certs c ON c.sha256 = substr(h.chain, s.n * {DIGEST} + 1, {DIGEST})
ORDER BY h.location, h.sha256, s.n
"""
_GET_CHAIN = _CHAIN_ROWS.format(
    "SELECT location, sha256, chain, seen FROM chains WHERE location = ? AND sha256 = ?")
_CHAINS = _CHAIN_ROWS.format(
    "SELECT location, sha256, chain, seen FROM chains ORDER BY location, sha256 LIMIT ?")
_SEQ = "INSERT OR IGNORE INTO seq(n) VALUES " + ",".join(
    f"({i})" for i in range(MAX_CHAIN_CERTS))

Rows = list[Any]
# a queued statement: (what, sql, params, the caller's future or None, location written)
_Queued = tuple[str, str, Sequence[object], "asyncio.Future[Rows] | None", str]


def _history(rows: Sequence[Sequence[Any]]) -> History:
    return ordered(
        Observation(bytes(r[0]), bytes(r[1]), int(r[2]), int(r[3])) for r in rows
    )


def _returned_history(text: str | None) -> History:
    if not text:
        return ()
    out = []
    for item in text.split(","):
        sha1, sha256, first, last = item.split(" ")
        out.append(Observation(bytes.fromhex(sha1), bytes.fromhex(sha256), int(first), int(last)))
    return ordered(out)


Op = tuple[str, Sequence[object]]  # one statement and its parameters
Outcome = Rows | sqlite3.Error  # an op's rows, or why it failed


class _Conn(Protocol):
    """What the store needs of a driver: one statement, its rows, one hop; or several
    statements in one transaction, still one hop."""

    async def fetchall(self, sql: str, params: Sequence[object] = ()) -> Rows: ...

    async def batch(self, ops: Sequence[Op], writes: Sequence[bool]) -> list[Outcome]: ...

    async def close(self) -> None: ...


def _apply(conn: sqlite3.Connection, ops: Sequence[Op], writes: Sequence[bool]) -> list[Outcome]:
    """Run ``ops`` in order on the driver's thread: one alone as its own statement, several
    as one transaction (``BEGIN IMMEDIATE`` when any writes: no lock upgrade can fail half
    way). When a statement or the commit fails (a constraint, a full disk), the transaction
    is rolled back and every op runs again alone, so a failing op fails only itself; when
    the transaction cannot begin (the file locked past ``busy_timeout``), the writes fail
    with that and the reads run alone (a reader never waits for the lock)."""
    if len(ops) == 1:
        sql, params = ops[0]
        try:
            return [conn.execute(sql, params).fetchall()]
        except sqlite3.Error as exc:
            return [exc]
    try:
        conn.execute("BEGIN IMMEDIATE" if any(writes) else "BEGIN")
    except sqlite3.Error as exc:
        return [exc if w else _apply(conn, [op], (w,))[0]
                for op, w in zip(ops, writes, strict=True)]
    try:
        out: list[Outcome] = [conn.execute(sql, params).fetchall() for sql, params in ops]
        conn.execute("COMMIT")
    except sqlite3.Error:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        return [_apply(conn, [op], (w,))[0] for op, w in zip(ops, writes, strict=True)]
    return out


class _AioConn:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def fetchall(self, sql: str, params: Sequence[object] = ()) -> Rows:
        return list(await self._conn.execute_fetchall(sql, params))

    async def batch(self, ops: Sequence[Op], writes: Sequence[bool]) -> list[Outcome]:
        # aiosqlite's own hop (the one execute_fetchall takes) with a function of ours on
        # its thread: several statements for the price of one hand-off. ``_execute`` and
        # ``_conn`` are aiosqlite's (0.17 to 0.22 at least); tests/notary/
        # test_store_batch.py fails if they go.
        conn = self._conn
        run = cast(Callable[..., Awaitable[list[Outcome]]], conn._execute)
        return await run(_apply, conn._conn, ops, writes)

    async def close(self) -> None:
        await self._conn.close()


def _open_reader(path: str) -> sqlite3.Connection | None:
    """A read-only connection for the event loop's thread (see :meth:`SQLiteStore.get`), or
    None where there is none to have (an in-memory database, a file it cannot open)."""
    if path == ":memory:" or path.startswith("file:"):
        return None
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True,
                               isolation_level=None, check_same_thread=False)
    except sqlite3.Error:
        return None
    try:
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("PRAGMA query_only = 1")
    except sqlite3.Error:
        conn.close()
        return None
    return conn


def _fetchall(conn: sqlite3.Connection, sql: str, params: Sequence[object]) -> Rows:
    return conn.execute(sql, params).fetchall()


class _ThreadConn:
    """The earlier driver: a plain sqlite3 connection on the store's own one-thread executor
    (kept to measure aiosqlite against, side by side)."""

    def __init__(self, conn: sqlite3.Connection, thread: ThreadPoolExecutor) -> None:
        self._conn = conn
        self._thread = thread

    async def fetchall(self, sql: str, params: Sequence[object] = ()) -> Rows:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, _fetchall, self._conn, sql, params
        )

    async def batch(self, ops: Sequence[Op], writes: Sequence[bool]) -> list[Outcome]:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, _apply, self._conn, ops, writes
        )

    async def close(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._thread, self._conn.close)
        finally:
            self._thread.shutdown(wait=False)


async def _connect(path: str, driver: Driver) -> _Conn:
    if driver == "aiosqlite":
        return _AioConn(await aiosqlite.connect(path, isolation_level=None))
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="notary-sqlite")
    try:
        conn = await asyncio.get_running_loop().run_in_executor(
            thread, lambda: sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        )
    except BaseException:
        thread.shutdown(wait=False)
        raise
    return _ThreadConn(conn, thread)


async def _prepare(db: _Conn, path: str, busy_timeout_ms: int) -> None:
    await db.fetchall(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    await db.fetchall("PRAGMA journal_mode = WAL")
    await db.fetchall("PRAGMA synchronous = NORMAL")
    await _migrate(db, path)


async def _migrate(db: _Conn, path: str) -> None:
    """Create the schema and bring it to :data:`SCHEMA_VERSION` in one write transaction
    (see module). Nothing else uses the connection yet, so this one transaction may span
    awaits. Several workers may open the file at once: ``BEGIN IMMEDIATE`` makes one of
    them migrate and the others find the version already recorded."""
    await db.fetchall("BEGIN IMMEDIATE")
    try:
        for statement in _TABLES:
            await db.fetchall(statement)
        row = await db.fetchall("SELECT value FROM meta WHERE key = 'schema_version'")
        version = int(row[0][0]) if row else None
        have = {str(r[1]) for r in await db.fetchall("PRAGMA table_info(targets)")}
        for column, decl in _TARGET_COLUMNS.items():
            if column not in have:
                await db.fetchall(f"ALTER TABLE targets ADD COLUMN {column} {decl}")
        await db.fetchall(_SEQ)
        await db.fetchall("DROP INDEX IF EXISTS certs_unreferenced")  # an earlier schema 6
        if version is not None and version < 6:
            await _dedupe_chains(db)
        if version is not None and version < 5:  # the trigger schema 5 changed
            await db.fetchall("DROP TRIGGER IF EXISTS observation_bumps_version")
            await db.fetchall(
                f"UPDATE targets SET named = {_NAMED.format('targets')}, last_used = coalesce("
                "(SELECT max(last_seen) FROM observations o WHERE o.location = targets.location),"
                " 0)")
        for statement in _TRIGGERS:
            await db.fetchall(statement)
        dropped = 0
        if version is None or version < 3:
            dropped = int((await db.fetchall("SELECT count(*) FROM targets"))[0][0])
            if dropped:
                for table in ("chains", "observations", "targets"):
                    await db.fetchall(f"DELETE FROM {table}")
        await db.fetchall("DELETE FROM certs WHERE refs <= 0")  # none is kept unreferenced
        counted = await db.fetchall("SELECT count(*) FROM usage")
        if version is None or version < 6 or int(counted[0][0]) != 2:
            await db.fetchall(_RECOUNT)
        if version is None or version < SCHEMA_VERSION:
            await db.fetchall(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
        await db.fetchall("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error, ValueError):
            await db.fetchall("ROLLBACK")
        raise
    if dropped:
        log.warning(
            "%s: schema %s -> %d: dropped %d cached target records (an older schema could "
            "hold observations made at client-named addresses under host:port); they refill "
            "from live probes", path, version, SCHEMA_VERSION, dropped,
        )


_USAGE = "SELECT named, records, bytes FROM usage ORDER BY named"
_EVICT = """DELETE FROM targets WHERE location IN (SELECT location FROM targets WHERE named = ?
ORDER BY useful, last_used LIMIT ?)"""
_EXPIRE = "DELETE FROM targets WHERE named = ? AND last_used < ?"
_TOUCH_BATCH = 500  # locations per touch statement
BATCH_MAX = 256  # statements per transaction of the write queue
BODY_DELAY = 0.05  # seconds a signed body may wait for other statements to go with


class SQLiteStore:
    """Every statement goes through one queue: the statements of one turn of the event loop
    (and those that arrive while a batch is on the driver's thread) run as one transaction
    in one hop, in the order they were asked for, and each caller is answered when that
    transaction has committed. An observation is therefore durable (as durable as
    ``synchronous=NORMAL`` makes any commit) before its caller hears of it, as before; what
    the batching changes is only that several callers share a commit. A signed body
    (:meth:`save_body_soon`) is the exception: nobody waits for it, and it goes with the
    next batch or after at most :data:`BODY_DELAY` seconds; if the process dies first, the
    body is signed again by whoever needs it."""

    def __init__(self, db: _Conn, path: str, driver: Driver, budget: Budget) -> None:
        self._db = db
        self.path = path
        self.driver = driver
        self.budget = budget
        self.evicted = 0  # records this process evicted or expired
        self._expired_at = 0
        # (what, sql, params, caller's future or None: nobody waits, location written or "")
        self._queue: list[_Queued] = []
        # writes queued or on the driver's thread, by location ("": any location)
        self._writing: dict[str, int] = {}
        # reads on the event loop's thread (see get); None: every read goes through the queue
        self._reader: sqlite3.Connection | None = None
        self.loop_reads = 0  # reads answered there, for tests and benchmarks
        self._flushing: asyncio.Future[None] | None = None
        self._soon: asyncio.TimerHandle | None = None
        # told of a failed write nobody waited for (save_body_soon): the operator's log
        self.deferred_failed: Callable[[str], None] = lambda message: None
        self.batches = 0  # transactions (hops) the queue ran, for tests and benchmarks

    @classmethod
    async def open(
        cls, path: str | Path, *, busy_timeout_ms: int = 5000, driver: Driver = "aiosqlite",
        budget: Budget = UNBOUNDED,
    ) -> SQLiteStore:
        if driver not in DRIVERS:
            raise ValueError(f"unknown SQLite driver {driver!r}")
        path = str(path)
        try:
            db = await _connect(path, driver)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite store {path}: {exc}") from exc
        try:
            await _prepare(db, path, busy_timeout_ms)
        except sqlite3.Error as exc:
            await db.close()
            raise StoreUnavailable(f"cannot open SQLite store {path}: {exc}") from exc
        except BaseException:
            await db.close()
            raise
        store = cls(db, path, driver, budget)
        store._reader = _open_reader(path)
        return store

    async def _run(self, what: str, sql: str, params: Sequence[object],
                   about: str = "") -> Rows:
        """One statement through the queue, its rows when its transaction has committed;
        SQLite errors and a closed store -> StoreUnavailable. ``about``: the one location
        a write changes ("": it may change any)."""
        fut: asyncio.Future[Rows] = asyncio.get_running_loop().create_future()
        self._enqueue((what, sql, params, fut, about))
        self._start()
        return await fut

    def _enqueue(self, op: _Queued) -> None:
        self._queue.append(op)
        if op[0] == "write":
            self._writing[op[4]] = self._writing.get(op[4], 0) + 1

    def _written(self, op: _Queued) -> None:
        if op[0] == "write":
            left = self._writing[op[4]] - 1
            if left:
                self._writing[op[4]] = left
            else:
                del self._writing[op[4]]

    def _start(self) -> None:
        """Run the queue soon (in a task: statements asked for in this turn of the loop go
        with it)."""
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        if self._flushing is None:
            self._flushing = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        ops: list[_Queued] = []
        try:
            while self._queue:
                ops, self._queue = self._queue[:BATCH_MAX], self._queue[BATCH_MAX:]
                try:
                    outcomes: Sequence[Outcome | Exception] = await self._db.batch(
                        [(op[1], op[2]) for op in ops], [op[0] == "write" for op in ops])
                except (ValueError, RuntimeError) as exc:  # the driver's thread is gone
                    outcomes = [exc] * len(ops)
                self.batches += 1
                done, ops = ops, []
                for op, out in zip(done, outcomes, strict=True):
                    self._written(op)
                    what, fut = op[0], op[3]
                    if isinstance(out, list):
                        if fut is not None and not fut.done():
                            fut.set_result(out)
                        continue
                    failure = StoreUnavailable(f"store {what} failed: " + (
                        str(out) if isinstance(out, sqlite3.Error) else "the store is closed"))
                    if fut is None:
                        with contextlib.suppress(Exception):  # a report must not stop the rest
                            self.deferred_failed(failure.message)
                    elif not fut.done():
                        fut.set_exception(failure)
        finally:
            self._flushing = None
            # cancelled with work left (the loop is closing): nobody is left hanging
            for op in [*ops, *self._queue]:
                self._written(op)
                fut = op[3]
                if fut is not None and not fut.done():
                    fut.set_exception(StoreUnavailable("store request failed: the store is "
                                                       "closing"))
            self._queue = []

    async def get(self, location: str) -> TargetRecord | None:
        """The record; read on the event loop's own thread when nothing this process asked
        to write about ``location`` is still on its way (one indexed lookup, about 4 us,
        against a hop to the driver's thread and back), else through the queue after
        those writes. The loop's connection is read-only and never waits: it takes no
        lock, never checkpoints (the driver's connection does, on its thread), and a
        read SQLite answers with ``SQLITE_BUSY`` (a WAL being reset by another process)
        goes through the queue instead."""
        reader = self._reader
        rows: Rows | None = None
        writing = self._writing
        if reader is not None and not (writing and (location in writing or "" in writing)):
            try:
                rows = reader.execute(_GET, (location,)).fetchall()
                self.loop_reads += 1
            except sqlite3.OperationalError:
                rows = None  # busy or locked: the driver's thread waits for it
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"store read failed: {exc}") from exc
        if rows is None:
            rows = await self._run("read", _GET, (location,))
        if not rows:
            return None
        version, body = int(rows[0][0]), rows[0][1]
        return TargetRecord(
            location, _history([r[2:] for r in rows if r[2] is not None]), version,
            bytes(body) if body is not None else None,
        )

    async def observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord:
        rows = await self._run("write", _OBSERVE, (location, seen.sha256, seen.sha1, int(now)),
                               location)
        version, text, usage = rows[0]
        # the class's accounting as the statement left it (before its AFTER triggers: at most
        # this one observation's bytes short): no second statement when under the caps
        records, _, nbytes = (usage or "0 0").partition(" ")
        await self.enforce(int(now), (is_named(location), int(records), int(nbytes)))
        return TargetRecord(location, _returned_history(text), int(version), None)

    async def usage(self) -> dict[bool, tuple[int, int]]:
        """Accounted (records, bytes) per class: ``{False: own, True: named}``."""
        rows = await self._run("read", _USAGE, ())
        return {bool(r[0]): (int(r[1]), int(r[2])) for r in rows}

    async def touch(self, locations: Sequence[str], now: int) -> None:
        """Mark records as used at ``now`` (they answered a request from the cache)."""
        for i in range(0, len(locations), _TOUCH_BATCH):
            batch = list(locations[i : i + _TOUCH_BATCH])
            marks = ",".join("?" * len(batch))
            await self._run("write", "UPDATE targets SET useful = 1, last_used = max(last_used,"
                            f" ?) WHERE location IN ({marks})", [int(now), *batch])

    async def enforce(self, now: int, hint: tuple[bool, int, int] | None = None) -> int:
        """Apply the budget: drop records past their time to live (at most once per
        :data:`EXPIRE_EVERY` seconds), then evict the least useful records of a class over
        its caps. Returns how many records went. ``hint``: (class, records, bytes) as a
        write just returned them; when that class is within its caps (and no sweep is due)
        nothing else is read, since a write grows only its own class."""
        budget, gone = self.budget, 0
        if hint is not None and now - self._expired_at < EXPIRE_EVERY and (
                not budget.over(*hint)):
            return 0
        if now - self._expired_at >= EXPIRE_EVERY:
            self._expired_at = now
            for named in (False, True):
                ttl = budget.ttl_of(named)
                if ttl:
                    rows = await self._run("write", _EXPIRE + " RETURNING 1",
                                           (int(named), now - ttl))
                    gone += len(rows)
        for _ in range(EVICT_ROUNDS):
            excess = {named: budget.excess(named, records, nbytes)
                      for named, (records, nbytes) in (await self.usage()).items()}
            if not any(excess.values()):
                break
            for named, count in excess.items():
                if count:
                    gone += len(await self._run("write", _EVICT + " RETURNING 1",
                                                (int(named), count)))
        self.evicted += gone
        return gone

    async def save_body(self, location: str, version: int, body: bytes) -> None:
        await self._run("write", _SAVE_BODY, (body, location, version), location)

    def save_body_soon(self, location: str, version: int, body: bytes) -> None:
        """:meth:`save_body` without waiting: the write goes with the next batch, at the
        latest after :data:`BODY_DELAY` seconds (a failure goes to :attr:`deferred_failed`).
        Statements asked for later run after it, so this process's own reads see it."""
        self._enqueue(("write", _SAVE_BODY, (body, location, version), None, location))
        if self._flushing is None and self._soon is None:
            self._soon = asyncio.get_running_loop().call_later(BODY_DELAY, self._start)

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
        if self._queue:
            self._start()  # what nobody waited for is written before the connection goes
        if self._flushing is not None:
            with contextlib.suppress(Exception):
                await self._flushing
        try:
            await self._db.close()
        except (sqlite3.Error, ValueError, RuntimeError) as exc:
            raise StoreUnavailable(f"store close failed: {exc}") from exc

    async def save_chain(
        self, location: str, sha256: bytes, chain: tuple[bytes, ...], now: int
    ) -> None:
        """One statement: the certificates (each once, whoever stored it first) and the
        chain naming them by digest, whose triggers count the references."""
        check_chain(chain)  # BadData before anything is written
        ders: list[bytes | None] = [*chain, *[None] * (MAX_CHAIN_CERTS - len(chain))]
        await self._run("write", _SAVE_CHAIN, (location, sha256,
                                               b"".join(chain_digests(chain)), int(now),
                                               sum(map(len, chain)), *ders), location)

    async def get_chain(self, location: str, sha256: bytes) -> tuple[bytes, ...] | None:
        chains = _assemble(await self._run("read", _GET_CHAIN, (location, sha256)))
        return chains[0].chain if chains else None

    async def chains(self, limit: int) -> list[StoredChain]:
        return _assemble(await self._run("read", _CHAINS, (max(0, limit),)))

    async def stored_certificates(self) -> tuple[int, int]:
        """(certificates, DER bytes) stored once each in the deduplicated table."""
        rows = await self._run(
            "read", "SELECT count(*), coalesce(sum(length(der)), 0) FROM certs", ())
        return int(rows[0][0]), int(rows[0][1])


def _assemble(rows: Rows) -> list[StoredChain]:
    """Chains from :data:`_CHAIN_ROWS` rows; a chain naming a certificate that is not there,
    or with a digest list of the wrong length, is a corrupt store."""
    out: list[StoredChain] = []
    for (location, sha256), group in itertools.groupby(
            rows, key=lambda r: (str(r[0]), bytes(r[1]))):
        items = list(group)
        seen, count, rest = int(items[0][2]), int(items[0][3]), int(items[0][4])
        ders = [bytes(r[6]) for r in items if r[5] is not None and r[6] is not None]
        if rest or not count or len(ders) != count:
            raise StoreUnavailable(f"{location}: stored chain is corrupt (it names "
                                   f"{count} certificates, {len(ders)} are stored)")
        out.append(StoredChain(location, sha256, tuple(ders), seen))
    return out


async def _dedupe_chains(db: _Conn) -> None:
    """Schema 6: chains of an older file (each a whole ``C1`` blob) become digest lists over
    the ``certs`` table, with their reference counts. A blob that does not decode is dropped
    (the next probe stores the chain again)."""
    for trigger in ("usage_chain_in", "usage_chain_change", "usage_chain_out"):
        await db.fetchall(f"DROP TRIGGER IF EXISTS {trigger}")
    have = {str(r[1]) for r in await db.fetchall("PRAGMA table_info(chains)")}
    if "der_bytes" not in have:
        await db.fetchall("ALTER TABLE chains ADD COLUMN der_bytes INTEGER NOT NULL DEFAULT 0")
    for location, sha256, raw, seen in await db.fetchall(
            "SELECT location, sha256, chain, seen FROM chains"):
        try:
            chain = decode_chain(bytes(raw))
        except BadData:
            await db.fetchall("DELETE FROM chains WHERE location = ? AND sha256 = ?",
                              (location, sha256))
            continue
        digests = chain_digests(chain)
        for d, der in zip(digests, chain, strict=True):
            await db.fetchall(_SAVE_CERT, (d, der, seen))
        await db.fetchall("UPDATE chains SET chain = ?, der_bytes = ? WHERE location = ? AND "
                          "sha256 = ?", (b"".join(digests), sum(map(len, chain)), location,
                                         sha256))
    await db.fetchall(f"UPDATE certs SET refs = (SELECT count(*) FROM chains h WHERE EXISTS ("
                      f"SELECT 1 FROM seq WHERE n < length(h.chain) / {DIGEST} AND "
                      f"substr(h.chain, n * {DIGEST} + 1, {DIGEST}) = certs.sha256))")


__all__ = ["SQLiteStore"]
