"""The synthetic university hour against one notary on this machine, recorded as the
project's figures.

``replay reproduce`` does the work (synth -> farm -> notary -> workload -> open-loop run ->
report -> the CA-vs-perspectives scores; no worlds, no client benchmark here); this script
keeps its report (summaries and figures) under ``bench/results/<name>/`` and a JSON summary,
side by side with the study, in ``bench/results/<name>.json`` (``var/results/...`` unless
recording); the per-site files go to ``var/bulk/<name>/``.

Scale 1 at speed 1 is the study's hour (~574k notary requests, ~1 h). A time-compressed
equivalent: ``--scale 0.25 --duration 3600 --speed 4`` keeps the notary's request rate while
shortening the run 4x (fewer clients and sites, so cache behaviour differs a little).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.paths import bulk_path, keep_results, results_path  # noqa: E402
from replay.reproduce import ReproduceConfig, reproduce  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.05)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "replay-hour")
    ap.add_argument("--out", type=Path, default=results_path("bench/results"))
    ap.add_argument("--name", default="replay-hour",
                    help="results go to OUT/NAME/ (report) and OUT/NAME.json")
    a = ap.parse_args()
    if a.work.exists():
        shutil.rmtree(a.work)
    rc = reproduce(ReproduceConfig(out=a.work, scale=a.scale, duration=a.duration,
                                   speed=a.speed, seed=a.seed, worlds=(),
                                   client_bench=False))
    if rc != 0:
        return rc
    rep = a.out / a.name
    bulk = keep_results(a.work / "report", rep, bulk_path(a.name))
    shutil.copy(a.work / "reproduce.md", rep / "reproduce.md")
    if (a.work / "compare" / "comparison.json").exists():  # the summary (separating.csv: bulk)
        shutil.copy(a.work / "compare" / "comparison.json", rep / "comparison.json")
        bulk += keep_results(a.work / "compare", a.work / "compare-summary", bulk_path(a.name))
    report = json.loads((rep / "report.json").read_text())
    n = max(1, report["requests"])
    o = report["outcomes"]
    summary = {
        "benchmark": "replay-synthetic-hour",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "scale": a.scale, "duration": a.duration, "speed": a.speed, "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "requests": report["requests"], "client_hits": report["client_hits"],
        "mean_requests_per_s": report["mean_requests_per_s"],
        "share_answered": (o["200"] + o["409"] + o["503"]) / n,
        "share_200": o["200"] / n, "share_409": o["409"] / n, "share_503": o["503"] / n,
        "share_dropped": o["connection-error"] / n, "share_timeout": o["client-timeout"] / n,
        "layers": report["layers"], "time_to_level": report["time_to_level"],
        "min_hold_seconds": report["min_hold_seconds"],
        "latency_ms": report["latency_ms"], "lateness_p99_ms": report["lateness_p99_ms"],
        "overhead": report["overhead"], "stages": report["stages"],
        "per_site_files": [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
                           for p in bulk],
        "study": {"share_202": 0.74, "share_503": 0.20, "share_dropped": 0.06,
                  "share_timeout": 0.001, "mean_requests_per_s": 160,
                  "layers": {"client": 0.77, "notary-hit": 0.21, "notary-miss": 0.01}},
    }
    (a.out / f"{a.name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "stages"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
