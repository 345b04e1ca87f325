#!/usr/bin/env bash
# The extension's cost on a cached verdict: a loopback page loaded 100 times in headless
# Firefox with and without it (bench.py).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
[ -f dist/converge-0.1.0.xpi ] || ./test.sh --build-only
exec "$ROOT/.venv/bin/python" -W ignore bench.py
