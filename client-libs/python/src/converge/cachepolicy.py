"""Local cache decisions (pure): is a stored (location, fingerprint) entry usable now?

* no entry: ``miss``
* ``lifetime`` is ``None``: every entry is a ``hit`` (the 2011 add-on never expired entries)
* ``now - timestamp > lifetime``: ``stale`` (ask the notaries again)
* an entry more than :data:`FUTURE_SKEW` seconds in the future: ``stale`` (clock trouble;
  do not let it live forever)
* otherwise ``hit``

Timestamps are unix seconds; values above :data:`MILLISECONDS_ABOVE` are read as
milliseconds (JavaScript's ``Date.now()``) so caches written by other clients still work.
"""

from __future__ import annotations

from typing import Literal

CacheDecision = Literal["hit", "stale", "miss"]

FUTURE_SKEW = 300
MILLISECONDS_ABOVE = 100_000_000_000  # year 5138 in seconds; 1973 in milliseconds


def normalise_timestamp(timestamp: int) -> int:
    return timestamp // 1000 if timestamp > MILLISECONDS_ABOVE else timestamp


def cache_decision(timestamp: int | None, now: float, lifetime: float | None) -> CacheDecision:
    if timestamp is None:
        return "miss"
    ts = normalise_timestamp(timestamp)
    age = now - ts
    if age < -FUTURE_SKEW:
        return "stale"
    if lifetime is not None and age > lifetime:
        return "stale"
    return "hit"
