# Two entry points (see README): `make run` starts a node, `make test` runs every check.
# Both create the virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "zbroker needs Python 3.11+")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/zbroker start $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check zbroker cli tests benchmarks examples
	$(BIN)/ruff format --check zbroker cli tests benchmarks examples
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_node.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
