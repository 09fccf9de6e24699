"""Shared test set-up: a private cache and temp root per test session, and leak checks.

Tests launch real appliances (TCG here; User-Mode Linux later). Everything guestbench creates on the
host lives under GUESTBENCH_TMPDIR, so "nothing leaked" is checkable: no run directory left there,
and no process whose command line mentions it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from guestbench.host import cgroups
from guestbench.execute.supervisor import socket_dirs_of
from suite_day import SuiteDay
from timeline import Timeline, scratch_files, who_made

ROOT = Path(__file__).resolve().parent.parent
# A user's own settings are not the tests' fixtures: guestbench's (a prebuilt appliance, the UML channel, a
# control group), libguestfs's (memsize, debug, a fixed appliance path) and Dask's are cleared for the session.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1... under `pytest -n`: make test runs TEST_WORKERS
_SUITE_SWITCHES = ("GUESTBENCH_TEST_TIMES", "GUESTBENCH_CLI_SUBPROCESS_ALL", "GUESTBENCH_TEST_SUITE_STARTED",
                   "GUESTBENCH_TEST_SESSION", "GUESTBENCH_TEST_TIMELINE")
_inherited = os.environ.get("GUESTBENCH_TEST_SESSION")  # make test's root, or the xdist controller's: below
for _name in [n for n in os.environ if n.startswith(("GUESTBENCH_", "LIBGUESTFS_", "DASK_"))]:
    if _name not in _SUITE_SWITCHES:  # the suite's own switches
        del os.environ[_name]


def _shared_root(path: str | None) -> Path | None:
    """A root made for the suite (make test's, or the controller's for its workers): a directory of this euid in
    /var/tmp, not a link, mode 0755; else none, and the session makes its own."""
    if not path:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    import stat

    ok = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o755
    return Path(path) if ok and Path(path).parent == Path("/var/tmp") else None


# One root per `make test` (GUESTBENCH_TEST_SESSION): its two pytest runs and their workers share the cache (probe
# verdicts, payloads, wrappers: one probe a backend, under the cache's own locks, as two users' runs would) and each
# has a temp root of its own, so that what one leaves is told from what another runs (guestbench keeps its UML and
# workload appliances in the temp root: each worker builds its own). Whoever made the root removes it.
_ROOT_OWNED = _shared_root(_inherited) is None
_SESSION_TMP = _shared_root(_inherited) or Path(tempfile.mkdtemp(prefix="gbtest-", dir="/var/tmp"))
os.chmod(_SESSION_TMP, 0o755)
os.environ["GUESTBENCH_TEST_SESSION"] = str(_SESSION_TMP)  # inherited by the workers xdist starts


def _own_dir(root: Path) -> Path:
    """This session's own directory under a shared root, named short (gw0, gw1; m for a plain run): paths under it
    reach libguestfs, which corrupts its memory on some hypervisor paths over 80 bytes (guestbench.backends.base)."""
    try:
        (root / (_WORKER or "m")).mkdir(mode=0o755)
        return root / (_WORKER or "m")
    except FileExistsError:  # a root used before: a fresh name beside
        return Path(tempfile.mkdtemp(prefix="m", dir=root))


_OWN = _own_dir(_SESSION_TMP) if not _ROOT_OWNED else _SESSION_TMP
os.chmod(_OWN, 0o755)
os.environ["GUESTBENCH_CACHE"] = str(_SESSION_TMP / "cache")
os.environ["GUESTBENCH_TMPDIR"] = str(_OWN / "tmp")
# Every results file written during the tests (by subprocesses such as `guestbench scenario` too) is checked
# against the published JSON Schema where it is written (guestbench/results/validate.py).
os.environ["GUESTBENCH_VALIDATE_RESULTS"] = "1"
(_OWN / "tmp").mkdir()
os.chmod(_OWN / "tmp", 0o755)
# The suite's timeline (tests/timeline.py): every worker's tests and what each saw on the host as it started and
# ended, so a leftover names the tests that ran when it appeared. GUESTBENCH_TEST_TIMELINE=FILE keeps it after the
# suite (make test's root, where it is by default, is removed at its end).
_TIMELINE = Timeline(Path(os.environ.get("GUESTBENCH_TEST_TIMELINE") or _SESSION_TMP / "timeline.log"),
                     _WORKER or "main")


def pytest_configure(config: pytest.Config) -> None:
    if not _WORKER and getattr(config.option, "numprocesses", None):  # xdist's controller relays its workers'
        _TIMELINE.broken = "the xdist controller: its workers write the timeline"  # test events: not its own


def _cpu_s() -> float:
    """CPU seconds of this pytest process and of every child it has waited for (a guestbench command, its workers,
    their hypervisors: each waits for its own), not those of daemons such as libvirtd's qemu."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_CPU_MARK = [0.0]


