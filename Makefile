# rlmesh-stream developer entry points. Each target creates .venv and installs the
# project into it (editable, with the test extras) when that has not been done yet.
#
#   make demo    the demo job (`rlmesh-stream demo`)
#   make test    the whole test suite; it starts its own Kafka + registry (see README)
#   make bench   every benchmarks/bench_*.py
#   make lint    ruff + mypy

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/rlmesh-stream
PYTEST_ARGS ?=
DEMO_ARGS ?=

.PHONY: demo test bench lint venv

venv: $(CLI)

# The console script only exists once the project is installed into the venv.
$(CLI):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'

demo: venv
	$(CLI) demo $(DEMO_ARGS)

test: venv
	$(VENV)/bin/pytest $(PYTEST_ARGS)

bench: venv
	@for script in benchmarks/bench_*.py; do \
		echo "== $$script"; $(PY) "$$script" || exit $$?; \
	done

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
