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
NODE_STAMP := node_modules/.installed

.PHONY: help install test lint typecheck layers unit kube-bin demo simulate synth package bootstrap deploy bench clean validate

help:
	@echo "make demo   - run the autoscaler locally on the 'inflate' example, then replay it in virtual time (no AWS account needed)"
	@echo "make simulate SCENARIO=hpa-burst - replay simulator/scenarios/<name>.yaml: timeline, summary, simulation.png"
	@echo "make test   - install everything, then lint, type-check, check layers and run the tests"
	@echo "make synth  - validate clusters/$(CLUSTER).yaml, then synthesise and lint the CloudFormation template into cdk.out/ (no AWS credentials, no Docker)"
	@echo "make package - synth with the real Lambda asset (pip-installs the arm64 dependencies)"
	@echo "make bootstrap CLUSTER=name - cdk bootstrap your credentials' account in the region of clusters/<name>.yaml"
	@echo "make deploy CLUSTER=name - cdk deploy the stack for clusters/<name>.yaml"
	@echo "make bench  - run the benchmarks and print JSON"

$(PY_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[cdk,dev]'
	@touch $@

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
	@$(PY) -m pytest -n 2 --durations=15; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

test: install lint typecheck layers unit

demo: $(PY_STAMP)
	$(PY) -m simulator.demo
	$(PY) -m simulator.simulate simulator/scenarios/inflate.yaml --plot simulation.png

SCENARIO ?= inflate
simulate: $(PY_STAMP)
	$(PY) -m simulator.simulate simulator/scenarios/$(SCENARIO).yaml --plot simulation.png $(ARGS)

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

bench: $(PY_STAMP)
	@# Each benchmark prints one JSON object; run them as modules of the work tree.
	@for b in benchmarks/*.py; do \
	  case $$b in */_*|*/__init__.py) continue;; esac; \
	  m=$${b%.py}; PYTHONPATH=functions:. $(PY) -m $${m//\//.} || exit 1; \
	done

clean:
	rm -rf $(VENV) node_modules cdk.out .pytest_cache .mypy_cache .ruff_cache
