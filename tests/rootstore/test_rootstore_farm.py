"""The replay target farm's own sites through the comparison: CA trust accepts the farm's
MITM forgery (a rogue intermediate under a popular root), perspectives catch it."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from pathlib import Path

from loopback import free_port  # noqa: F401  (re-exported for the tests)

from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.target import parse_ip
from notary.probe import TLSProber
from notary.resolve import Resolver
from notary.rootstore.compare import Observed, compare
from notary.rootstore.scan import parse_chain_line, parse_hosts, scan
from notary.rootstore.stores import read_pem_bundle
from notary.rootstore.verify import RootStore
from replay.farm import FarmPorts, FarmServer, prepare
from replay.rootview import client_view
from replay.rootview import main as rootview_main

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def spec(path: Path) -> Path:
    sites = [
        {"host": "good.test", "role": "good", "root": 0},
        {"host": "other.test", "role": "good", "root": 1},
        {"host": "mitm.test", "role": "mitm", "root": 2},
        {"host": "dead.test", "role": "dead", "root": 0},
    ]
    path.write_text(json.dumps({"version": 1, "roots": 3, "sites": sites}))
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
    assert counts == {"ok": 3, "failed": 1}
    seen = {}
    for line in lines:
        site = parse_chain_line(json.dumps(line))
        if site is not None:
            seen[site.host] = hashlib.sha256(site.chain[0]).digest()
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


def test_rootview_cli(tmp_path: Path) -> None:
    ports = FarmPorts(free_port(), free_port(), free_port(), free_port())
    state = tmp_path / "farm"
    prepare(spec(tmp_path / "spec.json"), state, ports, NOW)
    out, hosts = tmp_path / "view.jsonl", tmp_path / "hosts.txt"
    assert rootview_main([str(state), "-o", str(out), "--hosts", str(hosts)]) == 0
    assert len(out.read_text().splitlines()) == 3
    assert len(hosts.read_text().splitlines()) == 4
    assert rootview_main([str(tmp_path / "missing")]) == 1  # twin: not a farm
