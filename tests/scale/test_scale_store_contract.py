"""The store contract (notary/store/base.py) against memory, SQLite and a real redis-server.

The history a store keeps must always equal the pure ``observe`` fold over what it was told;
concurrent observers, in one process or several, all end up in one history.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis_testing import RedisServer
from scale_helpers import ROOT, free_port

from notary.core.fingerprint import CertDigests
from notary.core.history import MAX_HISTORY, History, Observation, observe
from notary.errors import BadData, StoreUnavailable
from notary.store.base import Store
from notary.store.memory import MemoryStore
from notary.store.redis import RedisStore, decode_history, encode_history
from notary.store.sqlite import SQLiteStore


def cert(i: int) -> CertDigests:
    return CertDigests.of(f"certificate {i}".encode())


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer, redis_prefix: str
) -> AsyncIterator[Store]:
    s: Store
    if request.param == "memory":
        s = MemoryStore()
    elif request.param == "sqlite":
        s = await SQLiteStore.open(tmp_path / "contract.sqlite3")
    else:
        s = RedisStore.from_url(redis_server.url, prefix=redis_prefix)
    try:
        yield s
    finally:
        await s.close()


async def test_get_of_unknown_location_is_none(store: Store) -> None:
    assert await store.get("nowhere.example:443") is None


async def test_observe_then_get_returns_the_record(store: Store) -> None:
    rec = await store.observe("a.example:443", cert(1), 1000)
    assert rec.version == 1 and rec.body is None
    assert rec.history == (Observation(cert(1).sha1, cert(1).sha256, 1000, 1000),)
    got = await store.get("a.example:443")
    assert got == rec
    assert await store.get("b.example:443") is None  # twin: other keys stay unknown


async def test_observe_extends_and_bumps_version(store: Store) -> None:
    await store.observe("a.example:443", cert(1), 1000)
    rec = await store.observe("a.example:443", cert(1), 1500)
    assert rec.version == 2
    assert rec.history == (Observation(cert(1).sha1, cert(1).sha256, 1000, 1500),)
    rec = await store.observe("a.example:443", cert(2), 1600)
    assert [o.sha256 for o in rec.history] == [cert(2).sha256, cert(1).sha256]
    assert await store.get("a.example:443") == rec


async def test_save_body_only_for_the_current_version(store: Store) -> None:
    rec = await store.observe("a.example:443", cert(1), 1000)
    await store.save_body("a.example:443", rec.version, b"signed-v1")
    got = await store.get("a.example:443")
    assert got is not None and got.body == b"signed-v1"
    rec2 = await store.observe("a.example:443", cert(2), 1001)
    got = await store.get("a.example:443")
    assert got is not None and got.body is None  # observing clears the body
    await store.save_body("a.example:443", rec.version, b"late-v1")  # stale version: ignored
    got = await store.get("a.example:443")
    assert got is not None and got.body is None
    await store.save_body("a.example:443", rec2.version, b"signed-v2")
    got = await store.get("a.example:443")
    assert got is not None and got.body == b"signed-v2"


async def test_save_body_of_unknown_location_creates_nothing(store: Store) -> None:
    await store.save_body("ghost.example:443", 1, b"x")
    assert await store.get("ghost.example:443") is None


@pytest.mark.parametrize("seed", range(8))
async def test_history_equals_the_pure_fold(store: Store, seed: int) -> None:
    rng = random.Random(seed)
    expected: History = ()
    location = f"fold{seed}.example:443"
    for n in range(rng.randint(1, 90)):
        c, t = cert(rng.randint(0, 80)), rng.randint(0, 10_000)
        expected = observe(expected, c, t)
        rec = await store.observe(location, c, t)
        assert rec.history == expected and rec.version == n + 1
    got = await store.get(location)
    assert got is not None and got.history == expected
    assert len(got.history) <= MAX_HISTORY


async def test_concurrent_observes_in_one_process_all_land(store: Store) -> None:
    await asyncio.gather(*(store.observe("hot.example:443", cert(i), 2000 + i)
                           for i in range(40)))
    rec = await store.get("hot.example:443")
    assert rec is not None and rec.version == 40
    assert {o.sha256 for o in rec.history} == {cert(i).sha256 for i in range(40)}


_WRITER = """
import asyncio, sys
from notary.core.fingerprint import CertDigests
from notary.store.redis import RedisStore
from notary.store.sqlite import SQLiteStore

async def main(kind, where, prefix, base):
    if kind == "redis":
        s = RedisStore.from_url(where, prefix=prefix)
    else:
        s = await SQLiteStore.open(where)
    for i in range(base, base + 25):
        await s.observe("shared.example:443", CertDigests.of(f"certificate {i}".encode()),
                        5000 + i % 7)
    await s.close()

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_two_processes_observing_one_target_end_in_one_history(
    kind: str, tmp_path: Path, redis_server: RedisServer, redis_prefix: str
) -> None:
    where = redis_server.url if kind == "redis" else str(tmp_path / "shared.sqlite3")
    if kind == "sqlite":
        await (await SQLiteStore.open(where)).close()  # create the schema before the race
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, kind, where, redis_prefix, str(base)],
                         cwd=ROOT)
        for base in (0, 25)
    ]
    for p in procs:
        assert p.wait(60) == 0
    s: Store = (RedisStore.from_url(where, prefix=redis_prefix) if kind == "redis"
                else await SQLiteStore.open(where))
    try:
        rec = await s.get("shared.example:443")
    finally:
        await s.close()
    assert rec is not None
    assert rec.version == 50  # every observation was applied exactly once
    assert {o.sha256 for o in rec.history} == {cert(i).sha256 for i in range(50)}
    for o in rec.history:
        i = next(i for i in range(50) if cert(i).sha256 == o.sha256)
        assert o.first_seen == o.last_seen == 5000 + i % 7


