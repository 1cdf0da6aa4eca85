# Two commands do all set-up on a fresh machine with only Python 3.11+:
#   make up    - install into .venv if needed, start embedded PostgreSQL, migrate, serve, run the runner
#   make test  - install dev dependencies, run the whole suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.netmap-installed
DEV_STAMP := $(VENV)/.netmap-dev-installed
PYTEST_ARGS ?=

.PHONY: up test lint format clean-var

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
		{ echo "netmap needs Python 3.11 or newer (found: $$($(PYTHON) --version 2>&1))" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

up: $(STAMP)
	$(BIN)/netmap up $(ARGS)

test: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(DEV_STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
