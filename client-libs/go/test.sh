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
  echo "go is not installed (expected /usr/local/go/bin/go, Go >= 1.26)" >&2
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
go test -race -count=1 ./...
go build -o bin/converge-conformance ./cmd/converge-conformance
go build -o bin/tlsclient ./examples/tlsclient
if [ "${CONVERGE_GO_SKIP_CONFORMANCE:-}" = 1 ] || [ "${CONVERGE_SKIP_CONFORMANCE:-}" = 1 ]; then
  echo "== conformance runner skipped (CONVERGE_GO_SKIP_CONFORMANCE=1)"
elif [ -x "$ROOT/.venv/bin/python" ]; then
  echo "== conformance runner, Go CLI"
  (cd "$ROOT" && .venv/bin/python -m pytest -q -p no:cacheprovider client-libs/conformance \
    -k "go and not python")
else
  echo "== conformance runner skipped: $ROOT/.venv is not set up (make setup)" >&2
  exit 1
fi
