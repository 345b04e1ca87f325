#!/usr/bin/env bash
# Benchmarks of the Java client against one real `notary serve` on loopback: the local-cache
# hit (baseline: a bare SQLite lookup) and the legacy and extended round trips (baseline: a
# pinned TLS handshake), bounded by fixed iteration counts. Prints the figures and writes
# bench-results.json.
#   client-libs/java/bench.sh [CACHE_ITERATIONS] [ROUND_TRIPS]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
# results: var/results/ unless CONVERGE_RECORD=1 (make bench-record), then this folder
if [ "${CONVERGE_RECORD:-}" = 1 ]; then RESULTS=bench-results.json; else
  mkdir -p "$ROOT/var/results/client-libs/java"; RESULTS="$ROOT/var/results/client-libs/java/bench-results.json"; fi
n_cache=${1:-20000}
n_rt=${2:-300}
[ -f target/converge-client-0.1.0.jar ] || mvn -q -B -Dstyle.color=never package -DskipTests
tmp=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
port=$("$ROOT/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$ROOT/.venv/bin/notary" keygen --data-dir "$tmp/n" >/dev/null
"$ROOT/.venv/bin/notary" bundle --data-dir "$tmp/n" --host 127.0.0.1 --ssl-port "$port" \
  --name "Bench" -o "$tmp/bench.notary" >/dev/null
"$ROOT/.venv/bin/notary" serve --data-dir "$tmp/n" --listen "127.0.0.1:$port" \
  --allow-target 127.0.0.0/8 >"$tmp/notary.log" 2>&1 &
pid=$!
java -cp "target/converge-client-0.1.0.jar:target/lib/*" org.converge.bench.Bench \
  "$tmp/bench.notary" "$n_cache" "$n_rt" "$RESULTS"
