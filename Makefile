# One entry point for people and CI. `make test` is what .ci/run runs.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv lint typecheck contracts unit e2e test testbed demo demo-quick scale-smoke estimates-smoke chromium rules bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check mcad tests e2e benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy mcad e2e/cluster

contracts: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q tests

# Builds the control-plane binaries (or reuses the cache), brings the test bed up
# once, runs every end-to-end test against it, and tears it down.
e2e: $(STAMP) chromium
	$(BIN)/pytest -q -m e2e e2e

# The web view's test drives a real headless Chromium, from the machine's packages.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "installing chromium (Debian package) for the web view's end-to-end test"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get install -y -q chromium || \
	    { $$sudo apt-get update -q && $$sudo apt-get install -y -q chromium; }; }

# The demo, with 3 s pods: the README's first command is run by the second, so it can
# never break unnoticed (its own test bed, after the e2e one is down).
demo-quick: $(STAMP)
	$(BIN)/python -m e2e.demo --quick

# 3 spokes x 100 nodes, 1,000 AppWrappers (about 3 minutes): fails when mcad dispatches
# at less than half of what the same API servers take from a plain client (the mean of
# its burst before the drain and one after; the burst before alone is reported, not
# gated). Needs no bench extra.
scale-smoke: $(STAMP)
	$(BIN)/python benchmarks/scale.py --smoke

# Estimated starts and backfill rules in simulated time (seconds, no test bed): fails
# when reservation backfill lets a head of the line start after its reservation, or
# lets a backfill that understated its run time outstay its promise to the head.
estimates-smoke: $(STAMP)
	$(BIN)/python benchmarks/estimates.py --smoke

# The alert rules, unit-tested by Prometheus's promtool (built from its Go module, cached
# beside the test bed's binaries: a few minutes the first time).
rules: $(STAMP)
	$(BIN)/python -m e2e.promtool

test: lint typecheck contracts unit rules e2e demo-quick scale-smoke estimates-smoke

# The test bed alone, for poking at by hand: make testbed; then python -m e2e.cluster down --dir tb
testbed: $(STAMP)
	$(BIN)/python -m e2e.cluster up --dir tb --spokes 2 --nodes 4 --gpus-per-node 8

demo: $(STAMP)
	$(BIN)/python -m e2e.demo

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	@touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/dispatch_cycle.py
	$(BIN)/python benchmarks/fair_sharing.py
	$(BIN)/python benchmarks/seed002.py
	$(BIN)/python benchmarks/seed000.py
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/topology.py

clean:
	-$(BIN)/python -m e2e.cluster down --dir tb
	rm -rf $(VENV) tb .mypy_cache .ruff_cache .pytest_cache .hypothesis
