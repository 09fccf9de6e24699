# Two commands on a fresh Debian 12 machine: `make run` and `make test` (see README.md).
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: setup lint run test test-long check soak soak-tools bench e1 doctor docs clean

# Bytecode caches in this checkout (__pycache__, ignored by git), whatever the environment says: without them every
# guestbench process (each CLI call, each UML launch's hypervisor program, each fleet worker) compiles guestbench
# from source, and every pytest process rewrites every test module's asserts again (measured here 2026-11-26,
# medians: `guestbench --help` 0.78 CPU-s against 0.58 (n=6 each), collecting make check's tests 8.3 CPU-s against
# 4.1 (n=3 each)).
unexport PYTHONDONTWRITEBYTECODE

setup:
	@bash tools/setup.sh

run: setup
	$(BIN)/guestbench scenario scenarios/startup.yaml

# The suite (what CI runs; its budget is 25 minutes on a slow day, docs/development.md): the few tests that judge the
# whole machine (its load, libvirtd, the noise of UML's start-up) by themselves first, then the rest on TEST_WORKERS
# pytest-xdist workers, a module to a worker at a time. Both runs share one root (GUESTBENCH_TEST_SESSION: the cache
# of probe verdicts, payloads and wrappers), removed however the recipe ends. It ends with its wall time and the
# day's tcg start-up median. A first run interrupted (status 2 and up but 5, none selected) stops it there.
# Four workers on two cores: tests often wait on a guest (a UML appliance answers one request at a time, a run
# sleeps in a slower hypervisor). Measured 2026-11-26, fresh clones: with 3 the machine was 81 % busy over the run and
# each test took 1.33 times as long as with 2 (parallel part 27 min 32 s against 30 min 41 s); with 4, 87 % busy, each
# test 1.25 times as long as with 3, and the parallel part 27 min 17 s against 28 min 39 s (the same tests).
TEST_WORKERS ?= 4
test: lint
	@export GUESTBENCH_TEST_SUITE_STARTED=$$(date +%s) GUESTBENCH_TEST_SESSION=$$(mktemp -d /var/tmp/gbtest-XXXXXXXX); \
	trap 'rm -rf --one-file-system "$$GUESTBENCH_TEST_SESSION"' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	chmod 755 "$$GUESTBENCH_TEST_SESSION"; \
	$(BIN)/python -m pytest -m "alone and not long" $(PYTEST_ARGS); alone=$$?; \
	case $$alone in 0|1|5) ;; *) exit $$alone;; esac; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not long and not alone" $(PYTEST_ARGS); rest=$$?; \
	if [ $$rest -eq 5 ]; then rest=$$alone; fi; \
	if [ $$alone -eq 1 ] && [ $$rest -eq 0 ]; then rest=1; fi; \
	exit $$rest

# Tests marked long (pytest -m long), kept out of make test for its 25-minute budget (issue 32): the nested scenario (a UML
# launch inside the TCG level-1 guest takes about 4 min), KVM probed inside the level-1 guest (13.5 min when every
# attempt stalls), and variations whose path the suite covers another way (docs/development.md).
test-long: setup
	$(BIN)/python -m pytest -m long $(PYTEST_ARGS)

# What keeps the code as docs/development.md describes it, before any test: ruff (pycodestyle, pyflakes, bugbear; lines of
# 120 characters) over the code, its tests and tools, and mypy over guestbench (every function typed; pyproject.toml).
# About 20 s the first time, under a second after that.
lint: setup
	$(BIN)/ruff check guestbench tests tools benchmarks
	$(BIN)/mypy

# The fast tier for a developer's loop: every test that launches no appliance and starts no hypervisor
# (architecture limits, scenario and results parsing, reports and their HTML in headless Chromium, the
# protocol, dry runs), in a few minutes. `make test` is the whole suite, what CI runs.
check: lint
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not launch" $(PYTEST_ARGS)

# The leak soak (scenarios/soak.yaml, 74 min here): 200 start-ups alternating UML and TCG and 200 verified
# uploads under guestbench.run.leaks, which prints what guestbench's processes and the host gained (fds, threads, RSS,
# temp entries, loop devices, libvirt domains, hypervisor processes): exit status 1 on any leak or failure.
soak: setup
	$(BIN)/python tools/soak.py scenarios/soak.yaml

# Long runs kept out of `make test`: libguestfs's own tools and E1's fifth row, on the host and inside a
# level-1 VM (hours where that VM runs on TCG: one nested api-suite sample is ~10 min on UML, 1–2 h on TCG). Every sample
# goes to results/ as it is taken, so an interrupted run keeps what it measured.
soak-tools: setup
	$(BIN)/guestbench scenario scenarios/virt-tools.yaml
	$(BIN)/guestbench scenario scenarios/seeds/api-suite.yaml

# pytest-benchmark regression run (benchmarks/); saves every run with its raw samples in .benchmarks/ and,
# from the second run on, prints the comparison with the previous one, then the history of every saved run
# (guestbench history: steps, where each started, what changed). BENCH_ARGS adds pytest options, e.g.
# BENCH_ARGS=--benchmark-compare-fail=median:15% to fail on a slowdown (see docs/regression.md).
bench: setup
	@args="--benchmark-autosave --benchmark-save-data"; \
	if ls .benchmarks/*/[0-9][0-9][0-9][0-9]_*.json >/dev/null 2>&1; then args="$$args --benchmark-compare"; fi; \
	echo "$(BIN)/python -m pytest benchmarks $$args $(BENCH_ARGS)"; \
	$(BIN)/python -m pytest benchmarks $$args $(BENCH_ARGS)
	@if [ "$$(ls .benchmarks/*/[0-9][0-9][0-9][0-9]_*.json 2>/dev/null | wc -l)" -ge 2 ]; then \
	echo "$(BIN)/guestbench history .benchmarks"; $(BIN)/guestbench history .benchmarks; \
	else echo "guestbench history: one saved run so far; its history starts with the next make bench"; fi

# Experiment E1 at the published sizes on every usable backend (guestbench scenario).
e1: setup
	$(BIN)/guestbench scenario scenarios/uml-vs-kvm.yaml

doctor: setup
	$(BIN)/guestbench doctor

# Documents written from the code: the scenario reference (tests/test_docs.py fails when it is stale).
docs: setup
	$(BIN)/python -m guestbench.output.scenario_reference > docs/scenario-reference.md

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
