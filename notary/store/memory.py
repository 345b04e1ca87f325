"""An in-memory store (unit tests, and the reference for the contract)."""

from __future__ import annotations

from dataclasses import replace

from notary.core.fingerprint import CertDigests
from notary.core.history import observe
from notary.store.base import StoredChain, TargetRecord
from notary.store.chain import encode_chain


class MemoryStore:
    def __init__(self) -> None:
        self._records: dict[str, TargetRecord] = {}
        self._chains: dict[tuple[str, bytes], StoredChain] = {}

    async def get(self, location: str) -> TargetRecord | None:
        return self._records.get(location)

    async def observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord:
        old = self._records.get(location)
        history = observe(old.history if old else (), seen, now)
        rec = TargetRecord(location, history, (old.version if old else 0) + 1, None)
        self._records[location] = rec
        kept = {o.sha256 for o in history}
        for o in old.history if old else ():
            if o.sha256 not in kept:  # a certificate dropped from the history: its chain too
                self._chains.pop((location, o.sha256), None)
        return rec

    async def save_body(self, location: str, version: int, body: bytes) -> None:
        rec = self._records.get(location)
        if rec is not None and rec.version == version:
            self._records[location] = replace(rec, body=body)

    async def save_chain(
        self, location: str, sha256: bytes, chain: tuple[bytes, ...], now: int
    ) -> None:
        encode_chain(chain)  # the same bounds as the durable stores
        self._chains[(location, sha256)] = StoredChain(location, sha256, tuple(chain), now)

    async def get_chain(self, location: str, sha256: bytes) -> tuple[bytes, ...] | None:
        found = self._chains.get((location, sha256))
        return found.chain if found is not None else None

    async def chains(self, limit: int) -> list[StoredChain]:
        return list(self._chains.values())[: max(0, limit)]

    async def close(self) -> None:
        self._records.clear()
        self._chains.clear()


__all__ = ["MemoryStore"]
