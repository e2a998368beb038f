# One command to run the service, one to run the tests. Both set up .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: run test test-unit test-slow check lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt $(VENV)/.installed
	$(BIN)/pip install --disable-pip-version-check -q -r requirements-dev.txt
	touch $@

## run: web (http://127.0.0.1:8000), Celery worker and beat, jobs watcher and Redis, stopped together
## by Ctrl-C or when any of them dies; one run per state directory (see paddleweb/run.py)
run: $(VENV)/.installed
	@command -v bwrap >/dev/null && command -v slirp4netns >/dev/null || { echo "make run: bwrap or slirp4netns" \
		"not found. Local jobs (and their pip installs) run in a bubblewrap sandbox; install them with:" \
		"sudo apt-get install bubblewrap slirp4netns" >&2; exit 1; }
	$(BIN)/python -m paddleweb.run

## test: lint (below), then the suite but for what must be slow, in
## TEST_WORKERS parallel processes (most tests wait on real processes, sockets and browsers rather
## than compute, so two cores keep four busy; TEST_WORKERS=0 runs it in this one process)
## test-slow: what must be slow: real PaddlePaddle trainings (the first run installs paddlepaddle
## into var/test/venvs) and a 4 GiB transfer
## test-unit: only the table tests of the pure decision functions (marked unit), in this one process:
## no database, Redis or launcher is started, so it takes seconds (make test runs them too)
## check: test and test-slow, as CI runs them
TEST_WORKERS ?= 4
test: lint
	$(BIN)/pytest -n $(TEST_WORKERS) -m "not e2e and not slow" $(PYTEST_ARGS)

# Only the files that mark tests unit are collected: collecting the whole suite alone takes longer
# than running every unit test.
UNIT_TEST_FILES = $(shell grep -rlE --include='test_*.py' 'mark\.unit' launcher accounts jobs pfs quotas legacy \
	notifications tests client/tests)
test-unit: $(VENV)/.installed-dev
	$(BIN)/pytest -n 0 -m unit $(UNIT_TEST_FILES) $(PYTEST_ARGS)

test-slow: $(VENV)/.installed-dev
	$(BIN)/pytest -n $(TEST_WORKERS) -m "e2e or slow" $(PYTEST_ARGS)

check: test test-slow

## lint: README.md kept to what a newcomer needs first; ruff, types, import contracts, migrations;
## the docs site built with --strict (a broken link or anchor fails) into var/site (never with
## --quiet, which hides the very warnings --strict counts)
README_MAX_LINES := 200
lint: $(VENV)/.installed-dev
	@lines=$$(wc -l < README.md); [ "$$lines" -le $(README_MAX_LINES) ] || { echo "README.md is $$lines" \
		"lines, over $(README_MAX_LINES): keep it to what a newcomer needs first (what PaddleCloud is, make run" \
		"with the example, make check) and move the rest into a page under docs/" >&2; exit 1; }
	$(BIN)/ruff check .
	$(BIN)/mypy
	PYTHONPATH=client $(BIN)/lint-imports  # paddlectl lives in client/
	$(BIN)/python manage.py makemigrations --check --dry-run -v0
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## bench: every benchmark, each against `make run`'s tree started on a state directory and port of
## its own (bench/service.py), then one table of them all (bench/report.py). The job list is about
## PostgreSQL: set DATABASE_URL (the bench makes and drops a database of its own on that server)
BENCH_RESULTS ?= var/bench-results.jsonl
bench: $(VENV)/.installed-dev
	@mkdir -p var && rm -f $(BENCH_RESULTS)
	export BENCH_RESULTS=$(abspath $(BENCH_RESULTS)); status=0; \
	for b in memory launch job_list web log_lag transfer cli_start fit_a_line_overhead legacy_upload recordio; do \
		$(BIN)/python bench/$$b.py || status=1; done; \
	BENCH_WINDOW=$${BENCH_WINDOW:-20} $(BIN)/python bench/k8s_status_sync.py || status=1; \
	$(BIN)/python bench/report.py $$BENCH_RESULTS; exit $$status

clean:
	rm -rf $(VENV) var
