# Two commands for a fresh machine (see README.md):
#   make run   — install, then serve the embedded default (SQLite + local runner) with the example tools
#   make test  — install, then lint, type-check, build the test control plane (cached; needs Go), run the
#                tests and the official conformance scenarios against the embedded and the Kubernetes gateway
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test lint typecheck controlplane objectstore promtool node pytest conformance bench bench-kubernetes clean

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

# kube-apiserver, kube-controller-manager, kubectl and etcd built from Go modules into ~/.cache/mcp-tasks
# (about 6 min the first time on 2 cores, a no-op after), and the identity provider the identity tests run
# against (ory hydra, about 1 min cold; needs a C compiler). Without Go the tests that need them skip, saying why.
controlplane:
	@if command -v go >/dev/null; then bash tests/controlplane/build.sh >/dev/null && bash tests/identity/build.sh >/dev/null; \
	else echo "Go not found: the tests that need a real kube-apiserver or identity provider will be skipped"; fi

# SeaweedFS's `weed`, the S3-compatible server the artifact tests run against, built from Go modules into
# ~/.cache/mcp-tasks (about 4 min the first time on 2 cores, a no-op after). Without Go those tests skip.
objectstore:
	@if command -v go >/dev/null; then bash tests/objectstore/build.sh >/dev/null; \
	else echo "Go not found: the tests that need an S3-compatible server will be skipped"; fi

# Prometheus's promtool, which the alert tests run the chart's PrometheusRule through (`promtool test rules`),
# built from Go modules into ~/.cache/mcp-tasks (about 2 min cold on 2 cores with `-tags remove_all_sd`, a no-op after). Without Go those tests skip.
promtool:
	@if command -v go >/dev/null; then bash tests/alerts/build.sh >/dev/null; \
	else echo "Go not found: the alert tests (promtool test rules) will be skipped"; fi

# The real node's set-up (tests/node/, docs/kubernetes.md §10): the Debian packages it needs (installed as
# root, else named with the command that installs them), kubelet, kube-scheduler, kube-proxy and CoreDNS
# built from Go modules into ~/.cache/mcp-tasks/node (~18 min the first time, a no-op after), the image's
# Debian base and wheelhouse (~8 min the first time). Without root or Go the real-node tests skip, saying why.
node: install
	@if [ "$$(id -u)" = 0 ] && command -v go >/dev/null; then bash tests/node/packages.sh && \
		bash tests/node/build.sh >/dev/null && $(BIN)/python -m tests.node.images >/dev/null; \
	else bash tests/node/packages.sh --check; echo "not root or Go not found: the real-node tests will be skipped"; fi

pytest: install controlplane objectstore promtool node
	timeout 2700 $(BIN)/pytest -q

conformance: install controlplane
	timeout 1200 bash conformance/run.sh
	timeout 1200 bash conformance/run.sh --kubernetes

test: lint typecheck pytest conformance

# bench.versus_fastmcp installs FastMCP + fastmcp-tasks into ~/.cache/mcp-tasks/bench-fastmcp (its own venv) and
# A/Bs this tree against BASELINE (a commit; default the last release tag, else origin/main); it exits 1 on a
# FAIL or a NOISY run (rounds spread over 20%), after printing every figure
bench: install
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.warm
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
