# One entry point for the developer loop. `make test` is the README's test command.
PY ?= python3
export PATH := $(CURDIR)/.tools/bin:$(PATH)

.PHONY: install native test lint typecheck unit integration generate bench example lock clean

install:            ## torch (CPU), the project with extras, and the helm binary
	bash scripts/dev-install.sh

native:             ## (re)build the optional C kernels in place (distgnn._native; install does too)
	$(PY) setup.py -q build_ext --inplace

test: install native lint typecheck   ## install, (re)build the C kernels, lint, type-check, then the whole suite
	$(PY) -m pytest -q tests

lint:
	$(PY) -m ruff check runtime operator tests bench
	$(PY) -m ruff format --check runtime operator tests bench

typecheck:
	$(PY) -m mypy

unit:
	$(PY) -m pytest -q tests/unit

integration:
	$(PY) -m pytest -q tests/integration

generate:           ## regenerate crds/ and the chart's CRD templates from distgnn.api
	$(PY) -m distgnn.api.generate

bench:              ## every benchmark, each printing a table
	$(PY) bench/run_all.py

example:            ## the README's main job
	distgnn run examples/cora-graphsage.yaml

lock:               ## record the installed versions as the tested constraints
	{ echo "# Versions the test suite last passed with (a fresh venv, 'make test')."; \
	  echo "# Used as pip constraints by scripts/dev-install.sh; regenerate with 'make lock'."; \
	  $(PY) -m pip freeze --exclude-editable | grep -v '^distgnn'; } > constraints.txt

clean:
	rm -rf .tools .pytest_cache .mypy_cache .ruff_cache build *.egg-info runtime/distgnn/_native*.so
