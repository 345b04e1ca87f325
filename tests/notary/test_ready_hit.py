"""A plain cache hit is answered from the in-process record without awaiting the store
(``NotaryService._ready_hit``), with the answer the general path gives; anything else still
goes through the general path."""

from __future__ import annotations

from typing import Any

import pytest
from notary_support import FakeClock
from test_service import FakeProber, fp_of, leaf, make_service

from notary.core.fingerprint import parse_fingerprint
from notary.core.target import Target
from notary.keys import Identity
from notary.service import CacheOutcome

T = Target("site.test", 443)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
def prober() -> FakeProber:
    return FakeProber()


class StoreCalled(Exception):
    pass


def _no_store_reads(svc: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*args: object, **kw: object) -> None:
        raise StoreCalled

    monkeypatch.setattr(svc.store, "get", refuse)


async def test_hit_needs_no_store_call_and_a_stale_record_does(
    identity: Identity, prober: FakeProber, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = make_service(identity, prober, clock, recheck_after=10)
    fp = parse_fingerprint(fp_of(leaf(1)))
    first = await svc.validate(T, fp)
    assert first.cache is CacheOutcome.MISS
    _no_store_reads(svc, monkeypatch)
    for asked in (fp, None):  # POST and GET
        hit = await svc.validate(T, asked)
        assert (hit.status, hit.cache, hit.body) == (200, CacheOutcome.HIT, first.body)
    clock.advance(11)  # the twin: a record due for a recheck is the general path's
    with pytest.raises(StoreCalled):
        await svc.validate(T, fp)


async def test_ready_hit_is_the_general_paths_answer(
    identity: Identity, prober: FakeProber, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = make_service(identity, prober, clock)
    fp = parse_fingerprint(fp_of(leaf(1)))
    await svc.validate(T, fp)
    ready = await svc.validate(T, fp)
    monkeypatch.setattr(svc.store, "peek", lambda key: None)  # every answer the general way
    general = await svc.validate(T, fp)
    assert (ready.status, ready.body, ready.cache) == (general.status, general.body,
                                                       general.cache)
    wrong = parse_fingerprint(fp_of(leaf(2)))
    monkeypatch.undo()
    assert (await svc.validate(T, wrong)).status == 409  # a mismatch is never a ready hit
    assert prober.calls == 2
