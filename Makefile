# Two commands for a fresh machine (see README.md):
#   make run   — install, then serve the embedded default (SQLite + local runner) with the example tools
#   make test  — install, then lint, type-check, run the tests and the official conformance scenarios
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test lint typecheck pytest conformance bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/mcptasks serve --host $(HOST) --port $(PORT) --tools examples/tools --data-dir .data

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

pytest: install
	timeout 1200 $(BIN)/pytest -q

conformance: install
	timeout 1200 bash conformance/run.sh

test: lint typecheck pytest conformance

bench: install
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .data .mypy_cache .ruff_cache .pytest_cache conformance-results
