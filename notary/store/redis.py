"""The shared store: Redis through redis-py's asyncio client.

Several notary processes on one or more machines share one Redis. Rules:

* One Redis hash per record, key ``<prefix>rec:<record key>`` (the record key of
  :attr:`notary.core.target.Target.key`: ``host:port``, or ``host:port/ip`` for a
  client-named address), fields ``v`` (version, decimal),
  ``h`` (the history, :func:`encode_history`) and ``b`` (the signed body of version ``v``;
  absent until signed).
* ``observe`` is an optimistic transaction: ``WATCH`` the key, read it, apply the pure
  :func:`notary.core.history.observe` in Python, then ``MULTI``/``EXEC`` the new history with
  ``v + 1`` and no body. If another process wrote the key in between, ``EXEC`` fails and the
  whole step is retried on the new contents after a short random pause (at most
  :data:`MAX_ATTEMPTS` times), so concurrent observers from any number of processes all end
  up in one history and no observation is lost. Within one process, writers of one key take
  turns (striped locks), so only other processes can make a transaction retry. The history
  rules live only in the pure core.
* ``save_body`` is a compare-and-set in one round trip (a one-line Lua script, no rules of
  its own): it writes ``b`` only while ``v`` is still the version the body was signed for.
* Every Redis or socket failure becomes :class:`~notary.errors.StoreUnavailable` here, with a
  message that names the shared store but not its address. Every wait is bounded by the
  socket and connect timeouts. The connection pool reconnects by itself when Redis returns.
* Chains (optional, :class:`~notary.store.base.ChainStore`): one hash per record, key
  ``<prefix>chain:<record key>``, field = leaf SHA-256 hex, value = 8-byte big-endian time
  seen then :func:`notary.store.chain.encode_chain`. Last write wins; no transaction. Each
  chain is stored whole (unlike SQLite's deduplicated certificates: shared certificates
  would need reference counts across keys that also expire on their own); the budget
  charges its whole DER in both stores.
* Upgrade: releases before the record key kept every observation under ``<prefix>t:`` and
  ``<prefix>c:`` keyed by ``host:port``, including observations made at addresses clients
  named. Those keys are never read; :meth:`RedisStore.drop_legacy_keys` (run once at start)
  deletes them. Nodes of an older release still running during a rolling upgrade keep
  writing there, unseen by the new ones.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError

from notary.core.fingerprint import CertDigests
from notary.core.history import MAX_HISTORY, History, Observation, observe, ordered
from notary.errors import BadData, StoreUnavailable
from notary.store.base import StoredChain, TargetRecord
from notary.store.budget import (
    EVICT_ROUNDS,
    EXPIRE_EVERY,
    ROW_OVERHEAD,
    UNBOUNDED,
    Budget,
    is_named,
)
from notary.store.chain import decode_chain, encode_chain

MAX_ATTEMPTS = 32  # optimistic-transaction retries before giving up on a hot key
RETRY_PAUSE = 0.002  # seconds; the pause before retry n is uniform in [0, n * RETRY_PAUSE]
LOCK_STRIPES = 64
DEFAULT_PREFIX = "converge:"
_OBS = struct.Struct(">20s32sqq")  # sha1, sha256, first_seen, last_seen
_HISTORY_MAGIC = b"H1"
_SAVE_BODY = """
if redis.call('HGET', KEYS[1], 'v') == ARGV[1] then redis.call('HSET', KEYS[1], 'b', ARGV[2]) end
"""
# The budget's accounting of one record (module docstring, "Budget"): its accounted bytes
# recomputed from what is stored, the class's byte counter moved by the difference, its
# place in the class's eviction order and the time to live of its keys. Idempotent.
# KEYS: rec, chain, lru:0, lru:1, size, bytes; ARGV: location, now, ttl, mode, row overhead.
# Returns the class's accounted {records, bytes}.
_ACCOUNT = """
local loc, now, ttl, mode, R = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local size = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  size = R + string.len(loc) + redis.call('HSTRLEN', KEYS[1], 'h')
    + redis.call('HSTRLEN', KEYS[1], 'b')
  local vals = redis.call('HVALS', KEYS[2])
  for i = 1, #vals do size = size + R + string.len(vals[i]) end
