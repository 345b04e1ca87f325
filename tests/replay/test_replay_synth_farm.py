"""The synthetic trace (pure, deterministic) and the target farm (real TLS on loopback)."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import ssl
import time
from collections import Counter
from pathlib import Path

import pytest
from replay_support import free_port

from replay.errors import ReplayInputError
from replay.farm import FarmPorts, FarmServer, prepare
from replay.model import StageCounters
from replay.reference import Namer, WorkloadConfig, build_workload
from replay.synth import ROLES, ROOT_WEIGHTS, SynthConfig, SyntheticTrace
from replay.workload import read_targets

NOW = dt.datetime(2026, 11, 22, tzinfo=dt.UTC)


def small(seed: int = 3, **kw: object) -> SyntheticTrace:
    return SyntheticTrace(SynthConfig(seed=seed, scale=0.01, duration=120, **kw))  # type: ignore[arg-type]


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    a = list(small(3).flows())
    b = list(small(3).flows())
    c = list(small(4).flows())
    assert a == b
    assert a != c


def test_flows_are_in_time_order_within_the_window() -> None:
    trace = small()
    recs = list(trace.flows())
    starts = [r.start for r in recs]
    assert starts == sorted(starts)
    assert starts[0] >= trace.config.start
    assert starts[-1] < trace.config.start + trace.config.duration
    assert all(r.dport == 443 and r.proto == 6 and r.end >= r.start for r in recs)


def test_shares_match_the_study_shape() -> None:
    trace = SyntheticTrace(SynthConfig(seed=1, scale=0.05, duration=900))
    names = dict(trace.name_map())
    roles = {s.host: s.role for s in trace.sites()}
    counters = StageCounters()
    requests = dead = 0
    for ev in build_workload(trace.flows(), Namer(names), WorkloadConfig(), counters):
        if ev.kind == "request":
            requests += 1
            dead += roles[ev.host] == "dead"
    s = trace.summary
    # 46% of flows have no name; ~594 named flows/s at scale 1
    assert s.unnamed_flows / s.flows == pytest.approx(0.46, abs=0.03)
    assert s.named_flows / 900 / 0.05 == pytest.approx(594, rel=0.1)
    assert counters.unnamed_dropped == s.unnamed_flows
    # client caching leaves roughly a quarter to a third of named flows for the notary
    assert 0.2 < requests / counters.named < 0.4
    # dead sites give roughly the study's 20% of notary requests
    assert dead / requests == pytest.approx(0.20, abs=0.05)


def test_catalogue_roles_and_root_skew() -> None:
    trace = SyntheticTrace(SynthConfig(seed=2, scale=0.2, duration=10))
    sites = list(trace.sites())
    roles = Counter(s.role for s in sites)
    assert set(roles) == set(ROLES)  # every role, the attack and misconfigured ones too
    live = [s for s in sites if s.role != "dead"]
    top = Counter(s.root for s in live).most_common()
    share = [n / len(live) for _, n in top]
    assert share[0] == pytest.approx(ROOT_WEIGHTS[0], abs=0.03)
    assert sum(share[:5]) == pytest.approx(0.59, abs=0.05)
    assert len({s.address for s in sites}) == len(sites)  # one name per address


def test_special_sites_are_visited_even_in_tiny_traces() -> None:
    trace = SyntheticTrace(SynthConfig(seed=5, scale=0.002, duration=20))
    names = dict(trace.name_map())
    visited = {names[r.dst] for r in trace.flows() if r.dst in names}
    assert {s.host for s in trace.special_sites()} <= visited


def test_bad_synth_settings() -> None:
    with pytest.raises(ReplayInputError):
        SyntheticTrace(SynthConfig(scale=0))
    with pytest.raises(ReplayInputError):
        SyntheticTrace(SynthConfig(unnamed_share=1.0))
    with pytest.raises(ReplayInputError):
        SyntheticTrace(SynthConfig(scale=5))  # more sites than the synthetic address block


# -- farm --------------------------------------------------------------------------------

def _spec(path: Path) -> Path:
    sites = [
        {"host": "good.test", "role": "good", "root": 0},
        {"host": "other.test", "role": "good", "root": 1},
        {"host": "mitm.test", "role": "mitm", "root": 0},
        {"host": "slow.test", "role": "slow", "root": 2},
        {"host": "rot.test", "role": "rotating", "root": 1},
        {"host": "dead.test", "role": "dead", "root": 0},
    ]
    path.write_text(json.dumps({"version": 1, "roots": 3, "sites": sites}))
    return path


def _sha1(der: bytes) -> str:
    return ":".join(f"{b:02X}" for b in hashlib.sha1(der).digest())


async def _handshake(port: int, sni: str | None) -> tuple[str, float]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    t = time.monotonic()
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=sni), 10)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    elapsed = time.monotonic() - t
    writer.close()
    return _sha1(der), elapsed


@pytest.fixture()
def ports() -> FarmPorts:
    return FarmPorts(free_port(), free_port(), free_port(), free_port())


def test_prepare_writes_targets_hosts_and_reuses_certificates(tmp_path: Path,
                                                             ports: FarmPorts) -> None:
    spec = _spec(tmp_path / "spec.json")
    info = prepare(spec, tmp_path / "farm", ports, NOW)
    # 5 live sites + the second rotating certificate + the forgery
    assert info["sites"] == 6 and info["certificates_made"] == 7
    targets = read_targets(tmp_path / "farm" / "targets.csv")
    assert targets["slow.test"].port == ports.slow
    assert targets["dead.test"].port == ports.dead
    assert targets["good.test"].port == ports.main
    hosts = (tmp_path / "farm" / "hosts").read_text().splitlines()
    assert "127.0.0.1 good.test" in hosts and "127.0.0.1 dead.test" in hosts
    again = prepare(spec, tmp_path / "farm", ports, NOW)
    assert again["certificates_made"] == 0
    assert read_targets(tmp_path / "farm" / "targets.csv") == targets


async def test_farm_serves_by_sni_with_every_role(tmp_path: Path, ports: FarmPorts) -> None:
    state = tmp_path / "farm"
    prepare(_spec(tmp_path / "spec.json"), state, ports, NOW)
    targets = read_targets(state / "targets.csv")
    server = FarmServer(state, ports, slow_delay=0.4, rotate_period=3600)
    await server.start()
    try:
        fp, _ = await _handshake(ports.main, "good.test")
        assert fp == targets["good.test"].fingerprint
        fp_other, _ = await _handshake(ports.main, "other.test")
        assert fp_other == targets["other.test"].fingerprint != fp
        # man in the middle: clients saw a forgery, the farm serves the genuine certificate
        fp_mitm, _ = await _handshake(ports.main, "mitm.test")
        assert fp_mitm != targets["mitm.test"].fingerprint
        # slow sites answer, but only after the delay
        fp_slow, elapsed = await _handshake(ports.slow, "slow.test")
        assert fp_slow == targets["slow.test"].fingerprint
        assert elapsed >= 0.35
        # dead sites refuse connections
        with pytest.raises(OSError):
            await asyncio.wait_for(asyncio.open_connection("127.0.0.1", ports.dead), 5)
        # silent dead sites accept the connection but never answer the hello
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(_handshake(ports.silent, "dead.test"), 0.5)
        # an unknown name gets the listener's default certificate, not a site's
        fp_unknown, _ = await _handshake(ports.main, "unknown.test")
        assert fp_unknown not in (targets["other.test"].fingerprint,
                                  targets["mitm.test"].fingerprint)
        assert server.stats.handshakes["good"] >= 2
    finally:
        await server.stop()


def test_dead_sites_split_between_refusing_and_silent_ports(tmp_path: Path,
                                                           ports: FarmPorts) -> None:
    spec = _spec(tmp_path / "spec.json")
    prepare(spec, tmp_path / "a", ports, NOW, silent_share=0.0)
    assert read_targets(tmp_path / "a" / "targets.csv")["dead.test"].port == ports.dead
    prepare(spec, tmp_path / "b", ports, NOW, silent_share=1.0)
    assert read_targets(tmp_path / "b" / "targets.csv")["dead.test"].port == ports.silent
    with pytest.raises(ReplayInputError):
        prepare(spec, tmp_path / "c", ports, NOW, silent_share=1.5)


async def test_rotating_site_changes_certificate_with_time(tmp_path: Path,
                                                          ports: FarmPorts) -> None:
    state = tmp_path / "farm"
    prepare(_spec(tmp_path / "spec.json"), state, ports, NOW)
    server = FarmServer(state, ports, rotate_period=10)
    assert server.variant_at("rot.test", 5.0) == 0
    assert server.variant_at("rot.test", 15.0) == 1
    assert server.variant_at("good.test", 15.0) == 0
    await server.start()
    try:
        fp, _ = await _handshake(ports.main, "rot.test")
        expected = read_targets(state / "targets.csv")["rot.test"].fingerprint
        phase = server.variant_at("rot.test", time.time())
        assert (fp == expected) == (phase == 0)
    finally:
        await server.stop()
