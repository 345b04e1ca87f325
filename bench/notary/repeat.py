"""The notary's headline figures as the median of several separate runs, quiet and busy.

    python -m bench.notary.repeat [--runs 3] [--seconds 2] [--trials 3] [--no-busy]

Each run is a whole ``bench.notary.run`` (its own processes, target and trials) over the
scenarios below; ``--runs`` of them with the machine as it is ("quiet": nothing of ours
beside), then as many with a CPU burner beside ("busy", ``bench.notary.run --busy``).
Reported per condition: the median of the runs and their spread (min-max) for

* the notary's CPU per forced probe over the floor (goal <= 1.25), and the forced-probe rate
  over the target's raw handshakes (goal >= 0.80);
* cached keep-alive over the trivial aiohttp+uvloop app (goal >= 0.90 of issue 36);
* the transparency log's cost: cached and forced-probe rates with the log over ``--no-log``
  (goals >= 0.97 and >= 0.95), and the p99 a proof's wait for sequencing adds (<= 1.5 s);

with the load average before and after every run. Results: ``bench/results/notary-runs.json``
and a section of ``docs/benchmarks.md`` when recording, else under ``var/results/``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.notary import run as notary_run
from bench.notary.procs import BenchError
from bench.paths import results_path, where, write_section

SCENARIOS = ("cached_keepalive", "forced_probes", *notary_run.LOG_SCENARIOS)

Getter = Callable[[dict[str, Any]], float | None]


def _sc(doc: dict[str, Any], name: str, *path: str) -> float | None:
    cur: Any = (doc.get("scenarios") or {}).get(name)
    for p in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(p)
    return None if cur is None else float(cur)


def _floor_ratio(doc: dict[str, Any]) -> float | None:
    pg = doc.get("probe_goals") or {}
    v = ((pg.get("scenarios") or {}).get("forced_probes") or {}).get("floor_ratio")
    return None if v is None else float(v)


def _pg(doc: dict[str, Any], key: str) -> float | None:
    v = (doc.get("probe_goals") or {}).get(key)
    return None if v is None else float(v)


def _library_ratio(doc: dict[str, Any]) -> float | None:
    pg = doc.get("probe_goals") or {}
    v = ((pg.get("scenarios") or {}).get("forced_probes") or {}).get("library_floor_ratio")
    return None if v is None else float(v)


# figure key, title, getter, goal, at_most
FIGURES: list[tuple[str, str, Getter, float | None, bool]] = [
    ("probe_cpu_over_floor", "notary CPU per forced probe / floor", _floor_ratio, 1.25, True),
    ("probe_cpu_us", "notary CPU per forced probe (µs)",
     lambda d: _sc(d, "forced_probes", "notary", "server_cpu_us_per_request"), None, True),
    ("floor_us", "floor (µs)",
     lambda d: None if not d.get("probe_goals") else float(d["probe_goals"]["floor_us"]),
     None, True),
    ("probe_cpu_over_library", "notary CPU per forced probe / (probe library's handshake "
     "+ signature)", _library_ratio, None, True),
    ("library_handshake_us", "probe library's handshake alone (µs)",
     lambda d: _pg(d, "library_handshake_cpu_us"), None, True),
    ("probes_over_handshakes", "forced probes / target's raw handshakes",
     lambda d: _sc(d, "forced_probes", "compare", "ratio"), 0.80, False),
    ("cached_over_trivial", "cached keep-alive / trivial app",
     lambda d: _sc(d, "cached_keepalive", "compare", "ratio"), 0.90, False),
    ("cached_cpu_over_trivial", "cached keep-alive, CPU ratio (trivial / notary per request)",
     lambda d: _sc(d, "cached_keepalive", "compare", "cpu_ratio"), None, False),
    ("log_cached", "cached keep-alive, log on / --no-log",
     lambda d: _sc(d, "log_cached", "compare", "ratio"), 0.97, False),
    ("log_cached_cpu", "cached keep-alive, CPU ratio (--no-log / log on per request)",
     lambda d: _sc(d, "log_cached", "compare", "cpu_ratio"), None, False),
    ("log_probes", "forced probes, log on / --no-log",
     lambda d: _sc(d, "log_probes", "compare", "ratio"), 0.95, False),
    ("log_probes_cpu", "forced probes, CPU ratio (--no-log / log on per probe)",
     lambda d: _sc(d, "log_probes", "compare", "cpu_ratio"), None, False),
    ("proof_wait_added_p99_ms", "proof: p99 added by waiting for sequencing (ms)",
     lambda d: _sc(d, "log_proof_wait", "proof_wait", "added_p99_ms"), 1500.0, True),
]


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def aggregate(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and min-max over runs of every figure, and whether the median meets its goal."""
    out: dict[str, Any] = {}
    for key, title, get, goal, at_most in FIGURES:
        vals = [v for v in (get(d) for d in docs) if v is not None]
        if not vals:
            continue
        med = _median(vals)
        out[key] = {"title": title, "runs": vals, "median": med, "min": min(vals),
                    "max": max(vals), "goal": goal, "at_most": at_most,
                    "met": None if goal is None else (med <= goal if at_most else med >= goal)}
    return out