end
local old = tonumber(redis.call('HGET', KEYS[5], loc) or '0')
if size == 0 then
  if mode ~= 'size' then
    redis.call('HDEL', KEYS[5], loc)
    redis.call('ZREM', KEYS[3], loc)
    redis.call('ZREM', KEYS[4], loc)
  else
    size = old
  end
else
  redis.call('HSET', KEYS[5], loc, size)
  if mode == 'use' then
    redis.call('ZREM', KEYS[3], loc)
    redis.call('ZADD', KEYS[4], now, loc)
  elseif not redis.call('ZSCORE', KEYS[4], loc) then
    if mode == 'new' or not redis.call('ZSCORE', KEYS[3], loc) then
      redis.call('ZADD', KEYS[3], now, loc)
    end
  end
  if ttl > 0 then
    redis.call('EXPIRE', KEYS[1], ttl)
    redis.call('EXPIRE', KEYS[2], ttl)
  end
end
if size ~= old then redis.call('INCRBY', KEYS[6], size - old) end
return {redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[4]),
        tonumber(redis.call('GET', KEYS[6]) or '0')}
"""
# Eviction of one class: records last used before ARGV[4] (time to live; 0: none), then the
# ARGV[3] least useful ones (never-reused first, each set by last use). Returns the count.
# KEYS: lru:0, lru:1, size, bytes; ARGV: record key prefix, chain key prefix, count, before.
_EVICT = """
local gone = 0
local function drop(loc)
  redis.call('UNLINK', ARGV[1] .. loc, ARGV[2] .. loc)
  local s = tonumber(redis.call('HGET', KEYS[3], loc) or '0')
  redis.call('HDEL', KEYS[3], loc)
  redis.call('ZREM', KEYS[1], loc)
  redis.call('ZREM', KEYS[2], loc)
  if s ~= 0 then redis.call('DECRBY', KEYS[4], s) end
  gone = gone + 1
end
local before = tonumber(ARGV[4])
if before > 0 then
  for _, z in ipairs({KEYS[1], KEYS[2]}) do
    local old = redis.call('ZRANGEBYSCORE', z, '-inf', '(' .. before, 'LIMIT', 0, 5000)
    for i = 1, #old do drop(old[i]) end
  end
end
local n = tonumber(ARGV[3])
for _, z in ipairs({KEYS[1], KEYS[2]}) do
  if n <= 0 then break end
  local victims = redis.call('ZRANGE', z, 0, n - 1)
  for i = 1, #victims do
    drop(victims[i])
    n = n - 1
  end
end
return gone
"""


def encode_history(history: History) -> bytes:
    """History -> bytes: ``b"H1"`` then 68 bytes per observation, in history order."""
    return _HISTORY_MAGIC + b"".join(
        _OBS.pack(o.sha1, o.sha256, o.first_seen, o.last_seen) for o in history
    )


def decode_history(raw: bytes) -> History:
    """The inverse of :func:`encode_history`; raises :class:`BadData` on malformed bytes."""
    if not raw.startswith(_HISTORY_MAGIC):
        raise BadData("stored history has an unknown format")
    data = raw[len(_HISTORY_MAGIC) :]
    if len(data) % _OBS.size or len(data) // _OBS.size > MAX_HISTORY:
        raise BadData("stored history has a bad length")
    return ordered(
        Observation(sha1, sha256, first, last)
        for sha1, sha256, first, last in _OBS.iter_unpack(data)
    )


def _glob(text: str) -> str:
    """``text`` as a literal inside a Redis SCAN MATCH pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _unavailable(exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        f"the shared store (Redis) is unavailable ({type(exc).__name__}); retry shortly"
    )