def pytest_runtest_logstart(nodeid: str) -> None:
    _TIMELINE.start(nodeid)
    _CPU_MARK[0] = _cpu_s()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each phase's CPU seconds ride on its report (GUESTBENCH_TEST_TIMES): on two cores they, more than the wall
    times of tests that share the machine, are what the suite's time is made of."""
    outcome = yield
    now = _cpu_s()
    outcome.get_result().user_properties.append(("cpu_s", now - _CPU_MARK[0]))  # type: ignore[attr-defined]
    _CPU_MARK[0] = now


def pytest_runtest_logfinish(nodeid: str) -> None:
    _TIMELINE.end(nodeid)


def made_by(thing: str) -> str:
    """Who made `thing` (tests/timeline.py's word: sockdir:PATH, loop:NAME=BACKING, domain:NAME), as the
    suite's timeline tells it."""
    _TIMELINE.look()
    return who_made(_TIMELINE.path, thing)


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


@contextlib.contextmanager
def host_path_lock(name: str) -> Iterator[None]:
    """Held by the tests that plant the same host-wide path (/var/tmp/guestbench-nested: test_nested and
    test_owned), which two workers may otherwise run at once."""
    import fcntl

    with open(_SESSION_TMP / f"{name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


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
        if not _WORKER:  # the controller, after its workers: their results files are under its basetemp
            left = sorted(scratch_files() - _SCRATCH_BEFORE)
            if left and session.exitstatus == 0:  # before the naming, which must not lose the failure
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            _SCRATCH_LEFT.extend(left)
            _SCRATCH_LEFT[:] = [made_by(t) for t in left]
            _DAY.collect(session, _SESSION_TMP)  # before the session's root, where the day's samples are kept, goes
    except Exception as e:  # noqa: BLE001 - the day's figures must never cost the session its clean-up
        _DAY.error = f"{type(e).__name__}: {e}"[:200]
    finally:
        shutil.rmtree(_SESSION_TMP if _ROOT_OWNED else _OWN, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for left in _SCRATCH_LEFT:
        terminalreporter.write_line(f"FAILED (left on the host) {left}", red=True)
    terminalreporter.write_sep("=", _DAY.line())


def session_tmp_path() -> Path:
    """This test session's private root (a worker's own, under `pytest -n`): every file (and so every libvirt domain)
    of its runs is under it."""
    return _OWN


def run_dirs() -> list[Path]:
    return sorted((_OWN / "tmp").glob("guestbench-run-*"))


def processes_mentioning(text: str, *more: str) -> list[str]:
    """Command lines (cut to 200 characters) of live processes that mention `text`, and each of `more`, anywhere in
    the whole line (qemu's mention their drives' paths)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        cmd = raw.replace(b"\0", b" ").decode("utf-8", "replace")
        if text in cmd and all(m in cmd for m in more) and "pytest" not in cmd:
            found.append(f"{entry}: {cmd[:200]}")
    return found


def hypervisor_processes() -> list[str]:
    return [p for p in processes_mentioning(str(_OWN / "tmp") + "/")]


def socket_dirs() -> set[Path]:
    """libguestfs's socket directories (as root always /tmp/libguestfsXXXXXX)."""
    return set(Path("/tmp").glob("libguestfs??????"))


def _states() -> dict[int, tuple[str, int]]:
    """Every process's state letter and parent pid."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                found[int(entry)] = (fields[0], int(fields[1]))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _parents() -> dict[int, int]:
    return {pid: parent for pid, (_, parent) in _states().items()}


def unreaped_children(parent: int) -> list[int]:
    """Children of `parent` that ended and were never reaped (zombies)."""
    return [pid for pid, (state, pp) in _states().items() if state == "Z" and pp == parent]


def descendants() -> set[int]:
    """This test process's live descendants: what its tests started and still runs."""
    parents = _parents()
    ours = {os.getpid()}
    grew = True
    while grew:
        more = {p for p, pp in parents.items() if pp in ours} - ours
        grew = bool(more)
        ours |= more
    return ours - {os.getpid()}


def strangers() -> list[int]:
    """Live processes that this session did not start: another test session, a user's libguestfs tool, CI."""
    mine = descendants() | {os.getpid()}
    return [p for p in _parents() if p not in mine]


def leftover_sockdirs(before: set[Path]) -> set[Path]:
    """Socket directories made since `before` that no stranger holds: ours (a stranger's live appliance on a shared
    machine, or another worker's, is not ours to judge)."""
    new = socket_dirs() - before
    return new - set(socket_dirs_of(strangers())) if new else set()


def leftover_groups() -> list[Path]:
    """guestbench's control groups that are ours: a dead run's, or a live one's this session started. A live
    stranger's run on the same host has its own."""
    from guestbench.host import procs

    mine = descendants() | {os.getpid()}  # an in-process Supervisor's group is guestbench-<this pid>-<start>
    found = []
    for g in cgroups.leftovers(alive_owners_too=True):
        pid, start = cgroups.owner_of(g.name) or (0, None)
        if pid in mine or not procs.same_process(pid, start):  # a pid reused since is not the owner
            found.append(g)
    return found


def lasting(unheld: Callable[[], set[Path]], patience: float) -> set[Path]:
    """The socket directories `unheld()` names that stay for `patience` s. Beside another worker a directory no
    process holds may be its: one whose appliance just ended or was killed, before its handle is closed. Ours
    would stay; a moment's more patience tells them apart."""
    deadline = time.monotonic() + patience
    found = unheld()
    while found and time.monotonic() < deadline:
        time.sleep(0.5)
        found &= unheld()
    return found


def wait_no_leftovers(sockdirs_before: set[Path] | None = None, timeout: float = 10.0) -> None:
    """Assert that no run dir, socket dir or hypervisor of ours is left (allowing a moment for reaping)."""
    def new_sockdirs() -> set[Path]:
        return leftover_sockdirs(sockdirs_before) if sockdirs_before is not None else set()

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (run_dirs() or hypervisor_processes() or new_sockdirs()
                                           or leftover_groups()):
        time.sleep(0.2)
    left = lasting(new_sockdirs, deadline + (50 if _WORKER else 0) - time.monotonic())
    assert run_dirs() == [], f"run directories left behind: {run_dirs()}"
    assert leftover_groups() == [], "control groups left behind"
    assert hypervisor_processes() == [], f"processes left behind: {hypervisor_processes()}"
    assert left == set(), ("libguestfs socket directories left behind: "
                           + " | ".join(made_by(f"sockdir:{d}") for d in sorted(left)))


@pytest.fixture
def no_leftovers():
    before = socket_dirs()
    yield
    wait_no_leftovers(before)


def guestbench(*args: str, timeout: float = 900, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a user would, in its own process; past `timeout` it is stopped as a user would (SIGTERM,
    then SIGKILL), so that it cleans up before the test fails (a bare SIGKILL would leave its hypervisors)."""
    proc = subprocess.Popen([sys.executable, "-m", "guestbench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # the time-out, or pytest-timeout's own interruption
        stop_run(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def start_guestbench(*args: str) -> subprocess.Popen[str]:
    """The real CLI started in its own process, for a test that signals it mid-run."""
    return subprocess.Popen([sys.executable, "-m", "guestbench", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="session")
def session_tmp() -> Path:
    return _OWN


def write_scenario(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def run_scenario_text(tmp_path: Path, text: str, *args: str,
                      timeout: float = 900) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`guestbench scenario` on a scenario given as text (and `args`), as a user runs it; the process and its one
    results file."""
    import json

    sc = write_scenario(tmp_path / "scenario.yaml", text)
    proc = guestbench("scenario", str(sc), *args, "--results", str(tmp_path / "r"), timeout=timeout)
    (path,) = (tmp_path / "r").glob("*.json")
    return proc, json.loads(path.read_text())


def stop_run(proc: subprocess.Popen[str]) -> None:
    """After a failed check: stop a run the way a user would (SIGTERM, then SIGKILL), so nothing is left behind."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.communicate(timeout=60)  # drains its pipes too, which a plain wait could block on
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@contextlib.contextmanager
def small_tmpfs(size: str) -> Iterator[Path]:
    """A tmpfs of `size` under the session's root, traversable (libvirt's qemu reaches images in it); root only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root (CI runs as root)")
    mnt = Path(tempfile.mkdtemp(prefix="small-", dir=_OWN))
    os.chmod(mnt, 0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        mnt.rmdir()
