#!/usr/bin/env bash
# Benchmark of the Perl client beside the C library's, in the same run, against one real
# `notary serve` on loopback (client-libs/conformance/bench_language.py). Bounded.
#   client-libs/perl/bench.sh [CACHE_ITERATIONS] [ROUND_TRIPS]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
exec "$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/bench_language.py" perl \
  --cache-iterations "${1:-20000}" --round-trips "${2:-300}" -- perl "$PWD/bin/converge-bench"
