"""An in-memory store (unit tests, and the reference for the contract)."""

from __future__ import annotations

from dataclasses import replace

from notary.core.fingerprint import CertDigests
from notary.core.history import observe
from notary.store.base import TargetRecord


class MemoryStore:
    def __init__(self) -> None:
        self._records: dict[str, TargetRecord] = {}

    async def get(self, location: str) -> TargetRecord | None:
        return self._records.get(location)

    async def observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord:
        old = self._records.get(location)
        history = observe(old.history if old else (), seen, now)
        rec = TargetRecord(location, history, (old.version if old else 0) + 1, None)
        self._records[location] = rec
        return rec

    async def save_body(self, location: str, version: int, body: bytes) -> None:
        rec = self._records.get(location)
        if rec is not None and rec.version == version:
            self._records[location] = replace(rec, body=body)

    async def close(self) -> None:
        self._records.clear()


__all__ = ["MemoryStore"]
