#!/usr/bin/env bash
# Benchmarks of the Go client: the local-cache hit and loopback round trips against three
# real `notary serve` processes, each next to its baseline measured in the same run. Prints
# the figures and ratios and writes bench-results.json (bounded: a fixed iteration count per
# benchmark).
#   client-libs/go/bench.sh [CACHE_ITERATIONS] [ROUND_TRIP_ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
# results: var/results/ unless CONVERGE_RECORD=1 (make bench-record), then this folder
if [ "${CONVERGE_RECORD:-}" = 1 ]; then RESULTS=bench-results.json; else
  mkdir -p "$ROOT/var/results/client-libs/go"; RESULTS="$ROOT/var/results/client-libs/go/bench-results.json"; fi
export PATH="$PATH:/usr/local/go/bin"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg); export LOAD_BEFORE
n_cache=${1:-20000}
n_rt=${2:-500}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench Cache -benchtime "${n_cache}x" . | tee "$out"
CONVERGE_BENCH_REAL=1 NOTARY="$ROOT/.venv/bin/notary" \
  go test -run '^$' -bench Notary -benchtime "${n_rt}x" . | tee -a "$out"
"$ROOT/.venv/bin/python" - "$out" "$RESULTS" <<'PY'
import json, os, re, sys, time
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"Benchmark(\S+?)-\d+\s+(\d+)\s+([\d.]+) ns/op\s+([\d.]+) p50-µs\s+([\d.]+) p99-µs", line)
    if m:
        rows[m[1]] = {"n": int(m[2]), "mean_us": float(m[3]) / 1000, "p50_us": float(m[4]),
                      "p99_us": float(m[5])}
    elif line.startswith("BenchmarkNotaryRoundTripPaired-"):
        # rounds, then "<value> <metric>" pairs: p50-µs-<check>, ratio-<check>
        f = line.split()
        rows["NotaryRoundTripPaired"] = {"n": int(f[1]), **{k: float(v) for v, k in zip(f[2::2], f[3::2])}}
def ratio(a, b):
    return round(rows[a]["p50_us"] / rows[b]["p50_us"], 2) if a in rows and b in rows else None
result = {
    "suite": "client-go",
    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()},
    "results": rows,
    "ratios_p50": {
        "cache_hit_vs_bare_select": ratio("CacheHit", "CacheBaselineBareSelect"),
        "reopen_per_validation_vs_cache_hit": ratio("CacheBaselineReopenPerValidation", "CacheHit"),
        "round_trip_vs_raw_tls_request": ratio("NotaryRoundTripOne", "NotaryRoundTripBaselineRawTLS"),
        "extended_vs_legacy_round_trip": ratio("NotaryRoundTripOneExtended", "NotaryRoundTripOne"),
    },
    # checks and bare TLS requests to the same notary in turn, median of per-round ratios
    "paired_ratios_median": {k.removeprefix("ratio-"): v for k, v in
                             rows.get("NotaryRoundTripPaired", {}).items() if k.startswith("ratio-")},
    "goal_paired_ratio": 1.3,
}
result["machine"]["loadavg_before"] = [float(x) for x in os.environ.get("LOAD_BEFORE", "").split()[:3]]
print(json.dumps(result["paired_ratios_median"], indent=2))
json.dump(result, open(sys.argv[2], "w"), indent=2)
print(json.dumps(result["ratios_p50"], indent=2))
PY
echo "wrote $RESULTS"
