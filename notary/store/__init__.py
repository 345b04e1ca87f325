"""Stores of observation histories: one small interface, several implementations.

* :class:`~notary.store.base.Store` -- the interface (``get`` returns ``None`` on a miss and
  raises :class:`~notary.errors.StoreUnavailable` only on failure).
* :class:`~notary.store.memory.MemoryStore` -- in-memory, for unit tests.
* :class:`~notary.store.sqlite.SQLiteStore` -- the embedded default (SQLite, WAL, aiosqlite; one
  statement per operation).
* :class:`~notary.store.redis.RedisStore` -- shared by several processes and machines.
* :class:`~notary.store.lru.CachedStore` -- an in-process LRU in front of any store.
"""

from notary.store.base import Store, TargetRecord
from notary.store.lru import CachedStore
from notary.store.memory import MemoryStore
from notary.store.redis import RedisStore
from notary.store.sqlite import SQLiteStore

__all__ = ["CachedStore", "MemoryStore", "RedisStore", "SQLiteStore", "Store", "TargetRecord"]
