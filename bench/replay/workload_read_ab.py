"""Reading a workload file (what ``replay run`` does per event while it sends), against a
baseline checkout, in alternating pairs.

    python -m bench.replay.workload_read_ab --baseline DIR [--pairs 6] [--rows 200000]

Writes one CSV workload of ``--rows`` events (the replayer benchmark's constant-rate events:
997 clients, 5,000 sites), then times reading it to the end with ``read_workload`` (best of 5
readings, the collector off) from this tree and from ``DIR``, each in a process of its own,
alternating. Reports the median and spread of microseconds per row for each and their ratio.
Results: ``bench/results/workload-read-ab.json`` (``var/results/`` unless recording).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.paths import cpu_model, results_path  # noqa: E402
from bench.replay.bench_replayer import workload  # noqa: E402
from bench.replay.ingest_command import _commit  # noqa: E402
from bench.replay.sender_ab import spread  # noqa: E402
from replay.workload import write_workload  # noqa: E402

RUN_TIMEOUT_S = 120.0
READINGS = 5

# run with the checkout as the working directory: its ``replay`` package comes first
_READ = """
import gc, json, sys, time
from pathlib import Path
import replay
from replay.workload import read_workload
gc.disable()
best = float("inf")
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    n = sum(1 for _ in read_workload(Path(sys.argv[1])))
    best = min(best, time.perf_counter() - t)
print(json.dumps({"us_per_row": best / n * 1e6, "rows": n, "package": replay.__file__}))
"""


def one(tree: Path, path: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", _READ, str(path), str(READINGS)], cwd=tree,
                          check=True, timeout=RUN_TIMEOUT_S, capture_output=True, text=True)
    got: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(got["package"]).resolve().is_relative_to(tree):
        raise SystemExit(f"{tree}: read with the replay package of {got['package']}")
    return {"us_per_row": got["us_per_row"], "rows": got["rows"],
            "loadavg_1m": os.getloadavg()[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="another checkout")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--out", type=Path,
                    default=results_path("bench/results/workload-read-ab.json"))
    a = ap.parse_args()
    base = a.baseline.resolve()
    if not (base / "replay" / "workload.py").is_file():
        ap.error(f"{base} is not a checkout of this project")
    if not 1 <= a.pairs <= 50 or not 1_000 <= a.rows <= 5_000_000:
        ap.error("--pairs must be 1-50 and --rows 1,000-5,000,000")
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "baseline": []}
    started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "workload.csv"
        write_workload(workload(20_000, a.rows / 20_000), path)
        for i in range(a.pairs):
            order = (("this", ROOT), ("baseline", base))
            for name, tree in order if i % 2 == 0 else reversed(order):
                r = one(tree, path)
                runs[name].append(r)
                print(f"pair {i + 1}/{a.pairs} {name:8s} {r['us_per_row']:.3f} us/row",
                      flush=True)
    figs = {k: spread([r["us_per_row"] for r in v]) for k, v in runs.items()}
    ratio = figs["this"]["median"] / figs["baseline"]["median"]
    doc = {"benchmark": "workload-read-ab", "started_at": started,
           "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
           "commit": _commit(ROOT), "baseline_commit": _commit(base), "rows": a.rows,
           "pairs": a.pairs, "readings_per_run": READINGS,
           "machine": {"cpus": os.cpu_count(), "cpu": cpu_model()},
           "figures": {"us_per_row": figs}, "ratio_this_to_baseline": ratio, "runs": runs}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    for k in ("this", "baseline"):
        f = figs[k]
        print(f"{k:8s}: {f['median']:.3f} us/row ({f['min']:.3f}-{f['max']:.3f})")
    print(f"reading a row, this / baseline: {ratio:.3f} -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
