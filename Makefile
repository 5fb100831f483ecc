# The whole set-up on a fresh machine: `make demo` runs the main job, `make test` passes the tests.
# Each creates .venv, installs the project, and (unless DATABASE_URL is set) starts an embedded
# PostgreSQL whose data lives in .pgdata/.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp


.PHONY: demo demo-queue test test-slow test-install dist chaos failover lint typecheck bench bench-peers bench-delivery bench-smoke db-url db-stop clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required, found " + sys.version' 
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m scheduler.demos.reminders

demo-queue: $(STAMP)
	$(PY) -m scheduler.demos.queue

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: lint typecheck
	$(VENV)/bin/pytest -q -m "not slow and not bench_smoke and not install"

# The source distribution and the wheel (SQL, migrations, dashboard templates and static files,
# py.typed included) in $(DIST_DIR): `pip install 'dist/tockwork-VERSION-py3-none-any.whl[dashboard]'`
# installs it anywhere (docs/quickstart.md, "Install"). Tockwork is not on PyPI.
DIST_DIR ?= dist
dist: $(STAMP)
	$(PY) -m build --outdir $(DIST_DIR) .

# Builds the wheel with `make dist`, installs it with its extras into a fresh venv outside the
# repository and runs docs/quickstart.md against it, and runs the pytest plugin where no server
# runs (tests/install; about a minute and a half, mostly pip and initdb): what proves the
# install lines of the docs. .ci/run runs it after the suite.
test-install: $(STAMP)
	$(VENV)/bin/pytest -q -m install tests/install

# Every bench of bench/ at a tiny size, to its report (tests/bench_smoke; about 5 minutes): the
# benches are not in the default suite, so this is what notices a change that breaks one.
bench-smoke: $(STAMP)
	$(VENV)/bin/pytest -q -m bench_smoke tests/bench_smoke

# Soak and chaos runs marked `slow`: the chaos suite (tests/chaos) for 120 s, about 3 minutes
# in all; exit code 5 means no test carried the marker.
test-slow: $(STAMP)
	$(VENV)/bin/pytest -q -m slow || [ $$? -eq 5 ]

# The chaos suite for CHAOS_SECONDS (600 by default: about 13 minutes in all; docs/operations.md,
# "Chaos"): schedulers, workers, a relay and a producer as processes under SIGKILLs, PostgreSQL
# restarts, LISTEN terminations, lost replies and a long transaction. It prints its figures;
# CHAOS_LOG_DIR=dir keeps the processes' logs.
CHAOS_SECONDS ?= 600
chaos: $(STAMP)
	CHAOS_SECONDS=$(CHAOS_SECONDS) $(VENV)/bin/pytest -q -s -m slow tests/chaos

# The failover suite (tests/failover, marked slow; docs/operations.md, "Failover"): a Patroni
# cluster (etcd + three PostgreSQL 15 on loopback ports from 25400, Debian's patroni,
# etcd-server and postgresql-15) under the chaos workload while the primary is SIGKILLed twice
# and switched over once, synchronous then asynchronous: about 8 minutes. It prints its
# figures; TOCKWORK_FAILOVER_DIR=dir keeps the cluster's data and the processes' logs.
failover: $(STAMP)
	$(VENV)/bin/pytest -q -s -m slow tests/failover

# PgQueuer, the peer bench/queue.py compares with, lives in a venv of its own (.venv-bench),
# never in the project's; when it cannot be installed the bench prints why and skips it.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-stamp

$(BENCH_STAMP): bench/requirements-peers.txt
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --disable-pip-version-check -r bench/requirements-peers.txt
	touch $(BENCH_STAMP)

bench-peers: $(BENCH_STAMP)

bench: $(STAMP)
	@$(MAKE) --no-print-directory bench-peers || echo "PgQueuer not installed: bench.queue skips the comparison"
	$(PY) -m bench.queue
	$(PY) -m bench.next_run
	$(PY) -m bench.scheduler_herd
	$(PY) -m bench.reminder_delivery

# The end-to-end reminder herd alone (1,000,000 by default; SIZE=20000 for a shorter run).
bench-delivery: $(STAMP)
	$(PY) -m bench.reminder_delivery $(if $(SIZE),--size $(SIZE))

db-url: $(STAMP)
	@$(PY) -m scheduler.devdb url

db-stop: $(STAMP)
	$(PY) -m scheduler.devdb stop

clean: db-stop
	rm -rf $(VENV) .pgdata .pgdata-run .mypy_cache .ruff_cache .pytest_cache
