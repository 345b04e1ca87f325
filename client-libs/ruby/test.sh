#!/usr/bin/env bash
# Test the Ruby client: every test file under minitest (every shared vector, real TLS notaries
# and HTTPS sites on loopback, the hooks with Net::HTTP directly and through a CONNECT proxy,
# a fixed-seed fuzz of the response parser), the gem builds, the example against a real notary
# (live_site.py), then the shared conformance runner for this CLI (skipped when
# scripts/test-all runs it for every language).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
command -v ruby >/dev/null || { echo "ruby is not installed (scripts/install-system-deps)" >&2; exit 1; }
echo "== ruby: $(ruby --version)"
ruby -Ilib -e 'Dir["test/test_*.rb"].sort.each { |f| require_relative f }' 2>&1 | tee /tmp/converge-ruby-test.$$ | tail -n 4
rc=${PIPESTATUS[0]}
# one count line for the make test summary
read -r runs failures errors skips < <(sed -n 's/^\([0-9]*\) runs, [0-9]* assertions, \([0-9]*\) failures, \([0-9]*\) errors, \([0-9]*\) skips$/\1 \2 \3 \4/p' /tmp/converge-ruby-test.$$)
rm -f /tmp/converge-ruby-test.$$
[ "$rc" = 0 ] || { echo "ruby: $((runs - failures - errors)) passed, $((failures + errors)) failed"; exit "$rc"; }
gem build --silent converge.gemspec -o /tmp/converge-notary-$$.gem >/dev/null
rm -f /tmp/converge-notary-$$.gem
echo "== the README example against a real notary"
"$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/live_site.py" \
  --trusted "ruby -I$PWD/lib $PWD/examples/fetch.rb https://{host}:{port}/ {config}" \
  --refused "ruby -I$PWD/lib $PWD/examples/fetch.rb https://{host}:{port}/ {config}"
if [ "${CONVERGE_SKIP_CONFORMANCE:-}" = 1 ]; then
  echo "== conformance runner skipped here (CONVERGE_SKIP_CONFORMANCE is 1)"
else
  echo "== conformance runner, Ruby CLI"
  (cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/conformance -k "ruby]")
fi
echo "ruby: $((runs - failures - errors - skips)) passed, $((failures + errors)) failed, $skips skipped"
