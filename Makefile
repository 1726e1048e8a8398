# The README's commands. Each target creates the virtual environment on first use.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
SETUP_SUM := $(shell cksum setup.py | cut -d' ' -f1)
## The `dev` extra (tests, docs, notebooks, every export format): most targets.
INSTALLED := $(VENV)/.installed-$(SETUP_SUM)
## The `train` extra only (training, evaluation, translation): `make demo`.
## The dev install includes it, so demo uses the dev stamp when it exists.
INSTALLED_TRAIN := $(VENV)/.installed-train-$(SETUP_SUM)
DEMO_INSTALLED := $(if $(wildcard $(INSTALLED)),$(INSTALLED),$(INSTALLED_TRAIN))
WORKDIR ?= runs/dates_tiny
## The editable installs. setuptools prints a ten-line warning box on each
## ("Editable installation ... careful with folders ... of your package"),
## which says nothing of this project: its UserWarnings are not shown.
PIP_EDITABLE := PYTHONWARNINGS=ignore::UserWarning $(PYTHON) -m pip install --quiet -e

.PHONY: setup demo test coverage test-slow test-core test-jax lint format docs dist notebooks bench clean

$(INSTALLED): setup.py
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PIP_EDITABLE) ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@

$(INSTALLED_TRAIN): setup.py
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PIP_EDITABLE) ".[train]"
	rm -f $(VENV)/.installed-train-*
	touch $@

setup: $(INSTALLED)

## The main job: train the default model on the built-in task, evaluate it,
## print translations and where the TensorBoard logs are. It installs only
## the `train` extra (or uses `make setup`'s dev install when there is one).
demo: $(DEMO_INSTALLED)
	$(VENV)/bin/keras-transformer train configs/dates_tiny.json --workdir $(WORKDIR)

## The default test run (slow tests excluded); the 25 slowest tests are
## listed at the end (what to speed up or mark slow when CI grows). It runs on
## TEST_WORKERS pytest-xdist workers; `--dist loadfile` keeps each file on one
## worker, so a file's module fixtures (its trained runs) are built once; the
## session's shared runs (tests/conftest.py) are built once for all workers.
## TEST_WORKERS=0 runs in one process. Three workers on two cores, since much
## of the default run waits on child processes and file writes; the JAX and
## slow tests gain nothing from a third and run on LONG_TEST_WORKERS.
TEST_WORKERS ?= 3
LONG_TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile
LONG_XDIST := -n $(LONG_TEST_WORKERS) --dist loadfile
test: $(INSTALLED)
	$(PYTHON) -m pytest $(XDIST) --durations=25

## Line coverage of the package over the default tests (coverage.py; the
## total and the least covered modules in the terminal).
coverage: $(INSTALLED)
	$(PYTHON) -m pytest $(XDIST) -q --cov=keras_transformer --cov-report=term:skip-covered

## The longer tests (multi-process training, notebooks, the wheel in a fresh
## venv).
test-slow: $(INSTALLED)
	$(PYTHON) -m pytest $(LONG_XDIST) -m slow --durations=15

## The core's tests (layers, models, losses, schedules, metrics, backend) on
## the JAX backend; TensorFlow-only tests are skipped with their reason.
test-jax: $(INSTALLED)
	KERAS_BACKEND=jax $(PYTHON) -m pytest $(LONG_XDIST) tests/layers tests/models tests/test_schedules_losses_metrics.py tests/backend -q

## The package as users get it: build the sdist and the wheel, `twine check`
## them, install the wheel into a fresh venv with only keras, numpy and JAX
## (no TensorFlow), run `keras-transformer --help`, the README's usage
## example and a training step of the core there. Part of `make test-slow`.
test-core: $(INSTALLED)
	$(PYTHON) -m pytest -m slow -q tests/test_packaging.py

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(INSTALLED)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

docs: $(INSTALLED)
	$(VENV)/bin/mkdocs build --strict --site-dir site

## The sdist and the wheel in dist/, checked for the package index.
dist: $(INSTALLED)
	rm -rf dist
	$(PYTHON) -m build --outdir dist .
	$(PYTHON) -m twine check --strict dist/*

## Execute notebooks in full and store their outputs in examples/, e.g.
## make notebooks NOTEBOOKS="01_quickstart 04_distributed_training"
notebooks: $(INSTALLED)
	$(PYTHON) examples/execute_notebooks.py $(NOTEBOOKS)

bench: $(INSTALLED)
	$(PYTHON) benchmarks/train_step.py
	$(PYTHON) benchmarks/decode.py
	$(PYTHON) benchmarks/attention_scaling.py

clean:
	rm -rf site runs dist .pytest_cache
