"""The validation service: the decision of the legacy protocol, over a store and a prober.

Flow for one request (see docs/ and convergence-v1.md "Server decision"):

1. Look the target up in the in-process LRU. A fresh matching observation is a *hit*: answer
   200 with the record's ready-signed body. A cache hit never signs.
2. Otherwise read through to the durable store (another process may have probed).
3. Still no fresh match: if the target failed recently (negative cache) answer 503 at once.
4. Probe, single-flight per record key: concurrent requests share one probe. When
   ``max_probes`` probes are in flight a new one is refused at once (503 + Retry-After).
5. Record what was observed, sign the new history once, answer 200 if the observed
   certificate is the one submitted, else 409.

Every record, probe flight, negative-cache entry and reusable extended answer is keyed by
:attr:`Target.key`: ``host:port`` for the notary's own resolution, ``host:port/ip`` when the
client named the address. What a probe to a client-chosen address observed is stored and
served only under that address's key, so it can never answer a request about ``host:port``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from notary.ca.checker import CAChecker
from notary.ca.verify import CAVerdict
from notary.core import extended, legacy
from notary.core.canonical import canonical_json
from notary.core.extended import ExtRequest
from notary.core.fingerprint import CertDigests, Fingerprint
from notary.core.history import CacheDecision, Observation, decide, decide_any, find
from notary.core.signing import LegacySigner
from notary.core.target import Target
from notary.errors import (
    BadInput,
    ProbeCapacityFull,
    StoreUnavailable,
    TargetRefused,
    TargetUnreachable,
)
from notary.limits import CLIENT, group_key
from notary.probe import Prober, ProbeResult
from notary.resolve import ResolverBusy
from notary.store.base import TargetRecord
from notary.store.lru import CachedStore
from notary.tlog.entry import Entry
from notary.tlog.service import TransparencyLog


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
    max_probes_per_client: int = 0  # probe flights one client may have started (0: no bound)
    max_probes_per_group: int = 0  # ... one client network (/24, /48) (0: no bound)
    probe_reserve: int = 0  # the last slots, only for clients holding none
    negative_max_entries: int = 100_000
    retry_after: int = 1
    ext_reuse: int = 1  # seconds a nonce-less extended answer may be reused
    ext_answer_entries: int = 100_000
    # and their bytes: an answer carries its target's history (up to 64 observations, about
    # 15 KB), so 100,000 of them could hold gigabytes
    ext_answer_bytes: int = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Lookup:
    record: TargetRecord
    cache: CacheOutcome
    seen: CertDigests | None  # what a probe just observed; None for a cache hit
    address: str | None  # the address probed, for a probe
    had_history: bool
    chain: tuple[bytes, ...] = ()  # the chain a probe just captured (with a CA verifier)


log = logging.getLogger("notary.ca")


class ExtSigner:
    """Signs extended-format statements with the notary's Ed25519 key."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = extended.AnswerKey(key)
        self.key_id = extended.key_id(key.public_key())

    def sign(self, stmt: dict[str, Any]) -> bytes:
        return extended.sign_answer(stmt, self._key)


class NegativeCache:
    """Targets that recently failed, each until its expiry time (bounded, oldest evicted)."""

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._until: OrderedDict[str, tuple[float, str]] = OrderedDict()

    def get(self, key: str, now: float) -> str | None:
        hit = self._until.get(key)
        if hit is None:
            return None
        if hit[0] <= now:
            del self._until[key]
            return None
        return hit[1]

    def put(self, key: str, until: float, why: str) -> None:
        self._until[key] = (until, why)
        self._until.move_to_end(key)
        while len(self._until) > self._max:
            self._until.popitem(last=False)

    def __len__(self) -> int:
        return len(self._until)


