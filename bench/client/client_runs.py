"""The clients' goal over separate runs, quiet and busy: Python and a compiled one (Go).

    python -m bench.client.client_runs [--runs 3] [--quick] [--no-go]

Runs ``bench/client/bench_client.py`` ``--runs`` times as separate processes on a quiet
machine and as many times with a CPU burner beside (one process in a busy loop, bounded in
time), the two kinds alternating run by run so both see the same stretch of a shared
machine. Reports per condition the median and spread (min-max) of the paired figures
(medians of per-round ratios over a bare legacy TLS request to the same notary, measured in
the same run): ``Client.check()`` with no local verdict on the connection kept from the
previous check (the default) and on a new connection every time, each against the goal of
1.3. The Go client's paired benchmark (``BenchmarkNotaryRoundTripPaired`` in
``client-libs/go``, against a real ``notary serve``, measured the same way: its checks and
the bare TLS request in turn, medians of per-round ratios) runs as many times per condition,
each a separate process of one test binary built first, in the same alternation. The load
average is recorded before and after every run. Results:
``bench/results/client-runs.json`` and its section of ``docs/benchmarks.md``
(``var/results/`` unless recording).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.notary.run import BURNER  # noqa: E402
from bench.paths import machine, results_path, where, write_section  # noqa: E402

GOAL = 1.3
CONDITIONS = ("quiet", "busy")
RUN_TIMEOUT_S = 300.0
BURNER_LIMIT_S = RUN_TIMEOUT_S  # the burner stops by itself even if this process dies
# bench_client.py's ratio name -> the figure's name here
FIGURES = {
    "one_notary_over_raw_request_paired": "check_over_bare_legacy_request",
    "one_notary_new_connection_over_raw_request_paired":
        "check_new_connection_over_bare_legacy_request",
    "one_notary_legacy_over_raw_request_paired": "legacy_check_over_bare_legacy_request",
    "one_notary_over_raw_extended_request_paired": "check_over_bare_extended_request",
    "raw_extended_request_over_raw_request_paired": "bare_extended_over_bare_legacy_request",
    "raw_resumed_request_over_raw_request_paired": "bare_resumed_over_bare_legacy_request",
}
# the Go benchmark's metric -> the same figure's name (its checks: ExtendedPrefer, the
# default of a bundle that offers it, on the kept connection or a new one; ExtendedOff)
GO_FIGURES = {
    "ratio-extended": "check_over_bare_legacy_request",
    "ratio-extended-new-connection": "check_new_connection_over_bare_legacy_request",
    "ratio-legacy": "legacy_check_over_bare_legacy_request",
    "ratio-raw-extended": "bare_extended_over_bare_legacy_request",
    "ratio-raw-extended-resumed": "bare_resumed_over_bare_legacy_request",
}
GO_DIR = ROOT / "client-libs" / "go"
GO_ROUNDS, GO_ROUNDS_QUICK = 300, 50
GOAL_FIGURES = {
    "check_over_bare_legacy_request": "check (kept connection)",
    "check_new_connection_over_bare_legacy_request": "check on a new connection",
}


def run_figures(doc: dict[str, Any]) -> dict[str, Any]:
    """One bench_client.py result reduced to this runner's figures and its load."""
    ratios = doc.get("ratios") or {}
    machine = doc.get("machine") or {}
    out: dict[str, Any] = {
        "when": doc.get("when"),
        "loadavg_before": [round(x, 2) for x in machine.get("loadavg_before", [])],
        "loadavg_after": [round(x, 2) for x in machine.get("loadavg_after", [])],
    }
    for src, name in FIGURES.items():
        if src in ratios:
            out[name] = ratios[src]
    return out


