# The README's commands. Each target creates the virtual environment on first use.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed-$(shell cksum setup.py | cut -d' ' -f1)
WORKDIR ?= runs/dates_tiny

.PHONY: setup demo test test-slow test-core test-jax lint format docs bench clean

$(INSTALLED): setup.py
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(INSTALLED)

## The main job: train the default model on the built-in task, evaluate it,
## print translations and where the TensorBoard logs are.
demo: $(INSTALLED)
	$(VENV)/bin/keras-transformer train configs/dates_tiny.json --workdir $(WORKDIR)

## The default test run (slow tests excluded).
test: $(INSTALLED)
	$(PYTHON) -m pytest

## The longer tests (multi-process training, full notebooks).
test-slow: $(INSTALLED)
	$(PYTHON) -m pytest -m slow

## The core's tests (layers, models, losses, schedules, metrics, backend) on
## the JAX backend; TensorFlow-only tests are skipped with their reason.
test-jax: $(INSTALLED)
	KERAS_BACKEND=jax $(PYTHON) -m pytest tests/layers tests/models tests/test_schedules_losses_metrics.py tests/backend -q

## The core on its own: a fresh venv with the package's core dependencies
## (keras, numpy) and JAX, no TensorFlow; builds a model and trains one step.
CORE_VENV ?= .venv-core
test-core:
	test -x $(CORE_VENV)/bin/python || python3 -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CORE_VENV)/bin/python -m pip install --quiet . "jax[cpu]>=0.10,<0.11"
	cd /tmp && KERAS_BACKEND=jax $(abspath $(CORE_VENV))/bin/python \
		$(abspath tests/scripts/core_without_tensorflow.py) --installed

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(INSTALLED)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

docs: $(INSTALLED)
	$(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(INSTALLED)
	$(PYTHON) benchmarks/train_step.py
	$(PYTHON) benchmarks/decode.py
	$(PYTHON) benchmarks/attention_scaling.py

clean:
	rm -rf site runs .pytest_cache
