#!/usr/bin/env bash
# Build and test the Firefox extension: npm ci, tsc (extension and tests), the build (esbuild;
# the core is the TypeScript library's, bundled), node --test (every shared vector on the
# extension's WebCrypto provider, the decision engine), web-ext lint (warnings are errors) and
# web-ext build (the .xpi), then the extension in a real headless Firefox (tests/, pytest +
# Selenium + geckodriver built once with cargo): a genuine site, a compromised CA, notaries
# unreachable, a cached verdict, a replayed answer. Screenshots: var/results/webextension/.
#   client-libs/webextension/test.sh [--build-only]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
command -v node >/dev/null || { echo "node is not installed (scripts/install-system-deps)" >&2; exit 1; }
echo "== webextension: node $(node --version)"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
npx --no-install tsc -p tsconfig.json
npx --no-install tsc -p tsconfig.test.json
node build.mjs
npx --no-install web-ext lint --source-dir dist/extension --warnings-as-errors --output text 2>&1 | grep -E "errors|notices|warnings" || true
npx --no-install web-ext lint --source-dir dist/extension --warnings-as-errors >/dev/null
npx --no-install web-ext build --source-dir dist/extension --artifacts-dir dist --overwrite-dest \
  --filename "converge-{version}.xpi" | tail -n 1
if [ "${1:-}" = --build-only ]; then exit 0; fi
echo "== node --test"
log=$(mktemp)
node --test --test-concurrency=1 --test-reporter=spec dist-test/*.test.mjs > "$log" 2>&1 || rc=$?
tail -n 9 "$log"
passed=$(sed -n 's/^ℹ pass //p' "$log"); failed=$(sed -n 's/^ℹ fail //p' "$log")
rm -f "$log"
[ "${rc:-0}" = 0 ] || { echo "webextension: ${passed:-0} passed, ${failed:-1} failed"; exit "$rc"; }
echo "== the extension in headless Firefox ($(firefox-esr --version 2>/dev/null || firefox --version))"
GECKODRIVER=$("$ROOT/scripts/install-geckodriver")
# the HTTP/3 test site (tests/h3site.py) runs on aioquic, from PyPI into the project's venv
"$ROOT/.venv/bin/python" -c "import aioquic" 2>/dev/null ||
  "$ROOT/.venv/bin/pip" install -q --disable-pip-version-check "aioquic>=1.2,<2"
echo "   geckodriver: $GECKODRIVER"
(cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/webextension/tests) || rc=$?
echo "   screenshots: $ROOT/var/results/webextension/"
# one count line for the make test summary (node tests, the Firefox story, lint and build)
if [ "${rc:-0}" = 0 ]; then echo "webextension: $((passed + 3)) passed, $failed failed"; else
  echo "webextension: $((passed + 2)) passed, $((failed + 1)) failed"; exit "$rc"; fi
