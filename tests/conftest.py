"""Shared test set-up: a private cache and temp root per test session (helpers.session), the leak checks' fixture,
the fixtures several modules take (a sticky shared directory, the nested run's printer), and the suite's hooks: its
timeline, each phase's CPU seconds, the modules' order, what is left on the host at its end. Helpers the tests call
live in tests/helpers (imported as `from helpers.x import y`); only fixtures and hooks are here.

Tests launch real appliances (TCG here; User-Mode Linux later). Everything guestbench creates on the
host lives under GUESTBENCH_TMPDIR, so "nothing leaked" is checkable: no run directory left there,
and no process whose command line mentions it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Iterator

import pytest

# first: it clears a user's own settings and makes the session's roots, before any test is collected
from helpers.session import OWN, ROOT_OWNED, SESSION_TMP, TIMELINE, WORKER, cpu_s, made_by, session_tmp_path
from helpers.dirs import sticky_dir
from helpers.leaks import socket_dirs, wait_no_leftovers
from suite_day import SuiteDay
from timeline import scratch_files

if TYPE_CHECKING:
    import io

    from guestbench.run.nested import Merger, NestedPlacement


def pytest_configure(config: pytest.Config) -> None:
    if not WORKER and getattr(config.option, "numprocesses", None):  # xdist's controller relays its workers'
        TIMELINE.broken = "the xdist controller: its workers write the timeline"  # test events: not its own


_CPU_MARK = [0.0]


def pytest_runtest_logstart(nodeid: str) -> None:
    TIMELINE.start(nodeid)
    _CPU_MARK[0] = cpu_s()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each phase's CPU seconds ride on its report (GUESTBENCH_TEST_TIMES): on two cores they, more than the wall
    times of tests that share the machine, are what the suite's time is made of."""
    outcome = yield
    now = cpu_s()
    outcome.get_result().user_properties.append(("cpu_s", now - _CPU_MARK[0]))  # type: ignore[attr-defined]
    _CPU_MARK[0] = now


def pytest_runtest_logfinish(nodeid: str) -> None:
    TIMELINE.end(nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With GUESTBENCH_TEST_TIMES=FILE, each phase of each test appends its wall and CPU seconds there as it ends: a
    run that is stopped (CI's limit) still says where its time went, which --durations only prints at the end."""
    path = os.environ.get("GUESTBENCH_TEST_TIMES")
    cpu = dict(report.user_properties).get("cpu_s")
    cpu = cpu if isinstance(cpu, float) else None
    # written once: by the xdist controller, or by a run without workers
    if path and max(report.duration, cpu or 0.0) >= 1.0 and "PYTEST_XDIST_WORKER" not in os.environ:
        with open(path, "a") as f:
            cpu_text = "     -" if cpu is None else f"{cpu:6.1f}"
            f.write(f"{report.duration:8.1f} {cpu_text} {report.when:8} {report.outcome:7} {report.nodeid}\n")


# Under `pytest -n N --dist loadfile` (make test) a module's tests stay on one worker, so its module fixtures (a
# booted level-1 guest, a fleet, a run of every workload) are made once. The longest modules (seconds on one worker,
# GUESTBENCH_TEST_TIMES of 2026-11-26, four workers) go first, so that the workers end together rather than one
# finishing a long module alone (with --no-loadscope-reorder: else xdist hands out the modules with the most tests
# first); test_owned well after test_nested, whose level-1 build holds the lock on the host path both plant (a
# worker waited 111 s on it when they started together).
# Not --dist loadgroup: pytest-xdist 3.8 cannot group under pytest 9, whose node ids it no longer rewrites.
_LONGEST = ("test_workload_run.py", "test_fleet.py", "test_faults.py", "test_nested.py", "test_uml.py",
            "test_storage_guest.py", "test_exec.py", "test_api_suite.py", "test_density.py", "test_order.py",
            "test_run_tcg.py", "test_compare_runs.py", "test_signals.py", "test_owned.py", "test_command.py",
            "test_backends.py", "test_appliance.py", "test_soak.py", "test_pytest_plugin.py", "test_ab.py",
            "test_fleet_security.py", "test_usage.py", "test_runner.py", "test_phases.py", "test_nested_live.py",
            "test_storage_host.py", "test_vhost_console.py", "test_supervisor.py", "test_uml_hv.py",
            # make check's longest (CLI processes, Chromium), then the rest
            "test_hostile_results.py", "test_hostile_inputs.py", "test_dryrun.py", "test_workloads.py",
            "test_report_browser.py", "test_safe_outputs.py", "test_htmlreport.py", "test_sweep.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: k for k, name in enumerate(_LONGEST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a module keeps its own order


_DAY = SuiteDay()
# Programs' temporary files outside every work dir when the session began (tests/timeline.py's SCRATCH): one more at
# its end was left by a killed program of some test, which no test's own check looks for; it fails the session.
_SCRATCH_BEFORE = scratch_files()
_SCRATCH_LEFT: list[str] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    import shutil

    try:
        if not WORKER:  # the controller, after its workers: their results files are under its basetemp
            left = sorted(scratch_files() - _SCRATCH_BEFORE)
            if left and session.exitstatus == 0:  # before the naming, which must not lose the failure
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            _SCRATCH_LEFT.extend(left)
            _SCRATCH_LEFT[:] = [made_by(t) for t in left]
            _DAY.collect(session, SESSION_TMP)  # before the session's root, where the day's samples are kept, goes
    except Exception as e:  # noqa: BLE001 - the day's figures must never cost the session its clean-up
        _DAY.error = f"{type(e).__name__}: {e}"[:200]
    finally:
        shutil.rmtree(SESSION_TMP if ROOT_OWNED else OWN, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for left in _SCRATCH_LEFT:
        terminalreporter.write_line(f"FAILED (left on the host) {left}", red=True)
    terminalreporter.write_sep("=", _DAY.line())


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """The test leaves no run dir, socket dir, hypervisor or control group of its own (helpers.leaks)."""
    before = socket_dirs()
    yield
    wait_no_leftovers(before)


@pytest.fixture(scope="session")
def session_tmp() -> Path:
    """This session's private root (helpers.session.session_tmp_path), for a test that takes it as a fixture."""
    return session_tmp_path()


@pytest.fixture
def shared() -> Iterator[Path]:
    """A sticky directory anyone may write in, as /tmp (helpers.dirs.sticky_dir), where the user nobody plants
    files (pytest's tmp_path is under a 0700 directory nobody cannot reach)."""
    with sticky_dir() as d:
        yield d


@pytest.fixture
def placement(tmp_path: Path) -> tuple[NestedPlacement, io.StringIO, Merger]:
    """Placement nested's printer (verbose, on a terminal: helpers.terminal), what it printed, and the merger of the
    level-1 guest's results into the host run's (helpers.nested): for the tests of what a nested run shows. Imported
    here, not at the top: the session's start (and the xdist controller, which runs no test) need none of it."""
    from guestbench.nested import job as nested_job
    from guestbench.plan.gate import Gate
    from guestbench.run.nested import Merger, NestedPlacement
    from guestbench.scenario import parse_scenario
    from helpers.nested import host_results
    from helpers.terminal import terminal

    sc = parse_scenario({"name": "n", "backends": ["uml"], "placement": ["nested"], "measurements": ["startup"]}, "n")
    rf = host_results(tmp_path)
    console, out = terminal()
    gate = Gate(rf, console, None, tmp_path, probe_timeout=60)  # type: ignore[arg-type]  # nothing is probed
    return NestedPlacement(sc, gate, verbose=True), out, Merger(rf, nested_job.plan(sc, False, None), "img")
