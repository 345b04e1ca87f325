# converge: one entry point for setup, running, testing and benchmarking.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DATA    ?= var/notary
LISTEN  ?= 127.0.0.1:8443

.PHONY: setup run demo test test-fast lint bench bench-record security security-record fuzz clean \
	system-deps

$(STAMP): pyproject.toml $(wildcard client-libs/python/pyproject.toml)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[replay,dev]'
	if [ -f client-libs/python/pyproject.toml ]; then $(BIN)/pip install -q -e client-libs/python; fi
	touch $(STAMP)

setup: $(STAMP)

system-deps:
	scripts/install-system-deps

## Run a notary on https://$(LISTEN) with an embedded SQLite store (key and cert made on first run).
run: setup
	$(BIN)/notary serve --data-dir $(DATA) --listen $(LISTEN)

## A notary and a local TLS site to ask it about, offline (README, "Try it").
demo: setup
	$(BIN)/notary demo

## Every test suite (installs the system packages the tests need).
test: setup system-deps
	$(BIN)/ruff check notary replay tests client-libs/python client-libs/conformance client-libs/webextension loadtests bench fuzz
	$(BIN)/mypy
	scripts/test-all

test-fast: setup
	$(BIN)/python -m pytest -x -q -m 'not slow'

lint: setup
	$(BIN)/ruff check notary replay tests client-libs/python client-libs/conformance client-libs/webextension loadtests bench fuzz
	$(BIN)/mypy

## Benchmarks (long). Results go to var/results/ (ignored); bench-record writes the tracked
## bench/results/, docs/benchmarks.md and client-libs/*/bench-results.json instead.
bench: setup system-deps
	$(BIN)/python -m bench.run_all

bench-record: setup system-deps
	CONVERGE_RECORD=1 $(BIN)/python -m bench.run_all

## The security suite alone (table in var/results/docs/security-results.md; security-record
## rewrites the tracked docs/security-results.md), and a longer fuzzing run.
security: setup system-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/security

security-record: setup system-deps
	CONVERGE_RECORD=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/security

fuzz: setup
	$(BIN)/python fuzz/run.py --seconds 300

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
