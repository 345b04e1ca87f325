"""One contract suite for every store implementation (notary/store/base.py).

To add an implementation, add one entry to ``STORES``: a name and an async factory that
takes the test's ``tmp_path`` and returns an open store.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis_testing import shared_redis_url

from notary.ca.verify import MAX_CHAIN_BYTES, MAX_CHAIN_CERTS
from notary.core.fingerprint import CertDigests
from notary.core.history import MAX_HISTORY, History, observe
from notary.errors import BadData
from notary.store import CachedStore, MemoryStore, SQLiteStore, Store
from notary.store.base import ChainStore


async def _memory(tmp_path: Path) -> Store:
    return MemoryStore()


async def _sqlite(tmp_path: Path) -> Store:
    return await SQLiteStore.open(tmp_path / "contract.sqlite3")


async def _sqlite_thread(tmp_path: Path) -> Store:
    return await SQLiteStore.open(tmp_path / "contract.sqlite3", driver="thread")


async def _cached_sqlite(tmp_path: Path) -> Store:
    return CachedStore(await SQLiteStore.open(tmp_path / "contract.sqlite3"), max_entries=4)


async def _redis(tmp_path: Path) -> Store:
    from notary.store.redis import RedisStore

    # a fresh key prefix per test keeps tests independent on the one server
    prefix = f"contract-{id(tmp_path)}-{tmp_path.name}:"
    return RedisStore.from_url(shared_redis_url(), prefix=prefix)


STORES: dict[str, Callable[[Path], Awaitable[Store]]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "sqlite-thread": _sqlite_thread,
    "cached-sqlite": _cached_sqlite,
    "redis": _redis,
}


@pytest.fixture(params=sorted(STORES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s = await STORES[request.param](tmp_path)
    yield s
    await s.close()


def cert(n: int) -> CertDigests:
    """Digests of a made-up certificate number ``n``."""
    return CertDigests.of(f"certificate {n}".encode())


LOC = "site.test:443"


async def test_get_miss_returns_none(store: Store) -> None:
    assert await store.get(LOC) is None
    assert await store.get("") is None


async def test_first_observation_creates_version_one(store: Store) -> None:
    rec = await store.observe(LOC, cert(1), 1000)
    assert rec.location == LOC
    assert rec.version == 1
    assert rec.body is None
    assert len(rec.history) == 1
    obs = rec.history[0]
    assert (obs.sha1, obs.sha256, obs.first_seen, obs.last_seen) == (
        cert(1).sha1,
        cert(1).sha256,
        1000,
        1000,
    )
    got = await store.get(LOC)
    assert got is not None and got.history == rec.history and got.version == 1


async def test_observing_again_extends_and_bumps_version(store: Store) -> None:
    await store.observe(LOC, cert(1), 1000)
    rec = await store.observe(LOC, cert(1), 1500)
    assert rec.version == 2
    assert [(o.first_seen, o.last_seen) for o in rec.history] == [(1000, 1500)]
    # an older observation (clock skew between workers) never shrinks the span
    rec = await store.observe(LOC, cert(1), 1200)
    assert [(o.first_seen, o.last_seen) for o in rec.history] == [(1000, 1500)]
    assert rec.version == 3


async def test_new_certificate_inserted_newest_first(store: Store) -> None:
    await store.observe(LOC, cert(1), 1000)
    await store.observe(LOC, cert(2), 2000)
    await store.observe(LOC, cert(3), 3000)
    rec = await store.get(LOC)
    assert rec is not None
    assert [o.sha256 for o in rec.history] == [cert(3).sha256, cert(2).sha256, cert(1).sha256]
    # seeing the first one again moves it to the front
    rec = await store.observe(LOC, cert(1), 4000)
    assert [o.sha256 for o in rec.history] == [cert(1).sha256, cert(3).sha256, cert(2).sha256]
    got = await store.get(LOC)
    assert got is not None and got.history == rec.history


async def test_locations_are_independent(store: Store) -> None:
    await store.observe("a.test:443", cert(1), 1000)
    await store.observe("b.test:443", cert(2), 1000)
    await store.observe("a.test:8443", cert(3), 1000)
    for loc, n in (("a.test:443", 1), ("b.test:443", 2), ("a.test:8443", 3)):
        rec = await store.get(loc)
        assert rec is not None and rec.version == 1
        assert [o.sha256 for o in rec.history] == [cert(n).sha256]


async def test_history_is_bounded(store: Store) -> None:
    for n in range(MAX_HISTORY + 3):
        rec = await store.observe(LOC, cert(n), 1000 + n)
    assert len(rec.history) == MAX_HISTORY
    got = await store.get(LOC)
    assert got is not None and len(got.history) == MAX_HISTORY
    kept = {o.sha256 for o in got.history}
    assert cert(0).sha256 not in kept and cert(2).sha256 not in kept  # least recent dropped
    assert cert(MAX_HISTORY + 2).sha256 in kept
    assert got.version == MAX_HISTORY + 3


async def test_save_body_for_current_version(store: Store) -> None:
    rec = await store.observe(LOC, cert(1), 1000)
    await store.save_body(LOC, rec.version, b"signed-1")
    got = await store.get(LOC)
    assert got is not None and got.body == b"signed-1" and got.version == rec.version


async def test_save_body_for_old_version_is_ignored(store: Store) -> None:
    old = await store.observe(LOC, cert(1), 1000)
    new = await store.observe(LOC, cert(2), 2000)
    await store.save_body(LOC, old.version, b"stale")
    got = await store.get(LOC)
    assert got is not None and got.body is None and got.version == new.version


async def test_save_body_for_unknown_location_is_ignored(store: Store) -> None:
    await store.save_body("nowhere.test:443", 1, b"x")
    assert await store.get("nowhere.test:443") is None


async def test_observe_clears_the_body(store: Store) -> None:
    rec = await store.observe(LOC, cert(1), 1000)
    await store.save_body(LOC, rec.version, b"signed-1")
    rec2 = await store.observe(LOC, cert(1), 1001)
    assert rec2.body is None
    got = await store.get(LOC)
    assert got is not None and got.body is None and got.version == rec.version + 1


async def test_concurrent_observes_in_one_store_all_land(store: Store) -> None:
    n = 20
    await asyncio.gather(*(store.observe(LOC, cert(i), 1000 + i) for i in range(n)))
    got = await store.get(LOC)
    assert got is not None
    assert got.version == n
    assert {o.sha256 for o in got.history} == {cert(i).sha256 for i in range(n)}


async def test_reads_during_writes_see_committed_states_only(store: Store) -> None:
    """Each observe adds a new certificate, so a committed record has len(history) == version.

    A read interleaved with a write must never see a half-applied observation (new history
    with the old version and the old signed body).
    """
    rec = await store.observe(LOC, cert(0), 1000)
    await store.save_body(LOC, rec.version, b"body-1")
    seen = []

    async def reader() -> None:
        for _ in range(40):
            got = await store.get(LOC)
            assert got is not None
            seen.append(got)
            await asyncio.sleep(0)

    async def writer() -> None:
        for i in range(1, 20):
            r = await store.observe(LOC, cert(i), 1000 + i)
            await store.save_body(LOC, r.version, f"body-{r.version}".encode())

    await asyncio.gather(reader(), reader(), writer())
    for got in seen:
        assert len(got.history) == got.version, (got.version, len(got.history))
        assert got.body in (None, f"body-{got.version}".encode())


# -- SQLite across connections and processes -------------------------------------------------


async def test_sqlite_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "reopen.sqlite3"
    s1 = await SQLiteStore.open(path)
    rec = await s1.observe(LOC, cert(1), 1000)
    await s1.save_body(LOC, rec.version, b"body")
    await s1.close()
    s2 = await SQLiteStore.open(path)
    try:
        got = await s2.get(LOC)
        assert got is not None and got.body == b"body" and got.history == rec.history
    finally:
        await s2.close()


async def test_two_sqlite_connections_observe_one_location(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    a, b = await SQLiteStore.open(path), await SQLiteStore.open(path)
    try:
        n = 15
        await asyncio.gather(
            *(a.observe(LOC, cert(i), 1000 + i) for i in range(n)),
            *(b.observe(LOC, cert(100 + i), 1000 + i) for i in range(n)),
            *(b.observe(LOC, cert(i), 5000) for i in range(3)),  # the same certs, from b
        )
        for s in (a, b):
            got = await s.get(LOC)
            assert got is not None
            assert got.version == 2 * n + 3
            expect = {cert(i).sha256 for i in range(n)} | {cert(100 + i).sha256 for i in range(n)}
            assert {o.sha256 for o in got.history} == expect
            assert len(got.history) == 2 * n
    finally:
        await a.close()
        await b.close()


async def test_cached_store_fresh_read_sees_other_connection(tmp_path: Path) -> None:
    path = tmp_path / "lru.sqlite3"
    a = CachedStore(await SQLiteStore.open(path))
    b = CachedStore(await SQLiteStore.open(path))
    try:
        await a.observe(LOC, cert(1), 1000)
        assert (await b.get(LOC)) is not None  # now cached in b's LRU at version 1
        await a.observe(LOC, cert(2), 2000)
        cached = await b.get(LOC)
        assert cached is not None and cached.version == 1  # the LRU may lag ...
        fresh = await b.get(LOC, fresh=True)
        assert fresh is not None and fresh.version == 2  # ... a fresh read does not
        assert (await b.get(LOC)).version == 2  # type: ignore[union-attr]
    finally:
        await a.close()
        await b.close()


def test_cached_store_rejects_empty_lru() -> None:
    with pytest.raises(ValueError):
        CachedStore(MemoryStore(), max_entries=0)


async def test_cached_store_evicts_least_recent() -> None:
    backend = MemoryStore()
    s = CachedStore(backend, max_entries=2)
    for n in range(3):
        await s.observe(f"h{n}.test:443", cert(n), 1000)
    assert len(s) == 2
    # the evicted entry is still read through from the backend
    got = await s.get("h0.test:443")
    assert got is not None and got.history[0].sha256 == cert(0).sha256


def _observe_many(path: str, base: int, count: int) -> None:
    async def run() -> None:
        s = await SQLiteStore.open(path, busy_timeout_ms=20_000)
        try:
            for i in range(count):
                await s.observe(LOC, cert(base + i), 1000 + i)
        finally:
            await s.close()

    asyncio.run(run())


async def test_two_processes_observe_one_location(tmp_path: Path) -> None:
    path = str(tmp_path / "procs.sqlite3")
    s = await SQLiteStore.open(path)
    await s.close()
    ctx = multiprocessing.get_context("spawn")
    count = 25
    procs = [ctx.Process(target=_observe_many, args=(path, base, count)) for base in (0, 1000)]
    for p in procs:
        p.start()
    loop = asyncio.get_running_loop()
    for p in procs:
        await loop.run_in_executor(None, p.join, 60)
        assert p.exitcode == 0
    s = await SQLiteStore.open(path)
    try:
        got = await s.get(LOC)
    finally:
        await s.close()
    assert got is not None
    assert got.version == 2 * count
    expect = {cert(i).sha256 for i in range(count)} | {cert(1000 + i).sha256 for i in range(count)}
    assert {o.sha256 for o in got.history} == expect
    # and the file itself holds exactly one row per certificate
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT COUNT(*) FROM observations WHERE location = ?", (LOC,))
        assert rows.fetchone()[0] == 2 * count


async def test_sqlite_open_failure_is_store_unavailable(tmp_path: Path) -> None:
    from notary.errors import StoreUnavailable

    with pytest.raises(StoreUnavailable):
        await SQLiteStore.open(tmp_path / "no-such-dir" / "x.sqlite3")
    bad = tmp_path / "not-a-db.sqlite3"
    bad.write_bytes(hashlib.sha256(b"junk").digest() * 200)
    with pytest.raises(StoreUnavailable):
        await SQLiteStore.open(bad)


# -- the optional chain store (memory, SQLite and the LRU over them implement it) -------------


def chain_store(store: Store) -> ChainStore:
    if not isinstance(store, ChainStore):
        pytest.skip(f"{type(store).__name__} does not keep chains")
    return store


async def test_chain_miss_is_none(store: Store) -> None:
    assert await chain_store(store).get_chain(LOC, cert(1).sha256) is None
    assert await chain_store(store).chains(10) == []


async def test_chain_round_trip_and_last_write_wins(store: Store) -> None:
    cs = chain_store(store)
    await cs.save_chain(LOC, cert(1).sha256, (b"leaf", b"intermediate"), 1000)
    assert await cs.get_chain(LOC, cert(1).sha256) == (b"leaf", b"intermediate")
    assert await cs.get_chain(LOC, cert(2).sha256) is None
    assert await cs.get_chain("other.test:443", cert(1).sha256) is None
    await cs.save_chain(LOC, cert(1).sha256, (b"leaf", b"other-intermediate"), 2000)
    assert await cs.get_chain(LOC, cert(1).sha256) == (b"leaf", b"other-intermediate")
    (stored,) = await cs.chains(10)
    assert (stored.location, stored.sha256, stored.seen) == (LOC, cert(1).sha256, 2000)


async def test_chains_listing_is_bounded(store: Store) -> None:
    cs = chain_store(store)
    for n in range(5):
        await cs.save_chain(f"h{n}.test:443", cert(n).sha256, (b"leaf %d" % n,), 1000)
    assert len(await cs.chains(3)) == 3
    assert len(await cs.chains(100)) == 5
    assert await cs.chains(0) == []


async def test_chain_leaves_with_its_certificate(store: Store) -> None:
    """A certificate dropped from the bounded history takes its stored chain with it."""
    cs = chain_store(store)
    await store.observe(LOC, cert(0), 1000)
    await cs.save_chain(LOC, cert(0).sha256, (b"leaf 0",), 1000)
    await cs.save_chain(LOC, cert(1).sha256, (b"leaf 1",), 1000)
    for n in range(1, MAX_HISTORY + 1):  # cert(0) is now the least recently seen: dropped
        await store.observe(LOC, cert(n), 1000 + n)
    rec = await store.get(LOC)
    assert rec is not None and cert(0).sha256 not in {o.sha256 for o in rec.history}
    assert await cs.get_chain(LOC, cert(0).sha256) is None
    # twin: the chain of a certificate still in the history stays
    assert await cs.get_chain(LOC, cert(1).sha256) == (b"leaf 1",)


@pytest.mark.parametrize(
    "chain", [(), tuple(b"c" for _ in range(MAX_CHAIN_CERTS + 1)), (b"x" * (MAX_CHAIN_BYTES + 1),)]
)
async def test_chain_bounds(store: Store, chain: tuple[bytes, ...]) -> None:
    cs = chain_store(store)
    with pytest.raises(BadData):
        await cs.save_chain(LOC, cert(1).sha256, chain, 1000)
    assert await cs.get_chain(LOC, cert(1).sha256) is None
    # twin: at the limits it is kept
    at_limit = tuple(b"c" for _ in range(MAX_CHAIN_CERTS))
    await cs.save_chain(LOC, cert(1).sha256, at_limit, 1000)
    assert await cs.get_chain(LOC, cert(1).sha256) == at_limit


# -- the SQL history rules agree with notary.core.history -----------------------------------


_CERTS = MAX_HISTORY + 8


@settings(max_examples=40, deadline=None)
@given(st.permutations(range(_CERTS)), st.lists(st.integers(0, 12), min_size=_CERTS,
                                                 max_size=_CERTS),
       st.lists(st.tuples(st.integers(0, _CERTS - 1), st.integers(0, 12)), max_size=60),
       st.integers(0, _CERTS), st.sampled_from(["aiosqlite", "thread"]))
def test_sqlite_history_equals_the_pure_rules(
    order: list[int], times: list[int], extra: list[tuple[int, int]], first: int, driver: str
) -> None:
    """Any sequence of observations (repeats, ties, times going backwards, more certificates
    than the history keeps) leaves SQLite's triggers with exactly the history that folding
    :func:`notary.core.history.observe` gives, and the chains of forgotten certificates
    gone. The twin below shows the comparison can fail."""
    # up to every certificate once (many same-second ties), then repeats in any order
    steps = list(zip(order[:first], times, strict=False)) + extra

    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            s = await SQLiteStore.open(Path(tmp) / "h.sqlite3", driver=driver)  # type: ignore[arg-type]
            try:
                expect: History = ()
                for n, (i, now) in enumerate(steps, 1):
                    await s.save_chain(LOC, cert(i).sha256, (b"leaf",), now)
                    rec = await s.observe(LOC, cert(i), now)
                    expect = observe(expect, cert(i), now)
                    assert rec.history == expect and rec.version == n
                got = await s.get(LOC)
                assert (got.history if got else ()) == expect
                kept = {c.sha256 for c in await s.chains(1000)}
                assert kept == {o.sha256 for o in expect}
            finally:
                await s.close()

    asyncio.run(run())


def test_history_comparison_fails_on_a_wrong_rule() -> None:
    """Twin: a history kept newest-first-seen instead of newest-last-seen differs."""
    h = observe(observe(observe((), cert(1), 10), cert(2), 20), cert(1), 30)
    wrong = tuple(sorted(h, key=lambda o: -o.first_seen))
    assert h != wrong
