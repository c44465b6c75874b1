# hrl-scheduler — the commands users run (DESIGN.md section 4). Everything installs into ./.venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test lint fuzz bench bench-quick bench-sim bench-topology bench-scheduler bench-descheduler bench-envs train controlplane scheduler-plugin images image-tools chart manifests e2e-kind clean help

help:
	@echo "make demo             install (runtime only, no torch) and run the main job on Online Boutique"
	@echo "make test             install (with [train,test]) and run the whole test suite (lint included)"
	@echo "make lint             ruff (lint + format check), the complexity budget, the import contracts, mypy"
	@echo "make fuzz             >= 100,000 generated requests and files against the extender and every parser, held"
	@echo "                      connections and 32-512 connections at 10x the extender's capacity (needs Go)"
	@echo "make bench            the policy benchmark, every scenario family (hours) -> BENCHMARKS.md, benchmarks/"
	@echo "make bench-quick      the same, smaller (policy/data/bench/plan.yaml, mode quick; ~30 min on 2 cores)"
	@echo "make bench-sim        simulator speed, discrete-event cross-check, calibration error (~13 min)"
	@echo "make bench-topology   graph encoder time vs size, gRPC cache latency, encoder held-out error"
	@echo "make bench-envs       reference returns of the Gymnasium environments (random, kube-scheduler, HPA, shipped)"
	@echo "make bench-scheduler  the extender's cost to kube-scheduler, caller-side latency, server comparison"
	@echo "make bench-descheduler  the descheduler at 100/1,000/5,000 synthetic nodes and its API requests per cycle"
	@echo "make train            train the learned stacks -> policy/bundles/"
	@echo "make controlplane     build the control planes of both Kubernetes minors and helm into the cache"
	@echo "make scheduler-plugin build kube-scheduler with the HRLScore plugin into the cache (after controlplane)"
	@echo "make images           the extender, descheduler and embedding-cache images (podman; Debian base built here)"
	@echo "                      -> OCI archives out/images/*.oci.tar, digests in out/images/images.json"
	@echo "make chart            helm package the chart -> out/charts/hrl-scheduler-VERSION.tgz"
	@echo "make manifests        regenerate the kustomize manifests from the Helm chart (hack/gen-manifests.py)"
	@echo "make e2e-kind         the control-plane scenarios on a kind cluster (needs Docker)"

$(VENV)/.runtime: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e .
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.runtime
	$(PIP) install -e '.[train,test]'
	touch $@

$(VENV)/.bench: pyproject.toml $(VENV)/.test
	$(PIP) install -e '.[train,test,bench]'
	touch $@

demo: $(VENV)/.runtime
	$(PY) hack/demo.py

# Both Kubernetes minors of the version-skew tests (hack/controlplane/k8s*), and helm for the chart tests.
controlplane:
	hack/build-controlplane.sh --all
	hack/build-helm.sh

# kube-scheduler with the HRLScore plugin (scheduler-plugin/), after the control plane: the Kubernetes packages come
# from the Go build cache that build filled (the same module versions and flags), cached by version and source.
scheduler-plugin: controlplane
	hack/build-scheduler-plugin.sh

# the images (hack/build-images.sh: podman, mmdebstrap; reproducible, OCI archives under out/images)
images:
	hack/build-images.sh

# podman, mmdebstrap, runc and containers.conf for the image tests (tests/integration/test_images.py). Without root
# the tests skip with the reason, except in CI (CI or HRL_REQUIRE_IMAGES set), where this step must succeed.
image-tools:
	@hack/install-image-tools.sh >/dev/null || { rc=$$?; if [ -n "$$CI$$HRL_REQUIRE_IMAGES" ]; then exit $$rc; fi; \
	  echo "make: the image tools could not be installed (exit $$rc): the image tests will be skipped" >&2; }

# the chart as a package (helm package), with the values schema, the generated checks and manifests checked first,
# and the shipped values.yaml read as a user's values file is (no duplicate key, which Helm keeps the last of)
chart: $(VENV)/.test
	$(PY) hack/gen-manifests.py --check
	$(PY) hack/check-values.py manifests/charts/hrl-scheduler/values.yaml
	mkdir -p out/charts
	"$$(hack/build-helm.sh | tail -n1)" package manifests/charts/hrl-scheduler -d out/charts

manifests: $(VENV)/.test
	$(PY) hack/gen-manifests.py

test: $(VENV)/.test controlplane scheduler-plugin lint image-tools
	hack/install-prometheus.sh >/dev/null
	hack/install-pushgateway.sh >/dev/null
	VENV=$(VENV) hack/check-collection.sh
	$(PY) -m pytest -q

# lint: ruff (rules and formatting, pyproject.toml [tool.ruff]), the complexity budget (hack/complexity-allowlist.txt,
# which only shrinks), the architecture contracts (import-linter) and mypy on the serving paths ([tool.mypy])
lint: $(VENV)/.test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) hack/check-complexity.py
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/mypy

# fuzz: hostile inputs against a running hrl-extender (HTTP), every parser and app build, then held connections and
# 32-512 connections at 10x its capacity (hack/extender-load, Go) -> section `fuzz` of BENCHMARKS.md
fuzz: $(VENV)/.test
	OMP_NUM_THREADS=1 $(PY) hack/fuzz.py --total $${FUZZ_TOTAL:-100000}

# the policy benchmark: the plan's cells (policy/data/bench/plan.yaml: scenarios x apps x traces x stacks x seeds)
# -> section `policy` of BENCHMARKS.md, benchmarks/summary.json, benchmarks/<scenario>/*.png
bench: $(VENV)/.test
	OMP_NUM_THREADS=1 $(PY) -m policy.bench --full

bench-quick: $(VENV)/.test
	OMP_NUM_THREADS=1 $(PY) -m policy.bench --quick

bench-sim: $(VENV)/.test
	OMP_NUM_THREADS=1 $(PY) -m policy.bench.sim

bench-topology: $(VENV)/.test
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(PY) -m policy.bench.topology

# reference returns of the Gymnasium environments (random, kube-scheduler, HPA, the shipped policy) -> section
# "rl-environments" of BENCHMARKS.md (a few minutes)
bench-envs: $(VENV)/.test
	OMP_NUM_THREADS=1 $(PY) -m policy.bench.envs --json benchmarks/rl-environments.json

# the extender's cost to kube-scheduler and plugin mode's side by side (real control plane), the extender's
# caller-side latency (hack/extender-load, Go), the server and decoder comparisons (granian, orjson: the [bench]
# extra) -> section "scheduler" of BENCHMARKS.md
bench-scheduler: $(VENV)/.bench controlplane scheduler-plugin
	$(PY) hack/bench-scheduler.py

bench-descheduler: $(VENV)/.test controlplane
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(PY) -m policy.bench.descheduler --controlplane

train: $(VENV)/.test
	OMP_NUM_THREADS=1 $(VENV)/bin/hrl-policy train --all

e2e-kind:
	hack/e2e-kind.sh

clean:
	rm -rf out/ .pytest_cache build dist *.egg-info
