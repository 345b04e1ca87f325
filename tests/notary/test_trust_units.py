"""Unit tests of the trust fixes: record keys, the special-purpose table both ways, client
keys and shares, per-client probe slots in the service, the schema-3 migration, the log
filter. The attacks themselves run against real processes in tests/security/test_trust.py."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import sqlite3
from pathlib import Path

import pytest
from aiohttp.http_exceptions import BadHttpMessage
from notary_support import FakeClock
from test_service import FakeProber, fp_of, leaf, make_service

from notary.core.addrpolicy import AddressPolicy
from notary.core.fingerprint import CertDigests, parse_fingerprint
from notary.core.special import RANGES, SOURCE_DATE, Range, classify
from notary.core.target import IPAddress, Target, parse_target_path
from notary.errors import ProbeCapacityFull
from notary.keys import Identity
from notary.limits import CLIENT, client_key, share
from notary.logpolicy import ClientPrivacyFilter
from notary.store.sqlite import SCHEMA_VERSION, SQLiteStore


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture
def prober() -> FakeProber:
    return FakeProber()


# -- record keys ----------------------------------------------------------------------------


def test_record_key_is_what_was_probed() -> None:
    assert parse_target_path("Bank.test+443").key == "bank.test:443"
    assert parse_target_path("bank.test+443/10.0.0.1").key == "bank.test:443/10.0.0.1"
    assert parse_target_path("bank.test+443/::FFFF:1.2.3.4").key == "bank.test:443/::ffff:102:304"
    # twin: an address equal to an IP-literal host names nothing new
    assert parse_target_path("1.2.3.4+443/1.2.3.4").key == "1.2.3.4:443"
    assert parse_target_path("1.2.3.4+443/1.2.3.5").key == "1.2.3.4:443/1.2.3.5"


async def test_client_named_address_never_answers_for_the_name(
    identity: Identity, prober: FakeProber, clock: FakeClock
) -> None:
    svc = make_service(identity, prober, clock)
    forged = parse_fingerprint(fp_of(leaf(666)))
    prober.current = leaf(666)  # what the attacker's address presents
    pinned = Target("bank.test", 443, ipaddress.ip_address("192.0.2.66"))
    assert (await svc.validate(pinned, forged)).status == 200
    prober.current = leaf(1)  # what the notary's own resolution reaches
    a = await svc.validate(Target("bank.test", 443), forged)
    assert a.status == 409 and b"666" not in a.body
    rec = await svc.store.get("bank.test:443")
    assert rec is not None and [o.sha1 for o in rec.history] == [CertDigests.of(leaf(1)).sha1]
    # twin: the pinned record is still answered for the pinned address, from the cache
    again = await svc.validate(pinned, forged)
    assert again.status == 200 and again.cache.value == "hit"


# -- the special-purpose table, both ways ---------------------------------------------------


def _inside(r: Range) -> IPAddress:
    """An address whose most specific range is ``r`` (not one of its sub-ranges)."""
    net = r.network
    for k in (1, 0, 11, 100, 1 << 20, net.num_addresses - 2):
        if 0 <= k < net.num_addresses:
            ip = net.network_address + k
            if classify(ip) is r:
                return ip
    raise AssertionError(f"no address of its own in {r}")


@pytest.mark.parametrize("r", RANGES, ids=[str(r.network) for r in RANGES])
def test_each_range_both_ways(r: Range) -> None:
    ip = _inside(r)
    reason = AddressPolicy().refusal(ip)
    if r.embeds:
        return  # judged by the embedded address: see test_embedded_forms
    if r.global_:
        assert reason is None, (ip, reason)
    else:
        assert reason is not None and r.name in reason, (ip, reason)
        # twin: an operator can open the range deliberately
        assert AddressPolicy((r.network,)).refusal(ip) is None


@pytest.mark.parametrize(("addr", "refused"), [
    ("::ffff:10.0.0.1", True), ("::ffff:8.8.8.8", False),
    ("64:ff9b::10.0.0.1", True), ("64:ff9b::8.8.8.8", False),
    ("2002:a00:1::1", True), ("2002:808:808::1", False),
    ("64:ff9b:1::8.8.8.8", True),  # local-use NAT64 is not globally reachable at all
])
def test_embedded_forms(addr: str, refused: bool) -> None:
    assert (AddressPolicy().refusal(ipaddress.ip_address(addr)) is not None) is refused


def test_table_does_not_depend_on_the_python_patch_level() -> None:
    # CVE-2024-4032: 3.11.7's ipaddress calls these global; our table does not
    for addr in ("192.0.0.1", "3fff::1", "192.0.0.170", "5f00::1"):
        assert AddressPolicy().refusal(ipaddress.ip_address(addr)) is not None, addr
    # twins: globally reachable exceptions inside non-global blocks, and ordinary addresses
    for addr in ("192.0.0.9", "2001:4:112::1", "8.8.8.8", "2606:4700::1"):
        assert AddressPolicy().refusal(ipaddress.ip_address(addr)) is None, addr
    assert SOURCE_DATE.count("-") == 2


# -- client keys and shares -----------------------------------------------------------------


def test_client_key_groups_ipv6_by_64() -> None:
    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::9")
    assert client_key("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("") == ""


@pytest.mark.parametrize(("total", "fraction", "expected"),
                         [(256, 0.25, 64), (3, 0.25, 1), (256, 0.0, 0), (256, 1.0, 0)])
def test_share(total: int, fraction: float, expected: int) -> None:
    assert share(total, fraction) == expected


async def test_per_client_probe_share(
    identity: Identity, prober: FakeProber, clock: FakeClock
) -> None:
    svc = make_service(identity, prober, clock, max_probes=8, max_probes_per_client=2)
    prober.gate.clear()
    fp = parse_fingerprint(fp_of(leaf(1)))

    async def ask(client: str, host: str) -> int:
        CLIENT.set(client)
        return (await svc.validate(Target(host, 443), fp)).status

    a = [asyncio.ensure_future(ask("A", f"a{i}.test")) for i in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(ProbeCapacityFull, match="share"):
        await ask("A", "a9.test")
    b = asyncio.ensure_future(ask("B", "b.test"))  # another client still gets a slot
    joined = asyncio.ensure_future(ask("A", "b.test"))  # joining a flight costs no slot
    await asyncio.sleep(0)
    assert svc.probes_in_flight == 3
    prober.gate.set()
    assert await asyncio.gather(*a, b, joined) == [200, 200, 200, 200]
    assert svc._per_client == {}  # every slot given back


async def test_per_client_share_off_lets_one_client_fill_the_slots(
    identity: Identity, prober: FakeProber, clock: FakeClock
) -> None:
    svc = make_service(identity, prober, clock, max_probes=2, max_probes_per_client=0)
    prober.gate.clear()
    fp = parse_fingerprint(fp_of(leaf(1)))
    CLIENT.set("A")
    held = [asyncio.ensure_future(svc.validate(Target(f"a{i}.test", 443), fp)) for i in (1, 2)]
    await asyncio.sleep(0)
    CLIENT.set("B")
    with pytest.raises(ProbeCapacityFull, match="all 2 probe slots"):
        await svc.validate(Target("b.test", 443), fp)
    prober.gate.set()
    await asyncio.gather(*held)


# -- the schema-3 migration -----------------------------------------------------------------


async def test_schema_2_records_are_dropped_once(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "n.sqlite3"
    store = await SQLiteStore.open(path)
    await store.observe("bank.test:443", CertDigests.of(b"x"), 100)
    await store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with caplog.at_level(logging.WARNING, logger="notary.store"):
        store = await SQLiteStore.open(path)
    try:
        assert await store.get("bank.test:443") is None
        assert "dropped 1 cached target records" in caplog.text
        await store.observe("bank.test:443", CertDigests.of(b"y"), 200)
    finally:
        await store.close()
    # twin: a schema-3 database keeps its records when reopened
    store = await SQLiteStore.open(path)
    try:
        assert await store.get("bank.test:443") is not None
    finally:
        await store.close()
    version = sqlite3.connect(path).execute(
        "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)


# -- the log filter -------------------------------------------------------------------------


def _record(exc: BaseException) -> logging.LogRecord:
    return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1,
                             "Error handling request from %s", ("198.51.100.7",),
                             (type(exc), exc, None))


def test_log_filter_reports_malformed_requests_once_per_period() -> None:
    clock = FakeClock(0.0)
    counted: list[int] = []
    f = ClientPrivacyFilter(period=60, clock=clock, on_malformed=lambda: counted.append(1))
    first = _record(BadHttpMessage("bad header 'GET /target/secret.test+443'"))
    assert f.filter(first) and first.exc_info is None and first.levelno == logging.WARNING
    assert "198.51.100.7" not in first.getMessage() and "secret" not in first.getMessage()
    assert not any(f.filter(_record(BadHttpMessage("x"))) for _ in range(99))
    clock.advance(61)
    report = _record(BadHttpMessage("x"))
    assert f.filter(report) and "100 malformed" in report.getMessage()
    assert len(counted) == 101
    # our own failures keep their traceback, not the address
    bug = _record(RuntimeError("boom"))
    assert f.filter(bug) and bug.exc_info is not None and "198.51" not in bug.getMessage()
    # twin: opted in, nothing is redacted (still counted)
    f2 = ClientPrivacyFilter(redact=False)
    raw = _record(BadHttpMessage("x"))
    assert f2.filter(raw) and "198.51.100.7" in raw.getMessage() and f2.malformed == 1