class RedisStore:
    def __init__(
        self, client: aioredis.Redis, *, prefix: str = DEFAULT_PREFIX, budget: Budget = UNBOUNDED
    ) -> None:
        self._r = client
        self._prefix = prefix
        self._stripes = [asyncio.Lock() for _ in range(LOCK_STRIPES)]
        self._save_body = client.register_script(_SAVE_BODY)
        self._account = client.register_script(_ACCOUNT)
        self._evict = client.register_script(_EVICT)
        self._rng = random.Random()
        self.budget = budget
        self.evicted = 0  # records this process evicted or expired
        self._expired_at = 0

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = 1.0,
        max_connections: int = 64,
        budget: Budget = UNBOUNDED,
    ) -> RedisStore:
        """A store on ``url`` (``redis://host:port/db``). Connects lazily, on first use."""
        try:
            client = aioredis.Redis.from_url(
                url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                max_connections=max_connections,
                health_check_interval=30,
                retry_on_timeout=False,
            )
        except (ValueError, RedisError) as exc:
            raise StoreUnavailable(f"bad Redis URL: {exc}") from exc
        return cls(client, prefix=prefix, budget=budget)

    def key(self, location: str) -> str:
        return f"{self._prefix}rec:{location}"

    @staticmethod
    def _history(location: str, hist: Any) -> History:
        try:
            return decode_history(bytes(hist)) if hist is not None else ()
        except BadData as exc:
            raise StoreUnavailable(f"{location}: stored record is corrupt ({exc.message})") from exc

    @classmethod
    def _record(cls, location: str, fields: list[Any]) -> TargetRecord | None:
        version, hist, body = fields
        if version is None:
            return None
        history = cls._history(location, hist)
        return TargetRecord(location, history, int(version), bytes(body) if body else None)

    async def get(self, location: str) -> TargetRecord | None:
        try:
            fields = await self._r.hmget(self.key(location), ["v", "h", "b"])
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc
        return self._record(location, list(fields))

    async def _pause(self, attempt: int) -> None:
        await asyncio.sleep(self._rng.uniform(0, attempt * RETRY_PAUSE))

    async def observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord:
        async with self._stripes[hash(location) % LOCK_STRIPES]:
            return await self._observe(location, seen, now)

    async def _observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord:
        key = self.key(location)
        try:
            async with self._r.pipeline(transaction=True) as pipe:
                for attempt in range(MAX_ATTEMPTS):
                    try:
                        await pipe.watch(key)
                        version, hist = await pipe.hmget(key, ["v", "h"])
                        old = self._history(location, hist)
                        new = observe(old, seen, now)
                        new_version = (int(version) if version is not None else 0) + 1
                        kept = {o.sha256 for o in new}
                        gone = [o.sha256.hex() for o in old if o.sha256 not in kept]
                        pipe.multi()  # type: ignore[no-untyped-call]
                        pipe.hset(key, mapping={"v": new_version, "h": encode_history(new)})
                        pipe.hdel(key, "b")
                        ttl = self.budget.ttl_of(is_named(location))
                        if ttl:  # never a record key without a time to live
                            pipe.expire(key, ttl)
                        if gone:  # certificates dropped from the history: their chains too
                            pipe.hdel(self.chain_key(location), *gone)
                        await pipe.execute()
                    except WatchError:
                        await self._pause(attempt + 1)
                        continue
                    break
                else:
                    raise StoreUnavailable(
                        f"{location}: too many concurrent writers ({MAX_ATTEMPTS} attempts); "
                        "retry shortly")
            records, nbytes = await self._accounted(
                location, now, "new" if new_version == 1 else "use")
            if (self.budget.over(is_named(location), records, nbytes)
                    or now - self._expired_at >= EXPIRE_EVERY):
                await self.enforce(now)
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc
        return TargetRecord(location, new, new_version, None)

    def _class_keys(self, named: bool) -> list[str]:
        """lru:0 (never reused), lru:1 (reused), size, bytes of a class."""
        c = f"{self._prefix}budget:{'named' if named else 'own'}:"
        return [c + "lru:0", c + "lru:1", c + "size", c + "bytes"]

    async def _accounted(self, location: str, now: int, mode: str) -> tuple[int, int]:
        """Account one record (see ``_ACCOUNT``); its class's (records, bytes)."""
        named = is_named(location)
        got = await self._account(
            keys=[self.key(location), self.chain_key(location), *self._class_keys(named)],
            args=[location, int(now), self.budget.ttl_of(named), mode, ROW_OVERHEAD],
        )
        return int(got[0]), int(got[1])

    async def usage(self) -> dict[bool, tuple[int, int]]:
        """Accounted (records, bytes) per class: ``{False: own, True: named}``."""
        try:
            async with self._r.pipeline(transaction=False) as pipe:
                for named in (False, True):
                    lru0, lru1, _, nbytes = self._class_keys(named)
                    pipe.zcard(lru0)
                    pipe.zcard(lru1)
                    pipe.get(nbytes)
                got = await pipe.execute()
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc
        return {named: (int(got[3 * i]) + int(got[3 * i + 1]), int(got[3 * i + 2] or 0))
                for i, named in enumerate((False, True))}

    async def touch(self, locations: Sequence[str], now: int) -> None:
        """Mark records as used at ``now`` (they answered a request from the cache)."""
        try:
            for location in locations:
                await self._accounted(location, now, "use")
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc

    async def enforce(self, now: int) -> int:
        """Apply the budget (see :meth:`notary.store.sqlite.SQLiteStore.enforce`)."""
        budget, gone = self.budget, 0
        expire = now - self._expired_at >= EXPIRE_EVERY
        if expire:
            self._expired_at = now
        try:
            for _ in range(EVICT_ROUNDS):
                usage = await self.usage()
                excess = {named: budget.excess(named, *usage[named]) for named in usage}
                if not any(excess.values()) and not expire:
                    break
                for named, count in excess.items():
                    ttl = budget.ttl_of(named)
                    before = now - ttl if expire and ttl else 0
                    if count or before:
                        gone += int(await self._evict(
                            keys=self._class_keys(named),
                            args=[self.key(""), self.chain_key(""), count, before]))
                expire = False
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc
        self.evicted += gone
        return gone

    async def save_body(self, location: str, version: int, body: bytes) -> None:
        try:
            await self._save_body(keys=[self.key(location)], args=[str(version), body])
            await self._accounted(location, int(time.time()), "size")
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc

    def chain_key(self, location: str) -> str:
        return f"{self._prefix}chain:{location}"

    async def drop_legacy_keys(self, batch: int = 500) -> int:
        """Delete the keys of the pre-record-key layout (``<prefix>t:*``, ``<prefix>c:*``).

        Returns how many were deleted. Idempotent; safe while other nodes run.
        """
        dropped = 0
        try:
            for kind in ("t", "c"):
                pending: list[Any] = []
                pattern = f"{_glob(self._prefix)}{kind}:*"
                async for key in self._r.scan_iter(match=pattern, count=batch):
                    pending.append(key)
                    if len(pending) >= batch:
                        dropped += int(await self._r.unlink(*pending))
                        pending = []
                if pending:
                    dropped += int(await self._r.unlink(*pending))
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc
        return dropped

    async def save_chain(
        self, location: str, sha256: bytes, chain: tuple[bytes, ...], now: int
    ) -> None:
        value = struct.pack(">q", now) + encode_chain(chain)
        ttl = self.budget.ttl_of(is_named(location))
        try:
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.hset(self.chain_key(location), sha256.hex(), value)
                if ttl:  # never a chain key without a time to live
                    pipe.expire(self.chain_key(location), ttl)
                await pipe.execute()
            await self._accounted(location, now, "size")
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc

    async def get_chain(self, location: str, sha256: bytes) -> tuple[bytes, ...] | None:
        try:
            raw = await self._r.hget(self.chain_key(location), sha256.hex())
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc
        return self._chain(location, sha256, raw).chain if raw is not None else None

    @staticmethod
    def _chain(location: str, sha256: bytes, raw: Any) -> StoredChain:
        data = bytes(raw)
        try:
            if len(data) < 8:
                raise BadData("stored chain is truncated")
            return StoredChain(location, sha256, decode_chain(data[8:]),
                               struct.unpack(">q", data[:8])[0])
        except BadData as exc:
            raise StoreUnavailable(f"{location}: stored chain is corrupt ({exc.message})") from exc

    async def chains(self, limit: int) -> list[StoredChain]:
        out: list[StoredChain] = []
        prefix = self.chain_key("")
        try:
            async for key in self._r.scan_iter(match=f"{_glob(prefix)}*", count=500):
                if len(out) >= limit:
                    break
                name = key.decode() if isinstance(key, bytes) else str(key)
                location = name[len(prefix) :]
                for field, raw in (await self._r.hgetall(key)).items():
                    if len(out) >= limit:
                        break
                    hexfp = field.decode() if isinstance(field, bytes) else str(field)
                    out.append(self._chain(location, bytes.fromhex(hexfp), raw))
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc
        except ValueError as exc:
            raise StoreUnavailable("a stored chain has a malformed field name") from exc
        return out

    async def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless Redis answers."""
        try:
            await self._r.ping()
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc

    async def close(self) -> None:
        try:
            await self._r.aclose()
        except (RedisError, OSError) as exc:
            raise _unavailable(exc) from exc


__all__ = ["DEFAULT_PREFIX", "MAX_ATTEMPTS", "RedisStore", "decode_history", "encode_history"]
