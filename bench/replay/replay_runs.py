"""The replayer's goal over separate runs, quiet and busy.

    python -m bench.replay.replay_runs [--runs 3] [--rates ...] [--step-seconds 3]

Runs ``bench/replay/bench_replayer.py`` (one open-loop sender against the trivial raw server,
a ladder of rates, one attempt per rate: no best-of) ``--runs`` times per condition as separate
processes, the conditions alternating: quiet; "busy", a CPU burner beside (``--busy``), every
process where the scheduler puts it; and "busy-own-core", the same burner with the sender on a
CPU of its own, the burner and the server sharing the other. Reports per condition the median
and spread of: the highest rate up to which every rate kept the send lateness p99 under
10 ms, the lateness p99 at the goal rate (20,000/s) and the sender's and the server's CPU per
request there. The load average is recorded before and after every run. Results:
``bench/results/replay-runs.json`` and its section of ``docs/benchmarks.md``
(``var/results/`` unless recording).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.paths import machine, results_path, where, write_section  # noqa: E402

GOAL_RATE = 20_000.0
GOAL_P99_MS = 10.0
RATES = "8000,12000,16000,20000,24000,28000"
RUN_TIMEOUT_S = 300.0
CONDITIONS = ("quiet", "busy")
# the replayer's conditions: bench_replayer.py's arguments for each
REPLAY_CONDITIONS: dict[str, tuple[str, ...]] = {
    "quiet": (),
    "busy": ("--busy",),
    # the same burner with the sender on a CPU of its own: the burner and the stand-in
    # notary (which a real run finds on another machine) share the other CPU
    "busy-own-core": ("--busy", "--placement", "server-with-burner"),
}


def one_run(condition: str, rates: str, step_seconds: float, out: Path,
            senders: int = 1) -> dict[str, Any]:
    argv = [sys.executable, str(ROOT / "bench" / "replay" / "bench_replayer.py"),
            "--rates", rates, "--step-seconds", f"{step_seconds:g}", "--attempts", "1",
            "--senders", str(senders),
            "--all-rates", "--p99-limit-ms", f"{GOAL_P99_MS:g}", "--out", str(out)]
    argv += REPLAY_CONDITIONS[condition]
    subprocess.run(argv, cwd=ROOT, check=True, timeout=RUN_TIMEOUT_S)
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return doc


def at_goal(doc: dict[str, Any]) -> dict[str, Any] | None:
    for step in doc.get("steps", []):
        if step["rate"] == GOAL_RATE:
            return dict(step)
    return None


def run_figures(doc: dict[str, Any]) -> dict[str, Any]:
    """The figures of one run: what the table reports, plus its load."""
    goal = at_goal(doc)
    return {
        "sustained_rate": doc["max_rate_all_lower_rates_also_under_limit"],
        "p99_ms_at_goal": None if goal is None else goal["dispatch_p99_ms"],
        "wire_p99_ms_at_goal": None if goal is None else goal["wire_p99_ms"],
        "errors_at_goal": None if goal is None else goal["errors"],
        "sender_cpu_us_at_goal": None if goal is None else goal["sender_cpu_us_per_request"],
        "server_cpu_us_at_goal": None if goal is None else goal.get("server_cpu_us_per_request"),
        "loadavg_before": doc.get("loadavg_before"), "loadavg_after": doc.get("loadavg_after"),
    }


def spread(xs: Sequence[float | None]) -> dict[str, float] | None:
    vals = [x for x in xs if x is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals)}


def aggregate(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cond, docs in runs.items():
        figs = [run_figures(d) for d in docs]
        agg: dict[str, Any] = {k: spread([f[k] for f in figs]) for k in
               ("sustained_rate", "p99_ms_at_goal", "wire_p99_ms_at_goal",
                "sender_cpu_us_at_goal", "server_cpu_us_at_goal")}
        p99 = agg["p99_ms_at_goal"]
        rate = agg["sustained_rate"]
        errors = sum(f["errors_at_goal"] or 0 for f in figs)
        agg["met"] = bool(p99 and rate and p99["median"] < GOAL_P99_MS
                          and rate["median"] >= GOAL_RATE and errors == 0)
        agg["errors_at_goal"] = errors
        agg["runs"] = figs
        out[cond] = agg
    return out


def _fmt(s: dict[str, float] | None, pattern: str) -> str:
    if s is None:
        return "-"
    return (f"{pattern.format(s['median'])} ({pattern.format(s['min'])}-"
            f"{pattern.format(s['max'])})")


def _senders(doc: dict[str, Any]) -> str:
    n = int(doc.get("senders", 1))
    return ("one sender, its events in memory" if n == 1 else
            f"{n} sender processes of `replay run --senders {n}`, each reading the workload "
            "file")


def render(doc: dict[str, Any]) -> str:
    conds = doc["conditions"]
    lines = [
        "## The replayer over separate runs, quiet and busy",
        "",
        f"Run {doc['started_at']} to {doc['finished_at']} at commit {doc['commit']} on "
        f"{doc['machine']['cpus']} CPUs ({doc['machine']['cpu']}{where(doc['machine'])}), Python "
        f"{doc['machine']['python']}: {doc['runs_per_condition']} separate runs of "
        f"`bench/replay/bench_replayer.py` per condition (rates {doc['rates']} per second, "
        f"{doc['step_seconds']:g} s each, one attempt per rate, {_senders(doc)} and the trivial "
        "raw server in a process of its own); *busy* runs a CPU burner (one process in a busy "
        "loop, bounded in time) beside the whole run, all three processes where the scheduler "
        "puts them"
        + ("; *busy-own-core* runs the same burner with the sender pinned to CPU 0 and the "
           "burner and the server to CPU 1 (`--placement server-with-burner`): a replayer on a "
           "busy machine whose notary runs elsewhere" if "busy-own-core" in conds else "")
        + ". Lateness is the time a request was handed to the socket minus its scheduled "
        "time. `bench/results/replay-runs.json` has every run and every step.",
        "",
        "| Figure | Goal | " + " | ".join(f"{c.capitalize()}: median (min-max) | Met"
                                         for c in conds) + " |",
        "|---|---:|" + "---:|---|" * len(conds),
    ]

    def met(agg: dict[str, Any], key: str, ok: Any) -> str:
        s = agg[key]
        return "-" if s is None else ("yes" if ok(s["median"]) else "**no**")

    rows = [
        ("highest rate with every rate up to it under the p99 limit (/s)",
         f"≥ {GOAL_RATE:,.0f}", "sustained_rate", "{:,.0f}", lambda v: v >= GOAL_RATE),
        (f"send lateness p99 at {GOAL_RATE:,.0f}/s (ms)", f"< {GOAL_P99_MS:g}",
         "p99_ms_at_goal", "{:.2f}", lambda v: v < GOAL_P99_MS),
        (f"on the wire, lateness p99 at {GOAL_RATE:,.0f}/s (ms)", "-",
         "wire_p99_ms_at_goal", "{:.2f}", None),
        (f"sender CPU per request at {GOAL_RATE:,.0f}/s (µs)", "-", "sender_cpu_us_at_goal",
         "{:.1f}", None),
        (f"the server's CPU per request at {GOAL_RATE:,.0f}/s (µs)", "-",
         "server_cpu_us_at_goal", "{:.1f}", None),
    ]
    for label, goal, key, pat, ok in rows:
        lines.append(f"| {label} | {goal} | " + " | ".join(
            f"{_fmt(c.get(key), pat)} | {'-' if ok is None else met(c, key, ok)}"
            for c in conds.values()) + " |")
    lines += ["", f"Errors at {GOAL_RATE:,.0f}/s: " + ", ".join(
        f"{name} {c['errors_at_goal']}" for name, c in conds.items())
        + ". Load average (1, 5, 15 min) before / after each run:"]
    for cond, c in conds.items():
        for i, r in enumerate(c["runs"], 1):
            before = ", ".join(f"{x:.2f}" for x in r["loadavg_before"] or [])
            after = ", ".join(f"{x:.2f}" for x in r["loadavg_after"] or [])
            lines.append(f"* {cond} run {i}: {before} / {after}")
    return "\n".join(lines) + "\n"


def alternate(label: str, count: int, one: Callable[[str, Path], dict[str, Any]],
              conditions: Sequence[str] = CONDITIONS) -> dict[str, list[dict[str, Any]]]:
    """``count`` runs per condition of ``one(condition, result file)``, the conditions
    alternating (forward, then backward) so that all see the same drift of the machine."""
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in conditions}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(count):
            order = tuple(conditions) if i % 2 == 0 else tuple(reversed(conditions))
            for n, cond in enumerate(order):
                print(f"bench/{label}: {cond} run {i + 1}/{count}", flush=True)
                runs[cond].append(one(cond, Path(tmp) / f"{i}-{n}.json"))
    return runs


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="separate runs per condition")
    ap.add_argument("--rates", default=RATES)
    ap.add_argument("--step-seconds", type=float, default=3.0)
    ap.add_argument("--senders", type=int, default=1,
                    help="sender processes (replay run --senders; default: %(default)s)")
    ap.add_argument("--out", type=Path, default=results_path("bench/results/replay-runs.json"))
    ap.add_argument("--md", type=Path, default=results_path("docs/benchmarks.md"))
    a = ap.parse_args(argv)
    if a.runs < 1 or not 0 < a.step_seconds <= 30:
        ap.error("--runs must be at least 1 and --step-seconds in (0, 30]")
    started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    conditions_run = tuple(REPLAY_CONDITIONS)
    if len(os.sched_getaffinity(0)) < 2:  # nothing to pin to: the busy-own-core needs two
        conditions_run = CONDITIONS
        print("bench/replay-runs: one usable CPU, so no busy-own-core condition", flush=True)
    runs = alternate("replay-runs", a.runs, lambda cond, out: one_run(
        cond, a.rates, a.step_seconds, out, a.senders), conditions_run)
    conditions = aggregate(runs)
    result = {
        "benchmark": "replay-runs", "started_at": started,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "commit": _commit(), "rates": a.rates, "step_seconds": a.step_seconds,
        "runs_per_condition": a.runs, "senders": a.senders,
        "machine": machine(),
        "goal": {"rate": GOAL_RATE, "p99_ms": GOAL_P99_MS},
        "conditions": conditions,
        "run_results": runs,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    write_section(a.md, "replay-runs", "bench/replay/replay_runs.py", render(result))
    for cond, c in conditions.items():
        print(f"{cond}: sustained {_fmt(c['sustained_rate'], '{:,.0f}')}/s, p99 at "
              f"{GOAL_RATE:,.0f}/s {_fmt(c['p99_ms_at_goal'], '{:.2f}')} ms, goal "
              f"{'met' if c['met'] else 'NOT met'}", flush=True)
    print(f"bench/replay-runs: wrote {a.out} and its section of {a.md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
