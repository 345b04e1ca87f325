#!/usr/bin/env bash
# Build and test the TypeScript client: npm ci, tsc (strict; the core also compiled without
# Node's types, as the browser extension uses it), the API docs (typedoc, warnings are
# errors), node --test (every shared vector, real TLS notaries and HTTPS sites on loopback),
# the README's example through the package's exports against a real notary (live_site.py),
# then the shared conformance runner for this CLI (skipped when scripts/test-all runs it for
# every language: CONVERGE_SKIP_CONFORMANCE=1).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
command -v node >/dev/null || { echo "node is not installed (scripts/install-system-deps)" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then echo "Node $(node --version): the library needs Node >= 20" >&2; exit 1; fi
echo "== typescript: node $(node --version), npm $(npm --version 2>/dev/null)"
# better-sqlite3 builds its addon with node-gyp: use the installed Node headers (no download)
nodeprefix=$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")
nodedir=()
if [ -f "$nodeprefix/include/node/common.gypi" ]; then nodedir=(env "npm_config_nodedir=$nodeprefix"); fi
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  "${nodedir[@]}" npm ci --no-audit --no-fund --loglevel=error
fi
npx --no-install tsc -p tsconfig.json
npx --no-install tsc -p tsconfig.core.json
npx --no-install typedoc --logLevel Warn >/dev/null
echo "== node --test"
log=$(mktemp)
node --test --test-concurrency=1 --test-reporter=spec dist/test/*.test.js > "$log" 2>&1 || rc=$?
tail -n 12 "$log"
# one count line for the make test summary: tests (each vector file is one), failures, skips
passed=$(sed -n 's/^ℹ pass //p' "$log"); failed=$(sed -n 's/^ℹ fail //p' "$log"); skipped=$(sed -n 's/^ℹ skipped //p' "$log")
rm -f "$log"
[ "${rc:-0}" = 0 ] || { echo "typescript: ${passed:-0} passed, ${failed:-1} failed, ${skipped:-0} skipped"; exit "$rc"; }
echo "== the README example through the package name, against a real notary"
consumer=$(mktemp -d)
trap 'rm -rf "$consumer"' EXIT
mkdir -p "$consumer/node_modules/@converge-notary"
ln -s "$PWD" "$consumer/node_modules/@converge-notary/client"
cp examples/fetch.mjs "$consumer/fetch.mjs"
"$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/live_site.py" \
  --trusted "node $consumer/fetch.mjs https://{host}:{port}/ {config}" \
  --refused "node $consumer/fetch.mjs https://{host}:{port}/ {config}"
if [ "${CONVERGE_SKIP_CONFORMANCE:-}" = 1 ]; then
  echo "== conformance runner skipped here (CONVERGE_SKIP_CONFORMANCE is 1)"
else
  echo "== conformance runner, TypeScript CLI"
  (cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/conformance -k "typescript]")
fi
echo "typescript: $((passed + 2)) passed, $failed failed, $skipped skipped"
