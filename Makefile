# Trainyard: `make run` brings everything up on the embedded defaults; `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# System packages the whole suite needs (PACKAGE:FILE it installs: Chromium for the browser tests,
# docker-compose to validate docker-compose.yml, dockerd and debootstrap for the container-mode
# tests' private engine and image); scripts/system-packages
# installs the missing ones once (root with apt-get) or stops, naming the command to run.
TEST_PACKAGES := chromium:/usr/bin/chromium docker-compose:/usr/bin/docker-compose docker.io:/usr/sbin/dockerd debootstrap:/usr/sbin/debootstrap slurm-wlm:/usr/sbin/slurmctld munge:/usr/sbin/munged

.PHONY: run test test-fast test-packages lint bench bench-check clean-var deploy-check

$(STAMP): requirements.txt requirements-dev.txt sdk/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch is pinned to 2.13.0 (CPU build on machines without CUDA); never let a resolver pick a newer one.
	# The development set (runtime + test, lint, browser tools): one stamp serves run, test and lint.
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e sdk
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m portal.launch

test-packages:
	@scripts/system-packages "make test" $(TEST_PACKAGES)

# Two workers by default (TEST_WORKERS=0 runs in one process): most of the suite's time is live
# tests waiting on real processes, so two share two cores well. A file is one unit of work, the
# replays and live files go first (tests/conftest.py).
TEST_WORKERS ?= 2
test: test-packages $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -m "not live and not browser and not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy apps portal agents sdk/trainyard
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(PY) bench/run_all.py

# The quick benches again, each figure beside the README's (bench/reference.json), flagging any
# more than 1.5x worse: run it before resolving an issue that touches a measured path.
bench-check: $(STAMP)
	$(PY) bench/bench_check.py $(BENCH_CHECK_ARGS)

# The production shape for real: docker-compose.yml up, bootstrap, the CPU agent, one run to
# success over the REST API, then everything torn down; prints PASS or FAIL (scripts/deploy-check:
# base images built locally, a private dockerd as root unless DOCKER_HOST is set). Minutes: not in CI.
deploy-check:
	scripts/deploy-check

clean-var:
	rm -rf var
