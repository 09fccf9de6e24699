"""Which host CPU a UML guest runs on. UML is uniprocessor and hands every guest system call over with ptrace: kept
on one host CPU it runs about 3x faster here than when those hand-offs cross CPUs. Guests are spread over the CPUs:
those of one run (concurrent appliances) and those of every other run, suite worker or fleet worker on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from collections.abc import Iterator

from guestbench.host import locks, procs
from guestbench.host.paths import INSTANCE_ENV, WORKDIR_ENV, cache_dir

CHOICE_WAIT_S = 2.0  # the longest a guest waits for another's choice to be seen; then it chooses anyway


def pinned_guests(comm: str) -> Counter[int]:
    """How many running UML guests of this user's are pinned to each host CPU, whichever run started them: processes
    named `comm` (UML's binary) that lead their own session (the hypervisor program starts UML so; a guest's own
    processes share its name, its session and its pin, and those of a guest just killed linger a moment, orphaned).
    Another user's processes are not counted: anyone can name a process so, and steer the choice."""
    taken: Counter[int] = Counter()
    me = os.geteuid()
    for pid in procs.pids():
        if procs.proc_comm(pid) != comm or (st := procs.stat(pid)) is None or st.session != pid or st.state in "ZX":
            continue
        if procs.proc_uid(pid) != me:
            continue
        try:
            cpus = os.sched_getaffinity(pid)
        except OSError:  # gone, or not ours to read
            continue
        if len(cpus) == 1:
            taken[next(iter(cpus))] += 1
    return taken


def uml_cpu(taken: Counter[int]) -> int | None:
    """The host CPU for a guest (none when this process may use only one): the one with the fewest guests already
    pinned to it (`taken`), and among those the last one for the first of a run's concurrent appliances, the one
    before for the second, and so on, so that guests sharing a disk do not also share a CPU; each run starts that
    round at a CPU of its own (drawn from its run directory's name). Without counting others, every run's first
    guest took the last CPU: four suite workers' guests on one CPU beside an idle one."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    try:
        instance = max(1, int(os.environ.get(INSTANCE_ENV, "1")))
    except ValueError:
        instance = 1
    workdir = os.environ.get(WORKDIR_ENV)
    first = zlib.crc32(str(Path(workdir).parent).encode()) if workdir else 0
    preferred = [cpus[-1 - (first + instance - 1 + k) % len(cpus)] for k in range(len(cpus))]
    return min(preferred, key=lambda cpu: taken[cpu])  # the first of the least taken


class Pin:
    """A guest's CPU, chosen under a lock that is held until its UML runs, where the next chooser counts it: runs
    that start guests at the same moment would otherwise each see none and all take the same CPU."""

    def __init__(self, kernel: str) -> None:
        self.comm = Path(kernel).name[:15]  # what the kernel names UML's processes
        self._lock: int | None = None
        self.cpu: int | None = None

    def choose(self) -> None:
        """Take the lock and a CPU; on any failure no CPU: UML then runs where the kernel puts it (slower, never
        failed for it)."""
        if len(os.sched_getaffinity(0)) < 2 or not shutil.which("taskset"):
            return
        t0 = time.monotonic()
        try:
            # a 0600 file in this user's own cache; none to be had within CHOICE_WAIT_S: choose without
            self._lock = locks.brief(cache_dir() / "uml-cpu.lock", CHOICE_WAIT_S)
            self.cpu = uml_cpu(pinned_guests(self.comm))
        except Exception as e:  # noqa: BLE001 - pinning is an optimisation
            self.release()
            self.cpu = None
            sys.stderr.write(f"guestbench-uml: warning: UML not pinned to a CPU: {type(e).__name__}: {e}\n")
        if (waited := time.monotonic() - t0) > 0.1:  # inside the timed launch: said
            sys.stderr.write(f"guestbench-uml: waited {waited:.2f} s for another guest's choice of CPU\n")

    def command(self, argv: list[str]) -> list[str]:
        """UML's command line, run on the chosen CPU."""
        return ["taskset", "-c", str(self.cpu), *argv] if self.cpu is not None else argv

    def started(self, uml: subprocess.Popen[bytes]) -> None:
        """UML is started: once the kernel names it as UML (taskset has exec'd it), the next guest may choose;
        not later than CHOICE_WAIT_S, nor once it has ended (taskset could not run it)."""
        deadline = time.monotonic() + CHOICE_WAIT_S
        while (self._lock is not None and uml.poll() is None and procs.proc_comm(uml.pid) not in (self.comm, "")
               and time.monotonic() < deadline):
            time.sleep(0.002)
        self.release()

    def release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # the flock goes with the last descriptor
            self._lock = None


@contextlib.contextmanager
def pinned(kernel: str) -> Iterator[Pin]:
    """A CPU for the UML guest started in the block (Pin.command, then Pin.started with its pid); the choice's lock
    is let go however the block ends."""
    pin = Pin(kernel)
    try:
        pin.choose()
        yield pin
    finally:
        pin.release()
