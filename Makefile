# Torchscope: `make demo` records the sample runs and opens the dashboard; `make test` runs every test.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNS ?= runs
PORT ?= 8501

.PHONY: demo test setup system-deps samples ui bench check clean

# The editable install puts the checkout on sys.path with a plain .pth line (`compat`): setuptools'
# default import finder for a flat layout costs every Python start ~20 ms (pathlib, importlib.util),
# which a user's installed wheel does not pay. Where a setuptools drops `compat`, the default is used.
# constraints.txt holds the versions the suite last passed with (requirements.txt keeps the ranges).
$(BIN)/torchscope: requirements.txt constraints.txt pyproject.toml setup.py app/data/_event_scan.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt -c constraints.txt
	$(BIN)/pip install -q --no-deps -e . --config-settings editable_mode=compat \
	  || $(BIN)/pip install -q --no-deps -e .
	touch $@

setup: system-deps $(BIN)/torchscope

# graphviz renders the computation graph; chromium drives the browser tests.
system-deps:
	@if ! command -v dot >/dev/null || ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq graphviz chromium >/dev/null; \
	  else echo "install graphviz and chromium (apt-get install graphviz chromium)"; fi; fi

samples: setup
	$(BIN)/python -m sample_models.record --root $(RUNS)

demo: samples
	$(BIN)/torchscope ui --root $(RUNS) --port $(PORT)

# Lint and types first, so that CI fails on them before the long test run (mypy keeps a cache in
# .mypy_cache: a warm run takes seconds).
check: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

# Two pytest-xdist workers: most of the suite's time is real jobs, servers and browsers waiting on
# each other, so two workers on two cores finish well before one process would (11 min 40 s for
# 1,421 tests on 2 cores, where the serial run was 13 min for 1,273). TEST_WORKERS=0: one process.
# Stores recorded by real jobs are recorded once for both workers (tests/once.py).
TEST_WORKERS ?= 2

test: setup check
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))

# Benchmarks against peers (HTA, orjson, torch-tb-profiler, tsdownsample), installed here only.
# Results land in benchmarks/results/; see benchmarks/README.md for what each measures.
bench: setup
	$(BIN)/pip install -q -r benchmarks/requirements.txt tsdownsample
	$(BIN)/python -m benchmarks.overhead --pairs 3 --steps 300 --json benchmarks/results/overhead.json
	$(BIN)/python benchmarks/trace_ingest.py --sizes 20 100 --out benchmarks/results/trace_ingest.json
	$(BIN)/python benchmarks/curves.py --sizes 100000 1000000 --out benchmarks/results/curves.json
	$(BIN)/python benchmarks/compare.py --out benchmarks/results/compare.json
	$(BIN)/python benchmarks/tb_profiler_compare.py
	$(BIN)/python -m benchmarks.fixed_cost --pairs 8 --steps 50 --json benchmarks/results/fixed_cost.json
	$(BIN)/python -m benchmarks.ab_verdicts
	$(BIN)/python -m benchmarks.stats_study --out benchmarks/results/stats_study.json
	$(MAKE) samples
	$(BIN)/python -m benchmarks.page_render --root $(RUNS) --runs 1000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-output
