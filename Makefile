# Two entry points that set everything up on a fresh machine:
#   make demo   install, then complete one mid-word sentence with the default model
#   make test   install with the test extras (and the VS Code test's Node packages), then pytest
#   make test-fast   the same install, then every test that does not need the real model (< 30 s)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install install-test demo test test-fast bench bench-quick

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

install: $(PY)
	$(PY) -m pip install --quiet --find-links "$$(scripts/llama-wheel.sh $(PY))" -e .

install-test: $(PY)
	$(PY) -m pip install --quiet --find-links "$$(scripts/llama-wheel.sh $(PY))" -e '.[test,bench]'
	cd editors/vscode && npm ci --no-audit --no-fund --silent

demo: install
	$(PY) -m lsp_server complete --text "Thanks for sending over the draft yest"

test: install-test
	$(PY) -m pytest -q

test-fast: install-test
	$(PY) -m pytest -q -m "not model"

bench: install-test
	$(PY) -m bench

bench-quick: install-test
	$(PY) -m bench --quick
