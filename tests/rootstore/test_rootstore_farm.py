"""The replay target farm's own sites through the comparison: CA trust accepts the farm's
MITM forgery (a rogue intermediate under a popular root), perspectives catch it."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from pathlib import Path

from cryptography.hazmat.primitives.serialization import Encoding
from loopback import free_port  # noqa: F401  (re-exported for the tests)

from notary.ca.stores import read_pem_bundle
from notary.ca.verify import RootStore
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.target import parse_ip
from notary.probe import TLSProber
from notary.resolve import Resolver
from replay.cli import main
from replay.farm import FarmPorts, FarmServer, prepare
from replay.rootstore.compare import Observed, SiteRequests, compare, scores
from replay.rootstore.scan import parse_chain_line, parse_hosts, scan
from replay.rootstore.view import client_view

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


SITES = [
    {"host": "good.test", "role": "good", "root": 0},
    {"host": "other.test", "role": "good", "root": 1},
    {"host": "mitm.test", "role": "mitm", "root": 2},
    {"host": "dead.test", "role": "dead", "root": 0},
]
# the attacker's and the careless operator's sites (the tail root is root 3, the last)
MORE_SITES = [
    {"host": "tail.test", "role": "mitm-tail", "root": 0},
    {"host": "untrusted.test", "role": "mitm-untrusted", "root": 0},
    {"host": "both-paths.test", "role": "mitm-notary-path", "root": 0},
    *({"host": f"misconf{i}.test", "role": "misconfigured", "root": 1} for i in range(6)),
]


def spec(path: Path, sites: list[dict[str, object]] = SITES, roots: int = 3) -> Path:
    path.write_text(json.dumps({"version": 1, "roots": roots, "sites": sites}))
    return path


async def test_farm_sites_in_the_agreement_matrix(tmp_path: Path) -> None:
    ports = FarmPorts(free_port(), free_port(), free_port(), free_port())
    state = tmp_path / "farm"
    prepare(spec(tmp_path / "spec.json"), state, ports, NOW)
    view, scan_lines = client_view(state)
    assert {v["role"] for v in view} == {"good", "mitm"}  # dead: no chain
    assert len(scan_lines) == 4
    roots = RootStore("farm", [c for p in sorted((state / "pki").glob("root-*.pem"))
                               for c in read_pem_bundle(p)])
    seen, counts = await _scan(state, ports, scan_lines)
    assert counts == {"ok": 3, "failed": 1}
    now = int(NOW.timestamp())
    observed = [Observed(v["host"], v["port"], tuple(base64.b64decode(c) for c in v["chain"]),
                         seen.get(v["host"]), v["role"]) for v in view]
    ranking = sorted(roots.roots)
    result = compare(observed, roots, ranking, [3], now)
    patterns = {s.site.host: s.pattern(3) for s in result.sites}
    assert patterns == {"good.test": "P+ F+ K+", "other.test": "P+ F+ K+",
                        "mitm.test": "P- F+ K+"}
    mitm = next(s for s in result.sites if s.site.host == "mitm.test")
    assert mitm.full.root_name is not None


async def _scan(state: Path, ports: FarmPorts, scan_lines: list[str]
                ) -> tuple[dict[str, bytes], dict[str, int]]:
    """Serve the farm, scan it as ``replay rootstore scan`` does: leaf digests by host."""
    server = FarmServer(state, ports, rotate_period=3600)
    await server.start()
    try:
        ip = parse_ip("127.0.0.1")
        assert ip is not None
        hosts = parse_hosts("\n".join(scan_lines))
        prober = TLSProber(Resolver({h: [ip] for h, _ in hosts}, use_system=False),
                           AddressPolicy(parse_networks(["127.0.0.0/8"])), 3.0,
                           want_chain=True)
        lines: list[dict[str, object]] = []
        counts = await scan(hosts, prober, 4, lines.append)
    finally:
        await server.stop()
    seen = {}
    for line in lines:
        site = parse_chain_line(json.dumps(line))
        if site is not None:
            seen[site.host] = hashlib.sha256(site.chain[0]).digest()
    return seen, counts


async def test_attack_and_misconfigured_roles_scored_against_the_truth(tmp_path: Path) -> None:
    ports = FarmPorts(free_port(), free_port(), free_port(), free_port())
    state = tmp_path / "farm"
    prepare(spec(tmp_path / "spec.json", SITES + MORE_SITES, roots=4), state, ports, NOW)
    view, scan_lines = client_view(state)
    seen, _ = await _scan(state, ports, scan_lines)
    roots = RootStore("farm", read_pem_bundle(state / "roots.pem"))
    assert len(roots.roots) == 4  # roots.pem: the public roots, not the rogue one
    now = int(NOW.timestamp())
    observed = [Observed(v["host"], v["port"], tuple(base64.b64decode(c) for c in v["chain"]),
                         seen.get(v["host"]), v["role"]) for v in view]
    # popularity as a scan would rank it: roots 0, 1, 2 trusted at k=3, the tail root 3 not
    ranking = [hashlib.sha256(r.public_bytes(Encoding.DER)).digest()
               for p in ("root-0", "root-1", "root-2", "root-3")
               for r in read_pem_bundle(state / "pki" / f"{p}.pem")]
    result = compare(observed, roots, ranking, [3], now)
    pat = {s.site.host: s.pattern(3) for s in result.sites}
    assert pat["mitm.test"] == "P- F+ K+"  # only perspectives catch it
    assert pat["tail.test"] == "P- F+ K-"  # top-k catches it, the full store does not
    assert pat["untrusted.test"] == "P- F- K-"  # everyone catches it
    assert pat["both-paths.test"] == "P+ F+ K+"  # the notary's path too: nobody can
    assert {pat[f"misconf{i}.test"] for i in range(6)} == {"P+ F- K-"}  # CA false alarms
    sc = scores(result, 3)
    p, full, top = (sc["sites"][n] for n in ("perspectives", "full CA store", "top-3 CA store"))
    assert (p.catches, p.misses, p.false_alarms) == (3, 1, 0)
    assert (full.catches, full.misses, full.false_alarms) == (1, 3, 6)
    assert (top.catches, top.misses, top.false_alarms) == (2, 2, 6)
    # weighted by requests: 10 validations of mitm.test, the notary confirmed none; 5 of
    # good.test, the notary confirmed 4 (one probe found another certificate)
    w = scores(result, 3, {("mitm.test", ports.main): SiteRequests(10, 0),
                           ("good.test", ports.main): SiteRequests(5, 4)})
    wp, wf = w["requests"]["perspectives"], w["requests"]["full CA store"]
    assert (wp.catches, wp.false_alarms, wp.accepted_genuine) == (10, 1, 4)
    assert (wf.misses, wf.accepted_genuine) == (10, 5)
    assert w["weighted_sites"] == 2
    # with request counts, only the requested sites count per site too
    assert w["labelled"] == 2 and w["not_requested"] == len(result.sites) - 2
    assert w["sites"]["perspectives"].catches == 1  # mitm.test, the only requested attack


def test_twin_unlabelled_sites_are_not_scored() -> None:
    from replay.rootstore.compare import Comparison

    c = Comparison([], [3])
    sc = scores(c, 3)
    assert sc["labelled"] == 0 and sc["sites"]["perspectives"].catches == 0


def test_rootview_cli(tmp_path: Path) -> None:
    ports = FarmPorts(free_port(), free_port(), free_port(), free_port())
    state = tmp_path / "farm"
    prepare(spec(tmp_path / "spec.json"), state, ports, NOW)
    out, hosts = tmp_path / "view.jsonl", tmp_path / "hosts.txt"
    assert main(["rootstore", "view", str(state), "-o", str(out), "--hosts", str(hosts)]) == 0
    assert len(out.read_text().splitlines()) == 3
    assert len(hosts.read_text().splitlines()) == 4
    assert main(["rootstore", "view", str(tmp_path / "missing")]) == 1  # twin: not a farm
