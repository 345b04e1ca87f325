"""Observation history per ``host:port`` and the rules for using it as a cache.

Rules:

* A history is a tuple of :class:`Observation`, one per distinct certificate, ordered
  newest ``last_seen`` first (ties: newest ``first_seen`` first, then by digest, so the
  order is a pure function of the contents).
* Observing a certificate extends its observation (``last_seen = max(last_seen, now)``) or
  adds a new one with ``first_seen = last_seen = now``.
* At most :data:`MAX_HISTORY` observations are kept; the least recently seen are dropped.
* A submitted fingerprint is a *hit* when it names an observation seen within
  ``recheck_after`` seconds of now, *stale* when it names an older one (re-verify by probing),
  and a *miss* otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from notary.core.fingerprint import CertDigests, Fingerprint

MAX_HISTORY = 64


@dataclass(frozen=True, slots=True)
class Observation:
    """One certificate seen at a target between ``first_seen`` and ``last_seen`` (unix s)."""

    sha1: bytes
    sha256: bytes
    first_seen: int
    last_seen: int

    @property
    def digests(self) -> CertDigests:
        return CertDigests(self.sha1, self.sha256)


History = tuple[Observation, ...]


class CacheDecision(Enum):
    HIT = "hit"
    STALE = "stale"
    MISS = "miss"


def ordered(observations: Iterable[Observation]) -> History:
    """The canonical order: newest last_seen first."""
    return tuple(
        sorted(observations, key=lambda o: (-o.last_seen, -o.first_seen, o.sha256))
    )


def observe(history: History, seen: CertDigests, now: int) -> History:
    """The history after seeing the certificate with digests ``seen`` at time ``now``."""
    out: list[Observation] = []
    found = False
    for obs in history:
        if obs.sha256 == seen.sha256:
            found = True
            obs = replace(
                obs,
                first_seen=min(obs.first_seen, now),
                last_seen=max(obs.last_seen, now),
            )
        out.append(obs)
    if not found:
        out.append(Observation(seen.sha1, seen.sha256, now, now))
    return ordered(out)[:MAX_HISTORY]


def find(history: History, fp: Fingerprint) -> Observation | None:
    for obs in history:
        if fp.matches(obs.sha1, obs.sha256):
            return obs
    return None


def decide(history: History, fp: Fingerprint, now: int, recheck_after: int) -> CacheDecision:
    """Whether the history answers ``fp`` without a probe (see module rules)."""
    obs = find(history, fp)
    if obs is None:
        return CacheDecision.MISS
    if now - obs.last_seen > recheck_after:
        return CacheDecision.STALE
    return CacheDecision.HIT


def decide_any(history: History, now: int, recheck_after: int) -> CacheDecision:
    """For a GET (no fingerprint): any observation fresh enough is a hit."""
    if not history:
        return CacheDecision.MISS
    if now - history[0].last_seen > recheck_after:
        return CacheDecision.STALE
    return CacheDecision.HIT


__all__ = [
    "MAX_HISTORY",
    "CacheDecision",
    "History",
    "Observation",
    "decide",
    "decide_any",
    "find",
    "observe",
    "ordered",
]
