#!/usr/bin/env bash
# Benchmark of the Rust client beside the C library's, in the same run, against one real
# `notary serve` on loopback (client-libs/conformance/bench_language.py): the local-cache hit
# and the legacy and extended round trips, in release mode. Bounded by iteration counts.
#   client-libs/rust/bench.sh [CACHE_ITERATIONS] [ROUND_TRIPS]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
CARGO=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
"$CARGO" build --quiet --release --example bench
exec "$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/bench_language.py" rust \
  --cache-iterations "${1:-20000}" --round-trips "${2:-300}" -- "$PWD/target/release/examples/bench"
