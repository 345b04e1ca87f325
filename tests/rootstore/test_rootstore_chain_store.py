"""Chain storage: one contract over memory, SQLite (with the v1 migration) and a real Redis."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from redis_testing import shared_redis_url

from notary.core.fingerprint import CertDigests
from notary.errors import BadData, StoreUnavailable
from notary.store.base import ChainStore, Store
from notary.store.lru import CachedStore
from notary.store.memory import MemoryStore
from notary.store.sqlite import SCHEMA_VERSION, SQLiteStore

LOC = "site.test:443"
A, B = b"\xaa" * 32, b"\xbb" * 32
CHAIN = (b"leaf-der", b"intermediate-der")
async def _memory(tmp: Path) -> Store:
    return MemoryStore()


async def _sqlite(tmp: Path) -> Store:
    return await SQLiteStore.open(tmp / "chains.sqlite3")


async def _cached(tmp: Path) -> Store:
    return CachedStore(await SQLiteStore.open(tmp / "cached.sqlite3"), max_entries=2)


async def _redis_store(tmp: Path) -> Store:
    from notary.store.redis import RedisStore

    return RedisStore.from_url(shared_redis_url(), prefix=f"rootstore-{id(tmp)}-{tmp.name}:")


STORES: dict[str, Callable[[Path], Awaitable[Store]]] = {
    "memory": _memory, "sqlite": _sqlite, "cached-sqlite": _cached, "redis": _redis_store}


@pytest.fixture(params=sorted(STORES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s = await STORES[request.param](tmp_path)
    yield s
    await s.close()


async def test_save_get_and_list(store: Store) -> None:
    assert isinstance(store, ChainStore)
    assert await store.get_chain(LOC, A) is None
    await store.save_chain(LOC, A, CHAIN, 100)
    assert await store.get_chain(LOC, A) == CHAIN
    assert await store.get_chain(LOC, B) is None  # twin: another leaf has none
    assert await store.get_chain("other.test:443", A) is None
    await store.save_chain(LOC, A, CHAIN[:1], 200)  # last write wins
    assert await store.get_chain(LOC, A) == CHAIN[:1]
    await store.save_chain("other.test:443", B, CHAIN, 150)
    listed = sorted(await store.chains(10), key=lambda c: c.location)
    assert [(c.location, c.sha256, c.chain, c.seen) for c in listed] == [
        ("other.test:443", B, CHAIN, 150), (LOC, A, CHAIN[:1], 200)]
    assert len(await store.chains(1)) == 1


async def test_chains_do_not_touch_records(store: Store) -> None:
    assert isinstance(store, ChainStore)
    await store.save_chain(LOC, A, CHAIN, 1)
    assert await store.get(LOC) is None
    rec = await store.observe(LOC, CertDigests.of(b"x"), 5)
    assert rec.version == 1
    assert await store.get_chain(LOC, A) == CHAIN


async def test_bad_chains_are_refused(store: Store) -> None:
    assert isinstance(store, ChainStore)
    with pytest.raises(BadData):
        await store.save_chain(LOC, A, (), 1)
    with pytest.raises(BadData):
        await store.save_chain(LOC, A, (b"x" * 70_000,), 1)
    assert await store.get_chain(LOC, A) is None  # nothing was kept


async def test_sqlite_migrates_a_version_1_database(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE targets (location TEXT PRIMARY KEY, version INTEGER NOT NULL, body BLOB);
        CREATE TABLE observations (location TEXT NOT NULL, sha256 BLOB NOT NULL,
            sha1 BLOB NOT NULL, first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL,
            PRIMARY KEY (location, sha256)) WITHOUT ROWID;
        INSERT INTO meta VALUES ('schema_version', '1');
        INSERT INTO targets VALUES ('site.test:443', 3, x'626f6479');
    """)
    db.commit()
    db.close()
    store = await SQLiteStore.open(path)
    try:
        # schema 3 re-keyed records: an older database's records are dropped on upgrade
        assert await store.get(LOC) is None
        await store.save_chain(LOC, A, CHAIN, 7)
        assert await store.get_chain(LOC, A) == CHAIN
    finally:
        await store.close()
    version = sqlite3.connect(path).execute(
        "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),) and SCHEMA_VERSION == 6
    # reopening a migrated database changes nothing
    again = await SQLiteStore.open(path)
    try:
        assert await again.get_chain(LOC, A) == CHAIN
    finally:
        await again.close()


async def test_sqlite_corrupt_chain_is_a_store_failure(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "c.sqlite3")
    try:
        await store.save_chain(LOC, A, CHAIN, 1)
        db = sqlite3.connect(tmp_path / "c.sqlite3")
        db.execute("UPDATE chains SET chain = x'00'")
        db.commit()
        db.close()
        with pytest.raises(StoreUnavailable):
            await store.get_chain(LOC, A)
    finally:
        await store.close()


async def test_cached_store_without_chain_backend() -> None:
    class Bare:
        async def get(self, location: str) -> None:
            return None

        async def close(self) -> None:
            return None

    cached = CachedStore(Bare())  # type: ignore[arg-type]
    await cached.save_chain(LOC, A, CHAIN, 1)  # nothing to keep it: no error
    assert await cached.get_chain(LOC, A) is None
    assert await cached.chains(5) == []
