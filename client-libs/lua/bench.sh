#!/usr/bin/env bash
# Benchmark of the Lua client beside the C library's, in the same run, against one real
# `notary serve` on loopback (client-libs/conformance/bench_language.py). Bounded.
#   client-libs/lua/bench.sh [CACHE_ITERATIONS] [ROUND_TRIPS]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
make -s
exec "$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/bench_language.py" lua \
  --cache-iterations "${1:-20000}" --round-trips "${2:-300}" -- "$PWD/bin/converge-bench"
