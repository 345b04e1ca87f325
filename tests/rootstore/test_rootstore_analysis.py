"""Popularity and coverage on a small set of chains whose answers were worked out by hand."""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

import pytest
from rootstore_support import NOW, NOW_TS, PKI

from notary.ca.verify import RootStore, sha256_der
from replay.pki import der, make_leaf
from replay.rootstore.analysis import (
    SiteChain,
    SiteVerdict,
    attribute,
    coverage,
    merge_by_org,
    org_key,
    popularity,
    privatesuffix_function,
    verdict_counts,
)
from replay.rootstore.report import Analysis, write_analysis

# host -> root index (None: a self-signed certificate, not valid)
SITES: dict[str, int | None] = {
    "www.alpha.test": 0,
    "shop.alpha.test": 0,
    "alpha.example": 0,
    "www.beta.test": 1,
    "beta.co.uk": 1,
    "gamma.test": 0,
    "delta.test": 2,
    "self.test": None,
    "epsilon.test": 1,
}


def chains(pki: PKI) -> list[SiteChain]:
    out = []
    for host, root in SITES.items():
        if root is None:
            leaf = make_leaf([host], None, pki.key, NOW - dt.timedelta(days=1))
            out.append(SiteChain(host, 443, (der(leaf),)))
        else:
            out.append(SiteChain(host, 443, pki.chain(host, root)))
    return out


@pytest.fixture
def results(pki: PKI) -> list[SiteVerdict]:
    return attribute(chains(pki), RootStore("test", [r.cert for r in pki.roots]), NOW_TS)


def test_popularity_table_by_hand(pki: PKI, results: list[SiteVerdict]) -> None:
    assert verdict_counts(results) == {"ok": 8, "self-signed": 1}
    table = popularity(results)
    assert [(r.rank, r.name, r.sites) for r in table] == [
        (1, "Test CA A", 4), (2, "Test CA B", 3), (3, "Test CA C", 1)]
    assert [r.sha256 for r in table] == [sha256_der(pki.roots[i].cert) for i in range(3)]
    assert [r.share for r in table] == [0.5, 0.375, 0.125]
    assert [r.cumulative for r in table] == [0.5, 0.875, 1.0]


def test_coverage_curve_by_hand(results: list[SiteVerdict]) -> None:
    curve = coverage(popularity(results), 50)
    assert len(curve) == 50
    assert curve[0] == (1, 0.5)
    assert curve[1] == (2, 0.875)
    assert all(share == 1.0 for _, share in curve[2:])
    assert coverage([], 3) == [(1, 0.0), (2, 0.0), (3, 0.0)]


def test_merge_by_registrable_domain_by_hand(results: list[SiteVerdict]) -> None:
    psl = privatesuffix_function()
    assert org_key("www.alpha.test", psl, "registrable") == "alpha.test"
    assert org_key("beta.co.uk", psl, "registrable") == "beta.co.uk"
    assert org_key("www.google.co.uk", psl, "label") == "google"
    assert org_key("192.0.2.1", psl, "registrable") == "192.0.2.1"
    merged = merge_by_org(results, lambda h: org_key(h, psl, "registrable"))
    # alpha.test's two sites count once: 8 organisations, 7 of them valid
    assert len(merged) == 8
    table = popularity(merged)
    assert [(r.name, r.sites) for r in table] == [
        ("Test CA A", 3), ("Test CA B", 3), ("Test CA C", 1)]  # tie broken by name
    assert [c for _, c in coverage(table, 3)] == [3 / 7, 6 / 7, 1.0]


def test_merge_by_label_by_hand(results: list[SiteVerdict]) -> None:
    psl = privatesuffix_function()
    merged = merge_by_org(results, lambda h: org_key(h, psl, "label"))
    # alpha.test + alpha.example, beta.test + beta.co.uk: 6 organisations, 5 valid
    assert len(merged) == 6
    table = popularity(merged)
    assert [(r.name, r.sites) for r in table] == [
        ("Test CA A", 2), ("Test CA B", 2), ("Test CA C", 1)]
    assert [c for _, c in coverage(table, 3)] == [0.4, 0.8, 1.0]


def test_merge_takes_the_majority_root(pki: PKI) -> None:
    full = RootStore("test", [r.cert for r in pki.roots])
    sites = [SiteChain("www.mix.test", 443, pki.chain("www.mix.test", 2)),
             SiteChain("shop.mix.test", 443, pki.chain("shop.mix.test", 0)),
             SiteChain("mail.mix.test", 443, pki.chain("mail.mix.test", 0))]
    psl = privatesuffix_function()
    merged = merge_by_org(attribute(sites, full, NOW_TS),
                          lambda h: org_key(h, psl, "registrable"))
    assert [m.host for m in merged] == ["shop.mix.test"]
    # twin: with the majority on root C the representative changes
    flipped = [sites[0], SiteChain("shop.mix.test", 443, pki.chain("shop.mix.test", 2)),
               sites[2]]
    merged = merge_by_org(attribute(flipped, full, NOW_TS),
                          lambda h: org_key(h, psl, "registrable"))
    assert [m.host for m in merged] == ["www.mix.test"]


def test_report_files(results: list[SiteVerdict], tmp_path: Path) -> None:
    psl = privatesuffix_function()
    merged = merge_by_org(results, lambda h: org_key(h, psl, "registrable"))
    table, org_table = popularity(results), popularity(merged)
    a = Analysis(NOW_TS, "test", 9, 0, verdict_counts(results), table, org_table,
                 coverage(table, 5), coverage(org_table, 5), len(merged), "registrable")
    files = write_analysis(a, tmp_path / "out")
    for f in files:
        assert f.exists() and f.stat().st_size > 0, f
    assert (tmp_path / "out" / "fig17-coverage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with (tmp_path / "out" / "coverage.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["k"], r["all_sites"]) for r in rows[:2]] == [("1", "0.500000"), ("2", "0.875000")]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["valid_sites"] == 8 and summary["coverage"]["top_1"] == 0.5


def test_intermediates_seen_elsewhere_name_a_missing_intermediate(pki: PKI) -> None:
    from replay.pki import make_ca
    from replay.rootstore.analysis import intermediate_pool

    upper = make_ca("Upper", "Ladder", NOW, pki.roots[0], path_length=1)
    lower = make_ca("Lower", "Ladder", NOW, upper)
    start = NOW - dt.timedelta(days=1)
    complete = SiteChain("a.test", 443, (der(make_leaf(["a.test"], lower, pki.key, start)),
                                         der(lower.cert), der(upper.cert),
                                         der(pki.roots[0].cert)))
    partial = SiteChain("b.test", 443, (der(make_leaf(["b.test"], lower, pki.key, start)),
                                        der(lower.cert)))
    pool = intermediate_pool([complete, partial])
    assert {c.subject.rfc4514_string() for c in pool} == {"CN=Lower,O=Ladder", "CN=Upper,O=Ladder"}
    full = RootStore("test", [r.cert for r in pki.roots])
    with_pool = attribute([complete, partial], full, NOW_TS, pool)
    assert [r.verdict.verdict for r in with_pool] == ["ok", "missing-intermediate"]
    # twin: without the pool the broken chain cannot be told from an unknown root
    alone = attribute([partial], full, NOW_TS)
    assert alone[0].verdict.verdict == "unknown-root"
    assert intermediate_pool([complete], limit=1) == pool[:1]
