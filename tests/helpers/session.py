"""This pytest process's session: a private cache and temp root, made once, at the first import (conftest's), so
that every test, fixture and hook of the process sees the same ones.

Tests launch real appliances (TCG here; User-Mode Linux later). Everything guestbench creates on the host lives
under GUESTBENCH_TMPDIR, so "nothing leaked" is checkable (helpers.leaks): no run directory left there, and no
process whose command line mentions it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import stat
import tempfile
from pathlib import Path
from collections.abc import Iterator

from timeline import Timeline, who_made

# A user's own settings are not the tests' fixtures: guestbench's (a prebuilt appliance, the UML channel, a
# control group), libguestfs's (memsize, debug, a fixed appliance path) and Dask's are cleared for the session.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1... under `pytest -n`: make test runs TEST_WORKERS
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
    ok = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o755
    return Path(path) if ok and Path(path).parent == Path("/var/tmp") else None


# One root per `make test` (GUESTBENCH_TEST_SESSION): its two pytest runs and their workers share the cache (probe
# verdicts, payloads, wrappers: one probe a backend, under the cache's own locks, as two users' runs would) and each
# has a temp root of its own, so that what one leaves is told from what another runs (guestbench keeps its UML and
# workload appliances in the temp root: each worker builds its own). Whoever made the root removes it.
ROOT_OWNED = _shared_root(_inherited) is None
SESSION_TMP = _shared_root(_inherited) or Path(tempfile.mkdtemp(prefix="gbtest-", dir="/var/tmp"))
os.chmod(SESSION_TMP, 0o755)
os.environ["GUESTBENCH_TEST_SESSION"] = str(SESSION_TMP)  # inherited by the workers xdist starts


def _own_dir(root: Path) -> Path:
    """This session's own directory under a shared root, named short (gw0, gw1; m for a plain run): paths under it
    reach libguestfs, which corrupts its memory on some hypervisor paths over 80 bytes (guestbench.backends.base)."""
    try:
        (root / (WORKER or "m")).mkdir(mode=0o755)
        return root / (WORKER or "m")
    except FileExistsError:  # a root used before: a fresh name beside
        return Path(tempfile.mkdtemp(prefix="m", dir=root))


OWN = _own_dir(SESSION_TMP) if not ROOT_OWNED else SESSION_TMP
os.chmod(OWN, 0o755)
os.environ["GUESTBENCH_CACHE"] = str(SESSION_TMP / "cache")
os.environ["GUESTBENCH_TMPDIR"] = str(OWN / "tmp")
# Every results file written during the tests (by subprocesses such as `guestbench scenario` too) is checked
# against the published JSON Schema where it is written (guestbench/results/validate.py).
os.environ["GUESTBENCH_VALIDATE_RESULTS"] = "1"
(OWN / "tmp").mkdir()
os.chmod(OWN / "tmp", 0o755)
# The suite's timeline (tests/timeline.py): every worker's tests and what each saw on the host as it started and
# ended, so a leftover names the tests that ran when it appeared. GUESTBENCH_TEST_TIMELINE=FILE keeps it after the
# suite (make test's root, where it is by default, is removed at its end).
TIMELINE = Timeline(Path(os.environ.get("GUESTBENCH_TEST_TIMELINE") or SESSION_TMP / "timeline.log"),
                    WORKER or "main")


def session_tmp_path() -> Path:
    """This test session's private root (a worker's own, under `pytest -n`): every file (and so every libvirt domain)
    of its runs is under it."""
    return OWN


def run_dirs() -> list[Path]:
    """guestbench's run directories in the session's temp root: any left after a run is a leak."""
    return sorted((OWN / "tmp").glob("guestbench-run-*"))


def made_by(thing: str) -> str:
    """Who made `thing` (tests/timeline.py's word: sockdir:PATH, loop:NAME=BACKING, domain:NAME), as the
    suite's timeline tells it."""
    TIMELINE.look()
    return who_made(TIMELINE.path, thing)


@contextlib.contextmanager
def host_path_lock(name: str) -> Iterator[None]:
    """Held by the tests that plant the same host-wide path (/var/tmp/guestbench-nested: test_nested and
    test_owned), which two workers may otherwise run at once."""
    import fcntl

    with open(SESSION_TMP / f"{name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cpu_s() -> float:
    """CPU seconds of this pytest process and of every child it has waited for (a guestbench command, its workers,
    their hypervisors: each waits for its own), not those of daemons such as libvirtd's qemu."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
