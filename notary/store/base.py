"""The store interface.

Contract (one suite tests every implementation: ``tests/notary/test_store_contract.py``):

* ``get(location)`` returns the :class:`TargetRecord` or ``None`` when nothing is known.
* ``observe(location, digests, now)`` applies :func:`notary.core.history.observe` atomically
  (concurrent observers of one location, in one or several processes, all end up in the
  history), bumps ``version`` and clears the signed body; returns the new record.
* ``save_body(location, version, body)`` stores the signed response bytes for that version;
  it does nothing if the record has moved on to another version meanwhile.
* Failures of the backing service raise :class:`notary.errors.StoreUnavailable`.

Optional, :class:`ChainStore` (memory, SQLite and Redis implement it; other stores need not):

Optional, :class:`BudgetStore` (SQLite and Redis; notary/store/budget.py):

* ``touch(locations, now)`` marks records used (a cache hit); ``usage()`` gives the accounted
  ``(records, bytes)`` per class (``False``: own, ``True``: client-named);
  ``enforce(now)`` expires and evicts down to the budget (``observe`` calls it).

Optional, :class:`DeferredBodyStore` (SQLite): ``save_body_soon`` is ``save_body`` without
waiting for the write; its failures go to ``deferred_failed``.

* ``save_chain(location, sha256, chain, now)`` keeps the chain presented with the leaf of
  that SHA-256 (last write wins); ``get_chain`` returns it or ``None``; ``chains(limit)``
  returns at most ``limit`` stored chains, for analysis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from notary.core.fingerprint import CertDigests
from notary.core.history import History


@dataclass(frozen=True, slots=True)
class TargetRecord:
    location: str
    history: History
    version: int
    body: bytes | None = None  # signed legacy body for this version, once signed


class Store(Protocol):
    async def get(self, location: str) -> TargetRecord | None: ...

    async def observe(self, location: str, seen: CertDigests, now: int) -> TargetRecord: ...

    async def save_body(self, location: str, version: int, body: bytes) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StoredChain:
    location: str
    sha256: bytes  # of the leaf
    chain: tuple[bytes, ...]  # DER, leaf first
    seen: int


@runtime_checkable
class ChainStore(Protocol):
    async def save_chain(
        self, location: str, sha256: bytes, chain: tuple[bytes, ...], now: int
    ) -> None: ...

    async def get_chain(self, location: str, sha256: bytes) -> tuple[bytes, ...] | None: ...

    async def chains(self, limit: int) -> list[StoredChain]: ...


@runtime_checkable
class DeferredBodyStore(Protocol):
    """A store that can take a signed body without the caller waiting for the write
    (SQLite: it goes with the next batch). A lost body is only signed again."""

    deferred_failed: Callable[[str], None]

    def save_body_soon(self, location: str, version: int, body: bytes) -> None: ...


@runtime_checkable
class BudgetStore(Protocol):
    async def touch(self, locations: Sequence[str], now: int) -> None: ...

    async def usage(self) -> dict[bool, tuple[int, int]]: ...

    async def enforce(self, now: int) -> int: ...


__all__ = ["BudgetStore", "ChainStore", "DeferredBodyStore", "Store", "StoredChain", "TargetRecord"]
