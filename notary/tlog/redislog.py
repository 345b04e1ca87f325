"""The transparency log in Redis, for notaries that share records through Redis: every worker
and every node queues, serves tiles and proves from the same log, and one of them at a time
sequences it (a lease key), so there is one log per notary identity and never a fork.

Keys (``P`` = ``--redis-prefix`` then ``tlog:<origin>:``, one log per notary identity; none
has a TTL, and the log must never be evicted: run Redis
with ``maxmemory-policy noeviction`` or a ``volatile-*`` policy, see docs/operations.md):

``P meta`` (hash: origin, size, right edge), ``P pending`` (list of queued
``key NUL entry``) and ``P queued`` (set of their keys), ``P logged`` (hash key -> index),
``P entries`` (list, position = index), ``P tile:L:N`` (the tile's hashes, appended to),
``P ck`` (hash size -> signed checkpoint), ``P cosig:SIZE`` (hash witness -> cosignature
line), ``P witnesses`` (hash URL -> size), ``P lease``.

A batch is one ``MULTI``/``EXEC`` guarded by ``WATCH`` on the meta key: it applies whole or
not at all, and a sequencer that lost its lease mid-batch cannot append. Durability is
Redis's: with ``appendonly yes`` and ``appendfsync always`` a batch is on disk before any
answer cites it (the shipped compose file uses ``everysec``: up to a second of batches can be
lost with the Redis host, which witnesses then see as an inconsistent log).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import redis

from .log import MAX_PENDING, Batch, LogFull, TileReader, tile_appends
from .merkle import HASH_SIZE, Frontier
from .note import Checkpoint, Signer

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""


class RedisTileLog(TileReader):
    def __init__(self, url: str, prefix: str, origin: str, timeout: float = 5.0) -> None:
        self.origin = origin
        # typed Any: redis-py's stubs type every reply as bytes | str
        self._r: Any = redis.Redis.from_url(url, socket_timeout=timeout,
                                            socket_connect_timeout=timeout)
        # one log per notary identity: nodes with the same log key share it, notaries with
        # other keys sharing the Redis keep their own
        self._k = f"{prefix}tlog:{origin}:"
        self._tile_cache: dict[tuple[int, int], bytes] = {}
        self._lock = threading.Lock()
        self._renew = self._r.register_script(_RENEW)
        self._release = self._r.register_script(_RELEASE)
        have: Any = self._r.hget(self._k + "meta", "origin")
        if have is None:
            self._r.hsetnx(self._k + "meta", "origin", origin)
            have = self._r.hget(self._k + "meta", "origin")
        if have is not None and bytes(have).decode() != origin:
            raise ValueError(f"Redis holds the log {bytes(have).decode()!r}, not {origin!r}")

    def close(self) -> None:
        self._r.close()

    # ------------------------------------------------------------------ writers

    def enqueue(self, key: str, entry: bytes) -> bool:
        return self.enqueue_many([(key, entry)]) == 1

    def enqueue_many(self, items: Sequence[tuple[str, bytes]]) -> int:
        if self._r.llen(self._k + "pending") + len(items) > MAX_PENDING:
            raise LogFull("too many entries are waiting for the sequencer")
        added = 0
        for key, entry in items:
            if self._r.hexists(self._k + "logged", key):
                continue
            if self._r.sadd(self._k + "queued", key):
                self._r.rpush(self._k + "pending", key.encode() + b"\x00" + entry)
                added += 1
        return added

    def take_lease(self, holder: str, now: float, ttl: float) -> bool:
        del now  # Redis keeps the time
        return bool(self._renew(keys=[self._k + "lease"], args=[holder, int(ttl * 1000)]))

    def release_lease(self, holder: str) -> None:
        self._release(keys=[self._k + "lease"], args=[holder])

    def sequence(self, signer: Signer, max_batch: int = 4096, force: bool = False) -> Batch | None:
        if signer.name != self.origin:
            raise ValueError("the log key's name must be the log's origin")
        meta = self._k + "meta"
        pipe: Any
        with self._r.pipeline() as pipe:
            pipe.watch(meta)
            raw = pipe.lrange(self._k + "pending", 0, max_batch - 1)
            has_ck = pipe.hlen(self._k + "ck") > 0
            if not raw and has_ck and not force:
                pipe.unwatch()
                return None
            size_b, edge = pipe.hmget(meta, ["size", "frontier"])
            size = int(size_b or 0)
            blob = bytes(edge or b"")
            fr = Frontier(size, [blob[i : i + HASH_SIZE] for i in range(0, len(blob),
                                                                          HASH_SIZE)])
            if pipe.llen(self._k + "entries") != size:
                raise RuntimeError("the Redis log's entries and size disagree")
            appends: dict[tuple[int, int], bytearray] = {}
            new: list[tuple[str, bytes]] = []
            seen: set[str] = set()
            for item in raw:
                key_b, _, data = bytes(item).partition(b"\x00")
                key = key_b.decode()
                if key in seen or pipe.hexists(self._k + "logged", key):
                    continue
                seen.add(key)
                new.append((key, data))
                for tk, h in tile_appends(fr, data):
                    appends.setdefault(tk, bytearray()).extend(h)
            note = signer.sign(Checkpoint(self.origin, fr.size, fr.root()).text())
            pipe.multi()
            for i, (key, data) in enumerate(new):
                pipe.rpush(self._k + "entries", data)
                pipe.hset(self._k + "logged", key, size + i)
            for (tl, n), hashes in appends.items():
                pipe.append(f"{self._k}tile:{tl}:{n}", bytes(hashes))
            pipe.hset(self._k + "ck", str(fr.size), note)
            pipe.hset(meta, mapping={"size": str(fr.size), "frontier": b"".join(fr.nodes)})
            if raw:
                pipe.ltrim(self._k + "pending", len(raw), -1)
                pipe.srem(self._k + "queued", *[bytes(x).partition(b"\x00")[0] for x in raw])
            pipe.execute()  # WatchError if another sequencer moved the log: nothing applied
        return Batch(fr.size, len(new), note.encode())

    # ------------------------------------------------------------------ readers

    def size(self) -> int:
        return int(self._r.hget(self._k + "meta", "size") or 0)

    def checkpoint(self, size: int | None = None) -> bytes | None:
        if size is None:
            size = self.size()
            if size == 0 and not self._r.hexists(self._k + "ck", "0"):
                return None
        got = self._r.hget(self._k + "ck", str(size))
        return bytes(got) if got is not None else None

    def index_of(self, key: str) -> int | None:
        got = self._r.hget(self._k + "logged", key)
        return None if got is None else int(got)

    def pending(self) -> int:
        return int(self._r.llen(self._k + "pending"))

    def _stored_tile(self, level: int, n: int) -> bytes:
        return bytes(self._r.get(f"{self._k}tile:{level}:{n}") or b"")

    def entries(self, start: int, end: int) -> Sequence[bytes]:
        if end <= start:
            return []
        return [bytes(x) for x in self._r.lrange(self._k + "entries", start, end - 1)]

    # ------------------------------------------------------------------ witnesses

    def witness_size(self, url: str) -> int:
        return int(self._r.hget(self._k + "witnesses", url) or 0)

    def set_witness_size(self, url: str, size: int) -> None:
        self._r.hset(self._k + "witnesses", url, size)

    def add_cosignature(self, size: int, name: str, line: str) -> None:
        self._r.hset(f"{self._k}cosig:{size}", name, line)

    def cosignatures(self, size: int) -> bytes:
        got = self._r.hgetall(f"{self._k}cosig:{size}")
        return b"".join(bytes(got[k]) for k in sorted(got))
