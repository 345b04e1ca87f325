"""Fixtures for the scale-out tests: a real redis-server on a free loopback port."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis_testing import RedisServer

from notary.store.redis import RedisStore


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the whole session; tests isolate themselves by key prefix."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, which the test may stop and restart."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_prefix() -> str:
    return f"test-{uuid.uuid4().hex[:12]}:"


@pytest.fixture
async def redis_store(redis_server: RedisServer, redis_prefix: str) -> AsyncIterator[RedisStore]:
    store = RedisStore.from_url(redis_server.url, prefix=redis_prefix)
    try:
        yield store
    finally:
        await store.close()
