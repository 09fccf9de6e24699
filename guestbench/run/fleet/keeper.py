"""`guestbench worker SCHEDULER_ADDRESS`: this host joins a fleet.

It checks the backends as `doctor` does, then runs a Dask worker (one thread) in a child process that
advertises `bench` and the usable backends as resources. This process stays as its keeper: it is the
child subreaper of everything the worker starts, so when the worker dies, however it dies (SIGKILL included),
the host runs it started (which stop by themselves when their worker's pipe closes) get time to clean up, and
whatever is still alive after that is killed; then libvirt domains with disks in the worker's directory, host
storage and control groups left by dead owners are removed, and the worker's directory with them.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Callable

from guestbench.host import rundirs
from guestbench.util.errors import UserError
from guestbench.host.paths import RUN_PREFIX, WORKER_PREFIX, remove_tree, temp_root
from guestbench.run.fleet import resources
from guestbench.storage.backing_sys import mounts
from guestbench.host import procs
from guestbench.host.procs import users

PR_SET_CHILD_SUBREAPER = 36
SETTLE_S = 150.0  # how long the worker's host runs may take to stop and clean up after the worker died
DEATH_TIMEOUT_S = 60  # a worker that cannot reach its scheduler for this long gives up


def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def serve(address: str, listen: str, usable: list[str], name: str, say: Callable[[str], None]) -> int:
    """Run the Dask worker, listening on `listen` only, until it ends; clean up after it; its exit status (0 when
    stopped by a signal)."""
    if not usable:
        raise UserError("no backend is usable on this host, so it has nothing to offer a fleet; "
                        "'guestbench doctor' says why", source="guestbench worker")
    for line in sweep_dead_workers(temp_root()):
        say(f"worker {name}: swept: {line}")
    home = rundirs.make(temp_root(), WORKER_PREFIX)  # 0755: libvirt's qemu user reaches disk images below it
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    env = {**os.environ, "GUESTBENCH_TMPDIR": str(home)}
    child = subprocess.Popen([sys.executable, "-m", "guestbench.run.fleet.daskworker", address, name, listen,
                              json.dumps(resources.advertised(usable)), str(home / "dask")],
                             env=env, preexec_fn=procs.die_with(os.getpid(), signal.SIGTERM))
    say(f"worker {name}: pid {child.pid}, offering {', '.join(usable)} to {address}, listening on {listen}; "
        f"its files in {home}")
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child.returncode is None:  # not send_signal: its poll() would reap the worker behind _wait_reaping's back
            os.kill(child.pid, signal.SIGTERM)  # unreaped, the pid is still the worker's (a zombie at worst)

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        status = _wait_reaping(child)
    finally:
        for s, h in old.items():
            signal.signal(s, signal.SIG_IGN if s != signal.SIGHUP else h)
        for line in clean_up(home):
            say(f"worker {name}: {line}")
        for s, h in old.items():
            signal.signal(s, h)
    if status < 0:
        say(f"worker {name}: the Dask worker ended by signal {-status}")
        return 0 if stopping else 1
    return status


def _wait_reaping(child: subprocess.Popen[bytes]) -> int:
    """The worker's exit status; meanwhile every orphan handed to this subreaper is reaped as it ends (UML's
    helper processes, one lot a launch): a keeper that only waited for its worker would gather zombies until the
    host ran out of process ids."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)  # a signal's handler runs and the wait resumes (PEP 475)
        except ChildProcessError:  # reaped elsewhere
            return child.wait()
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return child.returncode


def clean_up(home: Path) -> list[str]:
    """After the worker: its descendants (ours now, as subreaper) stopped, then what they left removed."""
    done: list[str] = []
    deadline = time.monotonic() + SETTLE_S
    while _descendants() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.2)
    left = _descendants()
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        done.append(f"killed {len(left)} process(es) still running {SETTLE_S:g} s after the worker ended")
    end = time.monotonic() + 10
    while _descendants() and time.monotonic() < end:
        _reap()
        time.sleep(0.1)
    _reap()
    return done + remove_leftovers(home)


def remove_leftovers(home: Path) -> list[str]:
    """A worker's directory once its processes are gone: libvirt domains with disks in it, its runs' host
    storage and control groups, then the directory itself (kept while a run in it is still alive)."""
    from guestbench.host import cgroups
    from guestbench.backends.libvirt import destroy_domains, guestfs_domains
    from guestbench.storage.backing import sweep_stale

    live = [d for d in home.glob(f"{RUN_PREFIX}*") if rundirs.alive(d)]
    if live:
        return [f"kept {home}: its run {live[0].name} is still alive"]
    done: list[str] = []
    try:
        done += [f"destroyed libvirt domain {d}" for d in destroy_domains(guestfs_domains(home))]
    except Exception as e:  # no libvirt here: nothing of it to clean
        done.append(f"libvirt not checked: {e}")
    done += sweep_stale(home) + cgroups.sweep()
    if any(m.startswith(f"{home}/") for m in mounts()):  # removing the tree would descend into it
        return done + [f"failed: kept {home}: something is still mounted in it"]
    remove_tree(home)
    return done


def sweep_dead_workers(root: Path) -> list[str]:
    """The directories (`gbw-*`) of the effective user's workers whose keeper died (SIGKILL) in `root`, with
    their Dask scratch space and what their runs left; kept while a process of the user's still names one
    (its Dask worker, stopping)."""
    found = rundirs.claim_dead(root, WORKER_PREFIX)
    done = list(found.log)
    for home in found.claimed:
        if using := users(home):
            done.append(f"kept {home}: process {using[0]} still uses it")
        else:
            done += remove_leftovers(home)
        if home.exists():
            found.release(home)
        else:
            done.append(f"removed {home} (its worker died)")
    return done


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _descendants() -> list[int]:
    """Every process below this one (its children's children are reparented here when their parent dies)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields and fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    me = os.getpid()
    out = []
    for pid in parents:
        p, hops = parents.get(pid), 0
        while p is not None and p > 1 and hops < 64:
            if p == me:
                out.append(pid)
                break
            p, hops = parents.get(p), hops + 1
    return sorted(out)
