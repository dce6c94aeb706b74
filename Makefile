# Two commands matter to a newcomer: `make demo` and `make test`. Everything else is for developers.
# Targets create and reuse .venv and node_modules; nothing needs to be installed by hand
# beyond Python 3.11+ and Node.js.
SHELL := /bin/bash
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 18,20
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PY_STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
PLOT_STAMP := $(VENV)/.installed-plot
NODE_STAMP := node_modules/.installed
# uv installs the locked packages (uv.lock: every package of every extra, with the hashes of every
# platform's wheels). It is itself pinned with hashes in requirements/tools.txt and installed from PyPI into
# .tools/ (not .venv: syncing .venv to the lock would remove it). Bump it: UV_VERSION here and
# [tool.uv].required-version in pyproject.toml, then make lock.
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
PIP_QUIET := --quiet --disable-pip-version-check
# The machine's Python, never one uv would download; quiet, and no hard links across file systems.
export UV_PYTHON_DOWNLOADS := never
export UV_LINK_MODE := copy
UV_SYNC := $(UV) sync --frozen --quiet --python $(PY)

.PHONY: help install lock test lint typecheck layers unit kube-bin demo simulate synth package bootstrap deploy bench clean validate browser prices

help:
	@echo "make demo   - run the autoscaler locally on the 'inflate' example, then replay it in virtual time (no AWS account needed)"
	@echo "make simulate SCENARIO=hpa-burst - replay simulator/scenarios/<name>.yaml: timeline, summary, simulation.png and simulation.html"
	@echo "make test   - install everything, then lint, type-check, check layers and run the tests"
	@echo "make lock   - re-resolve uv.lock and requirements/ from pyproject.toml's ranges (after editing dependencies)"
	@echo "make synth  - validate clusters/$(CLUSTER).yaml, then synthesise and lint the CloudFormation template into cdk.out/ (no AWS credentials, no Docker)"
	@echo "make package - synth with the real Lambda asset (pip-installs the arm64 dependencies)"
	@echo "make bootstrap CLUSTER=name - cdk bootstrap your credentials' account in the region of clusters/<name>.yaml"
	@echo "make deploy CLUSTER=name - cdk deploy the stack for clusters/<name>.yaml"
	@echo "make bench  - run the benchmarks and print JSON"

# With the machine's pip when it has one (--target: no venv, so no copy of pip to install first, which is
# most of this step's CPU); else in a venv of its own.
$(UV): requirements/tools.txt
	@PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install $(PIP_QUIET) --require-hashes --upgrade --target $(TOOLS) \
	  -r requirements/tools.txt 2>/dev/null || \
	{ $(PYTHON) -m venv $(TOOLS) && $(TOOLS)/bin/pip install $(PIP_QUIET) --require-hashes -r requirements/tools.txt; }
	@touch $@

# Without pip: uv installs the packages, and only make package needs pip (added by make install, below).
$(PY):
	@$(PYTHON) -m venv --without-pip $(VENV)

# Exactly the lock's packages (plus the project, editable): what CI tested is what a clone installs.
# infra/bundling.py runs this venv's pip to fetch the Lambda's arm64 wheels (make package).
$(PY_STAMP): uv.lock | $(UV) $(PY)
	@echo "Installing the locked packages into $(VENV)/ (uv.lock, every extra)"
	@$(UV_SYNC) --all-extras
	@$(PY) -m pip --version > /dev/null 2>&1 || $(PY) -m ensurepip --default-pip > /dev/null
	@touch $@ $(DEMO_STAMP) $(PLOT_STAMP)

# The demo's share of the lock only (runtime + the demo extra); --inexact keeps what make install added.
$(DEMO_STAMP): uv.lock | $(UV) $(PY)
	@echo "Installing the demo's locked packages into $(VENV)/ (uv.lock: run-time + demo extra)"
	@$(UV_SYNC) --inexact --extra demo
	@touch $@

# make simulate also draws simulation.png: the demo's packages plus matplotlib (the plot extra).
$(PLOT_STAMP): uv.lock | $(UV) $(PY)
	@$(UV_SYNC) --inexact --extra demo --extra plot
	@touch $@ $(DEMO_STAMP)

# After editing pyproject.toml's dependencies: resolve them (keeping every pin that still fits; add
# ARGS=--upgrade to take the newest of everything), then export the Lambda's share for infra/bundling.py.
lock: | $(UV)
	$(UV) lock --python $(PYTHON) $(ARGS)
	$(UV) export --frozen --quiet --no-dev --no-emit-project --no-header --no-annotate \
	  --format requirements-txt -o requirements/lambda.txt
	echo "uv==$(UV_VERSION)" | $(UV) pip compile --quiet --universal --generate-hashes --no-header --no-annotate \
	  - -o requirements/tools.txt

$(NODE_STAMP): package.json
	npm install --no-audit --no-fund --loglevel=error
	@touch $@

install: $(PY_STAMP) $(NODE_STAMP)

lint: $(PY_STAMP)
	$(BIN)/ruff check .

typecheck: $(PY_STAMP)
	$(BIN)/mypy

