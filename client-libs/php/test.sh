#!/usr/bin/env bash
# Test the PHP client: php -l on every file, PHPUnit (every shared vector, real TLS notaries and
# HTTPS sites on loopback from client-libs/conformance/fake_world.py, every hook: stream
# contexts, cURL, the PSR-18 decorator on Guzzle, through a CONNECT proxy; a fixed-seed fuzz),
# the example against a real notary (live_site.py), then the shared conformance runner for this
# CLI (skipped when scripts/test-all runs it for every language).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
command -v php >/dev/null || { echo "php is not installed (scripts/install-system-deps)" >&2; exit 1; }
echo "== php: $(php -r 'echo PHP_VERSION;'), phpunit $(phpunit --version | awk '{print $2; exit}')"
for f in src/*.php src/Http/*.php tests/*.php examples/*.php bin/converge-conformance bin/converge-bench; do
  php -l "$f" >/dev/null
done
log=$(mktemp)
phpunit > "$log" 2>&1 || rc=$?
tail -n 6 "$log"
# one count line for the make test summary
if grep -q '^OK (' "$log"; then
  read -r tests < <(sed -n 's/^OK (\([0-9]*\) tests.*/\1/p' "$log"); failed=0; skipped=0
else
  tests=$(sed -n 's/^Tests: \([0-9]*\).*/\1/p' "$log"); failed=$(grep -oE '(Failures|Errors): [0-9]+' "$log" | awk -F': ' '{s+=$2} END {print s+0}')
  skipped=$(grep -oE 'Skipped: [0-9]+' "$log" | awk -F': ' '{print $2+0}'); skipped=${skipped:-0}
fi
rm -f "$log"
[ "${rc:-0}" = 0 ] || { echo "php: $((tests - failed - skipped)) passed, $failed failed, $skipped skipped"; exit "$rc"; }
echo "== the README example against a real notary"
"$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/live_site.py" \
  --trusted "php $PWD/examples/fetch.php https://{host}:{port}/ {config}" \
  --refused "php $PWD/examples/fetch.php https://{host}:{port}/ {config}"
if [ "${CONVERGE_SKIP_CONFORMANCE:-}" = 1 ]; then
  echo "== conformance runner skipped here (CONVERGE_SKIP_CONFORMANCE is 1)"
else
  echo "== conformance runner, PHP CLI"
  (cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/conformance -k "php]")
fi
echo "php: $((tests - failed - skipped)) passed, $failed failed, $skipped skipped"
