"""The Grafana dashboard works on a plain Prometheus: every label its queries select or
group on is one Prometheus itself attaches to any scraped target (``job``, ``instance``),
one the notary's own metrics carry, or ``worker`` (the supervisor's merged metrics). No
label that only a particular scrape configuration adds. The twin: a query on the ``notary``
label that deploy/prometheus.yml adds is caught."""

from __future__ import annotations

import json
import re
from pathlib import Path

from notary.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "converge-notary.json"
PROMETHEUS_LABELS = {"job", "instance", "le", "worker"}


def exported_labels() -> set[str]:
    m = Metrics()
    m.answered(200, "hit")  # labelled families show their labels once used
    return set(re.findall(r"[{,]([a-z_]+)=", m.exposition().decode()))


def labels_used(expr: str) -> set[str]:
    used = set()
    for selector in re.findall(r"\{([^}]*)\}", expr):
        used |= set(re.findall(r"([a-zA-Z_]+)\s*(?:=~|!~|!=|=)", selector))
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        used |= {g.strip() for g in group.split(",") if g.strip()}
    return used


def problems(dashboard: dict[str, object]) -> list[str]:
    allowed = PROMETHEUS_LABELS | exported_labels()
    out = []
    exprs = [t["expr"] for p in dashboard["panels"]  # type: ignore[attr-defined]
             for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard["templating"]["list"]]  # type: ignore[index]
    for expr in exprs:
        for label in labels_used(expr):
            if label not in allowed:
                out.append(f"{expr}: label {label!r} is not on a plain Prometheus")
    for var in dashboard["templating"]["list"]:  # type: ignore[index]
        found = re.search(r"label_values\([^,]+,\s*(\w+)\)", var["query"])
        if found and found.group(1) not in allowed:
            out.append(f"variable {var['name']}: label {found.group(1)!r}")
    return out


def test_dashboard_needs_no_scrape_specific_label() -> None:
    assert problems(json.loads(DASHBOARD.read_text())) == []


def test_twin_a_scrape_specific_label_is_caught() -> None:
    doc = json.loads(DASHBOARD.read_text().replace('instance=~\\"$instance\\"',
                                                   'notary=~\\"$notary\\"'))
    assert doc != json.loads(DASHBOARD.read_text())
    assert any("'notary'" in p for p in problems(doc))
