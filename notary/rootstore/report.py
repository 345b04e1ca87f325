"""Writing the analysis and the comparison: CSV, JSON and PNG plots (matplotlib, Agg).

Files written by :func:`write_analysis` into the output directory:

* ``popularity.csv`` / ``popularity-orgs.csv``: rank, root name, root SHA-256, sites,
  share, cumulative share (Table 3 / Table 5);
* ``coverage.csv``: k, share of all valid sites, share of organisations (Figures 17/18);
* ``verdicts.csv``: full-store verdict counts over every site with a chain;
* ``fig17-coverage.png``, ``fig18-coverage-orgs.png`` and ``summary.json``.

:func:`write_comparison` writes ``agreement.csv``, ``separating.csv``, ``comparison.json``
and ``agreement.png``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from notary.errors import BadConfig
from notary.rootstore.analysis import RootCount
from notary.rootstore.compare import PATTERNS, Comparison


@dataclass(frozen=True)
class Analysis:
    now: int
    store: str
    sites: int  # sites with a chain
    without_chain: int
    verdicts: dict[str, int]
    table: list[RootCount]
    org_table: list[RootCount]
    coverage: list[tuple[int, float]]
    org_coverage: list[tuple[int, float]]
    organisations: int
    org_mode: str
    unevaluable: int = 0  # sites whose certificate or name could not be evaluated

    def summary(self) -> dict[str, Any]:
        def at(curve: list[tuple[int, float]], k: int) -> float | None:
            return curve[k - 1][1] if len(curve) >= k else None

        return {
            "now": self.now, "store": self.store, "sites_with_chain": self.sites,
            "sites_without_chain": self.without_chain,
            "sites_unevaluable": self.unevaluable,
            "valid_sites": self.verdicts.get("ok", 0), "verdicts": self.verdicts,
            "roots_used": len(self.table), "organisations": self.organisations,
            "org_mode": self.org_mode,
            "coverage": {f"top_{k}": at(self.coverage, k) for k in (1, 5, 10, 15, 50)},
            "org_coverage": {f"top_{k}": at(self.org_coverage, k) for k in (1, 5, 10, 15, 50)},
            "top_roots": [{"rank": r.rank, "name": r.name, "sha256": r.sha256.hex(),
                           "sites": r.sites} for r in self.table[:10]],
        }


def _mkdir(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadConfig(f"cannot create {out}: {exc.strerror or exc}") from exc


def _table_csv(path: Path, table: Sequence[RootCount]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["rank", "root", "root_sha256", "sites", "share", "cumulative"])
        for r in table:
            w.writerow([r.rank, r.name, r.sha256.hex(), r.sites, f"{r.share:.6f}",
                        f"{r.cumulative:.6f}"])


def write_analysis(a: Analysis, out: Path) -> list[Path]:
    _mkdir(out)
    try:
        _table_csv(out / "popularity.csv", a.table)
        _table_csv(out / "popularity-orgs.csv", a.org_table)
        with (out / "coverage.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["k", "all_sites", "organisations"])
            for (k, s), (_, o) in zip(a.coverage, a.org_coverage, strict=True):
                w.writerow([k, f"{s:.6f}", f"{o:.6f}"])
        with (out / "verdicts.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["verdict", "sites"])
            for v, n in sorted(a.verdicts.items(), key=lambda kv: (-kv[1], kv[0])):
                w.writerow([v, n])
        (out / "summary.json").write_text(json.dumps(a.summary(), indent=2) + "\n",
                                          encoding="utf-8")
        _plot_coverage(a, out)
    except OSError as exc:
        raise BadConfig(f"cannot write results in {out}: {exc.strerror or exc}") from exc
    names = ["popularity.csv", "popularity-orgs.csv", "coverage.csv", "verdicts.csv",
             "summary.json", "fig17-coverage.png", "fig18-coverage-orgs.png"]
    return [out / n for n in names]


def _plot_coverage(a: Analysis, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    ks = [k for k, _ in a.coverage]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(ks, [100 * s for _, s in a.coverage], marker=".")
    ax.set_xlabel("trusted root CAs (most popular first)")
    ax.set_ylabel("valid sites reachable without warning (%)")
    ax.set_title(f"Coverage by top-k roots ({a.verdicts.get('ok', 0)} valid sites)")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "fig17-coverage.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(ks, [100 * s for _, s in a.coverage], marker=".", label="all sites")
    ax.plot(ks, [100 * s for _, s in a.org_coverage], marker=".",
            label=f"one site per organisation ({a.organisations}, by {a.org_mode})")
    ax.set_xlabel("trusted root CAs (most popular first)")
    ax.set_ylabel("reachable without warning (%)")
    ax.set_ylim(0, 100)
    ax.legend(loc="lower right")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "fig18-coverage-orgs.png", dpi=100)
    plt.close(fig)


def write_comparison(c: Comparison, out: Path, k_detail: int | None = None) -> list[Path]:
    _mkdir(out)
    doc = c.to_json(k_detail)
    try:
        with (out / "agreement.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["k", *PATTERNS, "perspective_vs_full", "perspective_vs_top_k",
                        "full_vs_top_k", "top_k_accepts"])
            for r in c.rows:
                w.writerow([r.k, *(r.counts[p] for p in PATTERNS),
                            f"{r.perspective_vs_full:.4f}", f"{r.perspective_vs_top:.4f}",
                            f"{r.full_vs_top:.4f}", r.top_accepts])
        with (out / "separating.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["host", "port", "label", "pattern", "full_verdict", "top_k_verdict",
                        "reason"])
            for s in doc["separating"]:
                reason = s["top_k"]["reason"] if s["full"]["verdict"] == "ok" else \
                    s["full"]["reason"]
                w.writerow([s["host"], s["port"], s["label"], s["pattern"],
                            s["full"]["verdict"], s["top_k"]["verdict"], reason])
        (out / "comparison.json").write_text(json.dumps(doc, indent=2) + "\n",
                                             encoding="utf-8")
        _plot_agreement(c, out)
    except OSError as exc:
        raise BadConfig(f"cannot write results in {out}: {exc.strerror or exc}") from exc
    return [out / n for n in ("agreement.csv", "separating.csv", "comparison.json",
                              "agreement.png")]


def _plot_agreement(c: Comparison, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    ks = [r.k for r in c.rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    n = max(1, len(c.sites))
    ax.plot(ks, [100 * r.perspective_vs_top for r in c.rows], marker=".",
            label="perspectives vs top-k CA")
    ax.plot(ks, [100 * r.full_vs_top for r in c.rows], marker=".", label="full CA vs top-k CA")
    ax.plot(ks, [100 * r.top_accepts / n for r in c.rows], marker=".",
            label="top-k CA accepts (% of sites)")
    if c.rows:
        ax.axhline(100 * c.rows[0].perspective_vs_full, linestyle="--", color="grey",
                   label="perspectives vs full CA")
    ax.set_xlabel("k (trusted roots)")
    ax.set_ylabel("%")
    ax.set_ylim(0, 100)
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "agreement.png", dpi=100)
    plt.close(fig)


def format_comparison(c: Comparison, k_detail: int | None = None) -> str:
    """A plain-text agreement matrix and the separating cases."""
    lines = [f"{'k':>4} " + " ".join(f"{p:>9}" for p in PATTERNS) + "   P=F    P=K    F=K"]
    for r in c.rows:
        lines.append(f"{r.k:>4} " + " ".join(f"{r.counts[p]:>9}" for p in PATTERNS)
                     + f" {r.perspective_vs_full:6.1%} {r.perspective_vs_top:6.1%}"
                     f" {r.full_vs_top:6.1%}")
    doc = c.to_json(k_detail)
    lines.append(f"separating cases at k={doc['separating_k']}: {len(doc['separating'])}")
    for label, pats in doc["by_label"].items():
        lines.append(f"  {label or '-':<22} " + ", ".join(f"{p}: {n}"
                                                          for p, n in sorted(pats.items())))
    return "\n".join(lines)


__all__ = ["Analysis", "format_comparison", "write_analysis", "write_comparison"]