def summarise(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max of every figure the runs have (each over the runs that have it)."""
    out: dict[str, Any] = {"runs": list(runs)}
    for name in FIGURES.values():
        values = [r[name] for r in runs if name in r]
        if values:
            out[name] = {"median": statistics.median(values), "min": min(values),
                         "max": max(values), "runs": len(values)}
    return out


def one_run(busy: bool, quick: bool, out: Path) -> dict[str, Any]:
    argv = [sys.executable, str(ROOT / "bench" / "client" / "bench_client.py"), "--out", str(out)]
    if quick:
        argv.append("--quick")
    burner = (subprocess.Popen([sys.executable, "-c", BURNER, f"{BURNER_LIMIT_S:g}"])
              if busy else None)
    try:
        subprocess.run(argv, cwd=ROOT, check=True, timeout=RUN_TIMEOUT_S,
                       stdout=subprocess.DEVNULL)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return run_figures(doc)


def go_figures(output: str) -> dict[str, float]:
    """The paired ratios from ``go test -bench NotaryRoundTripPaired`` output (its one result
    line: name, rounds, then value-metric pairs)."""
    for line in output.splitlines():
        f = line.split()
        if f and f[0].startswith("BenchmarkNotaryRoundTripPaired"):
            metrics = dict(zip(f[3::2], f[2::2], strict=False))
            return {name: float(metrics[src]) for src, name in GO_FIGURES.items()
                    if src in metrics}
    raise RuntimeError("no BenchmarkNotaryRoundTripPaired line in the Go benchmark's output")


def go_binary(into: Path) -> Path | None:
    """The Go client's test binary, built once (None, said, when Go is not installed)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).is_file() or not (GO_DIR / "go.mod").is_file():
        print("client-runs: Go not found; the Go client's runs are skipped "
              "(scripts/install-system-deps installs it)", flush=True)
        return None
    exe = into / "converge-go.test"
    subprocess.run([go, "test", "-c", "-o", str(exe), "."], cwd=GO_DIR, check=True,
                   timeout=RUN_TIMEOUT_S)
    return exe


def one_go_run(busy: bool, quick: bool, exe: Path) -> dict[str, Any]:
    rounds = GO_ROUNDS_QUICK if quick else GO_ROUNDS
    env = {**os.environ, "CONVERGE_BENCH_REAL": "1",
           "NOTARY": str(ROOT / ".venv" / "bin" / "notary")}
    before = [round(x, 2) for x in os.getloadavg()]
    burner = (subprocess.Popen([sys.executable, "-c", BURNER, f"{BURNER_LIMIT_S:g}"])
              if busy else None)
    try:
        done = subprocess.run([str(exe), "-test.run", "^$", "-test.bench",
                               "^BenchmarkNotaryRoundTripPaired$", "-test.benchtime",
                               f"{rounds}x"], cwd=GO_DIR, env=env, check=True,
                              timeout=RUN_TIMEOUT_S, capture_output=True, text=True)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    return {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_before": before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "rounds": rounds, **go_figures(done.stdout)}


def _goal_rows(doc: dict[str, Any], client: str) -> list[str]:
    rows = []
    for name, title in GOAL_FIGURES.items():
        cells = []
        for cond in CONDITIONS:
            s = doc[cond].get(name)
            cells.append("-" if s is None else
                         f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})")
        rows.append(f"| {client} | {title} / bare TLS request | {cells[0]} | {cells[1]} "
                    f"| <= {GOAL:g} |")
    return rows


def markdown(doc: dict[str, Any]) -> str:
    go = doc.get("go")
    lines = [
        "## The clients over separate runs, quiet and busy",
        "",
        f"`python -m bench.client.client_runs`: `bench/client/bench_client.py` run "
        f"{doc['runs_per_condition']} times quiet and as many with a CPU burner on the other "
        "core, alternating; medians of per-round ratios over a bare legacy TLS request to the "
        f"same notary (min-max over the runs). "
        + ("The compiled client is Go: `BenchmarkNotaryRoundTripPaired` (client-libs/go), "
           f"{go['rounds']} rounds per run, run as often per condition in the same alternation, "
           "measured the same way against a real `notary serve` (its bare request is Go's own "
           "TLS connect, legacy request and read). " if go else "")
        + f"{doc['machine']['cpu']}, {doc['machine']['cpus']} CPUs{where(doc['machine'])}.",
        "",
        "| Client | Figure | Quiet | Busy | Goal |",
        "|---|---|---:|---:|---:|",
        *_goal_rows(doc, "Python"),
        *(_goal_rows(go, "Go") if go else []),
    ]
    loads = [r["loadavg_before"][0] for d in (doc, go or {}) for c in CONDITIONS
             for r in d.get(c, {}).get("runs", []) if r["loadavg_before"]]
    if loads:
        lines += ["", f"Load average (1 min) before the runs: {min(loads):.2f}-{max(loads):.2f}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="separate runs per condition")
    ap.add_argument("--quick", action="store_true",
                    help=f"bench_client.py --quick, {GO_ROUNDS_QUICK} Go rounds")
    ap.add_argument("--no-go", action="store_true", help="the Python client only")
    ap.add_argument("--out", type=Path,
                    default=results_path("bench/results/client-runs.json"))
    ap.add_argument("--md", type=Path, default=results_path("docs/benchmarks.md"))
    args = ap.parse_args(argv)
    if not 1 <= args.runs <= 10:
        ap.error("--runs must be 1 to 10")
    got: dict[str, list[dict[str, Any]]] = {c: [] for c in CONDITIONS}
    got_go: dict[str, list[dict[str, Any]]] = {c: [] for c in CONDITIONS}
    with tempfile.TemporaryDirectory(prefix="converge-client-runs-") as t:
        exe = None if args.no_go else go_binary(Path(t))
        for i in range(args.runs):
            for cond in CONDITIONS if i % 2 == 0 else CONDITIONS[::-1]:
                busy = cond == "busy"
                figs = [("python", got, one_run(busy, args.quick, Path(t) / f"{cond}{i}.json"))]
                if exe is not None:
                    figs.append(("go", got_go, one_go_run(busy, args.quick, exe)))
                for client, into, fig in figs:
                    into[cond].append(fig)
                    shown = fig.get("check_new_connection_over_bare_legacy_request")
                    print(f"run {i + 1}/{args.runs} {cond} {client}: kept connection "
                          f"{fig.get('check_over_bare_legacy_request')}, new connection "
                          f"{shown}; load {fig['loadavg_before'][:1]} -> "
                          f"{fig['loadavg_after'][:1]}", flush=True)
    doc: dict[str, Any] = {
        "suite": "client-runs",
        "what": "bench/client/bench_client.py run separately per condition, the conditions "
                "alternating run by run (quiet; busy: a CPU burner beside); per figure the "
                "median, min and max of the runs' paired ratios (medians of per-round ratios "
                "over a bare legacy TLS request to the same notary)",
        "goal": GOAL,
        "runs_per_condition": args.runs,
        "quick": args.quick,
        "machine": machine(),
        **{c: summarise(got[c]) for c in CONDITIONS},
    }
    if any(got_go.values()):
        doc["go"] = {"rounds": GO_ROUNDS_QUICK if args.quick else GO_ROUNDS,
                     **{c: summarise(got_go[c]) for c in CONDITIONS}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    write_section(args.md, "client-runs", "bench/client/client_runs.py", markdown(doc))
    for client, d in (("python", doc), ("go", doc.get("go"))):
        for cond in CONDITIONS if d else ():
            for name, title in GOAL_FIGURES.items():
                s = d[cond].get(name)
                if s is None:
                    continue
                met = s["median"] <= GOAL
                print(f"{client} {cond}: {title} / bare TLS request {s['median']:g} "
                      f"({s['min']:g}-{s['max']:g}; goal <= {GOAL:g}): "
                      f"{'met' if met else 'NOT met'}")
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
