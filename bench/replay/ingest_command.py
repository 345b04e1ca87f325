"""Trace ingest as users pay it: the whole ``replay workload --jobs 1`` command.

    python -m bench.replay.ingest_command [--scale 0.5] [--trials 3] [--baseline DIR]

For each layout of the synthetic hour (``bench/replay/ingest.py`` makes it), in fresh
processes on one core (``POLARS_MAX_THREADS=1``), alternating in every trial: the command
(interpreter start and imports included: wall time, CPU time and peak RSS from ``wait4``),
polars' own read of the columns the builder needs (the floor) and, with ``--baseline DIR``,
the same command from another checkout (``DIR/replay``), so that a change is measured against
its baseline in the same run on a shared machine. The load average is recorded before and
after every trial. Results: ``bench/results/ingest-command.json`` and its section of
``docs/benchmarks.md`` (``var/results/`` unless recording).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.notary.run import BURNER  # noqa: E402
from bench.paths import results_path, write_section  # noqa: E402
from bench.replay.ingest import (  # noqa: E402
    GOAL_COMMAND_RSS_MB,
    GOAL_FLOWS_PER_S,
    LAYOUTS,
    command,
    synth,
    whole_command,
)

BUSY_LIMIT_S = 900  # the burner's own deadline


def summary(runs: list[dict[str, Any]], flows: int) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    cpus = [r["cpu_s"] for r in runs]
    return {"wall_s": statistics.median(walls), "wall_min_s": min(walls),
            "wall_max_s": max(walls), "cpu_s": statistics.median(cpus),
            "cpu_min_s": min(cpus), "cpu_max_s": max(cpus),
            "flows_per_s": flows / statistics.median(walls),
            "flows_per_cpu_s": flows / statistics.median(cpus),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs), "trials": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a checkout whose replay/ is the baseline (e.g. a git worktree)")
    ap.add_argument("--busy", action="store_true",
                    help="run a CPU burner (one process in a busy loop) beside every trial: "
                    "the busy-machine scenario")
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "bench-ingest")
    ap.add_argument("--out", type=Path,
                    default=results_path("bench/results/ingest-command.json"))
    ap.add_argument("--md", type=Path, default=results_path("docs/benchmarks.md"),
                    help="Markdown file for the section (default: docs/benchmarks.md when "
                         "recording, else under var/results/)")
    a = ap.parse_args(argv)
    load_before = os.getloadavg()
    a.work.mkdir(parents=True, exist_ok=True)
    data = synth(a.work, a.scale, 3600.0, list(LAYOUTS))
    scratch = a.work / "out-command.csv"
    kinds = ["command", "columns"] + (["baseline"] if a.baseline else [])
    layouts: dict[str, Any] = {}
    # bounded: the burner stops by itself even if this process dies
    burner = (subprocess.Popen([sys.executable, "-c", BURNER, str(BUSY_LIMIT_S)])
              if a.busy else None)
    try:
        _measure(a, data, kinds, scratch, layouts)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    scratch.unlink(missing_ok=True)
    doc = {
        "suite": "ingest-command", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average_start": load_before, "load_average_end": os.getloadavg()},
        "scale": a.scale, "trials": a.trials, "busy": a.busy, "commit": _commit(ROOT),
        "baseline": str(a.baseline) if a.baseline else None,
        "baseline_commit": _commit(a.baseline) if a.baseline else None, "layouts": layouts,
        "goals": {
            "flows_per_s": {"limit": GOAL_FLOWS_PER_S, "met": all(
                v["command"]["flows_per_s"] >= GOAL_FLOWS_PER_S for v in layouts.values())},
            "flows_per_cpu_s": {"limit": GOAL_FLOWS_PER_S, "met": all(
                v["command"]["flows_per_cpu_s"] >= GOAL_FLOWS_PER_S
                for v in layouts.values())},
            "peak_rss_mb": {"limit": GOAL_COMMAND_RSS_MB, "met": all(
                v["command"]["peak_rss_mb"] <= GOAL_COMMAND_RSS_MB
                for v in layouts.values())},
        },
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"bench/ingest-command: wrote {a.out}")
    write_section(a.md, "ingest-command", "bench/replay/ingest_command.py", render_markdown(doc))
    print(f"bench/ingest-command: wrote its section of {a.md}")
    return 0


def _measure(a: argparse.Namespace, data: Path, kinds: list[str], scratch: Path,
             layouts: dict[str, Any]) -> None:
    """Every layout's trials, into ``layouts``."""
    for layout, name in LAYOUTS.items():
        path = data / name
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for trial in range(a.trials):
            order = kinds[trial % len(kinds):] + kinds[:trial % len(kinds)]
            for kind in order:
                load = os.getloadavg()[0]
                if kind == "columns":
                    r = whole_command(["-m", "bench.replay.ingest", "child", "columns",
                                       str(path), layout, "1", str(scratch)], 1)
                else:
                    root = a.baseline if kind == "baseline" and a.baseline else ROOT
                    r = whole_command(command(path, 1, scratch), 1, cwd=root)
                r["loadavg_1m_before"] = load
                r["loadavg_1m_after"] = os.getloadavg()[0]
                runs[kind].append(r)
        stages = json.loads(scratch.with_name(scratch.name + ".stages.json").read_text())
        flows = int(stages["flows_read"])
        row = {"file_mb": path.stat().st_size / 1e6, "flows": flows,
               **{k: summary(v, flows) for k, v in runs.items()}}
        row["ratio_to_columns_read"] = row["command"]["wall_s"] / row["columns"]["wall_s"]
        if a.baseline:
            row["wall_ratio_to_baseline"] = row["command"]["wall_s"] / row["baseline"]["wall_s"]
            row["cpu_ratio_to_baseline"] = row["command"]["cpu_s"] / row["baseline"]["cpu_s"]
        layouts[layout] = row
        c = row["command"]
        line = (f"bench/ingest-command: {layout}: {flows:,} flows, command {c['wall_s']:.2f} s "
                f"wall [{c['wall_min_s']:.2f}-{c['wall_max_s']:.2f}] ({c['flows_per_s']:,.0f} "
                f"flows/s), CPU {c['cpu_s']:.2f} s ({c['flows_per_cpu_s']:,.0f} flows per "
                f"CPU-second), peak RSS {c['peak_rss_mb']:.0f} MB; polars reading the "
                f"builder's columns {row['columns']['wall_s']:.2f} s wall, "
                f"{row['columns']['cpu_s']:.2f} s CPU")
        if a.baseline:
            b = row["baseline"]
            line += (f"; baseline {b['wall_s']:.2f} s wall, {b['cpu_s']:.2f} s CPU, "
                     f"{b['peak_rss_mb']:.0f} MB")
        print(line, flush=True)


