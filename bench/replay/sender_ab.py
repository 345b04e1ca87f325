"""The sender's CPU per request against a baseline checkout, in alternating pairs.

    python -m bench.replay.sender_ab --baseline DIR [--pairs 8] [--rate 20000] [--busy]

Runs one step of ``bench/replay/bench_replayer.py`` (one sender, the trivial raw server, a
constant rate for ``--step-seconds``) from this tree and from ``DIR`` (another checkout of the
project, e.g. ``git worktree add /tmp/base HEAD~3``, or an exported tree with a
``BASELINE_COMMIT`` file), alternating, ``--pairs`` times; reports
the median and spread of the sender's CPU per request and of the send lateness p99 for each,
and their ratio. The host's speed drifts by 10-25% from one minute to the next, so only
paired runs in one sitting say what a change is worth. Results:
``bench/results/sender-ab.json`` (``var/results/`` unless recording).
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.paths import cpu_model, results_path  # noqa: E402
from bench.replay.ingest_command import _commit  # noqa: E402

RUN_TIMEOUT_S = 120.0


def one(tree: Path, rate: float, seconds: float, busy: bool, out: Path) -> dict[str, Any]:
    argv = [sys.executable, str(tree / "bench" / "replay" / "bench_replayer.py"), "--rates",
            f"{rate:g}", "--step-seconds", f"{seconds:g}", "--attempts", "1", "--out",
            str(out)] + (["--busy"] if busy else [])
    subprocess.run(argv, cwd=tree, check=True, timeout=RUN_TIMEOUT_S,
                   stdout=subprocess.DEVNULL)
    step: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))["steps"][0]
    return {"cpu_us": step["sender_cpu_us_per_request"], "p99_ms": step["dispatch_p99_ms"],
            "errors": step["errors"], "loadavg_1m": os.getloadavg()[0]}


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="another checkout")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--rate", type=float, default=20_000)
    ap.add_argument("--step-seconds", type=float, default=3.5)
    ap.add_argument("--busy", action="store_true", help="a CPU burner beside every run")
    ap.add_argument("--out", type=Path, default=results_path("bench/results/sender-ab.json"))
    a = ap.parse_args()
    base = a.baseline.resolve()
    if not (base / "bench" / "replay" / "bench_replayer.py").is_file():
        ap.error(f"{base} is not a checkout of this project")
    if not 1 <= a.pairs <= 50 or not 0 < a.step_seconds <= 30:
        ap.error("--pairs must be 1-50 and --step-seconds in (0, 30]")
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "baseline": []}
    started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.pairs):
            order = (("this", ROOT), ("baseline", base))
            for name, tree in order if i % 2 == 0 else reversed(order):
                r = one(tree, a.rate, a.step_seconds, a.busy, Path(tmp) / f"{name}{i}.json")
                runs[name].append(r)
                print(f"pair {i + 1}/{a.pairs} {name:8s} CPU {r['cpu_us']:5.1f} us/request "
                      f"p99 {r['p99_ms']:6.2f} ms", flush=True)
    figs = {k: {"cpu_us": spread([r["cpu_us"] for r in v]),
                "p99_ms": spread([r["p99_ms"] for r in v])} for k, v in runs.items()}
    ratio = figs["this"]["cpu_us"]["median"] / figs["baseline"]["cpu_us"]["median"]
    base_commit, this_commit = _commit(base), _commit(ROOT)
    doc = {"benchmark": "sender-ab", "started_at": started,
           "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
           "commit": this_commit, "baseline_commit": base_commit, "rate": a.rate,
           "step_seconds": a.step_seconds, "busy": a.busy, "pairs": a.pairs,
           "machine": {"cpus": os.cpu_count(), "cpu": cpu_model()},
           "figures": figs, "cpu_ratio_this_to_baseline": ratio, "runs": runs}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    for k in ("this", "baseline"):
        c, p = figs[k]["cpu_us"], figs[k]["p99_ms"]
        print(f"{k:8s}: CPU {c['median']:.2f} us/request ({c['min']:.1f}-{c['max']:.1f}), "
              f"p99 {p['median']:.2f} ms ({p['min']:.2f}-{p['max']:.2f})")
    print(f"CPU per request, this / baseline: {ratio:.3f} -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
