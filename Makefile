PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean system-packages

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml setup.py $(wildcard src/openetw/_native/*.c src/openetw/_native/*.h)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: lint system-packages
	$(BIN)/python -m pytest -q

# Debian packages some tests need (a browser, a NATS server; the kernel headers' system call
# names for the syscall probes; llvm-pdbutil, the PDB reader the symbol tests compare with; gcc for
# the programs the stack tests profile): installed when missing and running as root, as CI does;
# otherwise named once, and the tests that need them skip saying why.
SYSTEM_PACKAGES := chromium nats-server linux-libc-dev llvm gcc
system-packages:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else \
	    echo "missing Debian packages:$$missing (the tests that need them skip)"; \
	fi

# Static checks (docs/checks.md), run before the tests.
lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy src

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build src/*.egg-info