def _commit(root: Path) -> str | None:
    """The commit a checkout is at (a ``BASELINE_COMMIT`` file names it in an exported
    tree), or None."""
    marker = root / "BASELINE_COMMIT"
    if marker.exists():
        return marker.read_text().strip() or None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def render_markdown(doc: dict[str, Any]) -> str:
    """The ingest-command section of docs/benchmarks.md."""
    m = doc["machine"]
    base = doc.get("baseline")
    lines = [
        "## Trace ingest as users pay it (`replay workload --jobs 1`, whole command)",
        "",
        f"Run {doc['when']} at commit {doc.get('commit') or '?'} on {m['cpus']} CPUs, Python "
        f"{m['python']}; the synthetic hour at scale {doc['scale']:g}, {doc['trials']} trials "
        "per layout, each a fresh process on one core (`POLARS_MAX_THREADS=1`), the kinds "
        "alternating in every trial" + ("; a CPU burner (one process in a busy loop) ran "
                                        "beside every trial" if doc.get("busy") else "")
        + ". CPU time (user + system, from `wait4`) includes the "
        "interpreter's start and the imports; *columns* is polars' own read of just the "
        "columns the builder needs, as a whole command too (the floor of reading the layout)"
        + (f"; *baseline* the same command from commit {doc.get('baseline_commit') or base}"
           if base else "") + ". `bench/results/ingest-command.json` has every trial.",
        "",
        "| Layout | Flows | CPU s (min-max) | Flows per CPU-s | Peak RSS MB | Columns CPU s |"
        + (" Baseline CPU s (min-max) | CPU ratio to baseline | Baseline RSS MB |"
           if base else ""),
        "|---|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if base else ""),
    ]
    for name, v in doc["layouts"].items():
        c, col = v["command"], v["columns"]
        row = (f"| {name} | {v['flows']:,} | {c['cpu_s']:.2f} ({c['cpu_min_s']:.2f}-"
               f"{c['cpu_max_s']:.2f}) | {c['flows_per_cpu_s']:,.0f} | {c['peak_rss_mb']:.0f} | "
               f"{col['cpu_s']:.2f} |")
        if base:
            b = v["baseline"]
            row += (f" {b['cpu_s']:.2f} ({b['cpu_min_s']:.2f}-{b['cpu_max_s']:.2f}) | "
                    f"{v['cpu_ratio_to_baseline']:.2f} | {b['peak_rss_mb']:.0f} |")
        lines.append(row)
    g = doc["goals"]
    loads = [t[k] for v in doc["layouts"].values() for runs in v.values()
             if isinstance(runs, dict) and "trials" in runs for t in runs["trials"]
             for k in ("loadavg_1m_before", "loadavg_1m_after")]
    walls = [t["wall_s"] for v in doc["layouts"].values() for t in v["command"]["trials"]]
    lines += [
        "",
        f"Goal of {g['flows_per_cpu_s']['limit']:,} flows per CPU-second for the whole "
        f"command in every layout: {'met' if g['flows_per_cpu_s']['met'] else 'NOT met'}; "
        f"peak RSS <= {g['peak_rss_mb']['limit']} MB: "
        f"{'met' if g['peak_rss_mb']['met'] else 'NOT met'}. Load average (1 min) "
        f"{m['load_average_start'][0]:.2f} at the start and {m['load_average_end'][0]:.2f} at "
        f"the end, {min(loads):.2f}-{max(loads):.2f} before and after the trials; the "
        f"command's wall times ({min(walls):.1f}-{max(walls):.1f} s) follow the load, CPU "
        "times much less.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
