"""Every figure of the runs benchmarks as measured here, beside the recorded one.

The project's figures count only if the same command on another machine of this kind gives
them again (within 15%). ``make bench`` writes its results under ``var/results/``; this reads
them and the tracked records (``bench/results/``) and prints, per figure, the recorded median,
this machine's, the change, whether it is within the tolerance, and whether the goal (where
there is one) holds here. Its header names both machines (CPU, kernel, boot: one boot
means one machine, so a comparison of a machine with itself says so).

The records compared are the four that take separate runs, quiet and busy, and so give a
median and a spread: ``notary-runs``, ``client-runs``, ``replay-runs`` and ``ingest-runs``.

Usage: ``python -m bench.compare [--here DIR] [--recorded DIR] [--tolerance 0.15]
[--json FILE]``. Exit 0 whatever the figures say (a comparison, not a gate); 2 when
neither side has a record to compare.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.paths import ROOT, SCRATCH

TOLERANCE = 0.15
RECORDS = ("notary-runs", "client-runs", "replay-runs", "ingest-runs")


@dataclass(frozen=True)
class Figure:
    median: float
    low: float
    high: float
    goal: str | None = None  # "<= 1.25", ">= 20000", "< 10"
    met: bool | None = None


def _goal(limit: float | None, at_most: bool, strict: bool = False) -> str | None:
    if limit is None:
        return None
    return ("<" if strict else "<=" if at_most else ">=") + f" {limit:g}"


def _holds(value: float, goal: str | None) -> bool | None:
    if goal is None:
        return None
    op, limit = goal.split(" ")
    return {"<=": value <= float(limit), ">=": value >= float(limit),
            "<": value < float(limit)}[op]


def _fig(s: dict[str, Any], goal: str | None = None) -> Figure:
    return Figure(float(s["median"]), float(s["min"]), float(s["max"]), goal,
                  _holds(float(s["median"]), goal))


def _notary_runs(d: dict[str, Any]) -> Iterator[tuple[str, Figure]]:
    for cond, c in (d.get("conditions") or {}).items():
        for f in (c.get("aggregate") or {}).values():
            yield (f"notary, {cond}: {f['title']}",
                   _fig(f, _goal(f.get("goal"), bool(f.get("at_most", True)))))


CLIENT_FIGURES = {
    "check_over_bare_legacy_request": "check (kept connection) / bare TLS request",
    "check_new_connection_over_bare_legacy_request":
        "check on a new connection / bare TLS request",
    "legacy_check_over_bare_legacy_request": "legacy check / bare TLS request",
    "check_over_bare_extended_request": "check / bare extended request",
    "bare_extended_over_bare_legacy_request": "bare extended / bare legacy request",
    "bare_resumed_over_bare_legacy_request": "bare resumed / bare legacy request",
}
CLIENT_GOALS = ("check_over_bare_legacy_request", "check_new_connection_over_bare_legacy_request")


def _client_runs(d: dict[str, Any]) -> Iterator[tuple[str, Figure]]:
    limit = float(d.get("goal", 1.3))
    for client, doc in (("Python", d), ("Go", d.get("go") or {})):
        for cond in ("quiet", "busy"):
            runs = doc.get(cond) or {}
            for key, title in CLIENT_FIGURES.items():
                if runs.get(key):
                    yield (f"client {client}, {cond}: {title}",
                           _fig(runs[key], _goal(limit, True) if key in CLIENT_GOALS else None))


def _replay_runs(d: dict[str, Any]) -> Iterator[tuple[str, Figure]]:
    goal = d.get("goal") or {}
    rate = f"{goal.get('rate', 20_000):,.0f}/s"
    for cond, c in (d.get("conditions") or {}).items():
        for key, title, g in (
                ("sustained_rate", "highest rate, every rate up to it under the limit (/s)",
                 _goal(goal.get("rate"), False)),
                ("p99_ms_at_goal", f"send lateness p99 at {rate} (ms)",
                 _goal(goal.get("p99_ms"), True, strict=True)),
                ("sender_cpu_us_at_goal", f"sender CPU per request at {rate} (µs)", None),
                ("server_cpu_us_at_goal", f"server CPU per request at {rate} (µs)", None)):
            if c.get(key):
                yield f"replay, {cond}: {title}", _fig(c[key], g)


def _ingest_runs(d: dict[str, Any]) -> Iterator[tuple[str, Figure]]:
    goal = d.get("goal") or {}
    for cond, c in (d.get("conditions") or {}).items():
        for name, v in (c.get("layouts") or {}).items():
            yield (f"ingest, {cond}, {name}: flows per CPU-second",
                   _fig(v["flows_per_cpu_s"], _goal(goal.get("flows_per_cpu_s"), False)))
            rss = float(v["peak_rss_mb"])
            g = _goal(goal.get("peak_rss_mb"), True)
            yield (f"ingest, {cond}, {name}: peak RSS (MB)", Figure(rss, rss, rss, g,
                                                                     _holds(rss, g)))


EXTRACT: dict[str, Callable[[dict[str, Any]], Iterator[tuple[str, Figure]]]] = {
    "notary-runs": _notary_runs, "client-runs": _client_runs, "replay-runs": _replay_runs,
    "ingest-runs": _ingest_runs}


def figures(name: str, doc: dict[str, Any]) -> dict[str, Figure]:
    """The figures of one runs record (``name`` as in :data:`RECORDS`)."""
    return dict(EXTRACT[name](doc))


def record_origin(doc: dict[str, Any]) -> str:
    """Where and when a record was taken, from what it kept."""
    m = doc.get("machine") or {}
    parts = [str(m.get("cpu") or m.get("cpu_model") or "CPU not recorded")]
    kernel = m.get("kernel") or m.get("platform")
    parts.append(f"kernel {kernel}" if kernel else "kernel not recorded")
    parts.append(f"boot {m['boot_id'][:8]}" if m.get("boot_id") else "boot not recorded")
    commit = doc.get("commit")
    when = doc.get("started_at")
    return ", ".join(parts) + (f", commit {str(commit)[:12]}" if commit else "") + \
        (f", {when}" if when else "")


@dataclass(frozen=True)
class Row:
    record: str
    figure: str
    recorded: Figure
    here: Figure
    change: float  # here / recorded - 1
    within: bool
    goal: str | None


def compare(recorded: dict[str, Figure], here: dict[str, Figure], record: str,
            tolerance: float = TOLERANCE) -> list[Row]:
    """One row per figure both sides have, in the recorded order."""
    out = []
    for name, r in recorded.items():
        h = here.get(name)
        if h is None:
            continue
        change = h.median / r.median - 1 if r.median else (0.0 if h.median == 0 else 1.0)
        out.append(Row(record, name, r, h, change, abs(change) <= tolerance + 1e-12,
                       h.goal or r.goal))
    return out


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}"


def same_boot(recorded: dict[str, Any], here: dict[str, Any]) -> bool:
    """Both records kept a boot identity and it is the same one: one machine, not two."""
    a = (recorded.get("machine") or {}).get("boot_id")
    return bool(a) and a == (here.get("machine") or {}).get("boot_id")


def render(rows: list[Row], sides: dict[str, tuple[str, str, bool]], tolerance: float) -> str:
    lines = []
    for record, (rec, here, same) in sides.items():
        lines += [f"{record}: recorded on {rec}", f"{' ' * len(record)}  here on {here}"]
        if same:
            lines.append(f"{' ' * len(record)}  (the same machine and boot: not a second "
                         "machine)")
    lines.append("")
    w = max([len(r.figure) for r in rows] + [6])
    lines.append(f"{'figure':<{w}}  {'recorded':>9}  {'here':>9}  {'change':>7}  "
                 f"{'within':>6}  {'goal':>10}  met here")
    for r in rows:
        met = "-" if r.here.met is None else ("yes" if r.here.met else "NO")
        lines.append(f"{r.figure:<{w}}  {_num(r.recorded.median):>9}  {_num(r.here.median):>9}"
                     f"  {r.change:>+7.0%}  {'yes' if r.within else 'NO':>6}  "
                     f"{r.goal or '-':>10}  {met}")
    goals = [r for r in rows if r.here.met is not None]
    lines += ["", f"{sum(r.within for r in rows)} of {len(rows)} figures within "
              f"{tolerance:.0%} of the recorded median; goals met here: "
              f"{sum(bool(r.here.met) for r in goals)} of {len(goals)}."]
    return "\n".join(lines)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--here", type=Path, default=SCRATCH / "bench" / "results",
                    help="this machine's results (default: what make bench just wrote)")
    ap.add_argument("--recorded", type=Path, default=ROOT / "bench" / "results",
                    help="the recorded results (default: the tracked ones)")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args(argv)
    rows: list[Row] = []
    sides: dict[str, tuple[str, str, bool]] = {}
    for name in RECORDS:
        rec, here = _load(a.recorded / f"{name}.json"), _load(a.here / f"{name}.json")
        if rec is None or here is None:
            print(f"{name}: {'no recorded results' if rec is None else 'no results here'} "
                  f"({a.recorded if rec is None else a.here}/{name}.json); not compared",
                  file=sys.stderr)
            continue
        try:
            got = compare(figures(name, rec), figures(name, here), name, a.tolerance)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            print(f"{name}: unreadable record ({exc!r}); not compared", file=sys.stderr)
            continue
        rows += got
        sides[name] = (record_origin(rec), record_origin(here), same_boot(rec, here))
    if not rows:
        print("bench.compare: nothing to compare", file=sys.stderr)
        return 2
    print(render(rows, sides, a.tolerance))
    if a.json is not None:
        a.json.write_text(json.dumps({"tolerance": a.tolerance, "sides": sides,
                                      "rows": [asdict(r) for r in rows]}, indent=1) + "\n",
                          encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
