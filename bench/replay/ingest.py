"""Trace ingest: ``replay workload`` on the columnar engine against a plain read+sort of the
same file by the same engine, measured in one run.

    python -m bench.replay.ingest [--scale 0.1] [--trials 3] [--big-flows N] [--quick]

For each layout of the synthetic hour (canonical CSV, nfdump's legacy and new CSV): the
engine on one core (``--jobs 1``, ``POLARS_MAX_THREADS=1``) in a fresh process, its flows/s
and peak RSS (``wait4``), and the baseline, ``pl.scan_csv(FILE).sort(start).collect()`` on
one core; then the engine on two cores (the speedup), and the per-row pipeline (the test
oracle) once, for scale. ``--big-flows N`` also builds a trace of N flows (several synthetic
hours in one file) and records the engine's peak RSS on it. Every child is bounded in time.
Results: ``bench/results/ingest.json`` (``var/results/`` unless recording).
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

from bench.paths import results_path, write_section  # noqa: E402

CHILD_TIMEOUT = 1800.0
LAYOUTS = {"canonical": "flows.csv", "nfdump-legacy": "flows-nfdump-legacy.csv",
           "nfdump-new": "flows-nfdump-new.csv"}
START = {"canonical": "start", "nfdump-legacy": "ts", "nfdump-new": "firstSeen"}
GOAL_FLOWS_PER_S = 1_000_000
GOAL_RATIO = 1.5
GOAL_RSS_MB = 500
GOAL_BIG_RSS_MB = 2048
GOAL_COMMAND_RSS_MB = 1024


def _python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def run_bounded(argv: list[str], threads: int, cwd: Path = ROOT) -> tuple[float, Any, str]:
    """``python ARGV`` in a fresh process on ``threads`` polars threads, bounded in time,
    in ``cwd`` (``-m`` modules come from there): its wall time (interpreter start and
    imports included), ``wait4`` usage and stdout."""
    env = dict(os.environ, POLARS_MAX_THREADS=str(threads), PYTHONHASHSEED="0")
    t0 = time.perf_counter()
    proc = subprocess.Popen([_python(), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd)
    deadline = t0 + CHILD_TIMEOUT
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            raise SystemExit(f"{argv} ran over {CHILD_TIMEOUT} s")
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} failed: {err[-2000:]}")
    return wall, usage, out


def child(argv: list[str], threads: int) -> dict[str, Any]:
    """Run this module in ``child`` mode in a fresh process; its JSON line, wall time and
    peak RSS."""
    wall, usage, out = run_bounded(["-m", "bench.replay.ingest", "child", *argv], threads)
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    doc["wall_s"] = wall
    doc["peak_rss_mb"] = usage.ru_maxrss / 1024.0
    return doc


# the columns the engine's parser reads in each layout, those of them a file has
# (replay/columnar/parse.py): polars' own read of these, as text, is the floor of what
# reading a layout can cost
BUILDER_COLUMNS = {
    "canonical": ["start", "end", "src", "dst", "sport", "dport", "proto", "packets", "bytes",
                  "sni"],
    "nfdump-legacy": ["ts", "te", "td", "sa", "da", "sp", "dp", "pr", "ipkt", "ibyt", "opkt",
                      "obyt"],
    "nfdump-new": ["firstSeen", "lastSeen", "duration", "proto", "srcAddr", "dstAddr",
                   "srcPort", "dstPort", "packets", "inPackets", "outPackets", "bytes",
                   "inBytes", "outBytes", "sniName", "sni"],
}


def command(path: Path, jobs: int, out: Path) -> list[str]:
    """The user's command: ``replay workload`` with the synthetic hour's name map."""
    return ["-m", "replay.cli", "workload", "--jobs", str(jobs), "-q", "--names",
            str(path.parent / "names.txt"), "-o", str(out), str(path)]


def whole_command(argv: list[str], threads: int, cwd: Path = ROOT) -> dict[str, Any]:
    """A whole command in a fresh process, as a user runs it: wall time (interpreter start
    and imports included), CPU time and peak RSS from ``wait4``."""
    wall, usage, _ = run_bounded(argv, threads, cwd)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024.0}


def run_child(mode: str, path: Path, layout: str, jobs: int, out: Path) -> None:
    """``child`` mode: one measurement, printed as a JSON line."""
    t0 = time.perf_counter()
    if mode == "columns":  # the floor: polars reads the builder's columns, nothing else
        import polars as pl

        t0 = time.perf_counter()
        with path.open() as fh:
            header = fh.readline().rstrip("\r\n").split(",")
        wanted = [c for c in BUILDER_COLUMNS[layout] if c in header]
        if "lastSeen" in wanted and "duration" in wanted:  # the engine reads lastSeen
            wanted.remove("duration")
        df = pl.scan_csv(path, infer_schema=False).select(wanted).collect()
        doc: dict[str, Any] = {"flows": df.height, "rows": df.height}
    elif mode == "engine":
        from replay import columnar
        from replay.ingest import ErrorLog
        from replay.workload import read_name_map

        names = read_name_map(path.parent / "names.txt")
        t0 = time.perf_counter()  # the name map is read before, as the CLI does
        counters, rows = columnar.build(
            [path], out, columnar.EngineConfig(jobs=jobs, name_map=names), ErrorLog())
        doc: dict[str, Any] = {"flows": counters.flows_read, "rows": rows}
    elif mode == "plain":
        import polars as pl

        t0 = time.perf_counter()  # as for the engine: the import is not timed
        df = pl.scan_csv(path).sort(START[layout]).collect()
        doc = {"flows": df.height, "rows": df.height}
    else:  # the per-row pipeline, the oracle
        from replay.ingest import ErrorLog, read_flows
        from replay.model import StageCounters
        from replay.reference import Namer, WorkloadConfig, build_workload
        from replay.workload import read_name_map, write_workload

        names = read_name_map(path.parent / "names.txt")
        t0 = time.perf_counter()
        c = StageCounters()
        rows = write_workload(build_workload(read_flows([path], ErrorLog()), Namer(names),
                                             WorkloadConfig(), c), out)
        doc = {"flows": c.flows_read, "rows": rows}
    doc["seconds"] = time.perf_counter() - t0
    print(json.dumps(doc))


def synth(work: Path, scale: float, duration: float, formats: list[str]) -> Path:
    from replay.synth import SynthConfig, SyntheticTrace, write_synthetic

    tag = work / f"syn-{scale}-{duration:g}"
    if not (tag / "synth.json").exists() or any(not (tag / LAYOUTS[f]).exists()
                                                for f in formats):
        print(f"bench/ingest: synthesising scale {scale}, {duration:g} s ...", flush=True)
        write_synthetic(SyntheticTrace(SynthConfig(seed=3, scale=scale, duration=duration)),
                        tag, formats)
    return tag


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["child"]:
        run_child(args[1], Path(args[2]), args[3], int(args[4]), Path(args[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--big-flows", type=int, default=0,
                    help="also measure peak RSS on a trace of this many flows (0: skip)")
    ap.add_argument("--quick", action="store_true", help="scale 0.02, one trial")
    ap.add_argument("--no-extras", action="store_true",
                    help="skip the two-core run and the per-row oracle (the layouts only)")
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "bench-ingest")
    ap.add_argument("--out", type=Path, default=results_path("bench/results/ingest.json"))
    ap.add_argument("--md", type=Path, default=None,
                    help="Markdown file for the ingest section (default: docs/benchmarks.md "
                         "when recording, else under var/results/)")
    a = ap.parse_args(args)
    if a.quick:
        a.scale, a.trials = 0.02, 1
    a.work.mkdir(parents=True, exist_ok=True)
    data = synth(a.work, a.scale, 3600.0, list(LAYOUTS))
    load_before = os.getloadavg()
    scratch = a.work / "out.csv"
    layouts: dict[str, Any] = {}
    for layout, name in LAYOUTS.items():
        path = data / name
        eng: list[dict[str, Any]] = []
        plain: list[dict[str, Any]] = []
        for trial in range(a.trials):
            order = ("engine", "plain") if trial % 2 == 0 else ("plain", "engine")
            for mode in order:
                r = child([mode, str(path), layout, "1", str(scratch)], threads=1)
                (eng if mode == "engine" else plain).append(r)
        e_s = statistics.median(r["seconds"] for r in eng)
        p_s = statistics.median(r["seconds"] for r in plain)
        flows = eng[0]["flows"]
        layouts[layout] = {
            "file_mb": path.stat().st_size / 1e6, "flows": flows,
            "engine_s": e_s, "plain_read_sort_s": p_s,
            "flows_per_s_one_core": flows / e_s, "ratio_to_plain": e_s / p_s,
            # whole commands, interpreter start and imports included (what a user waits for)
            "engine_wall_s": statistics.median(r["wall_s"] for r in eng),
            "plain_wall_s": statistics.median(r["wall_s"] for r in plain),
            "wall_ratio_to_plain": (statistics.median(r["wall_s"] for r in eng)
                                    / statistics.median(r["wall_s"] for r in plain)),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in eng),
            "plain_peak_rss_mb": max(r["peak_rss_mb"] for r in plain),
            "trials": {"engine": eng, "plain": plain},
        }
        # as users pay it: the whole `replay workload --jobs 1` command against polars' own
        # read of the columns the builder needs (a whole command too), alternating
        cli: list[dict[str, Any]] = []
        cols: list[dict[str, Any]] = []
        for trial in range(a.trials):
            for mode in (("cli", "columns") if trial % 2 == 0 else ("columns", "cli")):
                if mode == "cli":
                    cli.append(whole_command(command(path, 1, scratch), threads=1))
                else:
                    cols.append(whole_command(["-m", "bench.replay.ingest", "child", "columns",
                                               str(path), layout, "1", str(scratch)], 1))
        c_wall = statistics.median(r["wall_s"] for r in cli)
        f_wall = statistics.median(r["wall_s"] for r in cols)
        layouts[layout]["command"] = {
            "argv": "replay " + " ".join(command(path, 1, scratch)[3:]),
            "wall_s": c_wall, "wall_spread_s": [min(r["wall_s"] for r in cli),
                                                max(r["wall_s"] for r in cli)],
            "cpu_s": statistics.median(r["cpu_s"] for r in cli),
            "flows_per_s": flows / c_wall,
            "flows_per_cpu_s": flows / statistics.median(r["cpu_s"] for r in cli),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in cli),
            "columns_read_wall_s": f_wall,
            "columns_read_cpu_s": statistics.median(r["cpu_s"] for r in cols),
            "columns_read_peak_rss_mb": max(r["peak_rss_mb"] for r in cols),
            "ratio_to_columns_read": c_wall / f_wall,
            "trials": {"command": cli, "columns_read": cols},
        }
        cm = layouts[layout]["command"]
        print(f"bench/ingest: {layout}: whole command {c_wall:.2f} s wall "
              f"({flows / c_wall:,.0f} flows/s; CPU {cm['cpu_s']:.2f} s, "
              f"{cm['flows_per_cpu_s']:,.0f} flows per CPU-second), peak RSS "
              f"{cm['peak_rss_mb']:.0f} MB; polars reading the builder's columns "
              f"{f_wall:.2f} s (ratio {c_wall / f_wall:.2f})", flush=True)
        print(f"bench/ingest: {layout}: {flows:,} flows, engine {e_s:.2f} s "
              f"({flows / e_s:,.0f} flows/s, peak RSS {layouts[layout]['peak_rss_mb']:.0f} MB),"
              f" plain read+sort {p_s:.2f} s, ratio {e_s / p_s:.2f} (whole commands: "
              f"{layouts[layout]['wall_ratio_to_plain']:.2f})", flush=True)
    canon = data / LAYOUTS["canonical"]
    two_doc: dict[str, Any] | None = None
    oracle: dict[str, Any] | None = None
    if not a.no_extras:
        two = [child(["engine", str(canon), "canonical", "2", str(scratch)], threads=2)
               for _ in range(a.trials)]
        two_s = statistics.median(r["seconds"] for r in two)
        speedup = layouts["canonical"]["engine_s"] / two_s
        two_doc = {"seconds": two_s, "speedup": speedup, "trials": two}
        print(f"bench/ingest: canonical on 2 cores {two_s:.2f} s: speedup {speedup:.2f}x",
              flush=True)
        oracle = child(["rows", str(canon), "canonical", "1", str(scratch)], threads=1)
        print(f"bench/ingest: the per-row pipeline (test oracle) {oracle['seconds']:.2f} s "
              f"({oracle['flows'] / oracle['seconds']:,.0f} flows/s)", flush=True)
    big: dict[str, Any] | None = None
    if a.big_flows:
        hours = max(1.0, a.big_flows / (layouts["canonical"]["flows"] / a.scale))
        bdata = synth(a.work, 1.0, min(86400.0, 3600.0 * hours), ["canonical"])
        flows_file = bdata / LAYOUTS["canonical"]
        r = child(["engine", str(flows_file), "canonical", str(os.cpu_count() or 1),
                   str(a.work / "big.csv")], threads=os.cpu_count() or 1)
        big = {"flows": r["flows"], "file_gb": flows_file.stat().st_size / 1e9,
               "seconds": r["seconds"], "peak_rss_mb": r["peak_rss_mb"],
               "flows_per_s": r["flows"] / r["seconds"], "goal_rss_mb": GOAL_BIG_RSS_MB,
               "met": r["peak_rss_mb"] < GOAL_BIG_RSS_MB}
        print(f"bench/ingest: big trace {r['flows']:,} flows ({big['file_gb']:.1f} GB): "
              f"{r['seconds']:.0f} s, peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    scratch.unlink(missing_ok=True)
    canon_row = layouts["canonical"]
    doc = {
        "suite": "ingest", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average_before": load_before, "load_average": os.getloadavg()},
        "scale": a.scale, "trials": a.trials, "layouts": layouts,
        "two_cores": two_doc,
        "per_row_oracle": oracle, "big": big,
        "goals": {
            "flows_per_s_one_core": {"limit": GOAL_FLOWS_PER_S, "met": all(
                v["flows_per_s_one_core"] >= GOAL_FLOWS_PER_S for v in layouts.values())},
            "ratio_to_plain_read_sort": {"limit": GOAL_RATIO, "met": all(
                v["ratio_to_plain"] <= GOAL_RATIO for v in layouts.values())},
            "peak_rss_mb": {"limit": GOAL_RSS_MB,
                            "met": canon_row["peak_rss_mb"] < GOAL_RSS_MB},
        },
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"bench/ingest: wrote {a.out}")
    md = a.md if a.md is not None else results_path("docs/benchmarks.md")
    write_section(md, "ingest", "bench/replay/ingest.py", render_markdown(doc))
    print(f"bench/ingest: wrote its section of {md}")
    return 0


def render_markdown(doc: dict[str, Any]) -> str:
    """The ingest section of docs/benchmarks.md."""
    m = doc["machine"]
    lines = [
        "## Trace ingest (`replay workload`)",
        "",
        f"Run {doc['when']} on {m['cpus']} CPUs, Python {m['python']}, load average "
        f"{', '.join(f'{x:.2f}' for x in m['load_average'])}; the synthetic hour at scale "
        f"{doc['scale']:g}, median of {doc['trials']} trials, each in a fresh process. "
        "`bench/results/ingest.json` has every trial.",
        "",
        "| Layout | File MB | Flows | Engine s | Flows/s, 1 core | Plain read+sort s "
        "| Ratio | Ratio, whole commands | Peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, v in doc["layouts"].items():
        lines.append(
            f"| {name} | {v['file_mb']:.0f} | {v['flows']:,} | {v['engine_s']:.2f} | "
            f"{v['flows_per_s_one_core']:,.0f} | {v['plain_read_sort_s']:.2f} | "
            f"{v['ratio_to_plain']:.2f} | {v.get('wall_ratio_to_plain', float('nan')):.2f} | "
            f"{v['peak_rss_mb']:.0f} |")
    two = doc["two_cores"]
    oracle = doc["per_row_oracle"]
    g = doc["goals"]
    lines += [
        "",
        "As users pay it, the whole `replay workload --jobs 1` command (interpreter start and "
        "imports included) against polars' own read of the columns the builder needs (a whole "
        "command too), median of the trials:",
        "",
        "| Layout | Command s | Flows/s | CPU s | Peak RSS MB | Column read s | Ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, v in doc["layouts"].items():
        c = v.get("command")
        if c:
            lines.append(f"| {name} | {c['wall_s']:.2f} | {c['flows_per_s']:,.0f} | "
                         f"{c['cpu_s']:.2f} | {c['peak_rss_mb']:.0f} | "
                         f"{c['columns_read_wall_s']:.2f} | {c['ratio_to_columns_read']:.2f} |")
    cmds = [v["command"] for v in doc["layouts"].values() if v.get("command")]
    if cmds:
        fast = all(c["flows_per_s"] >= GOAL_FLOWS_PER_S for c in cmds)
        small = all(c["peak_rss_mb"] <= GOAL_COMMAND_RSS_MB for c in cmds)
        lines += ["", f"Goal of {GOAL_FLOWS_PER_S:,} flows/s for the whole command in every "
                  f"layout: {'met' if fast else 'NOT met'}; peak RSS <= {GOAL_COMMAND_RSS_MB} "
                  f"MB: {'met' if small else 'NOT met'}."]
    lines += [
        "",
        "Ratio: the engine's time over polars' own plain read of the same file sorted by start "
        "time, measured in the same run, each in a fresh process with its imports done before "
        "the clock starts; whole commands: the same two processes' wall times, interpreter start "
        "and imports included. The engine does much more than read and sort: it checks every "
        "field as the reference parser would, pairs directions, joins names, pseudonymises "
        "clients, simulates the client cache and writes the workload (the CSV write alone is "
        "about 0.04 s here). Goal <= "
        f"{g['ratio_to_plain_read_sort']['limit']:g}: "
        f"{'met' if g['ratio_to_plain_read_sort']['met'] else 'NOT met'}. Goal of "
        f"{g['flows_per_s_one_core']['limit']:,} flows/s on one core in every layout: "
        f"{'met' if g['flows_per_s_one_core']['met'] else 'NOT met'}; peak RSS under "
        f"{g['peak_rss_mb']['limit']} MB: {'met' if g['peak_rss_mb']['met'] else 'NOT met'}.",
    ]
    if two and oracle:
        lines += [
            "",
            f"Two cores (`--jobs 2`, canonical): {two['seconds']:.2f} s, "
            f"{two['speedup']:.2f}x one core. The per-row pipeline that is now the tests' "
            f"oracle: {oracle['seconds']:.2f} s "
            f"({oracle['flows'] / oracle['seconds']:,.0f} flows/s).",
        ]
    big = doc.get("big")
    if big:
        lines += ["", f"A long trace: {big['flows']:,} flows ({big['file_gb']:.1f} GB of CSV) in "
                  f"{big['seconds']:.0f} s on every core ({big['flows_per_s']:,.0f} flows/s), peak "
                  f"RSS {big['peak_rss_mb']:.0f} MB (goal < {big['goal_rss_mb']} MB: "
                  f"{'met' if big['met'] else 'NOT met'})."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
