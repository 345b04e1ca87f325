"""Pure core: history rules (time is an argument) and the address policy."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.fingerprint import CertDigests, parse_fingerprint
from notary.core.history import (
    MAX_HISTORY,
    CacheDecision,
    Observation,
    decide,
    decide_any,
    find,
    observe,
    ordered,
)
from notary.core.special import classify
from notary.errors import BadConfig


def cert(n: int) -> CertDigests:
    return CertDigests.of(f"cert {n}".encode())


def fp1(n: int):  # type: ignore[no-untyped-def]
    return parse_fingerprint(cert(n).sha1.hex())


# -- history ------------------------------------------------------------------------------


def test_observe_inserts_then_extends() -> None:
    h = observe((), cert(1), 100)
    assert h == (Observation(cert(1).sha1, cert(1).sha256, 100, 100),)
    h = observe(h, cert(1), 250)
    assert [(o.first_seen, o.last_seen) for o in h] == [(100, 250)]
    h = observe(h, cert(2), 300)
    assert [o.sha256 for o in h] == [cert(2).sha256, cert(1).sha256]
    h = observe(h, cert(1), 400)
    assert [o.sha256 for o in h] == [cert(1).sha256, cert(2).sha256]
    assert h[0].first_seen == 100 and h[0].last_seen == 400


def test_observe_in_the_past_widens_but_never_shrinks() -> None:
    h = observe(observe((), cert(1), 500), cert(1), 600)
    assert [(o.first_seen, o.last_seen) for o in observe(h, cert(1), 550)] == [(500, 600)]
    assert [(o.first_seen, o.last_seen) for o in observe(h, cert(1), 400)] == [(400, 600)]


def test_history_bound_drops_least_recently_seen() -> None:
    h: tuple[Observation, ...] = ()
    for n in range(MAX_HISTORY):
        h = observe(h, cert(n), 1000 + n)
    assert len(h) == MAX_HISTORY
    h = observe(h, cert(999), 5000)
    assert len(h) == MAX_HISTORY
    assert find(h, fp1(0)) is None  # the oldest went
    assert find(h, fp1(1)) is not None
    assert h[0].sha256 == cert(999).sha256


events = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10_000)), max_size=120)


@given(events)
def test_history_invariants(evs: list[tuple[int, int]]) -> None:
    h: tuple[Observation, ...] = ()
    for n, now in evs:
        h = observe(h, cert(n), now)
        o = find(h, parse_fingerprint(cert(n).sha256.hex()))
        assert o is not None and o.first_seen <= now <= o.last_seen
    assert len(h) <= MAX_HISTORY
    assert len({o.sha256 for o in h}) == len(h)  # one entry per certificate
    assert h == ordered(h)
    assert all(a.last_seen >= b.last_seen for a, b in zip(h, h[1:], strict=False))
    for o in h:
        seen = [now for n, now in evs if cert(n).sha256 == o.sha256]
        assert (o.first_seen, o.last_seen) == (min(seen), max(seen))


@given(events)
def test_history_is_independent_of_arrival_order(evs: list[tuple[int, int]]) -> None:
    a: tuple[Observation, ...] = ()
    b: tuple[Observation, ...] = ()
    for n, now in evs:
        a = observe(a, cert(n), now)
    for n, now in reversed(evs):
        b = observe(b, cert(n), now)
    assert a == b


def test_ordering_ties_are_deterministic() -> None:
    o1 = Observation(cert(1).sha1, cert(1).sha256, 10, 20)
    o2 = Observation(cert(2).sha1, cert(2).sha256, 10, 20)
    o3 = Observation(cert(3).sha1, cert(3).sha256, 15, 20)
    assert ordered([o1, o2, o3]) == ordered([o3, o2, o1])
    assert ordered([o1, o2, o3])[0] == o3  # newest first_seen first on a last_seen tie


def test_decide_hit_stale_miss_at_the_boundary() -> None:
    h = observe((), cert(1), 1000)
    assert decide(h, fp1(1), 1000, 60) is CacheDecision.HIT
    assert decide(h, fp1(1), 1060, 60) is CacheDecision.HIT  # at the limit
    assert decide(h, fp1(1), 1061, 60) is CacheDecision.STALE  # one past it
    assert decide(h, fp1(2), 1000, 60) is CacheDecision.MISS
    assert decide((), fp1(1), 1000, 60) is CacheDecision.MISS
    sha256 = parse_fingerprint(cert(1).sha256.hex())
    assert decide(h, sha256, 1000, 60) is CacheDecision.HIT
    assert decide(h, sha256, 1000, 0) is CacheDecision.HIT
    assert decide(h, sha256, 1001, 0) is CacheDecision.STALE


def test_decide_uses_the_matching_entry_not_the_newest() -> None:
    h = observe(observe((), cert(1), 1000), cert(2), 5000)
    assert decide(h, fp1(2), 5050, 100) is CacheDecision.HIT
    assert decide(h, fp1(1), 5050, 100) is CacheDecision.STALE


def test_decide_any_for_get() -> None:
    assert decide_any((), 1000, 60) is CacheDecision.MISS
    h = observe(observe((), cert(1), 900), cert(2), 1000)
    assert decide_any(h, 1060, 60) is CacheDecision.HIT
    assert decide_any(h, 1061, 60) is CacheDecision.STALE


# -- address policy -----------------------------------------------------------------------

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "10.1.2.3": "private-use",
    "172.16.0.1": "private-use",
    "192.168.1.1": "private-use",
    "169.254.1.1": "link-local",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "0.0.0.0": "unspecified",
    "240.0.0.1": "reserved",
    "255.255.255.255": "limited broadcast",
    "100.64.0.1": "shared address space",
    "100.127.255.254": "shared address space",
    "192.0.2.1": "TEST-NET-1",
    "203.0.113.9": "TEST-NET-3",
    "198.18.0.1": "benchmarking",
    "::1": "loopback",
    "::": "unspecified",
    "fc00::1": "unique-local",
    "fd12:3456::1": "unique-local",
    "fe80::1": "link-local",
    "fec0::1": "site-local",
    "ff02::1": "multicast",
    "2001:db8::1": "documentation",
    "::ffff:127.0.0.1": "embeds 127.0.0.1, not globally reachable: loopback",
    "::ffff:10.0.0.1": "embeds 10.0.0.1, not globally reachable: private-use",
    "::ffff:100.64.0.1": "embeds 100.64.0.1, not globally reachable: shared address space",
    "64:ff9b::10.0.0.1": "10.0.0.1",
    "64:ff9b::127.0.0.1": "127.0.0.1",
    "2002:7f00:1::1": "embeds 127.0.0.1, not globally reachable: loopback",  # 6to4
    "2002:a00:1::1": "embeds 10.0.0.1, not globally reachable: private-use",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2": "Teredo",
    "::127.0.0.1": "outside the global unicast block",  # IPv4-compatible (deprecated)
}

ALLOWED = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"]


@pytest.mark.parametrize(("addr", "why"), sorted(REFUSED.items()))
def test_refused_by_default(addr: str, why: str) -> None:
    reason = AddressPolicy().refusal(ipaddress.ip_address(addr))
    assert reason is not None
    assert why in reason
    assert " a unspecified" not in reason


@pytest.mark.parametrize("addr", ALLOWED)
def test_global_addresses_allowed(addr: str) -> None:
    assert AddressPolicy().refusal(ipaddress.ip_address(addr)) is None


def test_allowlist_opens_ranges() -> None:
    policy = AddressPolicy(parse_networks(["127.0.0.0/8", "::1/128", "10.9.0.0/16"]))
    for addr in ("127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1", "10.9.1.1"):
        assert policy.refusal(ipaddress.ip_address(addr)) is None, addr
    # twins: outside the allowed networks it is still refused
    for addr in ("10.8.1.1", "192.168.0.1", "fe80::1", "::2"):
        assert policy.refusal(ipaddress.ip_address(addr)) is not None, addr


def test_allowlist_of_one_family_does_not_open_the_other() -> None:
    policy = AddressPolicy(parse_networks(["0.0.0.0/0"]))
    assert policy.refusal(ipaddress.ip_address("10.0.0.1")) is None
    assert policy.refusal(ipaddress.ip_address("fd00::1")) is not None


@given(st.ip_addresses())
def test_policy_is_total_and_consistent(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    reason = AddressPolicy().refusal(ip)
    if reason is not None:
        assert str(ip) in reason
    # the kinds whose meaning no Python release changed; the rest follows our own table
    if ip.is_loopback or ip.is_multicast or ip.is_unspecified or ip.is_link_local:
        assert reason is not None
    r = classify(ip)
    if r is None:
        assert reason is None
    elif not r.global_ and not r.embeds:
        assert reason is not None and r.name in reason
    assert AddressPolicy(parse_networks(["0.0.0.0/0", "::/0"])).refusal(ip) is None


@pytest.mark.parametrize("spec", ["", "not-a-net", "10.0.0.0/33", "1.2.3.4/", "::1/129"])
def test_bad_networks(spec: str) -> None:
    with pytest.raises(BadConfig):
        parse_networks([spec])


def test_networks_parse_non_strict() -> None:
    (net,) = parse_networks([" 10.1.2.3/8 "])
    assert net == ipaddress.ip_network("10.0.0.0/8")
