#!/usr/bin/env bash
# Build and test the Rust client: cargo fmt --check, cargo clippy -D warnings, cargo test (every
# shared vector, real TLS notaries and HTTPS sites on loopback, the rustls hook through ureq
# directly and through a CONNECT proxy, a fixed-seed fuzz of the response parser), cargo doc
# with warnings as errors, the example against a real notary (live_site.py), then the shared
# conformance runner for this CLI (skipped when scripts/test-all runs it for every language).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
CARGO=$(command -v cargo || true)
[ -n "$CARGO" ] || CARGO=$HOME/.cargo/bin/cargo
if [ ! -x "$CARGO" ]; then echo "cargo is not installed (stable Rust >= 1.82)" >&2; exit 1; fi
export PATH="$(dirname "$CARGO"):$PATH"
echo "== rust: $("$CARGO" --version), $(rustc --version)"
"$CARGO" fmt --check
"$CARGO" clippy --quiet --all-targets -- -D warnings
log=$(mktemp)
"$CARGO" test --quiet > "$log" 2>&1 || rc=$?
grep -E "^test result|FAILED|panicked|^failures|^---- " "$log" || true
# one count line for the make test summary
read -r passed failed ignored < <(awk '/^test result/ {p+=$4; f+=$6; i+=$8} END {print p+0, f+0, i+0}' "$log")
rm -f "$log"
[ "${rc:-0}" = 0 ] || { echo "rust: $passed passed, $failed failed, $ignored skipped"; exit "$rc"; }
RUSTDOCFLAGS="-D warnings" "$CARGO" doc --quiet --no-deps
"$CARGO" build --quiet --bin converge-conformance --example fetch
echo "== the README example against a real notary"
"$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/live_site.py" \
  --trusted "$PWD/target/debug/examples/fetch https://{host}:{port}/ {config}" \
  --refused "$PWD/target/debug/examples/fetch https://{host}:{port}/ {config}"
if [ "${CONVERGE_SKIP_CONFORMANCE:-}" = 1 ]; then
  echo "== conformance runner skipped here (CONVERGE_SKIP_CONFORMANCE is 1)"
else
  echo "== conformance runner, Rust CLI"
  (cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/conformance -k "rust]")
fi
echo "rust: $passed passed, $failed failed, $ignored skipped"
