"""The system resolver in bounded threads (notary/resolve.py): a name whose nameserver never
answers holds a thread for the resolver's own timeouts, so lookups are bounded in all and per
client, fail at once beyond the bound, share a thread per name, and a probe that gave up while
resolving is not remembered as an answer about the target.

``socket.getaddrinfo`` is replaced here by a stand-in that blocks on an event per name (the
real resolver's slowness needs a silent nameserver; tests/security does that end to end).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from notary import resolve
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.target import Target
from notary.keys import Identity
from notary.probe import TLSProber
from notary.resolve import Resolver, ResolverBusy


class SlowDNS:
    """getaddrinfo that answers 127.0.0.1 for ``fast.*`` names and blocks other names until
    :meth:`release` (or the test ends)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, host: str, port: Any, *args: Any, **kw: Any) -> list[Any]:
        with self.lock:
            self.calls.append(host)
        if not host.startswith("fast."):
            self.gate.wait(10)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]

    def release(self) -> None:
        self.gate.set()


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowDNS]:
    d = SlowDNS()
    monkeypatch.setattr(resolve.socket, "getaddrinfo", d)
    yield d
    d.release()


def _resolver(client: list[str | None], **kw: Any) -> Resolver:
    return Resolver(owner=lambda: client[0], group=lambda c: c.rsplit(".", 1)[0] + ".0/24",
                    **kw)


async def _started(tasks: list[asyncio.Task[Any]]) -> None:
    await asyncio.sleep(0.05)
    assert not any(t.done() for t in tasks)


async def test_one_client_holds_its_share_and_another_still_resolves(dns: SlowDNS) -> None:
    """Four stuck lookups from one address (its share of 16) and the fifth fails at once;
    a client elsewhere resolves at once. The twin: without shares the one address takes
    every thread and the other client is refused."""
    who: list[str | None] = ["192.0.2.66"]
    r = _resolver(who, threads=16, per_client=4, per_group=8)
    stuck = [asyncio.create_task(r.resolve(f"y{i}.slow.test")) for i in range(4)]
    await _started(stuck)
    with pytest.raises(ResolverBusy, match="your address already has 4"):
        await r.resolve("y4.slow.test")
    who[0] = "198.51.100.7"
    got = await asyncio.wait_for(r.resolve("fast.victim.test"), 1)
    assert got == [ipaddress.ip_address("127.0.0.1")] and r.busy == 4
    dns.release()
    await asyncio.gather(*stuck)
    assert r.busy == 0 and not r._held

    dns.gate.clear()
    who[0] = "192.0.2.66"
    r = _resolver(who, threads=4)
    stuck = [asyncio.create_task(r.resolve(f"z{i}.slow.test")) for i in range(4)]
    await _started(stuck)
    who[0] = "198.51.100.7"
    with pytest.raises(ResolverBusy, match="all 4 name lookups"):
        await r.resolve("fast.victim.test")
    dns.release()
    await asyncio.gather(*stuck)


async def test_a_network_holds_its_share_whatever_its_addresses(dns: SlowDNS) -> None:
    who: list[str | None] = [None]
    r = _resolver(who, threads=16, per_client=4, per_group=6)
    stuck = []
    for i in range(6):
        who[0] = f"192.0.2.{10 + i}"
        stuck.append(asyncio.create_task(r.resolve(f"n{i}.slow.test")))
        await asyncio.sleep(0)  # started (and charged) as this address
    await _started(stuck)
    who[0] = "192.0.2.99"
    with pytest.raises(ResolverBusy, match="your network already has 6"):
        await r.resolve("n9.slow.test")
    who[0] = "203.0.113.5"  # the twin: another network
    assert await asyncio.wait_for(r.resolve("fast.other.test"), 1)
    dns.release()
    await asyncio.gather(*stuck)


async def test_lookups_of_one_name_share_a_thread_and_outlive_their_askers(
        dns: SlowDNS) -> None:
    """Three askers of one name, one thread; the askers time out, the lookup goes on holding
    its thread (and its client's share) until the system resolver answers."""
    who: list[str | None] = ["192.0.2.1"]
    r = _resolver(who, threads=16, per_client=4)
    askers = [asyncio.create_task(asyncio.wait_for(r.resolve("same.slow.test"), 0.1))
              for _ in range(3)]
    for a in askers:
        with pytest.raises(TimeoutError):
            await a
    assert dns.calls == ["same.slow.test"] and r.busy == 1 and r._held == {
        "192.0.2.1": 1, "192.0.2.0/24": 1}
    dns.release()
    for _ in range(100):
        if r.busy == 0:
            break
        await asyncio.sleep(0.01)
    assert r.busy == 0 and not r._held and not r._pending


