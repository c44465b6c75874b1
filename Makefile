# hrl-scheduler — the commands users run (DESIGN.md section 4). Everything installs into ./.venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test bench bench-quick bench-scheduler train controlplane clean help

help:
	@echo "make demo             install (runtime only, no torch) and run the main job on Online Boutique"
	@echo "make test             install (with [train,test]) and run the whole test suite"
	@echo "make bench            the policy benchmark -> BENCHMARKS.md, benchmarks/summary.json, plots"
	@echo "make bench-quick      a smaller policy benchmark (< 10 min)"
	@echo "make bench-scheduler  kube-scheduler throughput with/without the extender (real control plane)"
	@echo "make train            train the learned stacks -> policy/bundles/"
	@echo "make controlplane     build the control-plane binaries into the cache (hack/build-controlplane.sh)"

$(VENV)/.runtime: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e .
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.runtime
	$(PIP) install -e '.[train,test]'
	touch $@

demo: $(VENV)/.runtime
	$(PY) hack/demo.py

controlplane:
	hack/build-controlplane.sh

test: $(VENV)/.test
	$(PY) -m pytest -q

bench: $(VENV)/.test
	$(PY) -m policy.bench --full

bench-quick: $(VENV)/.test
	$(PY) -m policy.bench --quick

bench-scheduler: $(VENV)/.test
	$(PY) hack/bench-scheduler.py

train: $(VENV)/.test
	$(VENV)/bin/hrl-policy train --all

clean:
	rm -rf out/ .pytest_cache build dist *.egg-info
