# rlmesh-stream developer entry points. Each target creates .venv and installs the
# project into it (editable, with the test extras) when that has not been done yet, and
# again whenever pyproject.toml changed since (the stamp .venv/.installed is older).
#
#   make demo    the demo job (`rlmesh-stream demo`)
#   make check   ruff + mypy + every quick test that needs no server (no Kafka, no PostgreSQL)
#   make test    the whole test suite; it starts its own Kafka + registry (see README)
#   make bench   every benchmarks/bench_*.py
#   make lint    ruff + mypy

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/rlmesh-stream
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
DEMO_ARGS ?=
# What `make check` leaves out: tests that start or need a server (`stack` is marked on every
# test using a fixture that starts Kafka, `postgres` on every test using a PostgreSQL
# server, `tools` on every test using TensorBoard's server or `mlflow server`:
# tests/conftest.py) and the `slow` ones that need none (tests/packaging builds venvs).
# The rest runs on 4 workers (pytest-xdist) on the 2-core machine: many tests wait on a
# timeout or a child process, and a worker waiting costs no CPU.
CHECK_MARKERS ?= not stack and not postgres and not tools and not slow
CHECK_WORKERS ?= 4

.PHONY: demo check test bench lint venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: venv
	$(CLI) demo $(DEMO_ARGS)

check: lint
	$(VENV)/bin/pytest -m '$(CHECK_MARKERS)' -n $(CHECK_WORKERS) $(PYTEST_ARGS)

test: venv
	$(VENV)/bin/pytest $(PYTEST_ARGS)

bench: venv
	@for script in benchmarks/bench_*.py; do \
		echo "== $$script"; $(PY) "$$script" || exit $$?; \
	done

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