async def test_a_probe_that_gives_up_resolving_is_not_remembered(dns: SlowDNS) -> None:
    """A probe whose name did not resolve within the probe timeout is ResolverBusy (the
    service does not put it in the negative cache); the twin, a target that resolves and
    never answers the handshake, is an ordinary unreachable target."""
    from notary.errors import TargetUnreachable

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts, never speaks TLS
    port = silent.getsockname()[1]
    policy = AddressPolicy(parse_networks(["127.0.0.0/8"]))
    prober = TLSProber(Resolver(), policy, 0.3)
    try:
        with pytest.raises(ResolverBusy, match="did not resolve within 0.3 s"):
            await prober.probe(Target("stuck.slow.test", port))
        with pytest.raises(TargetUnreachable) as e:
            await prober.probe(Target("fast.silent.test", port))
        assert not isinstance(e.value, ResolverBusy)
        assert "no TLS handshake within 0.3 s" in e.value.message
    finally:
        silent.close()


async def test_the_service_remembers_unreachable_targets_but_not_a_busy_resolver(
        identity: Identity) -> None:
    from notary.core.fingerprint import parse_fingerprint
    from notary.core.signing import LegacySigner
    from notary.errors import TargetUnreachable
    from notary.service import NotaryService, ServiceSettings
    from notary.store import CachedStore, MemoryStore

    class Failing:
        def __init__(self) -> None:
            self.fail: Exception = ResolverBusy("x: the name did not resolve within 2 s")

        async def probe(self, target: Target) -> Any:
            raise self.fail

    p = Failing()
    svc = NotaryService(CachedStore(MemoryStore()), p, LegacySigner(identity.key),
                        ServiceSettings(), lambda: 1000.0)
    fp = parse_fingerprint("00" * 20)
    t = Target("x.test", 443)
    with pytest.raises(ResolverBusy):
        await svc.validate(t, fp)
    assert svc.negative.get(t.key, 1000.0) is None
    p.fail = TargetUnreachable("x.test:443: no TLS handshake within 2 s")
    with pytest.raises(TargetUnreachable):
        await svc.validate(t, fp)
    assert svc.negative.get(t.key, 1000.0) is not None


async def test_the_relays_lookups_are_charged_to_the_connecting_client(dns: SlowDNS) -> None:
    """A relay CONNECT to a name is looked up as its client's (so one client's stuck names
    cannot take every relay lookup); the twin, a lookup outside any connection, is
    nobody's."""
    from notary.core.addrpolicy import AddressPolicy, parse_networks
    from notary.limits import CLIENT, group_key
    from notary.relay import Relay, RelaySettings

    owners: list[str | None] = []

    def owner() -> str | None:
        owners.append(CLIENT.get())
        return owners[-1]

    r = Resolver(owner=owner, group=group_key, threads=16, per_client=4)
    relay = Relay(RelaySettings(connect_timeout=0.3, head_timeout=2), r,
                  AddressPolicy(parse_networks(["127.0.0.0/8"])), [("127.0.0.1", 0)])
    await relay.start()
    try:
        host, port = relay.addresses[0]
        reader, writer = await asyncio.open_connection(host, port, local_addr=("127.0.0.3", 0))
        writer.write(b"CONNECT fast.notary.test:4242 HTTP/1.1\r\n\r\n")
        await writer.drain()
        await asyncio.wait_for(reader.readline(), 5)
        writer.close()
        assert owners == ["127.0.0.3"]
        await r.resolve("fast.elsewhere.test")
        assert owners == ["127.0.0.3", None]
    finally:
        await relay.close()


async def test_no_thread_to_be_had_is_a_busy_resolver_and_leaks_no_count(
        dns: SlowDNS, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process at its thread limit: the lookup fails as ResolverBusy and gives its slot
    back. The twin: with threads to be had again, the same name resolves."""
    r = Resolver(threads=2)

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as m:
        m.setattr(threading.Thread, "start", refuse)
        for _ in range(3):
            with pytest.raises(ResolverBusy, match="no thread for a name lookup"):
                await r.resolve("fast.a.test")
    assert r.busy == 0 and not r._pending
    assert await asyncio.wait_for(r.resolve("fast.a.test"), 1)
