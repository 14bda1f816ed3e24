# bpd: the user interface. Every target does its own setup on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.bpd-setup-stamp
# CPU machines get the CPU wheel pinned explicitly: an unpinned torch resolves to a multi-GB CUDA build.
CPU_TORCH ?= torch==2.13.0
export WANDB_MODE ?= offline
export PYTHONHASHSEED := 0

.PHONY: setup test test-all lint demo demo-sr bench figures reproduce reproduce-mt-small reproduce-sr-small \
        reproduce-mt reproduce-sr reproduce-paper clean-results help

help:
	@echo "make demo     - the main job on embedded data (CPU, ~15 min)"
	@echo "make test     - the test suite (CPU, <10 min)"
	@echo "make lint     - ruff"
	@echo "see README.md for the reproduction and benchmark targets"

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
	    echo "CUDA GPU found: installing torch from pyproject's range"; \
	else \
	    echo "no CUDA GPU: installing the CPU build $(CPU_TORCH)"; \
	    $(PY) -m pip install -q "$(CPU_TORCH)"; \
	fi
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

test: setup
	WANDB_MODE=disabled $(PY) -m pytest -m "not slow" -x -q tests

test-all: setup
	WANDB_MODE=disabled $(PY) -m pytest -q tests

lint: setup
	$(VENV)/bin/ruff check bpd experiments analysis tests
