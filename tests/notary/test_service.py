"""The validation service over in-memory twins of our own interfaces (store, prober, clock).

The socket-level behaviour is in test_http_integration; here the decision rules are driven
step by step, deterministically.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress

import pytest
from notary_support import FakeClock

from notary.core import legacy
from notary.core.fingerprint import CertDigests, parse_fingerprint
from notary.core.signing import LegacySigner
from notary.core.target import Target
from notary.errors import ProbeCapacityFull, TargetRefused, TargetUnreachable
from notary.keys import Identity
from notary.probe import ProbeResult
from notary.service import CacheOutcome, NegativeCache, NotaryService, ServiceSettings
from notary.store import CachedStore, MemoryStore


def leaf(n: int) -> bytes:
    return f"leaf certificate {n}".encode()


def fp_of(der: bytes) -> str:
    return hashlib.sha1(der).hexdigest()


class FakeProber:
    """Presents ``current`` for every target; each probe can be held on ``gate``."""

    def __init__(self) -> None:
        self.current = leaf(1)
        self.calls = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None

    async def probe(self, target: Target) -> ProbeResult:
        self.calls += 1
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        der = self.current
        return ProbeResult(der, "192.0.2.1", CertDigests.of(der))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
def prober() -> FakeProber:
    return FakeProber()


def make_service(
    identity: Identity, prober: FakeProber, clock: FakeClock, **settings: object
) -> NotaryService:
    return NotaryService(
        CachedStore(MemoryStore()),
        prober,
        LegacySigner(identity.key),
        ServiceSettings(**settings),  # type: ignore[arg-type]
        clock,
    )


T = Target("site.test", 443)


async def test_miss_then_hit(identity: Identity, prober: FakeProber, clock: FakeClock) -> None:
    svc = make_service(identity, prober, clock)
    fp = parse_fingerprint(fp_of(leaf(1)))
    a = await svc.validate(T, fp)
    assert (a.status, a.cache) == (200, CacheOutcome.MISS)
    b = await svc.validate(T, fp)
    assert (b.status, b.cache) == (200, CacheOutcome.HIT)
    assert a.body == b.body and prober.calls == 1
    signed, _ = legacy.split_body(a.body)
    rec = await svc.store.get(T.location)
    assert rec is not None and signed == legacy.signed_payload(rec.history)


async def test_mismatch_probes_every_time(
    identity: Identity, prober: FakeProber, clock: FakeClock
) -> None:
    svc = make_service(identity, prober, clock)
    wrong = parse_fingerprint(fp_of(leaf(2)))
    for _ in range(3):
        a = await svc.validate(T, wrong)
        assert (a.status, a.cache) == (409, CacheOutcome.MISS)
    assert prober.calls == 3


async def test_stale_after_recheck_age(
    identity: Identity, prober: FakeProber, clock: FakeClock
) -> None:
    svc = make_service(identity, prober, clock, recheck_after=10)
    fp = parse_fingerprint(fp_of(leaf(1)))
    await svc.validate(T, fp)
    clock.advance(10)
    assert (await svc.validate(T, fp)).cache is CacheOutcome.HIT
    clock.advance(1)
    a = await svc.validate(T, fp)
    assert (a.status, a.cache) == (200, CacheOutcome.STALE)
    # the certificate changed meanwhile: the stale fingerprint now gets 409
    clock.advance(11)
    prober.current = leaf(2)
    b = await svc.validate(T, fp)
    assert (b.status, b.cache) == (409, CacheOutcome.STALE)
    assert prober.calls == 3


async def test_get_semantics(identity: Identity, prober: FakeProber, clock: FakeClock) -> None:
    svc = make_service(identity, prober, clock, recheck_after=10)
    first = await svc.validate(T, None)
    assert (first.status, first.cache) == (409, CacheOutcome.MISS)
    second = await svc.validate(T, None)
    assert (second.status, second.cache) == (200, CacheOutcome.HIT)
    clock.advance(11)
    third = await svc.validate(T, None)
    assert (third.status, third.cache) == (200, CacheOutcome.STALE)


async def test_single_flight_shares_results_and_errors(
    identity: Identity, prober: FakeProber, clock: FakeClock
) -> None:
    svc = make_service(identity, prober, clock)
    fp = parse_fingerprint(fp_of(leaf(1)))
    prober.gate.clear()
    tasks = [asyncio.ensure_future(svc.validate(T, fp)) for _ in range(10)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert svc.probes_in_flight == 1
    prober.gate.set()
    answers = await asyncio.gather(*tasks)
    assert {a.status for a in answers} == {200} and prober.calls == 1
    assert svc.probes_in_flight == 0
    # a failing shared probe fails every joiner, once
    other = Target("other.test", 443)
    prober.gate.clear()
    prober.fail = TargetUnreachable("other.test:443: connection refused")
    tasks = [asyncio.ensure_future(svc.validate(other, fp)) for _ in range(5)]
    await asyncio.sleep(0)
    prober.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, TargetUnreachable) for r in results)
    assert prober.calls == 2


async def test_cancelled_leader_does_not_fail_the_joiners(
    identity: Identity, prober: FakeProber, clock: FakeClock
) -> None:
    """One client going away must not fail the other clients sharing its probe."""
    svc = make_service(identity, prober, clock)
    fp = parse_fingerprint(fp_of(leaf(1)))
    prober.gate.clear()
    leader = asyncio.ensure_future(svc.validate(T, fp))
    await asyncio.sleep(0)
    joiners = [asyncio.ensure_future(svc.validate(T, fp)) for _ in range(3)]
    await asyncio.sleep(0)
    leader.cancel()
    await asyncio.sleep(0)
    prober.gate.set()
    results = await asyncio.gather(*joiners, return_exceptions=True)
    assert [getattr(r, "status", r) for r in results] == [200, 200, 200]
    assert leader.cancelled()


async def test_capacity_full_is_immediate(
    identity: Identity, prober: FakeProber, clock: FakeClock
) -> None:
    svc = make_service(identity, prober, clock, max_probes=2, retry_after=3)
    prober.gate.clear()
    fp = parse_fingerprint(fp_of(leaf(1)))
    busy = [asyncio.ensure_future(svc.validate(Target(f"h{i}.test", 443), fp)) for i in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(ProbeCapacityFull) as info:
        await svc.validate(Target("h3.test", 443), fp)
    assert info.value.retry_after == 3 and info.value.status == 503
    # joining an existing flight needs no new slot
    join = asyncio.ensure_future(svc.validate(Target("h0.test", 443), fp))
    await asyncio.sleep(0)
    prober.gate.set()
    assert [a.status for a in await asyncio.gather(*busy, join)] == [200, 200, 200]
    assert prober.calls == 2
    assert (await svc.validate(Target("h3.test", 443), fp)).status == 200  # twin


async def test_negative_cache_ttl(identity: Identity, prober: FakeProber, clock: FakeClock) -> None:
    svc = make_service(identity, prober, clock, negative_ttl=30)
    fp = parse_fingerprint(fp_of(leaf(1)))
    prober.fail = TargetUnreachable("site.test:443: refused")
    with pytest.raises(TargetUnreachable) as first:
        await svc.validate(T, fp)
    assert not getattr(first.value, "from_cache", False)
    clock.advance(29)
    with pytest.raises(TargetUnreachable) as second:
        await svc.validate(T, fp)
    assert getattr(second.value, "from_cache", False)
    assert prober.calls == 1
    # the negative entry is per (location, ip): an explicit address is probed separately
    with pytest.raises(TargetUnreachable):
        await svc.validate(Target("site.test", 443, ipaddress.ip_address("::1")), fp)
    assert prober.calls == 2
    clock.advance(2)
    prober.fail = None
    assert (await svc.validate(T, fp)).status == 200
    assert prober.calls == 3


async def test_refusals_are_not_remembered(
    identity: Identity, prober: FakeProber, clock: FakeClock
) -> None:
    svc = make_service(identity, prober, clock)
    prober.fail = TargetRefused("refused by the notary's address policy")
    fp = parse_fingerprint(fp_of(leaf(1)))
    for _ in range(2):
        with pytest.raises(TargetRefused):
            await svc.validate(T, fp)
    assert prober.calls == 2 and len(svc.negative) == 0


def test_negative_cache_is_bounded() -> None:
    neg = NegativeCache(max_entries=2)
    for i in range(3):
        neg.put((f"h{i}", ""), 100.0, "down")
    assert len(neg) == 2
    assert neg.get(("h0", ""), 0.0) is None
    assert neg.get(("h2", ""), 99.9) == "down"
    assert neg.get(("h2", ""), 100.0) is None  # expired at its deadline


def _ext_service(identity: Identity, prober: FakeProber, clock: FakeClock,
                 **settings: object) -> NotaryService:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from notary.service import ExtSigner

    return NotaryService(CachedStore(MemoryStore()), prober, LegacySigner(identity.key),
                         ServiceSettings(**settings),  # type: ignore[arg-type]
                         clock, ext_signer=ExtSigner(Ed25519PrivateKey.generate()))


async def test_reused_answers_are_hits_only_and_bounded_by_bytes(
        identity: Identity, prober: FakeProber, clock: FakeClock) -> None:
    """Only a hit's nonce-less answer is kept (only a hit reuses one), and the kept answers
    stay under their byte bound however many fingerprints a client sends: each mismatch
    with a random fingerprint was kept once, 15 KB apiece for a target with a long
    history. The twin: a repeated hit is served from the kept answer, byte for byte."""
    from notary.core.extended import ExtRequest

    svc = _ext_service(identity, prober, clock, ext_answer_bytes=4096)
    good = parse_fingerprint(fp_of(leaf(1)))
    first = await svc.validate_ext(ExtRequest(T, good, None))  # the probe: a miss
    assert first.cache is CacheOutcome.MISS and not svc._ext_answers
    a = await svc.validate_ext(ExtRequest(T, good, None))
    b = await svc.validate_ext(ExtRequest(T, good, None))
    assert a.cache is CacheOutcome.HIT and a.body == b.body and len(svc._ext_answers) == 1
    for n in range(200):  # wrong fingerprints: each a probe, never kept
        fp = parse_fingerprint(hashlib.sha1(b"%d" % n).hexdigest())
        assert (await svc.validate_ext(ExtRequest(T, fp, None))).status == 409
    for n in range(60):  # hits on 60 targets: the oldest forgotten past 4,096 bytes
        t = Target(f"s{n}.test", 443)
        await svc.validate_ext(ExtRequest(t, good, None))
        await svc.validate_ext(ExtRequest(t, good, None))
    kept = sum(len(v[3]) for v in svc._ext_answers.values())
    assert kept == svc._ext_answer_bytes <= 4096 and 0 < len(svc._ext_answers) < 60


async def test_a_reused_answer_names_the_address_its_client_named(
        identity: Identity, prober: FakeProber, clock: FakeClock) -> None:
    """``{host: 127.0.0.1, ip: 127.0.0.1}`` and ``{host: 127.0.0.1}`` share a record but
    not a statement (one names the address): neither is answered with the other's. The
    twin: the same request again is answered with the kept statement."""
    import json

    from notary.core.extended import ExtRequest

    svc = _ext_service(identity, prober, clock)
    good = parse_fingerprint(fp_of(leaf(1)))
    named = Target("127.0.0.1", 443, ipaddress.ip_address("127.0.0.1"))
    plain = Target("127.0.0.1", 443)
    assert named.key == plain.key
    await svc.validate_ext(ExtRequest(named, good, None))  # the probe
    a = await svc.validate_ext(ExtRequest(named, good, None))
    b = await svc.validate_ext(ExtRequest(plain, good, None))
    assert json.loads(a.body)["statement"]["target"]["ip"] == "127.0.0.1"
    assert json.loads(b.body)["statement"]["target"]["ip"] is None
    assert (await svc.validate_ext(ExtRequest(named, good, None))).body == a.body


async def test_a_client_over_its_probe_rate_fails_alone(
        identity: Identity, prober: FakeProber, clock: FakeClock) -> None:
    """A client whose probe bucket is empty and a client asking about the same target in the
    same loop step: the first gets its 429, the second its own probe (the charge once ran
    inside the flight's task, a step later, and the second joined the flight and got the
    first's 429). The twin: the first client's next probe is refused again."""
    import contextvars

    from notary.errors import RateLimited
    from notary.limits import CLIENT, ProbeLimitedProber, RateLimiter

    limiter = RateLimiter(rate=0.001, burst=1)
    limiter.check("192.0.2.66", 0.0)  # the attacker's bucket: empty
    limited = ProbeLimitedProber(prober, limiter, clock=lambda: 0.0)
    svc = NotaryService(CachedStore(MemoryStore()), limited, LegacySigner(identity.key),
                        ServiceSettings(), clock)
    good = parse_fingerprint(fp_of(leaf(1)))

    def as_client(addr: str) -> contextvars.Context:
        ctx = contextvars.copy_context()
        ctx.run(CLIENT.set, addr)
        return ctx

    prober.gate.clear()
    loop = asyncio.get_running_loop()
    attacker = loop.create_task(svc.validate(T, good), context=as_client("192.0.2.66"))
    victim = loop.create_task(svc.validate(T, good), context=as_client("198.51.100.7"))
    await asyncio.sleep(0)
    prober.gate.set()
    results = await asyncio.gather(attacker, victim, return_exceptions=True)
    assert isinstance(results[0], RateLimited)
    assert not isinstance(results[1], BaseException) and results[1].status == 200
    with pytest.raises(RateLimited):
        await loop.create_task(svc.validate(Target("b.test", 443), good),
                               context=as_client("192.0.2.66"))
