#!/usr/bin/env bash
# Test the Lua client: build the native module (make), luacheck, the API docs (ldoc), busted
# (every shared vector, real TLS notaries and HTTPS sites on loopback from
# client-libs/conformance/fake_world.py, the hooks: converge.https and converge.tls, through a
# CONNECT proxy; a fixed-seed fuzz), the rock builds and installs (luarocks make), the example
# against a real notary (live_site.py), then the shared conformance runner for this CLI
# (skipped when scripts/test-all runs it for every language). Lua 5.4 explicitly: Debian's
# `lua` alternative may point at 5.1 once luarocks is installed.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
command -v lua5.4 >/dev/null || { echo "lua5.4 is not installed (scripts/install-system-deps)" >&2; exit 1; }
echo "== $(lua5.4 -v), $(luarocks --version | head -n 1)"
make -s
luacheck --no-color --quiet src spec bin/converge-conformance.lua bin/converge-bench.lua examples
docs=$(mktemp -d)
rock=$(mktemp -d)
trap 'rm -rf "$docs" "$rock"' EXIT
ldoc -d "$docs" . > "$docs/ldoc.log" 2>&1 || { cat "$docs/ldoc.log"; exit 1; }
! grep -iE 'warning|error' "$docs/ldoc.log" || { echo "ldoc complained" >&2; exit 1; }
log=$(mktemp)
rc=0
lua5.4 /usr/bin/busted --output=TAP > "$log" 2>&1 || rc=$?
grep -E '^not ok|^# ' "$log" | head -n 60 || true
# one count line for the make test summary
passed=$(grep -cE '^ok ' "$log" || true)
failed=$(grep -cE '^not ok ' "$log" || true)
skipped=$(grep -cE '^ok .*# SKIP' "$log" || true)
tail -n 2 "$log"
rm -f "$log"
[ "$rc" = 0 ] || { echo "lua: $((passed - skipped)) passed, $failed failed, $skipped skipped"; exit "$rc"; }
echo "== the rock builds and installs (luarocks make)"
cp -r src csrc converge-0.1.0-1.rockspec "$rock/"
(cd "$rock" && luarocks --lua-version=5.4 make --deps-mode=none --tree="$rock/tree" converge-0.1.0-1.rockspec > "$rock/build.log" 2>&1) \
  || { cat "$rock/build.log"; exit 1; }
(cd / && LUA_PATH="$rock/tree/share/lua/5.4/?.lua;$rock/tree/share/lua/5.4/?/init.lua;;" \
  LUA_CPATH="$rock/tree/lib/lua/5.4/?.so;;" lua5.4 -e 'require "converge"; require "converge.https"; require "converge.ed25519"')
echo "== the README example against a real notary"
run="env LUA_PATH=$PWD/src/?.lua;$PWD/src/?/init.lua;; LUA_CPATH=$PWD/build/?.so;; lua5.4 $PWD/examples/fetch.lua"
"$ROOT/.venv/bin/python" "$ROOT/client-libs/conformance/live_site.py" \
  --trusted "$run https://{host}:{port}/ {config}" \
  --refused "$run https://{host}:{port}/ {config}"
if [ "${CONVERGE_SKIP_CONFORMANCE:-}" = 1 ]; then
  echo "== conformance runner skipped here (CONVERGE_SKIP_CONFORMANCE is 1)"
else
  echo "== conformance runner, Lua CLI"
  (cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/conformance -k "lua]")
fi
echo "lua: $((passed - skipped)) passed, $failed failed, $skipped skipped"
