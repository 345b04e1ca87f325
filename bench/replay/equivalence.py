"""The columnar engine against the per-row pipeline (its test oracle) on whole synthetic hours.

The tests compare the two on ten-minute traces at scale 0.05 in every layout; this runs the
same comparison at the scales the ingest issue names (the study's hour at scale 0.1 and 1.0,
every CSV layout, the engine on every core), too long for ``make test``. For each trace it
records whether the workload files are byte for byte identical and which stage counters
differ (none, when it passes), with both builders' times. Results:
``bench/results/ingest-equivalence.json`` when recording, else under ``var/results/``.

    .venv/bin/python -m bench.replay.equivalence --scales 0.1 1.0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.paths import ROOT, results_path  # noqa: E402

LAYOUTS = {"canonical": "flows.csv", "nfdump-legacy": "flows-nfdump-legacy.csv",
           "nfdump-new": "flows-nfdump-new.csv"}
COMPARED = ("flows_read", "malformed", "paired", "reverse_only", "filtered_out",
            "late_dropped", "kept", "named", "unnamed_dropped", "client_cache_hits",
            "client_cache_evictions", "notary_requests", "ssl_bytes_kept", "ssl_bytes_named",
            "first_start", "last_start", "named_by")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def compare(flows: Path, names_path: Path, work: Path) -> dict[str, Any]:
    from replay import columnar
    from replay.ingest import ErrorLog, read_flows
    from replay.model import StageCounters
    from replay.reference import Namer, WorkloadConfig, build_workload
    from replay.workload import read_name_map, write_workload

    names = read_name_map(names_path)
    ref_out, eng_out = work / "reference.csv", work / "engine.csv"
    t0 = time.perf_counter()
    errors = ErrorLog()
    ref = StageCounters()
    write_workload(build_workload(read_flows([flows], errors), Namer(names), WorkloadConfig(),
                                  ref), ref_out)
    ref.malformed = errors.count
    ref_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    eng, rows = columnar.build([flows], eng_out, columnar.EngineConfig(
        jobs=os.cpu_count() or 1, name_map=names), ErrorLog())
    eng_s = time.perf_counter() - t0
    a, b = ref.as_dict(), eng.as_dict()
    differ = {k: [a[k], b[k]] for k in COMPARED if a[k] != b[k]}
    ref_sha, eng_sha = _digest(ref_out), _digest(eng_out)
    result = {"flows": eng.flows_read, "rows": rows, "identical_bytes": ref_sha == eng_sha,
              "sha256": eng_sha, "counters_differ": differ, "reference_s": ref_s,
              "engine_s": eng_s, "speedup": ref_s / eng_s if eng_s else None}
    ref_out.unlink(missing_ok=True)
    eng_out.unlink(missing_ok=True)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[0.1, 1.0])
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "bench-equivalence")
    ap.add_argument("--out", type=Path,
                    default=results_path("bench/results/ingest-equivalence.json"))
    a = ap.parse_args(argv)
    from replay.synth import SynthConfig, SyntheticTrace, write_synthetic

    runs: list[dict[str, Any]] = []
    for scale in a.scales:
        data = a.work / f"syn-{scale:g}-{a.duration:g}"
        if not all((data / f).exists() for f in LAYOUTS.values()):
            print(f"bench/equivalence: synthesising scale {scale:g} ...", flush=True)
            write_synthetic(SyntheticTrace(SynthConfig(seed=3, scale=scale,
                                                       duration=a.duration)),
                            data, list(LAYOUTS))
        for layout, name in LAYOUTS.items():
            r = compare(data / name, data / "names.txt", a.work)
            r.update(scale=scale, layout=layout)
            runs.append(r)
            verdict = ("identical" if r["identical_bytes"] and not r["counters_differ"]
                       else f"DIFFERENT (counters {sorted(r['counters_differ'])})")
            print(f"bench/equivalence: scale {scale:g} {layout}: {r['flows']:,} flows, "
                  f"{r['rows']:,} rows: {verdict}; reference {r['reference_s']:.1f} s, "
                  f"engine {r['engine_s']:.1f} s", flush=True)
    ok = all(r["identical_bytes"] and not r["counters_differ"] for r in runs)
    doc = {"suite": "ingest-equivalence",
           "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "duration": a.duration, "all_identical": ok, "runs": runs}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"bench/equivalence: {'all identical' if ok else 'DIFFERENCES'}; wrote {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
