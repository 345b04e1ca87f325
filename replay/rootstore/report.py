"""Writing the analysis and the comparison: CSV, JSON and PNG plots (matplotlib, Agg).

Files written by :func:`write_analysis` into the output directory:

* ``popularity.csv`` / ``popularity-orgs.csv``: rank, root name, root SHA-256, sites,
  share, cumulative share (Table 3 / Table 5);
* ``coverage.csv``: k, share of all valid sites, share of organisations (Figures 17/18);
* ``verdicts.csv``: full-store verdict counts over every site with a chain;
* ``fig17-coverage.png``, ``fig18-coverage-orgs.png`` and ``summary.json``.

:func:`write_comparison` writes ``agreement.csv``, ``separating.csv`` (one row per separating
site: the bulk), ``comparison.json`` (the summary: matrix, patterns by label, scores, the
number of separating sites), ``agreement.png`` and, with labelled sites, ``scores.csv``
(catches, misses and false alarms of each kind of trust, per site and weighted by requests).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from notary.errors import BadConfig
from replay.rootstore.analysis import THESIS_COVERAGE, THESIS_ORG_COVERAGE, RootCount
from replay.rootstore.compare import PATTERNS, Comparison, Score


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
    popularity: str | None = None  # the synthetic world's root popularity model, if known

    def basis(self) -> str:
        """Whether the coverage curve is a finding or returns an input."""
        if self.popularity == "thesis":
            return ("input: the world's root popularity is the thesis's own Table 3, so this "
                    "curve returns its input and cannot confirm the thesis")
        if self.popularity:
            return (f"measured on a synthetic world whose root popularity is {self.popularity} "
                    "(not the thesis's)")
        return "measured"

    def side_by_side(self) -> list[tuple[str, str, str, str]]:
        """``(measure, ours, thesis, basis)`` rows: coverage at the thesis's reference k."""
        def at(curve: list[tuple[int, float]], k: int) -> str:
            return f"{curve[k - 1][1]:.1%}" if len(curve) >= k else "-"
        rows = [(f"top-{k} roots, all valid sites", at(self.coverage, k), f"{v:.0%} (Fig. 17)",
                 self.basis()) for k, v in THESIS_COVERAGE.items()]
        rows += [(f"top-{k} roots, one site per organisation", at(self.org_coverage, k),
                  f"{v:.0%} (Fig. 18)", self.basis()) for k, v in THESIS_ORG_COVERAGE.items()]
        return rows

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
            "thesis": {"coverage": THESIS_COVERAGE, "org_coverage": THESIS_ORG_COVERAGE},
            "popularity_model": self.popularity, "basis": self.basis(),
            "side_by_side": [list(r) for r in self.side_by_side()],
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
    note = "" if a.popularity is None else f"\nworld popularity: {a.popularity}" + (
        " (the thesis's Table 3: the curve returns its input)" if a.popularity == "thesis"
        else "")
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax.plot(ks, [100 * s for _, s in a.coverage], marker=".", label="ours")
    ax.plot(list(THESIS_COVERAGE), [100 * v for v in THESIS_COVERAGE.values()], "kD",
            markersize=8, label="thesis, Figure 17 (97,415 sites)")
    ax.set_xlabel("trusted root CAs (most popular first)")
    ax.set_ylabel("valid sites reachable without warning (%)")
    ax.set_title(f"Coverage by top-k roots ({a.verdicts.get('ok', 0)} valid sites){note}")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    fig.savefig(out / "fig17-coverage.png", dpi=100, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax.plot(ks, [100 * s for _, s in a.coverage], marker=".", label="ours, all sites")
    ax.plot(ks, [100 * s for _, s in a.org_coverage], marker=".", linestyle="--",
            label=f"ours, one site per organisation ({a.organisations}, by {a.org_mode})")
    ax.plot(list(THESIS_ORG_COVERAGE), [100 * v for v in THESIS_ORG_COVERAGE.values()], "kD",
            markersize=8, label="thesis, Figure 18 (80,316 sites)")
    ax.set_xlabel("trusted root CAs (most popular first)")
    ax.set_ylabel("reachable without warning (%)")
    ax.set_title(f"Coverage after merging each organisation's sites{note}")
    ax.set_ylim(0, 100)
    ax.legend(loc="lower right")
    ax.grid(True, alpha=0.3)
    fig.savefig(out / "fig18-coverage-orgs.png", dpi=100, bbox_inches="tight")
    plt.close(fig)


SCORE_FIELDS = ("catches", "misses", "false_alarms", "accepted_genuine")


def _scores_json(sc: dict[str, Any]) -> dict[str, Any]:
    def side(d: dict[str, Score] | None) -> dict[str, dict[str, int]] | None:
        return None if d is None else {n: {f: getattr(v, f) for f in SCORE_FIELDS}
                                       for n, v in d.items()}
    return {**sc, "sites": side(sc["sites"]), "requests": side(sc["requests"])}


def write_comparison(c: Comparison, out: Path, k_detail: int | None = None,
                     sc: dict[str, Any] | None = None) -> list[Path]:
    _mkdir(out)
    doc = c.to_json(k_detail)
    if sc is not None:
        doc["scores"] = _scores_json(sc)
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
        # the summary; the per-site rows are in separating.csv (bulk: not for a tracked place)
        summary = {k: v for k, v in doc.items() if k != "separating"}
        summary["separating_count"] = len(doc["separating"])
        summary["separating_file"] = "separating.csv"
        (out / "comparison.json").write_text(json.dumps(summary, indent=2) + "\n",
                                             encoding="utf-8")
        names = ["agreement.csv", "separating.csv", "comparison.json", "agreement.png"]
        if sc is not None and sc["labelled"]:
            with (out / "scores.csv").open("w", newline="", encoding="utf-8") as fh:
                w = csv.writer(fh)
                w.writerow(["counted", "verifier", *SCORE_FIELDS])
                for counted in ("sites", "requests"):
                    for name, v in (sc[counted] or {}).items():
                        w.writerow([counted, name, *(getattr(v, f) for f in SCORE_FIELDS)])
            names.append("scores.csv")
        _plot_agreement(c, out)
    except OSError as exc:
        raise BadConfig(f"cannot write results in {out}: {exc.strerror or exc}") from exc
    return [out / n for n in names]


def _plot_agreement(c: Comparison, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ks = [r.k for r in c.rows]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    n = max(1, len(c.sites))
    ax.plot(ks, [100 * r.perspective_vs_top for r in c.rows], marker="o", linestyle="-",
            label="perspectives agree with top-k CA trust")
    ax.plot(ks, [100 * r.full_vs_top for r in c.rows], marker="s", linestyle="--",
            label="full-store CA trust agrees with top-k CA trust")
    ax.plot(ks, [100 * r.top_accepts / n for r in c.rows], marker="^", linestyle=":",
            label="top-k CA trust accepts (% of sites)")
    if c.rows:
        ax.axhline(100 * c.rows[0].perspective_vs_full, linestyle="-.", color="grey",
                   label="perspectives agree with full-store CA trust (no k)")
    ax.set_title(f"Agreement of perspectives, full-store and top-k CA trust ({len(c.sites)} "
                 "sites)")
    ax.set_xlabel("k: the most popular roots trusted")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("% of sites")
    ax.set_ylim(0, 105)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1, fontsize="small",
              frameon=False)
    fig.savefig(out / "agreement.png", dpi=100, bbox_inches="tight")
    plt.close(fig)


def format_comparison(c: Comparison, k_detail: int | None = None,
                      sc: dict[str, Any] | None = None) -> str:
    """A plain-text agreement matrix, the separating cases and, with labelled sites, the
    catches, misses and false alarms of each kind of trust."""
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
    if sc is not None and sc["labelled"]:
        lines.append("")
        lines.append(f"against the truth (attack: clients shown a forged certificate; "
                     f"{sc['labelled']} labelled sites, {sc['unlabelled']} unlabelled)")
        head = f"{'':<9} {'verifier':<20} {'catches':>9} {'misses':>9} {'false alarms':>13}"
        lines.append(head)
        for counted in ("sites", "requests"):
            for name, v in (sc[counted] or {}).items():
                lines.append(f"{counted:<9} {name:<20} {v.catches:>9,} {v.misses:>9,} "
                             f"{v.false_alarms:>13,}")
        if sc["requests"] is not None:
            lines.append(f"(requests: {sc['weighted_sites']} sites with replay requests; "
                         "perspectives counted by the notary's own answers)")
    return "\n".join(lines)


__all__ = ["Analysis", "format_comparison", "write_analysis", "write_comparison"]
