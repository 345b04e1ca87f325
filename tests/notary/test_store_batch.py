"""The SQLite store's queue (notary/store/sqlite.py): the statements of one turn of the
event loop run as one transaction in one hop to the driver's thread; every caller hears of
its statement only once that transaction has committed (another connection sees it); one
failing statement fails only itself; a signed body nobody waits for is written with the
next batch, after at most ``BODY_DELAY``, or when the store closes. Real SQLite files, both
drivers (aiosqlite's own thread and the one-thread executor)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from notary.core.fingerprint import CertDigests
from notary.errors import StoreUnavailable
from notary.store.lru import CachedStore
from notary.store.sqlite import BODY_DELAY, DRIVERS, Driver, SQLiteStore

NOW = 1_800_000_000

pytestmark = pytest.mark.parametrize("driver", DRIVERS)


def cert(n: int) -> CertDigests:
    return CertDigests.of(f"certificate {n}".encode())


async def opened(path: Path, driver: Driver) -> SQLiteStore:
    """A store past its first write (which also sweeps the budget: a statement of its own)."""
    store = await SQLiteStore.open(path, driver=driver)
    await store.observe("first.test:443", cert(0), NOW)
    return store


def stored(path: Path, sql: str) -> list[tuple[object, ...]]:
    """What another connection (another process's view) reads from the file now."""
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


async def test_one_turn_of_the_loop_is_one_batch(tmp_path: Path, driver: Driver) -> None:
    store = await opened(tmp_path / "b.sqlite3", driver)
    try:
        before = store.batches
        recs = await asyncio.gather(*(store.observe(f"h{i}.test:443", cert(i), NOW)
                                      for i in range(20)))
        assert store.batches - before == 1
        # committed before any caller heard of it: another connection sees all of them
        assert stored(tmp_path / "b.sqlite3", "SELECT count(*) FROM observations") == [(21,)]
        assert [r.version for r in recs] == [1] * 20
        assert [len(r.history) for r in recs] == [1] * 20
        reads = store.loop_reads
        got = await asyncio.gather(*(store.get(f"h{i}.test:443") for i in range(20)),
                                   store.get("nowhere.test:443"))
        # nothing is being written: every read on the loop's own connection, no hop
        assert store.batches - before == 1 and store.loop_reads - reads == 21
        assert [g is not None and g.history == r.history
                for g, r in zip(got[:-1], recs, strict=True)] == [True] * 20
        assert got[-1] is None
    finally:
        await store.close()


async def test_twin_one_after_the_other_is_one_batch_each(tmp_path: Path,
                                                          driver: Driver) -> None:
    store = await opened(tmp_path / "b.sqlite3", driver)
    try:
        before = store.batches
        for i in range(5):
            await store.observe(f"h{i}.test:443", cert(i), NOW)
        assert store.batches - before == 5
    finally:
        await store.close()


@pytest.mark.parametrize("same", [True, False])
async def test_a_read_waits_for_the_writes_about_its_location(tmp_path: Path, driver: Driver,
                                                              same: bool) -> None:
    """About the location being written: through the queue, after the write; twin, about
    another location: on the loop at once, the write still on its way."""
    store = await opened(tmp_path / "w.sqlite3", driver)
    try:
        reads = store.loop_reads
        writing = asyncio.ensure_future(store.observe("a.test:443", cert(1), NOW))
        await asyncio.sleep(0)  # the write is queued, not yet committed
        got = await store.get("a.test:443" if same else "first.test:443")
        assert got is not None and got.version == 1
        assert store.loop_reads - reads == (0 if same else 1)
        assert writing.done() == same
        await writing
    finally:
        await store.close()


async def test_a_failing_statement_fails_only_itself(tmp_path: Path, driver: Driver) -> None:
    path = tmp_path / "f.sqlite3"
    store = await opened(path, driver)
    try:
        before = store.batches
        good, bad, other = await asyncio.gather(
            store.observe("a.test:443", cert(1), NOW),
            store._run("write", "INSERT INTO no_such_table VALUES (1)", ()),
            store.observe("b.test:443", cert(2), NOW),
            return_exceptions=True)
        assert store.batches - before == 1
        assert isinstance(bad, StoreUnavailable) and "no_such_table" in bad.message
        assert not isinstance(good, BaseException) and good.version == 1
        assert not isinstance(other, BaseException) and other.version == 1
        assert stored(path, "SELECT count(*) FROM observations") == [(3,)]
    finally:
        await store.close()


async def test_a_body_nobody_waits_for_is_written_soon(tmp_path: Path, driver: Driver) -> None:
    path = tmp_path / "s.sqlite3"
    store = await SQLiteStore.open(path, driver=driver)
    try:
        rec = await store.observe("a.test:443", cert(1), NOW)
        store.save_body_soon("a.test:443", rec.version, b"signed")
        assert stored(path, "SELECT body FROM targets") == [(None,)]  # not yet
        got = await store.get("a.test:443")  # this process's reads come after it
        assert got is not None and got.body == b"signed"
        store.save_body_soon("a.test:443", rec.version, b"signed again")
        await asyncio.sleep(BODY_DELAY * 4)  # nothing else asked for: written by the timer
        assert stored(path, "SELECT body FROM targets") == [(b"signed again",)]
    finally:
        await store.close()


async def test_close_writes_the_bodies_left(tmp_path: Path, driver: Driver) -> None:
    path = tmp_path / "c.sqlite3"
    store = await SQLiteStore.open(path, driver=driver)
    rec = await store.observe("a.test:443", cert(1), NOW)
    store.save_body_soon("a.test:443", rec.version, b"signed")
    await store.close()
    assert stored(path, "SELECT body FROM targets") == [(b"signed",)]


async def test_a_failed_body_write_is_told_to_the_operator(tmp_path: Path,
                                                           driver: Driver) -> None:
    cached = CachedStore(await SQLiteStore.open(tmp_path / "r.sqlite3", driver=driver))
    try:
        rec = await cached.observe("a.test:443", cert(1), NOW)
        backend = cached.backend
        assert isinstance(backend, SQLiteStore)
        await backend._run("read", "PRAGMA query_only = 1", ())
        await cached.save_body("a.test:443", rec.version, b"signed")  # does not wait
        assert not cached.writes.failing
        await backend.get("a.test:443")  # goes with the body, which fails alone
        assert cached.writes.failing
        got = await cached.get("a.test:443")  # the LRU kept it: the answer is not lost
        assert got is not None and got.body == b"signed"
    finally:
        await cached.close()


async def test_twin_a_body_write_that_works_tells_nothing(tmp_path: Path,
                                                          driver: Driver) -> None:
    cached = CachedStore(await SQLiteStore.open(tmp_path / "r.sqlite3", driver=driver))
    try:
        rec = await cached.observe("a.test:443", cert(1), NOW)
        await cached.save_body("a.test:443", rec.version, b"signed")
        fresh = await cached.get("a.test:443", fresh=True)
        assert fresh is not None and fresh.body == b"signed"
        assert not cached.writes.failing
    finally:
        await cached.close()


async def test_a_closed_store_fails_every_waiting_caller(tmp_path: Path,
                                                         driver: Driver) -> None:
    store = await SQLiteStore.open(tmp_path / "x.sqlite3", driver=driver)
    await store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.get("a.test:443")
