# Two commands do all set-up on a fresh machine with only Python 3.11+:
#   make up    - install into .venv if needed, start embedded PostgreSQL, migrate, serve, run the runner
#   make test  - install dev dependencies, run the whole suite
#   make test-fast - unit + integration suites only: no end-to-end processes, no benchmarks
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.netmap-installed
DEV_STAMP := $(VENV)/.netmap-dev-installed
PYTEST_ARGS ?=

.PHONY: up test test-fast lint format clean-var

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
		{ echo "netmap needs Python 3.11 or newer (found: $$($(PYTHON) --version 2>&1))" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[server]'
	@touch $@

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

# Local trials scan this machine too: `make up` allows loopback targets, which the default
# policy refuses (docs/security.md); an explicit NETMAP_SCAN_SPECIAL_USE_TARGETS wins.
up: export NETMAP_SCAN_SPECIAL_USE_TARGETS ?= loopback,private
up: $(STAMP)
	$(BIN)/netmap up $(ARGS)

# The whole suite: unit and integration tests on TEST_JOBS processes (pytest-xdist; each
# starts its own PostgreSQL), then the end-to-end tests on E2E_JOBS processes: they spend
# much of their time waiting on real servers, scanners and leases, each binds free ports
# and data directories of its own, and the few that watch timing allow for a busy host
# (E2E_JOBS=1 runs them one at a time). Both parts run; either failing fails.
# PYTEST_ARGS replaces the selection: `make test PYTEST_ARGS="tests/unit -x"`.
TEST_JOBS ?= 2
E2E_JOBS ?= 2
test: $(DEV_STAMP)
ifeq ($(strip $(PYTEST_ARGS)),)
	@status=0; \
	$(BIN)/python -m pytest -n $(TEST_JOBS) tests/unit tests/integration || status=$$?; \
	$(BIN)/python -m pytest -n $(E2E_JOBS) tests/e2e || status=$$?; \
	exit $$status
else
	$(BIN)/python -m pytest $(PYTEST_ARGS)
endif

# Benchmarks are the test_bench_* modules wherever they live; e2e tests are marked (and in tests/e2e).
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest tests/unit tests/integration -m "not e2e" \
		--ignore-glob='*/test_bench_*.py' $(PYTEST_ARGS)

# Import contracts (layers, no loops, the agent apart): [tool.importlinter] in pyproject.toml.
lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(DEV_STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
