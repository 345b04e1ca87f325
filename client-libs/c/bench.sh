#!/usr/bin/env bash
# Benchmarks of libconverge: the local-cache hit (next to a bare SELECT measured in the same
# run), a round trip to an in-process stand-in notary, and round trips (legacy and extended)
# to one real `notary serve` on loopback, asked about its own TLS port. Bounded: fixed
# iteration counts. Writes bench-results.json.
#   client-libs/c/bench.sh [CACHE_ITERATIONS] [ROUND_TRIP_ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
# results: var/results/ unless CONVERGE_RECORD=1 (make bench-record), then this folder
if [ "${CONVERGE_RECORD:-}" = 1 ]; then RESULTS=bench-results.json; else
  mkdir -p "$ROOT/var/results/client-libs/c"; RESULTS="$ROOT/var/results/client-libs/c/bench-results.json"; fi
n_cache=${1:-20000}
n_rt=${2:-300}
make -s build/bench_converge
tmp=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
out="$tmp/out.jsonl"
./build/bench_converge cache "$n_cache" | tee "$out"
./build/bench_converge standin "$n_rt" | tee -a "$out"
if [ -x "$ROOT/.venv/bin/notary" ]; then
  port=$("$ROOT/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$ROOT/.venv/bin/notary" serve --data-dir "$tmp/n" --listen "127.0.0.1:$port" \
    --allow-target 127.0.0.0/8 >"$tmp/notary.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    if "$ROOT/.venv/bin/python" - "$port" <<'PY' 2>/dev/null; then break; fi
import socket, ssl, sys
c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1) as s:
    with c.wrap_socket(s) as t:
        t.sendall(b"GET / HTTP/1.0\r\n\r\n"); assert t.recv(10)
PY
    sleep 0.2
  done
  "$ROOT/.venv/bin/notary" bundle --data-dir "$tmp/n" --host 127.0.0.1 --ssl-port "$port" \
    --name "Org Bench" -o "$tmp/ext.notary" >/dev/null
  fp=$(openssl x509 -in "$tmp/n/notary.pem" -noout -fingerprint -sha1 | cut -d= -f2)
  for mode in legacy extended; do
    d="$tmp/cfg-$mode"
    mkdir -p "$d/notaries-available" "$d/notaries-enabled"
    "$ROOT/.venv/bin/python" - "$tmp/ext.notary" "$d/notaries-available/a.notary" "$mode" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
if sys.argv[3] == "legacy":
    b.pop("protocols", None); b.pop("signing_keys", None)
json.dump(b, open(sys.argv[2], "w"))
PY
    ln -s ../notaries-available/a.notary "$d/notaries-enabled/a.notary"
    echo '{"db": null}' >"$d/converge.config"
    ./build/bench_converge real "$d" 127.0.0.1 "$port" "$fp" "$n_rt" | sed "s/1 real notary serve/1 real notary serve, $mode/" | tee -a "$out"
  done
fi
"${ROOT}/.venv/bin/python" - "$out" "$RESULTS" <<'PY' || true
import json, os, sys, time
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {r["measurement"]: r for r in rows}
def ratio(a, b):
    a = next((r for k, r in by.items() if k.startswith(a)), None)
    b = next((r for k, r in by.items() if k.startswith(b)), None)
    return round(a["p50_us"] / b["p50_us"], 2) if a and b else None
res = {"suite": "client-c", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()}, "results": rows,
       "ratios_p50": {"cache_hit_vs_bare_select": ratio("cache hit, converge_check", "baseline: bare"),
                      "extended_vs_legacy_round_trip": ratio("round trip, 1 real notary serve, extended",
                                                             "round trip, 1 real notary serve, legacy")}}
json.dump(res, open(sys.argv[2], "w"), indent=2)
print(json.dumps(res["ratios_p50"]))
PY
echo "wrote $RESULTS"
