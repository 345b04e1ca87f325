"""The notary over real sockets: real TLS to the notary, real TLS targets with trustme certs."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable

import pytest
import trustme
from notary_support import (
    FakeClock,
    Notary,
    TLSTarget,
    counting_identity,
    free_port,
    ipv6_loopback_available,
    leaf_der,
    sha1_fp,
    sha256_fp,
    verifies_recipe_a,
    verifies_recipe_b,
)

from notary.errors import StoreUnavailable
from notary.keys import Identity

MakeTarget = Callable[..., Awaitable[TLSTarget]]
MakeNotary = Callable[..., Awaitable[Notary]]

HIT = "converge-notary; hit"
MISS = "converge-notary; fwd=miss"
STALE = "converge-notary; fwd=stale"
NEG = "converge-notary; hit; detail=unreachable"
CAPACITY = "converge-notary; fwd=miss; detail=capacity"


async def test_match_answers_200_with_signed_history(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary()
    der = leaf_der(site_cert)
    r = await notary.post(f"site.test+{target.port}", sha1_fp(der))
    assert r.status == 200
    assert r.cache_status == MISS
    assert (r.header("Content-Type") or "").startswith("application/json")
    assert r.fingerprints() == [sha1_fp(der)]
    key = notary.identity.cert.public_key()
    assert verifies_recipe_a(r.body, key)  # type: ignore[arg-type]
    assert verifies_recipe_b(r.body, key)  # type: ignore[arg-type]
    assert target.hellos == 1
    assert target.sni_seen == ["site.test"]


async def test_own_response_fails_against_another_key(
    make_target: MakeTarget,
    make_notary: MakeNotary,
    site_cert: trustme.LeafCert,
    other_identity: Identity,
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary()
    r = await notary.post(f"site.test+{target.port}", sha1_fp(leaf_der(site_cert)))
    assert r.status == 200
    wrong = other_identity.cert.public_key()
    assert not verifies_recipe_a(r.body, wrong)  # type: ignore[arg-type]
    assert not verifies_recipe_b(r.body, wrong)  # type: ignore[arg-type]
    # and a single flipped byte in the signed part fails with the right key
    tampered = r.body.replace(b'"start": "', b'"start": "1', 1)
    right = notary.identity.cert.public_key()
    assert not verifies_recipe_b(tampered, right)  # type: ignore[arg-type]


async def test_sha256_fingerprint_in_any_form_matches(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary()
    fp = sha256_fp(leaf_der(site_cert)).replace(":", "").lower()
    r = await notary.post(f"site.test+{target.port}", fp)
    assert r.status == 200
    # the list still carries the canonical SHA-1 form
    assert r.fingerprints() == [sha1_fp(leaf_der(site_cert))]


async def test_mismatch_answers_409_with_what_was_seen(
    make_target: MakeTarget,
    make_notary: MakeNotary,
    site_cert: trustme.LeafCert,
    ca: trustme.CA,
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary()
    other = leaf_der(ca.issue_cert("site.test"))
    r = await notary.post(f"site.test+{target.port}", sha1_fp(other))
    assert r.status == 409
    assert r.cache_status == MISS
    assert r.fingerprints() == [sha1_fp(leaf_der(site_cert))]
    key = notary.identity.cert.public_key()
    assert verifies_recipe_b(r.body, key)  # type: ignore[arg-type]


async def test_history_after_rotation_lists_both_newest_first(
    make_target: MakeTarget, make_notary: MakeNotary, ca: trustme.CA
) -> None:
    old, new = ca.issue_cert("site.test"), ca.issue_cert("site.test")
    target = await make_target(old)
    clock = FakeClock()
    notary = await make_notary(clock=clock)
    spec = f"site.test+{target.port}"
    r1 = await notary.post(spec, sha1_fp(leaf_der(old)))
    assert r1.status == 200
    t1 = int(clock.now)
    clock.advance(100)
    target.use(new)
    r2 = await notary.post(spec, sha1_fp(leaf_der(new)))
    assert r2.status == 200
    assert r2.cache_status == MISS
    entries = r2.json()["fingerprintList"]
    assert [e["fingerprint"] for e in entries] == [
        sha1_fp(leaf_der(new)),
        sha1_fp(leaf_der(old)),
    ]
    assert entries[0]["timestamp"] == {"start": str(t1 + 100), "finish": str(t1 + 100)}
    assert entries[1]["timestamp"] == {"start": str(t1), "finish": str(t1)}
    # the old certificate is no longer presented: a fresh probe would say 409, but the
    # record still names it (the legacy rule: a known fingerprint is a hit)
    r3 = await notary.post(spec, sha1_fp(leaf_der(old)))
    assert r3.status == 200 and r3.cache_status == HIT
    assert target.hellos == 2


async def test_dead_port_answers_503_within_the_timeout(make_notary: MakeNotary) -> None:
    notary = await make_notary(probe_timeout=1.0)
    port = free_port()
    started = time.monotonic()
    r = await notary.post(f"site.test+{port}", "00" * 20)
    assert r.status == 503
    assert time.monotonic() - started < 10  # generous; a refused connect is immediate
    assert r.cache_status == "converge-notary; fwd=miss; detail=unreachable"
    assert b"refused" in r.body


async def test_handshake_that_never_completes_answers_503(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert, stall=True)
    notary = await make_notary(probe_timeout=0.5)
    started = time.monotonic()
    r = await notary.post(f"site.test+{target.port}", sha1_fp(leaf_der(site_cert)))
    elapsed = time.monotonic() - started
    assert r.status == 503
    assert target.accepted == 1 and target.hellos == 0
    assert 0.4 <= elapsed < 10  # the probe timeout, measured generously
    assert b"no TLS handshake within" in r.body


async def test_negative_cache_answers_without_a_new_connection(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert, stall=True)
    notary = await make_notary(probe_timeout=0.3, negative_ttl=60)
    spec = f"site.test+{target.port}"
    fp = sha1_fp(leaf_der(site_cert))
    first = await notary.post(spec, fp)
    assert first.status == 503 and first.cache_status != NEG
    second = await notary.post(spec, fp)
    assert second.status == 503
    assert second.cache_status == NEG
    assert target.accepted == 1


async def test_negative_cache_expires(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    """Twin of the above: after the negative TTL a new probe is made."""
    target = await make_target(site_cert, stall=True)
    clock = FakeClock()
    notary = await make_notary(probe_timeout=0.3, negative_ttl=30, clock=clock)
    spec = f"site.test+{target.port}"
    fp = sha1_fp(leaf_der(site_cert))
    assert (await notary.post(spec, fp)).status == 503
    clock.advance(31)
    target.stall = False
    r = await notary.post(spec, fp)
    assert r.status == 200 and r.cache_status == MISS
    assert target.accepted == 2


async def test_two_certificates_behind_one_port_by_sni(
    make_target: MakeTarget, make_notary: MakeNotary, ca: trustme.CA
) -> None:
    a, b = ca.issue_cert("a.test"), ca.issue_cert("b.test")
    fallback = ca.issue_cert("fallback.test")
    target = await make_target(fallback, by_sni={"a.test": a, "b.test": b})
    notary = await make_notary(resolve=["a.test=127.0.0.1", "b.test=127.0.0.1"])
    ra = await notary.post(f"a.test+{target.port}", sha1_fp(leaf_der(a)))
    rb = await notary.post(f"b.test+{target.port}", sha1_fp(leaf_der(b)))
    assert ra.status == 200 and rb.status == 200
    assert ra.fingerprints() == [sha1_fp(leaf_der(a))]
    assert rb.fingerprints() == [sha1_fp(leaf_der(b))]
    # twin: b's certificate is not what a.test presents (a.test's history is cached, so the
    # wrong fingerprint forces a probe, which sees a's certificate again)
    wrong = await notary.post(f"a.test+{target.port}", sha1_fp(leaf_der(b)))
    assert wrong.status == 409
    assert wrong.fingerprints() == [sha1_fp(leaf_der(a))]
    assert sorted(n or "" for n in target.sni_seen) == ["a.test", "a.test", "b.test"]


@pytest.mark.skipif(not ipv6_loopback_available(), reason="::1 is not available here")
async def test_ipv6_loopback_target(
    make_target: MakeTarget, make_notary: MakeNotary, ca: trustme.CA
) -> None:
    cert = ca.issue_cert("::1")
    target = await make_target(cert, host="::1")
    notary = await make_notary()
    der = leaf_der(cert)
    r = await notary.post(f"[::1]+{target.port}", sha1_fp(der))
    assert r.status == 200
    assert target.sni_seen == [None]  # no SNI for IP literals
    bare = await notary.post(f"::1+{target.port}", sha1_fp(der))
    assert bare.status == 200 and bare.cache_status == HIT  # same record "[::1]:port"
    # twin: the IPv4 loopback on the same port has nothing listening
    v4 = await notary.post(f"127.0.0.1+{target.port}", sha1_fp(der))
    assert v4.status == 503


async def test_optional_ip_segment_connects_there_with_sni(
    make_target: MakeTarget, make_notary: MakeNotary, ca: trustme.CA
) -> None:
    cert = ca.issue_cert("elsewhere.test")
    target = await make_target(cert)
    notary = await make_notary()  # elsewhere.test is not in the name map
    der = leaf_der(cert)
    r = await notary.post(f"elsewhere.test+{target.port}/127.0.0.1", sha1_fp(der))
    assert r.status == 200
    assert target.sni_seen == ["elsewhere.test"]
    # the record is keyed by host:port/ip: asking again with the same address is a hit ...
    hit = await notary.post(f"elsewhere.test+{target.port}/127.0.0.1", sha1_fp(der))
    assert hit.status == 200 and hit.cache_status == HIT
    # ... but the name alone is not answered from it: the notary resolves it itself (here
    # it cannot: elsewhere.test is not in its name map, answered as a name resolving to no
    # address it may probe)
    bare = await notary.post(f"elsewhere.test+{target.port}", sha1_fp(der))
    assert bare.status == 403 and bare.cache_status != HIT
    # twin: an IP segment where nothing listens is unreachable
    dead = await notary.post(f"other.test+{target.port}/127.0.0.2", sha1_fp(der))
    assert dead.status == 503


async def test_concurrent_requests_share_one_probe(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert, gated=True)
    notary = await make_notary(probe_timeout=10)
    spec = f"site.test+{target.port}"
    fp = sha1_fp(leaf_der(site_cert))
    n = 12
    tasks = [asyncio.ensure_future(notary.post(spec, fp)) for _ in range(n)]
    async with asyncio.timeout(10):
        while target.accepted < 1:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.5)  # let every request reach the notary and join the flight
    target.gate.set()
    replies = await asyncio.gather(*tasks)
    assert [r.status for r in replies] == [200] * n
    assert target.accepted == 1 and target.hellos == 1
    assert notary.service.probes_started == 1
    assert len({r.body for r in replies}) == 1


async def test_sequential_misses_each_probe(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert, ca: trustme.CA
) -> None:
    """Twin of single-flight: wrong fingerprints asked one after another each probe."""
    target = await make_target(site_cert)
    notary = await make_notary()
    spec = f"site.test+{target.port}"
    for _ in range(3):
        r = await notary.post(spec, sha1_fp(leaf_der(ca.issue_cert("x.test"))))
        assert r.status == 409
    assert target.hellos == 3
    assert notary.service.probes_started == 3


async def test_probe_capacity_full_answers_503_with_retry_after(
    make_target: MakeTarget, make_notary: MakeNotary, ca: trustme.CA
) -> None:
    slow_cert, other_cert = ca.issue_cert("site.test"), ca.issue_cert("other.test")
    slow = await make_target(slow_cert, gated=True)
    other = await make_target(other_cert)
    notary = await make_notary(
        max_probes=1, probe_timeout=10, resolve=["site.test=127.0.0.1", "other.test=127.0.0.1"]
    )
    slow_fp = sha1_fp(leaf_der(slow_cert))
    first = asyncio.ensure_future(notary.post(f"site.test+{slow.port}", slow_fp))
    async with asyncio.timeout(10):
        while slow.accepted < 1:
            await asyncio.sleep(0.01)
    busy = await notary.post(f"other.test+{other.port}", sha1_fp(leaf_der(other_cert)))
    assert busy.status == 503
    assert busy.header("Retry-After") is not None
    assert int(busy.header("Retry-After") or "0") >= 1
    assert busy.cache_status == CAPACITY
    assert other.accepted == 0
    slow.gate.set()
    assert (await first).status == 200
    # twin: with the slot free again the same request is probed and answered
    ok = await notary.post(f"other.test+{other.port}", sha1_fp(leaf_der(other_cert)))
    assert ok.status == 200 and ok.header("Retry-After") is None


async def test_recheck_after_reprobes_as_stale(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    clock = FakeClock()
    notary = await make_notary(clock=clock, recheck_after=100)
    spec = f"site.test+{target.port}"
    fp = sha1_fp(leaf_der(site_cert))
    assert (await notary.post(spec, fp)).cache_status == MISS
    clock.advance(100)  # at the limit: still fresh
    r = await notary.post(spec, fp)
    assert r.status == 200 and r.cache_status == HIT
    assert target.hellos == 1
    clock.advance(1)  # one past it: re-verified by a probe
    r = await notary.post(spec, fp)
    assert r.status == 200 and r.cache_status == STALE
    assert target.hellos == 2
    finish = r.json()["fingerprintList"][0]["timestamp"]["finish"]
    assert finish == str(int(clock.now))


async def test_cache_hit_does_not_sign(
    make_target: MakeTarget,
    make_notary: MakeNotary,
    site_cert: trustme.LeafCert,
    identity: Identity,
) -> None:
    target = await make_target(site_cert)
    ident, key = counting_identity(identity)
    notary = await make_notary(ident=ident)
    spec = f"site.test+{target.port}"
    fp = sha1_fp(leaf_der(site_cert))
    first = await notary.post(spec, fp)
    assert first.status == 200 and key.signs == 1
    version = (await notary.service.store.get(f"site.test:{target.port}")).version
    for _ in range(5):
        r = await notary.post(spec, fp)
        assert r.status == 200 and r.cache_status == HIT
        assert r.body == first.body
    assert key.signs == 1
    assert (await notary.service.store.get(f"site.test:{target.port}")).version == version
    # twin: a miss (new observation) signs again
    r = await notary.post(spec, "AB" * 20)
    assert r.status == 409 and key.signs == 2


async def test_get_without_fingerprint(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary()
    spec = f"site.test+{target.port}"
    first = await notary.get(spec)
    assert first.status == 409  # unknown target: probed, answered 409 the first time
    assert first.fingerprints() == [sha1_fp(leaf_der(site_cert))]
    second = await notary.get(spec)
    assert second.status == 200 and second.cache_status == HIT
    assert target.hellos == 1


async def test_keep_alive_http11_client(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    """An HTTP/1.1 client can send several requests on one connection."""
    from notary_support import no_verify_client, parse_reply

    target = await make_target(site_cert)
    notary = await make_notary()
    fp = sha1_fp(leaf_der(site_cert))
    body = f"fingerprint={fp}".encode()
    req = (
        f"POST /target/site.test+{target.port} HTTP/1.1\r\nHost: notary\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    reader, writer = await asyncio.open_connection("127.0.0.1", notary.port, ssl=no_verify_client())
    try:
        statuses = []
        for _ in range(3):
            writer.write(req)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            reply = parse_reply(head)
            length = int(reply.header("Content-Length") or "-1")
            assert reply.header("Transfer-Encoding") is None
            await asyncio.wait_for(reader.readexactly(length), 10)
            statuses.append((reply.status, reply.cache_status))
    finally:
        writer.close()
        await writer.wait_closed()
    assert statuses == [(200, MISS), (200, HIT), (200, HIT)]


class FailingStore:
    """A store whose backing service is down (an in-memory twin of our Store interface)."""

    async def get(self, location: str) -> None:
        raise StoreUnavailable("store read failed: disk on fire")

    async def observe(self, location: str, seen: object, now: int) -> None:
        raise StoreUnavailable("store write failed: disk on fire")

    async def save_body(self, location: str, version: int, body: bytes) -> None:
        raise StoreUnavailable("store write failed: disk on fire")

    async def close(self) -> None:
        pass


async def test_store_failure_answers_503(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary(store=FailingStore())
    r = await notary.post(f"site.test+{target.port}", sha1_fp(leaf_der(site_cert)))
    assert r.status == 503
    assert r.body == b"the notary's store is unavailable; retry shortly\n"  # nothing internal
    assert r.header("Retry-After") is not None
    assert r.cache_status == "converge-notary; fwd=miss; detail=store-unavailable"


async def test_http11_connection_close_is_honoured(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    notary = await make_notary()
    fp = sha1_fp(leaf_der(site_cert))
    body = f"fingerprint={fp}".encode()
    req = (
        f"POST /target/site.test+{target.port} HTTP/1.1\r\nHost: n\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    r = await notary.send(req, timeout=10)  # returns only once the server has closed
    assert r.status == 200
    assert r.header("Transfer-Encoding") is None
    assert r.header("Content-Length") == str(len(r.body))


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
async def test_targets_speaking_tls12_or_tls13(
    make_target: MakeTarget,
    make_notary: MakeNotary,
    site_cert: trustme.LeafCert,
    version: ssl.TLSVersion,
) -> None:
    target = await make_target(site_cert, max_version=version)
    notary = await make_notary()
    r = await notary.post(f"site.test+{target.port}", sha1_fp(leaf_der(site_cert)))
    assert r.status == 200


async def test_target_limited_to_tls11_is_unreachable(
    make_target: MakeTarget, make_notary: MakeNotary, site_cert: trustme.LeafCert
) -> None:
    """Twin: the notary does not go below TLS 1.2."""
    target = await make_target(site_cert, max_version=ssl.TLSVersion.TLSv1_1)
    notary = await make_notary()
    r = await notary.post(f"site.test+{target.port}", sha1_fp(leaf_der(site_cert)))
    assert r.status == 503
    assert r.cache_status == "converge-notary; fwd=miss; detail=unreachable"


async def test_target_speaking_plain_http_is_unreachable(make_notary: MakeNotary) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 400 Bad Request\r\n\r\nnot TLS\r\n")
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        notary = await make_notary(probe_timeout=5)
        started = time.monotonic()
        r = await notary.post(f"site.test+{port}", "00" * 20)
        assert r.status == 503
        assert time.monotonic() - started < 4  # failed at once, not by the timeout
        assert b"TLS handshake" in r.body or b"cannot connect" in r.body
    finally:
        server.close()
        await server.wait_closed()
