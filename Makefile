# The two set-up commands of the README: `make demo` and `make test`. Each installs what it needs.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
PROVIDER ?= kwok

.PHONY: help venv binaries chromium docker kind-images test test-all test-unit test-kind lint demo bench figures clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# Two distributions, both editable: the harness (pyproject.toml) and the offline clusters (offline/).
$(VENV)/.installed: pyproject.toml offline/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]' -e './offline[dev]'
	touch $@

venv: $(VENV)/.installed  ## create the virtual environment: the harness and the offline clusters, every Python dependency

binaries: venv  ## build (first time, many minutes) or reuse the offline cluster's binaries
	$(VENV)/bin/deploy-suite binaries

chromium:  ## install headless Chromium (Debian's chromium package) for the browser tests, unless present
	scripts/install-chromium

docker:  ## Docker and debootstrap for the kind provider (Debian's packages; a runtime wrapper only where capabilities are missing)
	scripts/install-docker

kind-images: venv binaries docker  ## build (first time, minutes) or reuse kind, the node binaries, the kind node image and the Dynamo image
	$(PY) -m deploy_suite_offline.kind.prepare

# The kind tests run beside the others, as a second session (scripts/run-tests).
test: venv binaries chromium lint docker  ## lint, then the project's tests (unit, browser, integration, end-to-end, kind; a representative slice of each matrix)
	@VENV=$(VENV) scripts/run-tests "not matrix" $(PYTEST_ARGS)

test-all: venv binaries chromium lint docker  ## as `make test`, plus the rest of every matrix (each operator profile x each failure class, every kind case)
	@VENV=$(VENV) scripts/run-tests "" $(PYTEST_ARGS)

test-unit: venv  ## only the fast unit tests (no cluster)
	$(VENV)/bin/pytest tests/unit -q $(PYTEST_ARGS)

test-kind: venv binaries docker kind-images  ## only the kind tests (one kind cluster, every kind case)
	DEPLOY_SUITE_REQUIRE_KIND=1 $(VENV)/bin/pytest tests/kind -m kind -q $(PYTEST_ARGS)

# What CONTRIBUTING.md's Rules promise about size and repetition, checked here rather than in review.
LINT_ROOTS := deploy_suite plugins fixtures offline/deploy_suite_offline

lint: venv  ## ruff, mypy, the layering contracts of .importlinter (lint-imports), the module size cap and no duplicated block
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(PY) scripts/check_module_size.py $(LINT_ROOTS)
	$(VENV)/bin/pylint --disable=all --enable=duplicate-code $(LINT_ROOTS)

demo: venv binaries  ## bring up the offline cluster and run the sample experiment (PROVIDER=kind: on kind, cluster DEMO_CLUSTER or demo)
	@if [ "$(PROVIDER)" = kind ]; then $(MAKE) --no-print-directory docker kind-images; fi
	$(PY) -m deploy_suite_offline.fixtures.demo --provider $(PROVIDER) $(if $(DEMO_CLUSTER),--name $(DEMO_CLUSTER))

bench: venv binaries  ## benchmarks; figures go to docs/performance.md
	$(PY) bench/bench_cluster_up.py
	$(PY) bench/bench_capacity.py
	$(PY) bench/bench_e2e.py --pairs 5
	$(PY) bench/bench_experiment_page.py
	$(PY) bench/bench_time_to_verdict.py

figures: venv binaries  ## the reliability and security figures of docs/reliability.md and docs/security.md
	$(PY) bench/reliability_security_figures.py

clean:  ## remove the virtual environment and generated reports (not the binary cache)
	rm -rf $(VENV) reports/*.html reports/*.xml reports/*/
