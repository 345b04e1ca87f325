"""One contract for both log stores: the SQLite file and a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from redis_testing import RedisServer

from notary.tlog.log import TileLog
from notary.tlog.merkle import Frontier, leaf_hash, verify_consistency, verify_inclusion
from notary.tlog.note import Signer, open_checkpoint
from notary.tlog.redislog import RedisTileLog
from notary.tlog.tiles import ENTRIES, TilePath, decode_bundle

ORIGIN = "example.test/converge-log/00000002"
SIGNER = Signer(ORIGIN, Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33))))


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


_N = iter(range(10_000))


@pytest.fixture(params=["sqlite", "redis"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Opens the same log again on each call (two workers, or a restart)."""
    if request.param == "sqlite":
        path = tmp_path / "t.sqlite3"
        return lambda origin=ORIGIN: TileLog(path, origin)
    server = request.getfixturevalue("redis_server")
    prefix = f"t{next(_N)}:"
    return lambda origin=ORIGIN: RedisTileLog(server.url, prefix, origin)


def test_sequencing_tiles_and_proofs(opener: Any) -> None:
    log = opener()
    fr = Frontier()
    leaves = []
    roots = {}
    n = 0
    for batch in (1, 255, 300, 10):
        items = [(f"k{n + i}", f'{{"n":{n + i}}}'.encode()) for i in range(batch)]
        assert log.enqueue_many(items) == batch
        got = log.sequence(SIGNER)
        n += batch
        assert got is not None and got.size == n and got.added == batch
        for _, data in items:
            leaves.append(leaf_hash(data))
            fr.append(leaves[-1])
        roots[n] = fr.root()
    ck, _ = open_checkpoint(log.checkpoint() or b"", SIGNER.verifier)
    assert ck.size == n == log.size() and ck.root == roots[n]
    for i in (0, 255, 256, 300, n - 1):
        verify_inclusion(leaves[i], i, n, log.inclusion(i, n), roots[n])
    sizes = sorted(roots)
    for old, new in zip(sizes, sizes[1:], strict=False):
        verify_consistency(old, new, roots[old], roots[new], log.consistency(old, new))
    bundle = log.read(TilePath(ENTRIES, 1, n - 256), n)
    assert bundle is not None and decode_bundle(bundle, n - 256)[0] == b'{"n":256}'
    assert log.read(TilePath(0, 2, n - 512 + 1), n) is None  # twin: one past the tree
    assert log.read(TilePath(0, 3, 1), n) is None


def test_dedupe_and_index(opener: Any) -> None:
    log = opener()
    assert log.enqueue("a", b"1") and not log.enqueue("a", b"1")
    assert log.pending() == 1
    log.sequence(SIGNER)
    assert log.index_of("a") == 0 and log.index_of("b") is None
    assert not log.enqueue("a", b"1")  # logged already
    assert log.sequence(SIGNER) is None
    other = opener()  # a second worker sees the same log
    assert other.size() == 1 and other.index_of("a") == 0


def test_one_sequencer_and_no_fork(opener: Any) -> None:
    a, b = opener(), opener()
    assert a.take_lease("a", 100.0, 5)
    assert not b.take_lease("b", 100.0, 5)
    a.enqueue("x", b"x")
    a.sequence(SIGNER)
    b.enqueue("y", b"y")
    b.sequence(SIGNER)  # even out of turn, it extends the same tree (never a second one)
    assert a.size() == b.size() == 2
    assert a.index_of("y") == 1


def test_another_origin_is_another_log(opener: Any) -> None:
    """A SQLite file holds one log and refuses another origin; in a Redis shared by several
    notaries each origin (each notary identity) has its own log."""
    first = opener()
    first.enqueue("a", b"1")
    first.sequence(SIGNER)
    if isinstance(first, TileLog):
        with pytest.raises(ValueError, match="holds the log"):
            opener("other.test/log")
    else:
        other = opener("other.test/log")
        assert other.size() == 0 and other.index_of("a") is None and first.size() == 1


def test_witness_state_and_cosignatures(opener: Any) -> None:
    log = opener()
    assert log.witness_size("http://w") == 0
    log.set_witness_size("http://w", 5)
    log.add_cosignature(5, "w2", "\u2014 w2 AAAA\n")
    log.add_cosignature(5, "w1", "\u2014 w1 BBBB\n")
    assert opener().witness_size("http://w") == 5
    assert opener().cosignatures(5) == "\u2014 w1 BBBB\n\u2014 w2 AAAA\n".encode()
    assert log.cosignatures(6) == b""


def test_a_released_lease_is_free_at_once(opener: Any) -> None:
    a, b = opener(), opener()
    assert a.take_lease("a", 100.0, 60)
    assert not b.take_lease("b", 101.0, 60)
    b.release_lease("b")  # not b's: nothing happens
    assert not b.take_lease("b", 101.0, 60)
    a.release_lease("a")
    assert b.take_lease("b", 101.0, 60)