layers: $(PY_STAMP)
	PYTHONPATH=functions:. $(BIN)/lint-imports

# The upstream control plane the contract suite and tests/e2e/real_kube run against (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager), built once from the Go module proxy into a cache outside the
# work tree (tools/kube/build.sh; docs/development.md has the build time and size).
kube-bin:
	@bash tools/kube/build.sh > /dev/null

unit: $(PY_STAMP) kube-bin
	@# pytest exits 5 when it collected no test: that is a failure here, never a pass.
	@# Two workers: CI has two cores, and most of the suite waits on moto, the emulator and CDK synthesis.
	@# Each worker that runs a test on the real control plane starts its own (tests/real_kube.py).
	@# worksteal: each worker starts with half of the tests in order and an idle one takes the second half of
	@# the other's queue, where the default (load) leaves one worker idle while the other works through the
	@# tests it was handed last (docs/development.md).
	@$(PY) -m pytest -n 2 --dist worksteal --durations=15; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

# The HTML report's test opens it in headless Chromium (Debian's package); installed when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { echo "installing chromium for the HTML report's test"; \
	    $$(command -v sudo >/dev/null 2>&1 && [ "$$(id -u)" != 0 ] && echo sudo) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$(command -v sudo >/dev/null 2>&1 && [ "$$(id -u)" != 0 ] && echo sudo) \
	      apt-get install -y -qq chromium; }

test: install browser lint typecheck layers unit

# One process for the demo and its replay: one interpreter start and one set of imports (docs/development.md).
demo: $(DEMO_STAMP)
	@$(PY) -m simulator.demo --replay simulator/scenarios/inflate.yaml --report simulation.html
	@echo "HTML report: file://$(CURDIR)/simulation.html (open it in a browser)"

SCENARIO ?= inflate
simulate: $(PLOT_STAMP)
	$(PY) -m simulator.simulate simulator/scenarios/$(SCENARIO).yaml --plot simulation.png --report simulation.html $(ARGS)

# synth skips the dependency bundling (fast, offline after install); package and deploy bundle for real.
CLUSTER ?= demo
synth: install
	@# Every problem of the cluster file, with its line, before CDK runs (docs/configuration.md).
	PYTHONPATH=functions:. $(PY) -m autoscaler.cli validate clusters/$(CLUSTER).yaml
	rm -rf cdk.out
	npx --no-install cdk synth --quiet -c cluster=$(CLUSTER) -c skipBundling=true > /dev/null
	$(BIN)/cfn-lint cdk.out/*.template.json
	@echo "CloudFormation template written to cdk.out/ (cfn-lint passed; asset not bundled: use make package)"

package: install
	rm -rf cdk.out
	npx --no-install cdk synth --quiet -c cluster=$(CLUSTER) > /dev/null
	$(BIN)/cfn-lint cdk.out/*.template.json
	@echo "Template and bundled Lambda asset written to cdk.out/"

# cdk bootstrap without an environment bootstraps the app's stack environment: the cluster file's region (and
# account, else your credentials' account). Bundling is skipped: bootstrapping needs only the template.
bootstrap: install
	npx --no-install cdk bootstrap -c cluster=$(CLUSTER) -c skipBundling=true

deploy: install
	PYTHONPATH=functions:. $(PY) -m autoscaler.cli validate clusters/$(CLUSTER).yaml
	npx --no-install cdk deploy -c cluster=$(CLUSTER)

# make validate FILES="clusters/x.yaml karpenter/*.yaml snapshot.json"
validate: $(PY_STAMP)
	PYTHONPATH=functions:. $(PY) -m autoscaler.cli validate $(or $(FILES),clusters/$(CLUSTER).yaml)

# The on-demand price table bundled as the Price List API's fallback (scripts/price_table.py): from the API
# for PRICE_REGIONS when AWS credentials are configured, else from the shared price data the tests use.
PRICE_REGIONS ?= us-east-1 us-east-2 us-west-1 us-west-2 eu-west-1 eu-central-1 ap-southeast-1 ap-northeast-1
prices: $(PY_STAMP)
	@if PYTHONPATH=functions:. $(PY) -c 'import boto3, sys; sys.exit(boto3.Session().get_credentials() is None)'; then \
	  PYTHONPATH=functions:. $(PY) scripts/price_table.py --from-api $(PRICE_REGIONS); \
	else \
	  echo "no AWS credentials: the table is made from simulator/data/ec2-on-demand-prices.json" >&2; \
	  PYTHONPATH=functions:. $(PY) scripts/price_table.py; \
	fi

bench: $(PY_STAMP)
	@# Each benchmark prints one JSON object; run them as modules of the work tree.
	@for b in benchmarks/*.py; do \
	  case $$b in */_*|*/__init__.py) continue;; esac; \
	  m=$${b%.py}; PYTHONPATH=functions:. $(PY) -m $${m//\//.} || exit 1; \
	done

clean:
	rm -rf $(VENV) $(TOOLS) node_modules cdk.out .pytest_cache .mypy_cache .ruff_cache