def _run_summary(doc: dict[str, Any]) -> dict[str, Any]:
    m = doc["machine"]
    return {"started_at": doc["started_at"], "finished_at": doc["finished_at"],
            "loadavg_before": m.get("loadavg_before"), "loadavg_after": m.get("loadavg_after"),
            "figures": {k: get(doc) for k, _, get, _, _ in FIGURES}}


def _load(xs: Sequence[float] | None) -> str:
    return "-" if not xs else "[" + ", ".join(f"{x:.2f}" for x in xs) + "]"


def _fmt(x: float, key: str) -> str:
    if key.endswith("_us") or key.endswith("_ms"):
        return f"{x:,.0f}"
    return f"{x:.2f}"


def render(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    lines = [
        "## The notary over separate runs, quiet and busy",
        "",
        f"Run {doc['started_at']} to {doc['finished_at']} at commit "
        f"{(doc.get('commit') or '?')[:12]} on {doc['machine'].get('nproc')} CPUs "
        f"({doc['machine'].get('cpu_model')}{where(doc['machine'])}): {s['runs']} separate runs of "
        f"`bench.notary.run` per condition, each {s['trials']} paired trials of {s['seconds']} s "
        f"per scenario and side (the proof-wait trials {max(s['seconds'], 3)} s); *busy* runs a "
        "CPU burner (one process in a busy loop, bounded in time) beside everything. "
        "`bench/results/notary-runs.json` has every run.",
        "",
        "| Figure | Goal | Quiet: median (min-max) | Met | Busy: median (min-max) | Met |",
        "|---|---:|---:|---|---:|---|",
    ]
    conds = doc["conditions"]
    for key, title, _, goal, at_most in FIGURES:
        cells = []
        for c in ("quiet", "busy"):
            f = (conds.get(c) or {}).get("aggregate", {}).get(key)
            if f is None:
                cells += ["-", "-"]
                continue
            cells.append(f"{_fmt(f['median'], key)} ({_fmt(f['min'], key)}-"
                         f"{_fmt(f['max'], key)})")
            cells.append("-" if f["met"] is None else ("yes" if f["met"] else "**no**"))
        g = "-" if goal is None else ("≤ " if at_most else "≥ ") + _fmt(goal, key)
        lines.append(f"| {title} | {g} | {' | '.join(cells)} |")
    lines += [
        "",
        "Rate ratios are medians of paired trials (notary next to its baseline, order "
        "flipping); CPU ratios are the baseline's CPU per request over the notary's, from "
        "`/proc`, and move much less with other load than rates do. *Quiet* means nothing of "
        "this benchmark's beside it; other work on the machine is not controlled: read the "
        "load averages below. The log's figures pair a notary with the log (the default) "
        "against the same configuration with `--no-log`. The proof wait: 8 clients each "
        "sending `/v2/answer` for never-asked names (every answer a live probe), half the "
        "trials with `\"transparency\": true`; the figure is the p99 of the answers with a "
        "proof minus the median without. The clients are closed-loop, so each new request "
        "starts just after the batch that released the previous one and waits nearly a "
        "whole `--log-interval`: the worst case, not the average.",
        "",
        "Load average (1, 5, 15 min) before / after each run:", ""]
    for c in ("quiet", "busy"):
        for i, r in enumerate((conds.get(c) or {}).get("runs", []), 1):
            lines.append(f"* {c} run {i}: {r['loadavg_before']} / {r['loadavg_after']}")
    tl = doc.get("tlog")
    if tl:
        seq = tl.get("sequencing") or {}
        big = tl.get("large_log") or {}
        cmd = "python -m bench.tlog.run" + (" --quick" if tl.get("quick") else "")
        rate = seq.get("sequence_entries_per_second", 0)
        lines += ["", f"Sequencing (`{cmd}`, {tl.get('date')}): {rate:,.0f} "
                  f"entries/s on one core into SQLite (goal ≥ 10,000), "
                  f"{seq.get('queue_and_sequence_entries_per_second', 0):,.0f}/s with queueing; "
                  f"a {big.get('entries', 0):,}-entry log written in "
                  f"{big.get('write_seconds', 0):.1f} s and verified end to end in "
                  f"{big.get('verify_seconds', 0):.1f} s, "
                  f"{big.get('bytes_per_entry', 0):.0f} bytes per entry on disk; load "
                  f"{_load(tl.get('machine', {}).get('load_before'))} / "
                  f"{_load(tl.get('machine', {}).get('load_after'))}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.notary.repeat", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=int, default=2)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--no-busy", action="store_true", help="only the quiet runs")
    p.add_argument("--tlog-json", help="a bench.tlog.run result to quote (default: the "
                   "results path's bench/results/tlog.json, if any)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--render", type=Path, metavar="JSON",
                   help="only rewrite the docs section from an earlier run's results file")
    args = p.parse_args(argv)
    if args.render is not None:
        doc = json.loads(args.render.read_text())
        write_section(results_path("docs/benchmarks.md"), "notary-runs",
                      "bench/notary/repeat.py", render(doc))
        return 0
    if not 1 <= args.runs <= 9 or not 1 <= args.seconds <= 30 or not 1 <= args.trials <= 20:
        p.error("--runs 1..9, --seconds 1..30, --trials 1..20")
    t0 = time.monotonic()
    started = notary_run._now()
    conditions: dict[str, Any] = {}
    machine: dict[str, Any] = {}
    for cond in ("quiet",) if args.no_busy else ("quiet", "busy"):
        docs = []
        for i in range(args.runs):
            notary_run._log(f"repeat: {cond} run {i + 1}/{args.runs}")
            opts = notary_run.Options(seconds=args.seconds, trials=args.trials,
                                      scenarios=SCENARIOS, out_json=None, out_md=None,
                                      busy=cond == "busy")
            try:
                docs.append(notary_run.run(opts))
            except BenchError as exc:
                print(f"bench/notary/repeat: {cond} run {i + 1} failed: {exc}", file=sys.stderr)
                return 1
            machine = docs[-1]["machine"]
        conditions[cond] = {"aggregate": aggregate(docs),
                            "runs": [_run_summary(d) for d in docs]}
    tl_path = (results_path("bench/results/tlog.json") if args.tlog_json is None
               else Path(args.tlog_json))
    tlog: dict[str, Any] | None = None
    try:
        tlog = json.loads(tl_path.read_text())
    except (OSError, ValueError):
        tlog = None
    if isinstance(tlog, dict):
        tlog["quick"] = (tlog.get("large_log") or {}).get("entries", 0) < 10_000_000
    else:
        tlog = None
    doc = {"schema": 1, "benchmark": "notary-runs", "started_at": started,
           "finished_at": notary_run._now(), "commit": notary_run._commit(),
           "machine": machine,
           "settings": {"runs": args.runs, "seconds": args.seconds, "trials": args.trials,
                        "scenarios": list(SCENARIOS)},
           "conditions": conditions, "tlog": tlog,
           "elapsed_seconds": round(time.monotonic() - t0, 1)}
    text = render(doc)
    print(text)
    if not args.no_write:
        out = results_path("bench/results/notary-runs.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")
        write_section(results_path("docs/benchmarks.md"), "notary-runs",
                      "bench/notary/repeat.py", text)
        notary_run._log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
