# Two entry points (see README): `make run` starts a node, `make test` runs every check.
# Both create the virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint build bench clean

# the tests that run a second time on the pure-Python path (ZBROKER_PURE_PYTHON=1): the
# compiled modules' own tests and end-to-end nodes, relays and clients (zbroker/_compiled.py;
# tests/test_compiled.py sets the variable itself for each path it checks)
PURE_TESTS ?= tests/test_wire.py tests/test_wire_malformed.py tests/test_wire_links.py \
	tests/test_wire_forward.py tests/test_link_state.py tests/test_publisher_batches.py \
	tests/test_sansio.py tests/test_client_parts.py tests/test_link_duplicates.py \
	tests/test_publish_runs.py tests/integration/test_publish_runs.py tests/test_splice.py \
	tests/routing/test_dedupe.py tests/routing/test_engine*.py tests/integration/test_node*.py \
	tests/integration/test_network.py tests/integration/test_network_link_options.py \
	tests/integration/test_network_faults.py tests/integration/test_network_handshakes.py \
	tests/integration/test_network_processes.py tests/integration/test_network_limits.py \
	tests/integration/test_relay_runs.py \
	tests/integration/test_fuzz*.py tests/integration/test_splice_chain.py \
	tests/test_message_gc.py tests/test_reading.py tests/integration/test_frame_views.py \
	tests/test_heads.py tests/integration/test_shortcut.py tests/integration/test_shortcut_publish.py \
	tests/test_lone.py tests/integration/test_peer_paths.py

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "zbroker needs Python 3.11+")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 'setuptools>=77'  # (make build: the SPDX license)
	$(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/zbroker start $(ARGS)

# the benchmarks and examples, checked as the modules their scripts import by name
SCRIPT_MODULES := $(filter-out __init__,$(basename $(notdir $(wildcard benchmarks/*.py examples/*.py))))

lint: $(STAMP)
	$(BIN)/ruff check setup.py zbroker cli tests benchmarks examples
	$(BIN)/ruff format --check setup.py zbroker cli tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/mypy $(addprefix -m ,$(SCRIPT_MODULES))

# the compiled modules, rebuilt where a source changed (none without Cython or a compiler)
build: $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace

test: lint build
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	ZBROKER_PURE_PYTHON=1 $(BIN)/python -m pytest $(PYTEST_ARGS) $(PURE_TESTS)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_node.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build
	find zbroker \( -name '*.so' -o -name '*.source-sha256' \) -delete
