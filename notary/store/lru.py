"""An in-process LRU of records (with their signed bodies) in front of a durable store.

The LRU is per process. Other processes sharing the durable store may have newer records;
callers that are about to do expensive work on a cached record's say-so (a live probe) call
``get(location, fresh=True)`` to read through to the durable store first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from notary.core.fingerprint import CertDigests
from notary.store.base import ChainStore, Store, StoredChain, TargetRecord


class CachedStore:
    def __init__(self, backend: Store, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.backend = backend
        self._max = max_entries
        self._lru: OrderedDict[str, TargetRecord] = OrderedDict()

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

    async def get(self, location: str, *, fresh: bool = False) -> TargetRecord | None:
        if not fresh:
            rec = self._lru.get(location)
            if rec is not None:
                self._lru.move_to_end(location)
                return rec
        rec = await self.backend.get(location)
        if rec is not None:
            self._put(rec)
        return rec

    async def observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord:
        rec = await self.backend.observe(location, seen, now)
        self._put(rec)
        return rec

    async def save_body(self, location: str, version: int, body: bytes) -> None:
        await self.backend.save_body(location, version, body)
        rec = self._lru.get(location)
        if rec is not None and rec.version == version:
            self._lru[location] = replace(rec, body=body)

    async def save_chain(
        self, location: str, sha256: bytes, chain: tuple[bytes, ...], now: int
    ) -> None:
        """Pass through to the backend when it keeps chains; otherwise do nothing."""
        if isinstance(self.backend, ChainStore):
            await self.backend.save_chain(location, sha256, chain, now)

    async def get_chain(self, location: str, sha256: bytes) -> tuple[bytes, ...] | None:
        if isinstance(self.backend, ChainStore):
            return await self.backend.get_chain(location, sha256)
        return None

    async def chains(self, limit: int) -> list[StoredChain]:
        if isinstance(self.backend, ChainStore):
            return await self.backend.chains(limit)
        return []

    async def close(self) -> None:
        self._lru.clear()
        await self.backend.close()


__all__ = ["CachedStore"]
