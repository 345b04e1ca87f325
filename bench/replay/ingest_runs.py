"""Trace ingest's goal over separate runs, quiet and busy.

    python -m bench.replay.ingest_runs [--runs 3] [--trials 3]

Runs ``bench.replay.ingest_command`` (the whole ``replay workload --jobs 1`` command on the
synthetic hour in every layout, ``--trials`` fresh processes per layout, next to polars' own
read of the builder's columns) ``--runs`` times as separate processes on a quiet machine, then
as many times with a CPU burner beside ("busy", ``--busy``), the two kinds alternating.
Reports per condition and layout the median and spread of the runs' medians: CPU seconds per
command, flows per CPU-second against the goal (1 M), peak RSS against its goal (1 GB), and
the floor's CPU seconds. The load average is recorded before and after every run. Results:
``bench/results/ingest-runs.json`` and its section of ``docs/benchmarks.md``
(``var/results/`` unless recording).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.paths import machine, results_path, where, write_section  # noqa: E402
from bench.replay.ingest import GOAL_COMMAND_RSS_MB, GOAL_FLOWS_PER_S  # noqa: E402
from bench.replay.replay_runs import CONDITIONS, _commit, _fmt, alternate  # noqa: E402
from bench.replay.replay_runs import spread as _any_spread  # noqa: E402

RUN_TIMEOUT_S = 600.0


def _spread(xs: Sequence[float]) -> dict[str, float]:
    s = _any_spread(xs)
    if s is None:
        raise ValueError("no runs to summarise")
    return s


def one_run(busy: bool, trials: int, scale: float, work: Path, out: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.replay.ingest_command", "--trials", str(trials),
            "--scale", f"{scale:g}", "--work", str(work), "--out", str(out),
            "--md", str(out.with_suffix(".md"))]
    if busy:
        argv.append("--busy")
    subprocess.run(argv, cwd=ROOT, check=True, timeout=RUN_TIMEOUT_S)
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return doc


def aggregate(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One condition's runs: per layout, the spread of the runs' medians, and the goals."""
    layouts: dict[str, Any] = {}
    for name in docs[0]["layouts"]:
        rows = [d["layouts"][name] for d in docs]
        flows = int(rows[0]["flows"])
        cpu = _spread([r["command"]["cpu_s"] for r in rows])
        per_cpu = _spread([flows / r["command"]["cpu_s"] for r in rows])
        rss = max(r["command"]["peak_rss_mb"] for r in rows)
        layouts[name] = {
            "flows": flows, "cpu_s": cpu, "flows_per_cpu_s": per_cpu,
            "columns_cpu_s": _spread([r["columns"]["cpu_s"] for r in rows]),
            "peak_rss_mb": rss,
            "met": per_cpu["median"] >= GOAL_FLOWS_PER_S and rss <= GOAL_COMMAND_RSS_MB,
        }
    return {"layouts": layouts, "met": all(v["met"] for v in layouts.values()),
            "loads": [(d["machine"]["load_average_start"], d["machine"]["load_average_end"])
                      for d in docs]}


def render(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        "## Trace ingest over separate runs, quiet and busy",
        "",
        f"Run {doc['started_at']} to {doc['finished_at']} at commit {doc['commit']} on "
        f"{m['cpus']} CPUs ({m['cpu']}{where(m)}), Python {m['python']}: "
        f"{doc['runs_per_condition']} "
        "separate runs of `bench.replay.ingest_command` per condition, each "
        f"{doc['trials']} trials per layout of the whole `replay workload --jobs 1` command "
        "(a fresh process, `POLARS_MAX_THREADS=1`, not pinned by the benchmark: the command "
        f"holds itself to the CPU it starts on) on the synthetic hour at scale "
        f"{doc['scale']:g}; *busy* runs a CPU burner (one process in a busy loop, bounded in "
        "time) beside the whole run. Figures are the median (min-max) of the runs' medians; "
        "*columns* is polars' own read of the columns the builder needs, as a whole command. "
        "`bench/results/ingest-runs.json` has every run and trial.",
        "",
        "| Layout | Goal | Quiet: flows per CPU-s | CPU s | Columns CPU s | RSS MB | Met "
        "| Busy: flows per CPU-s | CPU s | Columns CPU s | RSS MB | Met |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    q, b = doc["conditions"]["quiet"], doc["conditions"]["busy"]
    for name in q["layouts"]:
        cells = []
        for c in (q, b):
            v = c["layouts"][name]
            cells.append(f"{_fmt(v['flows_per_cpu_s'], '{:,.0f}')} | "
                         f"{_fmt(v['cpu_s'], '{:.2f}')} | {v['columns_cpu_s']['median']:.2f} | "
                         f"{v['peak_rss_mb']:.0f} | {'yes' if v['met'] else '**no**'}")
        lines.append(f"| {name} | ≥ {GOAL_FLOWS_PER_S:,.0f}, ≤ {GOAL_COMMAND_RSS_MB:,} MB | "
                     f"{cells[0]} | {cells[1]} |")
    lines += ["", "Load average (1, 5, 15 min) before / after each run:"]
    for cond in CONDITIONS:
        for i, (before, after) in enumerate(doc["conditions"][cond]["loads"], 1):
            lines.append(f"* {cond} run {i}: {', '.join(f'{x:.2f}' for x in before)} / "
                         f"{', '.join(f'{x:.2f}' for x in after)}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="separate runs per condition")
    ap.add_argument("--trials", type=int, default=3, help="trials per layout in each run")
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "bench-ingest")
    ap.add_argument("--out", type=Path, default=results_path("bench/results/ingest-runs.json"))
    ap.add_argument("--md", type=Path, default=results_path("docs/benchmarks.md"))
    a = ap.parse_args(argv)
    if not 1 <= a.runs <= 10 or not 1 <= a.trials <= 15:
        ap.error("--runs must be in 1-10 and --trials in 1-15")
    started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    runs = alternate("ingest-runs", a.runs, lambda cond, out: one_run(
        cond == "busy", a.trials, a.scale, a.work, out))
    doc = {
        "benchmark": "ingest-runs", "started_at": started,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "commit": _commit(), "runs_per_condition": a.runs, "trials": a.trials,
        "scale": a.scale,
        "machine": machine(),
        "goal": {"flows_per_cpu_s": GOAL_FLOWS_PER_S, "peak_rss_mb": GOAL_COMMAND_RSS_MB},
        "conditions": {c: aggregate(runs[c]) for c in CONDITIONS},
        "run_results": runs,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    write_section(a.md, "ingest-runs", "bench/replay/ingest_runs.py", render(doc))
    for cond in CONDITIONS:
        c = doc["conditions"][cond]
        for name, v in c["layouts"].items():
            print(f"bench/ingest-runs: {cond} {name}: "
                  f"{_fmt(v['flows_per_cpu_s'], '{:,.0f}')} flows per CPU-second, CPU "
                  f"{_fmt(v['cpu_s'], '{:.2f}')} s, peak RSS {v['peak_rss_mb']:.0f} MB, goal "
                  f"{'met' if v['met'] else 'NOT met'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
