"""The validation service: the decision of the legacy protocol, over a store and a prober.

Flow for one request (see docs/ and convergence-v1.md "Server decision"):

1. Look the target up in the in-process LRU. A fresh matching observation is a *hit*: answer
   200 with the record's ready-signed body. A cache hit never signs.
2. Otherwise read through to the durable store (another process may have probed).
3. Still no fresh match: if the target failed recently (negative cache) answer 503 at once.
4. Probe, single-flight per (target, address): concurrent requests share one probe. When
   ``max_probes`` probes are in flight a new one is refused at once (503 + Retry-After).
5. Record what was observed, sign the new history once, answer 200 if the observed
   certificate is the one submitted, else 409.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from notary.core import legacy
from notary.core.fingerprint import CertDigests, Fingerprint
from notary.core.history import CacheDecision, decide, decide_any
from notary.core.signing import LegacySigner
from notary.core.target import Target
from notary.errors import ProbeCapacityFull, TargetUnreachable
from notary.probe import Prober
from notary.store.base import TargetRecord
from notary.store.lru import CachedStore


class CacheOutcome(Enum):
    HIT = "hit"  # answered from the notary's cache
    MISS = "miss"  # live probe, no usable record
    STALE = "stale"  # live probe re-verifying an aged record


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    cache: CacheOutcome


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    recheck_after: int = 86_400
    negative_ttl: float = 60.0
    max_probes: int = 256
    negative_max_entries: int = 100_000
    retry_after: int = 1


class NegativeCache:
    """Targets that recently failed, each until its expiry time (bounded, oldest evicted)."""

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._until: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()

    def get(self, key: tuple[str, str], now: float) -> str | None:
        hit = self._until.get(key)
        if hit is None:
            return None
        if hit[0] <= now:
            del self._until[key]
            return None
        return hit[1]

    def put(self, key: tuple[str, str], until: float, why: str) -> None:
        self._until[key] = (until, why)
        self._until.move_to_end(key)
        while len(self._until) > self._max:
            self._until.popitem(last=False)

    def __len__(self) -> int:
        return len(self._until)


class Unreachable(TargetUnreachable):
    """A 503 answered from the negative cache, without a probe."""

    from_cache = True


class NotaryService:
    def __init__(
        self,
        store: CachedStore,
        prober: Prober,
        signer: LegacySigner,
        settings: ServiceSettings,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self._prober = prober
        self._signer = signer
        self.settings = settings
        self._clock = clock
        self.negative = NegativeCache(settings.negative_max_entries)
        self._flights: dict[tuple[str, str], asyncio.Future[tuple[TargetRecord, CertDigests]]] = {}
        self.probes_started = 0

    @property
    def probes_in_flight(self) -> int:
        return len(self._flights)

    def _decide(self, rec: TargetRecord | None, fp: Fingerprint | None, now: int) -> CacheDecision:
        if rec is None:
            return CacheDecision.MISS
        if fp is None:
            return decide_any(rec.history, now, self.settings.recheck_after)
        return decide(rec.history, fp, now, self.settings.recheck_after)

    async def validate(self, target: Target, fp: Fingerprint | None) -> Answer:
        """Answer one request (``fp`` is ``None`` for a GET)."""
        now = int(self._clock())
        location = target.location
        rec = await self.store.get(location)
        decision = self._decide(rec, fp, now)
        if decision is not CacheDecision.HIT and rec is not None:
            rec = await self.store.get(location, fresh=True)
            decision = self._decide(rec, fp, now)
        if decision is CacheDecision.HIT:
            assert rec is not None
            return Answer(200, await self._body(rec), CacheOutcome.HIT)

        key = (location, target.ip.compressed if target.ip is not None else "")
        why = self.negative.get(key, self._clock())
        if why is not None:
            raise Unreachable(f"{why} (remembered for up to {self.settings.negative_ttl:g} s)")

        had_history = rec is not None and bool(rec.history)
        rec, seen = await self._probe_once(key, target)
        body = await self._body(rec)
        if fp is None:
            status = 200 if had_history else 409
        else:
            status = 200 if fp.matches(seen.sha1, seen.sha256) else 409
        outcome = CacheOutcome.STALE if decision is CacheDecision.STALE else CacheOutcome.MISS
        return Answer(status, body, outcome)

    async def _probe_once(
        self, key: tuple[str, str], target: Target
    ) -> tuple[TargetRecord, CertDigests]:
        flight = self._flights.get(key)
        if flight is not None:
            return await asyncio.shield(flight)
        if len(self._flights) >= self.settings.max_probes:
            raise ProbeCapacityFull(
                f"all {self.settings.max_probes} probe slots are busy; retry shortly",
                self.settings.retry_after,
            )
        loop = asyncio.get_running_loop()
        flight = loop.create_future()
        self._flights[key] = flight
        self.probes_started += 1
        try:
            result = await self._probe_and_record(key, target)
        except BaseException as exc:
            if not flight.cancelled():
                flight.set_exception(exc)
                flight.exception()  # mark retrieved: joiners may be absent
            raise
        else:
            flight.set_result(result)
            return result
        finally:
            del self._flights[key]

    async def _probe_and_record(
        self, key: tuple[str, str], target: Target
    ) -> tuple[TargetRecord, CertDigests]:
        try:
            result = await self._prober.probe(target)
        except TargetUnreachable as exc:
            self.negative.put(key, self._clock() + self.settings.negative_ttl, exc.message)
            raise
        rec = await self.store.observe(target.location, result.digests, int(self._clock()))
        await self._body(rec)
        rec = await self.store.get(target.location) or rec
        return rec, result.digests

    async def _body(self, rec: TargetRecord) -> bytes:
        """The record's signed legacy body, signing (once per version) if needed."""
        if rec.body is not None:
            return rec.body
        payload = legacy.signed_payload(rec.history)
        body = legacy.body(payload, self._signer.sign(payload))
        await self.store.save_body(rec.location, rec.version, body)
        return body


__all__ = ["Answer", "CacheOutcome", "NegativeCache", "NotaryService", "ServiceSettings"]
