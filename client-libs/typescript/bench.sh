#!/usr/bin/env bash
# Benchmark of the TypeScript client beside the C library's, in the same run, against one
# real `notary serve` on loopback: the local-cache hit and the legacy and extended round
# trips (client-libs/conformance/bench_language.py). Bounded by iteration counts.
#   client-libs/typescript/bench.sh [CACHE_ITERATIONS] [ROUND_TRIPS]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
[ -f dist/src/cli/bench.js ] || { npm ci --no-audit --no-fund && npm run build; }
exec "$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/bench_language.py" typescript \
  --cache-iterations "${1:-20000}" --round-trips "${2:-300}" -- node "$PWD/dist/src/cli/bench.js"