class Unreachable(TargetUnreachable):
    """A 503 answered from the negative cache, without a probe."""

    from_cache = True


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class NotaryService:
    def __init__(
        self,
        store: CachedStore,
        prober: Prober,
        signer: LegacySigner,
        settings: ServiceSettings,
        clock: Callable[[], float],
        ext_signer: ExtSigner | None = None,
        ca: CAChecker | None = None,
        tlog: TransparencyLog | None = None,
    ) -> None:
        self.store = store
        self.tlog = tlog
        self.ca = ca
        self._prober = prober
        # a prober that charges clients for probes (notary.limits.ProbeLimitedProber) does it
        # here, synchronously, so that no other request can join a probe it refuses
        self._admit: Callable[[], None] | None = getattr(prober, "admit", None)
        self._signer = signer
        self.settings = settings
        self._clock = clock
        self.negative = NegativeCache(settings.negative_max_entries)
        self._flights: dict[str, asyncio.Future[tuple[TargetRecord, ProbeResult]]] = {}
        self.probes_started = 0
        self._per_client: dict[str, int] = {}  # flights in progress, by the client that started
        self._ext_signer = ext_signer
        # (record key, client-named address, fingerprint) -> (record version, signed at,
        # status, body): nonce-less answers to cache hits, reused for ``ext_reuse`` seconds
        self._ext_answers: OrderedDict[tuple[str, str | None, bytes],
                                       tuple[int, int, int, bytes]] = OrderedDict()
        self._ext_answer_bytes = 0
        # told of store failures that do not fail a request (the operator's log)
        self.store_failed: Callable[[StoreUnavailable], None] = store.health_failed
        self.on_ca_verdict: Callable[[str], None] = lambda verdict: None  # metrics, if any

    @property
    def probes_in_flight(self) -> int:
        return len(self._flights)

    def _decide(self, rec: TargetRecord | None, fp: Fingerprint | None, now: int) -> CacheDecision:
        if rec is None:
            return CacheDecision.MISS
        if fp is None:
            return decide_any(rec.history, now, self.settings.recheck_after)
        return decide(rec.history, fp, now, self.settings.recheck_after)

    async def _lookup(self, target: Target, fp: Fingerprint | None) -> Lookup:
        """Cache decision, then (if needed) one shared probe. Raises on probe failure."""
        now = int(self._clock())
        key = target.key
        rec = await self.store.get(key)
        decision = self._decide(rec, fp, now)
        if decision is not CacheDecision.HIT and rec is not None:
            rec = await self.store.get(key, fresh=True)
            decision = self._decide(rec, fp, now)
        if decision is CacheDecision.HIT:
            assert rec is not None
            if self.store.used(key, now):  # the budget's last use, written in batches
                try:
                    await self.store.flush_uses()
                except StoreUnavailable as exc:  # the hit is still a good answer
                    self.store_failed(exc)
            # a client-named address is the only one its record was ever probed at
            address = target.ip.compressed if target.ip is not None else None
            return Lookup(rec, CacheOutcome.HIT, None, address, True)

        why = self.negative.get(key, self._clock())
        if why is not None:
            raise Unreachable(f"{why} (remembered for up to {self.settings.negative_ttl:g} s)")

        had_history = rec is not None and bool(rec.history)
        rec, probed = await self._probe_once(key, target)
        outcome = CacheOutcome.STALE if decision is CacheDecision.STALE else CacheOutcome.MISS
        return Lookup(rec, outcome, probed.digests, probed.address, had_history, probed.chain)

    def _ready_hit(self, target: Target, fp: Fingerprint | None) -> Answer | None:
        """The answer of :meth:`validate` when it is a plain cache hit needing nothing awaited
        (the in-process record decides a hit, its signed body is ready, no CA verifier and no
        batch of uses due); None otherwise, and :meth:`_lookup` decides as usual."""
        if self.ca is not None:
            return None
        key = target.key
        rec = self.store.peek(key)
        if rec is None or rec.body is None:
            return None
        now = int(self._clock())
        if self._decide(rec, fp, now) is not CacheDecision.HIT or self.store.used(key, now):
            return None
        return Answer(200, rec.body, CacheOutcome.HIT)

    async def validate(self, target: Target, fp: Fingerprint | None) -> Answer:
        """Answer one legacy request (``fp`` is ``None`` for a GET)."""
        ready = self._ready_hit(target, fp)
        if ready is not None:  # the common case: ~2 us instead of ~4 per hit
            return ready
        found = await self._lookup(target, fp)
        body = await self._body(found.record)
        if found.seen is None:
            status = 200
        elif fp is None:
            status = 200 if found.had_history else 409
        else:
            status = 200 if fp.matches(found.seen.sha1, found.seen.sha256) else 409
        if self.ca is not None:
            verdict = await self._ca_verdict(target, found, fp)
            if self.ca.decides and status == 200 and (verdict is None or not verdict.ok):
                status = 409
        return Answer(status, body, found.cache)

    async def _ca_verdict(
        self, target: Target, found: Lookup, fp: Fingerprint | None
    ) -> CAVerdict | None:
        """The CA verdict on the certificate in question: the one a probe just saw, else the
        observation matching ``fp``, else (GET) the latest one. ``None`` without one."""
        ca = self.ca
        if ca is None:
            return None
        if found.seen is not None:
            sha256 = found.seen.sha256
        else:
            obs = find(found.record.history, fp) if fp is not None else None
            if obs is None and fp is None and found.record.history:
                obs = max(found.record.history, key=lambda o: o.last_seen)
            if obs is None:
                return None
            sha256 = obs.sha256
        now = int(self._clock())
        key = target.key
        verdict = ca.cached(target.host, key, sha256, now)
        if verdict is not None:
            return verdict
        chain = found.chain if found.seen is not None else ()
        if not chain:
            chain = await self.store.get_chain(key, sha256) or ()
        verdict = ca.check(target.host, key, sha256, chain, now)
        # counted, not logged per probe (a line per probe grew the log by gigabytes a day);
        # the target only at DEBUG: the default log must not say what clients ask about
        self.on_ca_verdict(verdict.verdict)
        log.debug("ca %s sha256=%s verdict=%s store=%s reason=%s", key, sha256.hex()[:16],
                  verdict.verdict, verdict.store, verdict.reason)
        return verdict

    async def validate_ext(self, req: ExtRequest) -> Answer:
        """Answer one extended-format request with a signed ``converge-answer/1`` document.

        Unreachable and refused targets get signed answers too (verdicts ``unreachable`` and
        ``refused``); only a full probe capacity raises (the client should retry).
        Without a nonce, a signed answer is reused for the same record version and
        fingerprint within ``ext_reuse`` seconds, so a cache hit signs at most once per
        target per window; with a nonce every answer is signed.
        """
        signer = self._ext_signer
        if signer is None:
            raise BadInput("this notary has no extended-format signing key")
        target, fp = req.target, req.fingerprint
        try:
            found = await self._lookup(target, fp)
        except (TargetUnreachable, TargetRefused) as exc:
            verdict: extended.Verdict = (
                "refused" if isinstance(exc, TargetRefused) else "unreachable"
            )
            rec = await self.store.get(target.key)
            stmt = extended.statement(
                target=target, fingerprint=fp, nonce=req.nonce, verdict=verdict,
                history=rec.history if rec else (), answered_at=int(self._clock()),
                key=signer.key_id, cache="hit" if isinstance(exc, Unreachable) else "miss",
                detail=exc.message,
            )
            status = 403 if verdict == "refused" else 503
            return Answer(status, signer.sign(stmt), CacheOutcome.MISS)
        obs = find(found.record.history, fp)
        match = obs is not None and (
            found.seen is None or fp.matches(found.seen.sha1, found.seen.sha256)
        )
        ca_verdict = await self._ca_verdict(target, found, fp) if match else None
        if self.ca is not None and self.ca.decides and (ca_verdict is None or not ca_verdict.ok):
            match = False
        now = int(self._clock())
        # the statement names the target as asked, so the address a client named is part of
        # the key even where the record key leaves it out (an ``ip`` equal to the host)
        reuse_key = (target.key, None if target.ip is None else target.ip.compressed,
                     fp.digest)
        reusable = req.nonce is None and found.cache is CacheOutcome.HIT
        if reusable:
            cached = self._ext_answers.get(reuse_key)
            if (
                cached is not None
                and cached[0] == found.record.version
                and 0 <= now - cached[1] < self.settings.ext_reuse
            ):
                self._ext_answers.move_to_end(reuse_key)
                body = await self._with_proof(req, obs, cached[3])
                return Answer(cached[2], body, found.cache)
        stmt = extended.statement(
            target=target, fingerprint=fp, nonce=req.nonce,
            verdict="match" if match else "mismatch", history=found.record.history,
            answered_at=now, key=signer.key_id, address=found.address, cache=found.cache.value,
            ca=None if self.ca is None else (
                ca_verdict.to_json() if ca_verdict is not None
                else {"verdict": None, "reason": "the notary did not see this certificate",
                      "store": self.ca.store.name, "root_sha256": None}
            ),
        )
        body = signer.sign(stmt)
        status = 200 if match else 409
        if reusable:  # only a hit is ever reused, so only a hit's answer is kept
            self._keep_ext_answer(reuse_key, (found.record.version, now, status, body))
        body = await self._with_proof(req, obs, body)
        return Answer(status, body, found.cache)

    def _keep_ext_answer(self, key: tuple[str, str | None, bytes],
                         value: tuple[int, int, int, bytes]) -> None:
        """Keep one reusable answer, the oldest forgotten past the entry and byte bounds."""
        answers = self._ext_answers
        old = answers.pop(key, None)
        if old is not None:
            self._ext_answer_bytes -= len(old[3])
        answers[key] = value
        self._ext_answer_bytes += len(value[3])
        while answers and (len(answers) > self.settings.ext_answer_entries
                           or self._ext_answer_bytes > self.settings.ext_answer_bytes):
            self._ext_answer_bytes -= len(answers.popitem(last=False)[1][3])

    async def _with_proof(self, req: ExtRequest, obs: Observation | None, body: bytes) -> bytes:
        """The answer with the log's inclusion proof of the observation it is about, when the
        client asked for one and the log has it (docs/transparency.md). The member comes
        after the signed statement, so the signed bytes are unchanged."""
        if not req.transparency or self.tlog is None or obs is None:
            return body
        entry = Entry.of(req.target, obs.sha1, obs.sha256, obs.first_seen)
        proof = await self.tlog.proof(entry)
        if proof is None:
            return body
        return body[:-1] + b',"transparency":' + canonical_json(proof) + b"}"

    async def _probe_once(
        self, key: str, target: Target
    ) -> tuple[TargetRecord, ProbeResult]:
        flight = self._flights.get(key)
        if flight is not None:
            return await asyncio.shield(flight)
        if len(self._flights) >= self.settings.max_probes:
            raise ProbeCapacityFull(
                f"all {self.settings.max_probes} probe slots are busy; retry shortly",
                self.settings.retry_after,
            )
        if self._admit is not None:
            self._admit()  # the prober's own charge (its per-client rate), before the flight
        client = CLIENT.get()
        if client is not None:
            self._charge(client)
        # The probe runs as its own task: the request that started it may be cancelled (its
        # client went away, shutdown) without failing the requests that joined it.
        flight = asyncio.ensure_future(self._flight(key, target, client))
        flight.add_done_callback(_retrieve)  # joiners may be absent
        self._flights[key] = flight
        self.probes_started += 1
        return await asyncio.shield(flight)

    def _charge(self, client: str) -> None:
        """Charge a new flight to ``client`` and its network, or raise ProbeCapacityFull
        (the hierarchical shares of notary/limits.py)."""
        s = self.settings
        held = self._per_client.get(client, 0)
        group = group_key(client)
        group_held = self._per_client.get(group, 0) if group != client else 0
        why = None
        if 0 < s.max_probes_per_client <= held:
            why = (f"your address already has {held} live probes in flight (its share of the "
                   f"{s.max_probes} probe slots)")
        elif 0 < s.max_probes_per_group <= group_held:
            why = (f"your network already has {group_held} live probes in flight (its share "
                   f"of the {s.max_probes} probe slots)")
        elif held and s.probe_reserve and len(self._flights) >= s.max_probes - s.probe_reserve:
            why = (f"the last {s.probe_reserve} probe slots are kept for clients with no probe "
                   "in flight")
        if why is not None:
            raise ProbeCapacityFull(why + "; retry shortly", s.retry_after)
        self._per_client[client] = held + 1
        if group != client:
            self._per_client[group] = group_held + 1

    def _release(self, client: str) -> None:
        group = group_key(client)
        for key in (client, group) if group != client else (client,):
            left = self._per_client[key] - 1
            if left:
                self._per_client[key] = left
            else:
                del self._per_client[key]

    async def _flight(
        self, key: str, target: Target, client: str | None
    ) -> tuple[TargetRecord, ProbeResult]:
        try:
            return await self._probe_and_record(key, target)
        finally:
            del self._flights[key]
            if client is not None:
                self._release(client)

    async def _probe_and_record(
        self, key: str, target: Target
    ) -> tuple[TargetRecord, ProbeResult]:
        try:
            result = await self._prober.probe(target)
        except ResolverBusy:
            raise  # the notary's resolver was busy or slow: nothing is known of the target
        except TargetUnreachable as exc:
            self.negative.put(key, self._clock() + self.settings.negative_ttl, exc.message)
            raise
        if self.ca is not None and result.chain:
            # before the record: whoever reads the new record finds its chain
            await self.store.save_chain(key, result.digests.sha256, result.chain,
                                        int(self._clock()))
        rec = await self.store.observe(key, result.digests, int(self._clock()))
        if self.tlog is not None:
            for obs in rec.history:
                if obs.sha256 == result.digests.sha256:
                    self.tlog.record(Entry.of(target, obs.sha1, obs.sha256, obs.first_seen))
        await self._body(rec)
        rec = await self.store.get(key) or rec
        return rec, result

    async def _body(self, rec: TargetRecord) -> bytes:
        """The record's signed legacy body, signing (once per version) if needed."""
        if rec.body is not None:
            return rec.body
        payload = legacy.signed_payload(rec.history)
        body = legacy.body(payload, self._signer.sign(payload))
        await self.store.save_body(rec.location, rec.version, body)
        return body


__all__ = [
    "Answer",
    "CacheOutcome",
    "ExtSigner",
    "Lookup",
    "NegativeCache",
    "NotaryService",
    "ServiceSettings",
]
