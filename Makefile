# Two commands on a fresh Debian 12 machine: `make run` and `make test` (see README.md).
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup run test bench doctor clean

setup:
	@bash tools/setup.sh

run: setup
	$(BIN)/guestbench scenario scenarios/startup.yaml

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: setup
	$(BIN)/guestbench scenario scenarios/uml-vs-kvm.yaml

doctor: setup
	$(BIN)/guestbench doctor

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
