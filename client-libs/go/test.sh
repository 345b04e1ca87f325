#!/usr/bin/env bash
# Build and test the Go client: go vet, go test -race (unit tests, every shared vector file,
# loopback TLS tests), the conformance CLI and the example, then the shared conformance
# runner for the Go CLI only (pytest -k; scripts/test-all runs the whole runner before this
# script, when the CLI of a fresh clone is not built yet).
# CONVERGE_GO_SKIP_CONFORMANCE=1 (or CONVERGE_SKIP_CONFORMANCE=1, which scripts/test-all sets
# before running the shared runner once for every language) skips the runner step.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
export PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null; then
  echo "go is not installed (expected /usr/local/go/bin/go; the module needs Go >= 1.19)" >&2
  exit 1
fi
echo "== go: $(go version)"
go mod download
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt: not formatted: $unformatted" >&2
  exit 1
fi
go vet ./...
gotest_log=$(mktemp)
trap 'rm -f "$gotest_log"' EXIT
go test -race -count=1 -json ./... > "$gotest_log" || gotest_rc=$?
# one line per package as go test prints it, then the count of tests (subtests included)
"$ROOT/.venv/bin/python" - "$gotest_log" <<'PY'
import json, sys
passed = failed = skipped = 0
for line in open(sys.argv[1], encoding="utf-8"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    if ev.get("Action") == "output" and not ev.get("Test"):
        sys.stdout.write(ev.get("Output", ""))
    if ev.get("Test") and ev.get("Action") in ("pass", "fail", "skip"):
        if ev["Action"] == "fail":
            failed += 1
        elif ev["Action"] == "skip":
            skipped += 1
        else:
            passed += 1
    if ev.get("Test") and ev.get("Action") == "fail":
        print(f"--- FAIL: {ev['Package']} {ev['Test']}")
print(f"go: {passed} passed, {failed} failed, {skipped} skipped")
PY
[ "${gotest_rc:-0}" = 0 ] || exit "$gotest_rc"
# The go line of go.mod is the oldest toolchain the module supports: Debian 12's Go 1.19
# (golang-1.19-go, installed by scripts/install-system-deps) builds and tests it too.
OLDEST_GO=/usr/lib/go-1.19/bin/go
if [ -x "$OLDEST_GO" ]; then
  echo "== go: $("$OLDEST_GO" version) (the oldest supported toolchain)"
  GOTOOLCHAIN=local "$OLDEST_GO" vet ./...
  GOTOOLCHAIN=local "$OLDEST_GO" test -count=1 ./... 2>&1 | grep -v 'TLS handshake error'
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
else
  echo "== go: $OLDEST_GO not installed (scripts/install-system-deps): oldest toolchain not tested" >&2
  exit 1
fi
go build -o bin/converge-conformance ./cmd/converge-conformance
go build -o bin/tlsclient ./examples/tlsclient
if [ "${CONVERGE_GO_SKIP_CONFORMANCE:-}" = 1 ] || [ "${CONVERGE_SKIP_CONFORMANCE:-}" = 1 ]; then
  echo "== conformance runner skipped here (CONVERGE_SKIP_CONFORMANCE or CONVERGE_GO_SKIP_CONFORMANCE is 1)"
elif [ -x "$ROOT/.venv/bin/python" ]; then
  echo "== conformance runner, Go CLI"
  (cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/conformance \
    -k "go and not python")
else
  echo "== conformance runner skipped: $ROOT/.venv is not set up (make setup)" >&2
  exit 1
fi
