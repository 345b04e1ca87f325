"""The store's budget (notary/store/budget.py) on real SQLite files and a real redis-server.

The measurement of issue 33: a flood of 20,000 distinct records (what one client makes by
asking about 20,000 names it controls) leaves the store under its cap and an honest target's
history intact; the twin without a budget keeps all 20,000. Client-named records and their
chains have a budget of their own and a time to live, so their flood evicts no own record.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from notary_support import record_statements
from redis_testing import RedisServer

from notary.core.fingerprint import CertDigests
from notary.store.budget import UNBOUNDED, Budget
from notary.store.redis import RedisStore
from notary.store.sqlite import SQLiteStore

NOW = 1_800_000_000
HONEST = "bank.test:443"
FLOOD = 20_000
CAP = 5_000
CHAIN = (b"\x30" * 6000, b"\x31" * 6000)  # 12 KB of DER-like bytes, as a CA chain is

Store = SQLiteStore | RedisStore
Factory = Callable[[Budget], Awaitable[Store]]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(Path(tempfile.mkdtemp(prefix="converge-budget-")))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "redis"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    async def sqlite(budget: Budget) -> Store:
        return await SQLiteStore.open(tmp_path / "budget.sqlite3", budget=budget)

    async def redis(budget: Budget) -> Store:
        server: RedisServer = request.getfixturevalue("redis_server")
        return RedisStore.from_url(server.url, prefix=f"b-{tmp_path.name}:", budget=budget)

    return sqlite if request.param == "sqlite" else redis


def cert(n: int) -> CertDigests:
    return CertDigests.of(f"certificate {n}".encode())


async def _honest(store: Store) -> None:
    """The honest target: probed, asked again (a cache hit), probed once more later."""
    await store.observe(HONEST, cert(-1), NOW - 86_400)
    await store.save_body(HONEST, 1, b"signed body" * 30)
    await store.touch([HONEST], NOW - 3600)


async def _flood(store: Store, n: int, named: bool = False, chain: bool = False) -> None:
    for i in range(n):
        loc = f"x{i}.attacker.test:443" + ("/198.51.100.7" if named else "")
        if chain:
            await store.save_chain(loc, cert(i).sha256, CHAIN, NOW + i // 100)
        await store.observe(loc, cert(i), NOW + i // 100)


@pytest.mark.timeout(600)
async def test_flood_of_distinct_records_stays_under_cap(factory: Factory) -> None:
    store = await factory(Budget(max_records=CAP, max_bytes=4 * 1024 * 1024))
    try:
        await _honest(store)
        started = time.monotonic()
        await _flood(store, FLOOD)
        elapsed = time.monotonic() - started
        records, nbytes = (await store.usage())[False]
        print(f"\n{type(store).__name__}: {FLOOD} records in {elapsed:.1f} s; kept {records} "
              f"records, {nbytes} accounted bytes, {store.evicted} evicted")
        assert records <= CAP and nbytes <= 4 * 1024 * 1024
        assert store.evicted >= FLOOD + 1 - CAP
        rec = await store.get(HONEST)
        assert rec is not None and rec.history[0].first_seen == NOW - 86_400
        assert rec.body == b"signed body" * 30
        # the newest flood records are kept, the oldest went first
        assert await store.get(f"x{FLOOD - 1}.attacker.test:443") is not None
        assert await store.get("x0.attacker.test:443") is None
    finally:
        await store.close()


@pytest.mark.timeout(600)
async def test_twin_without_budget_keeps_every_flood_record(factory: Factory) -> None:
    store = await factory(UNBOUNDED)
    try:
        await _honest(store)
        await _flood(store, FLOOD // 4)
        records, _ = (await store.usage())[False]
        assert records == FLOOD // 4 + 1 > CAP  # the flood is over the cap without a budget
        assert await store.get("x0.attacker.test:443") is not None
    finally:
        await store.close()


async def test_never_reused_records_go_before_a_reused_older_one(factory: Factory) -> None:
    store = await factory(Budget(max_records=10, max_bytes=0))
    try:
        await store.observe("old-but-asked.test:443", cert(1), NOW - 1000)
        await store.touch(["old-but-asked.test:443"], NOW - 999)
        await store.observe("asked-once.test:443", cert(2), NOW - 500)
        await _flood(store, 30)
        assert await store.get("old-but-asked.test:443") is not None
        assert await store.get("asked-once.test:443") is None
        assert (await store.usage())[False][0] <= 10
    finally:
        await store.close()


async def test_named_flood_with_chains_has_its_own_budget(factory: Factory) -> None:
    budget = Budget(max_records=CAP, max_bytes=0, named_max_records=100,
                    named_max_bytes=512 * 1024)
    store = await factory(budget)
    try:
        await _honest(store)
        for i in range(20):  # own records, never asked again: the least useful of their class
            await store.observe(f"own{i}.test:443", cert(1000 + i), NOW - 10)
        await _flood(store, 400, named=True, chain=True)
        named = (await store.usage())[True]
        assert named[0] <= 100 and named[1] <= 512 * 1024, named
        assert (await store.usage())[False][0] == 21
        for i in range(20):
            assert await store.get(f"own{i}.test:443") is not None
        kept = "x399.attacker.test:443/198.51.100.7"
        assert await store.get_chain(kept, cert(399).sha256) == CHAIN
        assert await store.get_chain("x0.attacker.test:443/198.51.100.7", cert(0).sha256) is None
    finally:
        await store.close()


async def test_twin_named_flood_without_named_budget_exceeds_it(factory: Factory) -> None:
    store = await factory(Budget(max_records=CAP, max_bytes=0, named_max_records=0,
                                 named_max_bytes=0))
    try:
        await _flood(store, 200, named=True, chain=True)
        named = (await store.usage())[True]
        assert named[0] == 200 and named[1] > 512 * 1024
    finally:
        await store.close()


@pytest.mark.parametrize("after", [3601, 3599])  # past the ttl; the twin: within it
async def test_named_records_expire_after_their_ttl(factory: Factory, after: int) -> None:
    store = await factory(Budget(named_ttl=3600, ttl=0))
    try:
        await store.observe("a.test:443/198.51.100.7", cert(1), NOW)
        await store.observe("a.test:443", cert(1), NOW)
        await store.enforce(NOW + after)
        named = await store.get("a.test:443/198.51.100.7")
        assert (named is None) == (after > 3600)
        assert await store.get("a.test:443") is not None  # own records: no ttl here
        assert ((await store.usage())[True] == (0, 0)) == (after > 3600)
    finally:
        await store.close()


async def test_redis_keys_carry_ttls(redis_server: RedisServer, tmp_path: Path) -> None:
    store = RedisStore.from_url(redis_server.url, prefix=f"ttl-{tmp_path.name}:",
                                budget=Budget(ttl=7200, named_ttl=600))
    try:
        await store.save_chain("n.test:443/198.51.100.7", cert(1).sha256, CHAIN, NOW)
        await store.observe("n.test:443/198.51.100.7", cert(1), NOW)
        await store.observe("o.test:443", cert(1), NOW)
        r = store._r
        assert 0 < await r.ttl(store.key("n.test:443/198.51.100.7")) <= 600
        assert 0 < await r.ttl(store.chain_key("n.test:443/198.51.100.7")) <= 600
        assert 600 < await r.ttl(store.key("o.test:443")) <= 7200
    finally:
        await store.close()


async def test_twin_redis_keys_without_budget_have_no_ttl(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    store = RedisStore.from_url(redis_server.url, prefix=f"nottl-{tmp_path.name}:")
    try:
        await store.observe("o.test:443", cert(1), NOW)
        assert await store._r.ttl(store.key("o.test:443")) == -1
    finally:
        await store.close()


async def test_schema_4_file_gains_the_accounting(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    store = await SQLiteStore.open(path)
    await store.observe("kept.test:443", cert(1), NOW)
    await store.observe("kept.test:443/198.51.100.7", cert(1), NOW)
    await store.close()
    with sqlite3.connect(path) as db:  # make it look like the previous schema's file
        db.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        db.execute("DELETE FROM usage")
    store = await SQLiteStore.open(path)
    try:
        usage = await store.usage()
        assert usage[False][0] == 1 and usage[True][0] == 1
        assert (await store.get("kept.test:443")) is not None
    finally:
        await store.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lru"])
async def test_redis_maxmemory_policy_never_evicts_the_log(
    tmp_path: Path, policy: str
) -> None:
    """A full Redis under the documented ``volatile-lru`` evicts only cache keys (they carry
    TTLs), never the transparency log's keys (no TTL); the twin, ``allkeys-lru``, loses log
    keys. Budget off, so only Redis's own eviction bounds the flood."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    store = RedisStore.from_url(server.url, prefix="p:", budget=Budget(0, 0, 90 * 86_400,
                                                                       0, 0, 86_400))
    try:
        r = store._r
        await r.config_set("maxmemory", str(8 * 1024 * 1024))
        await r.config_set("maxmemory-policy", policy)
        log_keys = [f"p:tlog:origin:tile/{i}" for i in range(200)]
        for key in log_keys:  # stands for the log's tiles: about 8 KB each, no TTL
            await r.set(key, b"t" * 8192)
        await _flood(store, 400, named=True, chain=True)  # about 5 MB of cache keys
        kept = int(await r.exists(*log_keys))
        evicted = int((await r.info("stats"))["evicted_keys"])
        if policy == "volatile-lru":
            assert kept == len(log_keys) and evicted > 0, (kept, evicted)
        else:
            assert kept < len(log_keys), (kept, evicted)
    finally:
        await store.close()
        server.stop()


async def test_sqlite_observe_is_one_statement_while_under_the_caps(tmp_path: Path) -> None:
    """The class's accounting comes back with the upsert, so a write under its caps costs one
    statement (one hop to the driver's thread); twin: over a cap, the eviction follows."""
    store = await SQLiteStore.open(tmp_path / "hops.sqlite3", budget=Budget(max_records=3))
    statements = record_statements(store)
    try:
        await store.observe("a.test:443", cert(1), NOW)  # the first write sweeps (due)
        for i in range(2, 4):
            statements.clear()
            await store.observe(f"h{i}.test:443", cert(i), NOW)
            assert len(statements) == 1, statements
        statements.clear()
        await store.observe("h4.test:443", cert(4), NOW)  # the fourth record: over the cap
        assert any(s.lstrip().startswith("DELETE FROM targets") for s in statements), statements
        assert (await store.usage())[False][0] <= 3
    finally:
        await store.close()
