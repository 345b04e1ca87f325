"""Why polars: the workload's core query in polars and in DuckDB, on one core, same file.

    python -m bench.replay.engines [--scale 0.1] [--trials 3]

Both engines run, each in a fresh process limited to one thread: (1) a plain read of the
synthetic hour's canonical CSV sorted by start time, and (2) the workload's core: keep TCP to
port 443, join the address-to-name map, sort by time, mark the first flow of each (client,
host, port). Results: ``bench/results/engines.json``; docs/replay.md cites them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.paths import results_path  # noqa: E402
from bench.replay.ingest import synth  # noqa: E402


def run(engine: str, task: str, flows: Path) -> float:
    names = flows.parent / "names.csv"
    if engine == "polars":  # imports are not timed (polars ~0.1 s, DuckDB ~0.1 s)
        import polars as pl

        t0 = time.perf_counter()
        lf = pl.scan_csv(flows)
        if task == "read-sort":
            lf.sort("start").collect()
        else:
            m = pl.scan_csv(names, has_header=False, new_columns=["dst", "host"])
            (lf.filter((pl.col("proto") == 6) & (pl.col("dport") == 443))
             .join(m, on="dst", how="inner").sort("start")
             .with_columns((pl.int_range(pl.len()).over(["src", "host", "dport"]) == 0)
                           .alias("request")).collect())
    else:
        import duckdb

        t0 = time.perf_counter()
        con = duckdb.connect()
        con.execute("SET threads = 1")
        if task == "read-sort":
            con.execute(f"SELECT * FROM read_csv('{flows}') ORDER BY start").to_arrow_table()
        else:
            con.execute(f"""
                SELECT f.*, row_number() OVER (PARTITION BY f.src, m.host, f.dport
                                               ORDER BY f.start) = 1 AS request
                FROM read_csv('{flows}') f
                JOIN read_csv('{names}', header = false, names = ['dst', 'host']) m
                  ON f.dst = m.dst
                WHERE f.proto = 6 AND f.dport = 443 ORDER BY f.start""").to_arrow_table()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["child"]:
        print(json.dumps({"seconds": run(args[1], args[2], Path(args[3]))}))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "bench-ingest")
    ap.add_argument("--out", type=Path, default=results_path("bench/results/engines.json"))
    a = ap.parse_args(args)
    a.work.mkdir(parents=True, exist_ok=True)
    data = synth(a.work, a.scale, 3600.0, ["canonical"])
    names_csv = data / "names.csv"
    if not names_csv.exists():
        names_csv.write_text("".join(
            line.replace(" ", ",", 1) for line in (data / "names.txt").open()
            if not line.startswith("#")))
    env = dict(os.environ, POLARS_MAX_THREADS="1")
    py = str(ROOT / ".venv" / "bin" / "python")
    results: dict[str, Any] = {}
    for task in ("read-sort", "workload-core"):
        for engine in ("polars", "duckdb"):
            times = []
            for _ in range(a.trials):
                out = subprocess.run([py, "-m", "bench.replay.engines", "child", engine, task,
                                      str(data / "flows.csv")], capture_output=True, text=True,
                                     env=env, cwd=ROOT, timeout=600, check=True)
                times.append(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])
            results[f"{engine} {task}"] = {"seconds": statistics.median(times),
                                           "trials": times}
            print(f"bench/engines: {engine:6} {task:14} {statistics.median(times):.2f} s",
                  flush=True)
    doc = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "scale": a.scale,
           "file_mb": (data / "flows.csv").stat().st_size / 1e6,
           "load_average": os.getloadavg(), "results": results}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
