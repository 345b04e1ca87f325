"""An in-process LRU of records (with their signed bodies) in front of a durable store.

The LRU is per process. Other processes sharing the durable store may have newer records;
callers that are about to do expensive work on a cached record's say-so (a live probe) call
``get(location, fresh=True)`` to read through to the durable store first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import replace
from typing import TypeVar, cast

from notary.core.fingerprint import CertDigests
from notary.errors import StoreUnavailable
from notary.store.base import (
    BudgetStore,
    ChainStore,
    DeferredBodyStore,
    Store,
    StoredChain,
    TargetRecord,
)
from notary.store.health import FailureLog

T = TypeVar("T")

USES_BATCH = 256  # cache hits remembered before they are written to the durable store
USES_EVERY = 1.0  # seconds between such writes


class CachedStore:
    def __init__(self, backend: Store, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.backend = backend
        # what the backend can do, decided once: an isinstance() against a runtime-checkable
        # Protocol walks its members (about 5 % of a cached answer's CPU when done per hit)
        self._budgeted = isinstance(backend, BudgetStore)
        self._chains = isinstance(backend, ChainStore)
        self._deferred: DeferredBodyStore | None = (
            backend if isinstance(backend, DeferredBodyStore) else None)
        self._max = max_entries
        self._lru: OrderedDict[str, TargetRecord] = OrderedDict()
        self._uses: dict[str, int] = {}  # location -> last hit, not yet written
        self._uses_at = time.monotonic()
        # every backend failure and recovery, for the operator; reads and writes apart (a
        # full disk fails writes while reads work: a read is no sign of recovery)
        self.reads = FailureLog("store reads")
        self.writes = FailureLog("store writes")
        if self._deferred is not None:
            self._deferred.deferred_failed = self.writes.failed

    def health_failed(self, exc: StoreUnavailable) -> None:
        """A failure the caller handled itself (it did not fail a request)."""
        self.writes.failed(exc.message)

    @staticmethod
    async def _b(call: Awaitable[T], health: FailureLog) -> T:
        """A backend call, its failure or success told to ``health``."""
        try:
            out = await call
        except StoreUnavailable as exc:
            health.failed(exc.message)
            raise
        health.ok()
        return out

    def __len__(self) -> int:
        return len(self._lru)

    def _put(self, rec: TargetRecord) -> None:
        lru = self._lru
        old = lru.get(rec.location)
        if old is not None and old.version > rec.version:
            return  # never replace newer knowledge with older
        lru[rec.location] = rec
        lru.move_to_end(rec.location)
        if len(lru) > self._max:
            lru.popitem(last=False)

    def peek(self, location: str) -> TargetRecord | None:
        """The in-process record of ``location`` (marked recently used), or None; no backend
        call and nothing awaited (for a cache hit answered at once)."""
        rec = self._lru.get(location)
        if rec is not None:
            self._lru.move_to_end(location)
        return rec

    async def get(self, location: str, *, fresh: bool = False) -> TargetRecord | None:
        if not fresh:
            rec = self._lru.get(location)
            if rec is not None:
                self._lru.move_to_end(location)
                return rec
        rec = await self._b(self.backend.get(location), self.reads)
        if rec is not None:
            self._put(rec)
        return rec

    async def observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord:
        if self._uses and time.monotonic() - self._uses_at >= USES_EVERY:
            await self.flush_uses()  # before the write whose budget check may evict
        rec = await self._b(self.backend.observe(location, seen, now), self.writes)
        self._put(rec)
        return rec

    async def save_body(self, location: str, version: int, body: bytes) -> None:
        """Keep the signed body of a version, here at once; a backend that can take it
        without a wait (:class:`DeferredBodyStore`) writes it with its next batch."""
        if self._deferred is not None:
            self._deferred.save_body_soon(location, version, body)
        else:
            await self._b(self.backend.save_body(location, version, body), self.writes)
        rec = self._lru.get(location)
        if rec is not None and rec.version == version:
            self._lru[location] = replace(rec, body=body)

    def used(self, location: str, now: int) -> bool:
        """Remember a cache hit on ``location`` (the budget's last use); True when the
        remembered hits are due to be written (:meth:`flush_uses`)."""
        if not self._budgeted:
            return False
        self._uses[location] = now
        return (len(self._uses) >= USES_BATCH
                or time.monotonic() - self._uses_at >= USES_EVERY)

    async def flush_uses(self) -> None:
        """Write the remembered hits to the durable store (raises StoreUnavailable; the
        hits are then forgotten: a lost last use only makes a record evicted earlier)."""
        uses, self._uses = self._uses, {}
        self._uses_at = time.monotonic()
        if uses and self._budgeted:
            backend = cast(BudgetStore, self.backend)
            await self._b(backend.touch(list(uses), max(uses.values())), self.writes)

    async def save_chain(
        self, location: str, sha256: bytes, chain: tuple[bytes, ...], now: int
    ) -> None:
        """Pass through to the backend when it keeps chains; otherwise do nothing."""
        if self._chains:
            chains = cast(ChainStore, self.backend)
            await self._b(chains.save_chain(location, sha256, chain, now), self.writes)

    async def get_chain(self, location: str, sha256: bytes) -> tuple[bytes, ...] | None:
        if isinstance(self.backend, ChainStore):
            return await self._b(self.backend.get_chain(location, sha256), self.reads)
        return None

    async def chains(self, limit: int) -> list[StoredChain]:
        if isinstance(self.backend, ChainStore):
            return await self.backend.chains(limit)
        return []

    async def close(self) -> None:
        self._lru.clear()
        await self.backend.close()


__all__ = ["CachedStore"]
