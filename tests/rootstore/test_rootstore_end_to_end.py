"""End to end on a small synthetic world: farm on loopback, scan, analysis, agreement matrix."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from notary.ca.stores import read_pem_bundle
from notary.ca.verify import RootStore
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.target import parse_ip
from notary.probe import TLSProber
from notary.resolve import Resolver
from replay.cli import main
from replay.farm import SNIFarm
from replay.rootstore.analysis import attribute, popularity
from replay.rootstore.compare import Observed, compare
from replay.rootstore.scan import parse_chain_line, parse_hosts, scan
from replay.rootstore.world import BAD_ROLES, RootWorld, load_client_view, plan_sites

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
SITES, ROOTS = 48, 6


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> RootWorld:
    return RootWorld.build(tmp_path_factory.mktemp("world"), NOW, sites=SITES, roots=ROOTS,
                           seed=7)


@pytest.fixture
async def farm(world: RootWorld) -> AsyncIterator[SNIFarm]:
    f = world.farm()
    await f.start()
    yield f
    await f.stop()


def test_world_plan_is_deterministic_and_has_every_case() -> None:
    a, b = plan_sites(SITES, ROOTS, 7), plan_sites(SITES, ROOTS, 7)
    assert a == b and len(a) == SITES
    roles = Counter(s.role for s in a)
    assert all(roles[r] >= 1 for r in BAD_ROLES)
    assert plan_sites(SITES, ROOTS, 8) != a
    # organisations share one root, as the thesis observed
    by_org: dict[int, set[int]] = {}
    for s in a:
        by_org.setdefault(s.org, set()).add(s.root)
    assert all(len(roots) == 1 for roots in by_org.values())


def test_root_popularity_is_skewed_like_table_3() -> None:
    big = plan_sites(5000, 20, 3, bad_share=0.0)
    counts = Counter(s.root for s in big)
    assert counts.most_common(1)[0][0] in (0, 1, 2)  # AddTrust, GlobalSign or Equifax
    assert sum(n for _, n in counts.most_common(10)) / 5000 > 0.7


def test_other_popularity_models_are_not_the_thesis() -> None:
    from replay.errors import ReplayInputError
    from replay.rootstore.world import root_weights

    def top(model: str, k: int) -> float:
        w = root_weights(20, model)
        return sum(sorted(w, reverse=True)[:k]) / sum(w)

    assert top("uniform", 10) == pytest.approx(0.5)  # no concentration at all
    assert top("zipf:1.0", 1) < top("zipf:1.5", 1)  # a steeper law, a larger top root
    assert top("thesis", 1) == pytest.approx(18944 / sum(root_weights(20, "thesis")))
    for bad in ("zipf:0", "zipf:x", "pareto", "zipf:11"):
        with pytest.raises(ReplayInputError):
            root_weights(20, bad)
    plan = plan_sites(3000, 20, 3, bad_share=0.0, popularity="uniform")
    counts = Counter(s.root for s in plan)
    assert max(counts.values()) / 3000 < 0.15  # twin of the Table 3 skew above


async def scan_world(world: RootWorld, port: int) -> list[dict[str, object]]:
    hosts = [(h, port) for h in world.hosts()]
    ip = parse_ip("127.0.0.1")
    assert ip is not None
    resolver = Resolver({h: [ip] for h, _ in hosts}, use_system=False)
    prober = TLSProber(resolver, AddressPolicy(parse_networks(["127.0.0.0/8"])), 5.0,
                       want_chain=True)
    lines: list[dict[str, object]] = []
    counts = await scan(hosts, prober, 8, lines.append)
    assert counts == {"ok": len(hosts), "failed": 0}
    return lines


async def test_agreement_matrix_on_the_farm(world: RootWorld, farm: SNIFarm) -> None:
    lines = await scan_world(world, farm.port)
    notary = {}
    for line in lines:
        site = parse_chain_line(json.dumps(line))
        assert site is not None
        notary[site.host] = site
    full = RootStore("synthetic", read_pem_bundle(world.dir / "roots.pem"))
    now = int(NOW.timestamp())
    ranking = [r.sha256 for r in popularity(attribute(list(notary.values()), full, now))]
    view = load_client_view(world.dir / "client-view.jsonl")
    observed = [Observed(v["host"], farm.port, tuple(v["chain_der"]),
                         hashlib.sha256(notary[v["host"]].chain[0]).digest(), v["role"])
                for v in view]
    ks = [1, 2, len(ranking)]
    result = compare(observed, full, ranking, ks, now)
    assert [r.k for r in result.rows] == ks
    every = len(ranking)
    expected = {
        "good": "P+ F+ K+", "good-full": "P+ F+ K+", "good-direct": "P+ F+ K+",
        "mitm": "P- F+ K+",  # CA trust accepts the rogue intermediate; perspectives catch it
        "self-signed": "P+ F- K-", "private-ca": "P+ F- K-", "expired": "P+ F- K-",
        "wrong-host": "P+ F- K-", "missing-intermediate": "P+ F- K-",
    }
    for s in result.sites:
        assert s.pattern(every) == expected[s.site.label], (s.site.host, s.site.label)
    reasons = {s.site.label: s.full.verdict for s in result.sites if not s.full.ok}
    assert reasons == {"self-signed": "self-signed", "private-ca": "unknown-root",
                       "expired": "expired", "wrong-host": "wrong-host",
                       "missing-intermediate": "missing-intermediate"}
    # with one root, good sites under other roots are the separating not-in-top-k cases
    top1 = result.rows[0]
    good = sum(s.site.label.startswith("good") for s in result.sites)
    assert 0 < top1.counts["P+ F+ K-"] < good
    assert top1.counts["P+ F+ K-"] + top1.counts["P+ F+ K+"] == good
    assert all(s.top[1].verdict == "not-in-top-k" for s in result.sites
               if s.pattern(1) == "P+ F+ K-")
    assert result.rows[-1].full_vs_top == 1.0
    separating = {s.site.label for s in result.separating(every)}
    assert separating == set(BAD_ROLES)
    # perspectives and full CA trust agree exactly on the good sites
    assert result.rows[0].perspective_vs_full == pytest.approx(good / len(result.sites))


async def test_cli_scan_analyze_topk_compare(world: RootWorld, farm: SNIFarm,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("".join(f"{h}:{farm.port}\n" for h in world.hosts()), encoding="utf-8")
    scan_out = tmp_path / "scan.jsonl"
    rc = await asyncio.to_thread(main, [
        "rootstore", "scan", "--hosts", str(hosts), "--hosts-file", str(world.dir / "hosts"),
        "--concurrency", "8", "--timeout", "5", "-o", str(scan_out)])
    assert rc == 0
    assert len(scan_out.read_text().splitlines()) == SITES
    roots = str(world.dir / "roots.pem")
    now = str(int(NOW.timestamp()))
    out = tmp_path / "analysis"
    assert main(["rootstore", "analyze", "--chains", str(scan_out), "--roots", roots,
                 "--no-mozilla", "--now", now, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["basis"] == "measured" and summary["thesis"]["coverage"]["10"] == 0.8
    printed = capsys.readouterr().out
    assert "20% (Fig. 17)" in printed and "59% (Fig. 17)" in printed
    # the same analysis told the chains come from a thesis-popularity world says the curve
    # returns its input
    assert main(["rootstore", "analyze", "--chains", str(scan_out), "--roots", roots,
                 "--no-mozilla", "--now", now, "--out", str(out), "--world",
                 str(world.dir / "world.json")]) == 0
    assert "returns its input" in capsys.readouterr().out
    assert "returns its input" in json.loads((out / "summary.json").read_text())["basis"]
    bad = sum(1 for v in load_client_view(world.dir / "client-view.jsonl")
              if v["role"] in ("self-signed", "private-ca", "expired", "wrong-host",
                               "missing-intermediate"))
    assert summary["valid_sites"] == SITES - bad
    assert summary["coverage"]["top_50"] == 1.0
    top = tmp_path / "top2.txt"
    assert main(["rootstore", "topk", "--chains", str(scan_out), "--roots", roots,
                 "--no-mozilla", "--now", now, "--k", "2", "-o", str(top)]) == 0
    assert len(top.read_text().splitlines()) == 2
    cmp_out = tmp_path / "compare"
    assert main(["rootstore", "compare", "--chains", str(scan_out), "--client-view",
                 str(world.dir / "client-view.jsonl"), "--roots", roots, "--no-mozilla",
                 "--now", now, "--ranking", str(top), "--k", "1,2", "--out",
                 str(cmp_out)]) == 0
    doc = json.loads((cmp_out / "comparison.json").read_text())
    assert doc["sites"] == SITES and [m["k"] for m in doc["matrix"]] == [1, 2]
    assert set(doc["by_label"]["mitm"]) <= {"P- F+ K+", "P- F+ K-"}
    assert set(doc["by_label"]["self-signed"]) == {"P+ F- K-"}
    assert "separating cases at k=2" in capsys.readouterr().out
    # twin: a host list with a bad line is a usage error, nothing is scanned
    bad_hosts = tmp_path / "bad.txt"
    bad_hosts.write_text("good.test\nbad host name\n", encoding="utf-8")
    assert main(["rootstore", "scan", "--hosts", str(bad_hosts)]) == 2


def test_scan_host_list_rules() -> None:
    assert parse_hosts("# c\na.test\nb.test:8443\n[::1]:444\n192.0.2.1\na.test\n") == [
        ("a.test", 443), ("b.test", 8443), ("::1", 444), ("192.0.2.1", 443)]
    from notary.errors import BadData

    with pytest.raises(BadData):
        parse_hosts("a.test:99999\n")


async def test_scan_reports_unreachable_hosts() -> None:
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ip = parse_ip("127.0.0.1")
    assert ip is not None
    prober = TLSProber(Resolver({"gone.test": [ip]}, use_system=False),
                       AddressPolicy(parse_networks(["127.0.0.0/8"])), 1.0, want_chain=True)
    lines: list[dict[str, object]] = []
    counts = await scan([("gone.test", port)], prober, 4, lines.append)
    assert counts == {"ok": 0, "failed": 1}
    assert lines[0]["chain"] == [] and lines[0]["error"]


def test_rootstore_scan_subprocess(tmp_path: Path) -> None:
    hosts = tmp_path / "h.txt"
    hosts.write_text("# nothing to scan\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    proc = subprocess.run([sys.executable, "-m", "replay.cli", "rootstore", "scan", "--hosts",
                           str(hosts), "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "scanned 0 hosts" in proc.stderr and out.read_text() == ""
    bad = subprocess.run([sys.executable, "-m", "replay.cli", "rootstore", "analyze",
                          "--chains", str(out), "--out", str(tmp_path / "a")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no chains" in bad.stderr


def test_chain_lines_are_checked(tmp_path: Path) -> None:
    from notary.errors import BadData
    from replay.rootstore.scan import read_chains

    good = json.dumps({"host": "A.Test", "port": 443, "chain": ["AAEC"]})
    failed = json.dumps({"host": "b.test", "port": 443, "chain": [], "error": "refused"})
    path = tmp_path / "c.jsonl"
    path.write_text(f"{good}\n{failed}\n\n", encoding="utf-8")
    sites, missing = read_chains(path)
    assert [(s.host, s.chain) for s in sites] == [("a.test", (b"\x00\x01\x02",))]
    assert missing == 1
    for bad in ('{"host": "bad host", "chain": ["AAEC"]}', '{"chain": ["AAEC"]}',
                '{"host": "a.test", "chain": ["!!"]}', "not json"):
        path.write_text(bad + "\n", encoding="utf-8")
        with pytest.raises(BadData, match="c.jsonl:1"):
            read_chains(path)


async def test_scan_concurrency_bound() -> None:
    from notary.errors import BadConfig
    from replay.rootstore.scan import MAX_CONCURRENCY

    prober = TLSProber(Resolver({}, use_system=False),
                       AddressPolicy(parse_networks(["127.0.0.0/8"])), 1.0)
    assert await scan([], prober, MAX_CONCURRENCY, lambda line: None) == {"ok": 0, "failed": 0}
    for bad in (0, MAX_CONCURRENCY + 1):
        with pytest.raises(BadConfig):
            await scan([], prober, bad, lambda line: None)