# -- Redis specifics --------------------------------------------------------------------------


async def test_redis_down_raises_store_unavailable() -> None:
    store = RedisStore.from_url(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    try:
        with pytest.raises(StoreUnavailable) as info:
            await store.get("a.example:443")
        assert "Redis" in info.value.message and "127.0.0.1" not in info.value.message
        with pytest.raises(StoreUnavailable):
            await store.observe("a.example:443", cert(1), 1)
        with pytest.raises(StoreUnavailable):
            await store.save_body("a.example:443", 1, b"x")
        with pytest.raises(StoreUnavailable):
            await store.ping()
    finally:
        await store.close()


async def test_redis_ping_when_up(redis_store: RedisStore) -> None:
    await redis_store.ping()  # the twin of the test above: no exception


async def test_redis_corrupt_record_is_a_store_failure(
    redis_server: RedisServer, redis_store: RedisStore
) -> None:
    import redis.asyncio as aioredis

    raw = aioredis.Redis.from_url(redis_server.url)
    try:
        await raw.hset(redis_store.key("bad.example:443"), mapping={"v": 3, "h": b"garbage"})
    finally:
        await raw.aclose()
    with pytest.raises(StoreUnavailable, match="corrupt"):
        await redis_store.get("bad.example:443")
    with pytest.raises(StoreUnavailable, match="corrupt"):
        await redis_store.observe("bad.example:443", cert(1), 1)


async def test_redis_clients_racing_on_one_key_lose_nothing(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """Four clients (as four processes would) each observe 15 certificates at once."""
    stores = [RedisStore.from_url(redis_server.url, prefix=redis_prefix) for _ in range(4)]
    try:
        await asyncio.gather(*(
            s.observe("race.example:443", cert(100 * k + i), 7000 + i)
            for i in range(15) for k, s in enumerate(stores)
        ))
        rec = await stores[0].get("race.example:443")
    finally:
        for s in stores:
            await s.close()
    assert rec is not None and rec.version == 60
    assert {o.sha256 for o in rec.history} == {
        cert(100 * k + i).sha256 for k in range(4) for i in range(15)
    }


def test_bad_redis_url_is_refused() -> None:
    with pytest.raises(StoreUnavailable):
        RedisStore.from_url("not-a-url")


_obs = st.builds(
    Observation,
    st.binary(min_size=20, max_size=20),
    st.binary(min_size=32, max_size=32),
    st.integers(-(2**40), 2**40),
    st.integers(-(2**40), 2**40),
)


@given(st.lists(_obs, max_size=MAX_HISTORY, unique_by=lambda o: o.sha256))
def test_history_encoding_round_trips(obs: list[Observation]) -> None:
    from notary.core.history import ordered

    history = ordered(obs)
    assert decode_history(encode_history(history)) == history


@pytest.mark.parametrize("raw", [b"", b"XX", b"H1" + b"\0" * 67, b"H1" + b"\0" * 68 * 65])
def test_history_decoding_rejects_malformed_bytes(raw: bytes) -> None:
    with pytest.raises(BadData):
        decode_history(raw)


def test_cert_helper_is_deterministic() -> None:
    assert cert(3).sha256 == hashlib.sha256(b"certificate 3").digest()
    assert cert(3) != cert(4)


async def test_redis_upgrade_drops_the_pre_record_key_layout(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    """Keys of the old layout (records keyed by host:port whatever address was probed) are
    never read and are deleted at start; the new layout's keys and other prefixes stay."""
    import redis.asyncio as aioredis

    raw = aioredis.Redis.from_url(redis_server.url)
    other = redis_prefix.replace("test-", "other-")
    try:
        await raw.hset(f"{redis_prefix}t:bank.test:443", mapping={"v": 1, "h": b"H1"})
        await raw.hset(f"{redis_prefix}c:bank.test:443", "ab", b"x")
        await raw.hset(f"{other}t:bank.test:443", mapping={"v": 1})
        store = RedisStore.from_url(redis_server.url, prefix=redis_prefix)
        try:
            assert await store.get("bank.test:443") is None  # the old key is not read
            await store.observe("bank.test:443", cert(1), 10)
            assert await store.drop_legacy_keys() == 2
            assert await store.drop_legacy_keys() == 0  # idempotent
            rec = await store.get("bank.test:443")
            assert rec is not None and len(rec.history) == 1  # the new layout is untouched
        finally:
            await store.close()
        assert await raw.exists(f"{other}t:bank.test:443") == 1  # another prefix is not ours
    finally:
        await raw.delete(f"{other}t:bank.test:443")
        await raw.aclose()
