"""A control group per worker, where the host lets guestbench make one: the kernel then counts the CPU time and
memory of everything the worker starts, also a process that leaves its tree (a daemonised helper) or lives
shorter than a /proc reading, and a dead worker's leftovers can be found and killed by membership.

The supervisor makes the group before it hands the worker its request (the worker starts nothing before that),
moves the worker in, and removes the group with whatever is left in it when the worker's tree is ended. The
workers of one guestbench process are groups inside one run group, `guestbench-<pid>`, removed when its last
worker's is: the run group's CPU count keeps what its ended workers used, which is how a worker tells its
concurrent peers' work (ours) from the rest of the machine's (guestbench.instruments.load), also after a peer has gone.
A run killed with SIGKILL leaves groups behind; `sweep` removes those whose owner is dead.

Two hierarchies are used, each where it can be written:
- CPU: the cgroup2 hierarchy (`cpu.stat` usage_usec, kept by the kernel for every cgroup2 group, with or without
  the cpu controller).
- Memory: the group's memory controller, cgroup v1 (`memory.max_usage_in_bytes`, reset at each step's start) or
  cgroup2 where the controller is enabled for it (`memory.peak`, reset per open file on kernels from 6.12). It
  is the memory charged to the group: what its processes touched, their page cache and tmpfs files included.

GUESTBENCH_CGROUP=0 makes no group (the meter then reads /proc alone, as on a host that allows none).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from guestbench.host import procs

ENV_OFF = "GUESTBENCH_CGROUP"
ENV_CPU, ENV_MEMORY = "GUESTBENCH_CGROUP_CPU", "GUESTBENCH_CGROUP_MEMORY"  # the worker's group, for its meter
PREFIX = "guestbench-"
# a run group: guestbench-<pid>-<start> of the process whose workers it holds (its start time in clock ticks since boot:
# a pid alone is reused, up to 32768 here, and a dead run's group was kept as a live one's; groups named before carry
# the pid alone)
NAME = re.compile(rf"{PREFIX}(\d+)(?:-(\d+))?$")
EMPTY_WAIT_S = 5.0  # a killed process leaves its group once the kernel has torn it down

_seq = 0
_lock = threading.Lock()  # concurrent workers' supervisors make and remove worker groups in one run group


def _mounts() -> dict[str, Path]:
    """Where this process's cgroup hierarchies are: "cgroup2" → its dir, v1 controller name → its dir."""
    roots: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, fstype = left.split(), right.split()
        if len(fields) < 5 or len(fstype) < 3:
            continue
        if fstype[0] == "cgroup2":
            roots.setdefault("cgroup2", Path(fields[4]))
        elif fstype[0] == "cgroup":
            for option in fstype[2].split(","):
                if option in ("memory", "cpuacct"):
                    roots.setdefault(option, Path(fields[4]))
    own: dict[str, Path] = {}
    try:
        membership = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    for line in membership:
        _, controllers, path = line.split(":", 2)
        names = ["cgroup2"] if controllers == "" else controllers.split(",")
        for name in names:
            if name in roots:
                own[name] = roots[name] / path.lstrip("/")
    return own


@dataclass
class Group:
    """One worker's group: `cpu` its cgroup2 dir, `memory` its memory-controller dir (either may be None)."""

    cpu: Path | None
    memory: Path | None

    def dirs(self) -> list[Path]:
        return list(dict.fromkeys(d for d in (self.cpu, self.memory) if d is not None))  # once each

    def add(self, pid: int) -> bool:
        """Move `pid` into every dir of the group; False when the host refused (the group is then removed)."""
        try:
            for d in self.dirs():
                (d / "cgroup.procs").write_text(f"{pid}\n")
            return True
        except OSError:
            self.remove()
            return False

    def entered(self, command: list[str]) -> list[str]:
        """`command`, started already in the group: a shell that moves itself into each of its dirs, then execs it
        (for a program that forks at once, such as bubblewrap: add() after it started could miss its children)."""
        moves = "; ".join(f'echo $$ 2>/dev/null > "$G{i}"' for i in range(len(self.dirs())))  # refused: counted
        names = [f"G{i}={d / 'cgroup.procs'}" for i, d in enumerate(self.dirs())]  # from /proc then (of_this_worker)
        return ["/usr/bin/env", *names, "/bin/sh", "-c", f'{moves}; exec "$@"', "sh", *command]

    def env(self) -> dict[str, str]:
        return {ENV_CPU: str(self.cpu or ""), ENV_MEMORY: str(self.memory or "")}

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs():
            try:
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                continue
        return out

    def end(self) -> None:
        """Kill whatever is still in the group, wait until it is empty (bounded), and remove it."""
        deadline = time.monotonic() + EMPTY_WAIT_S
        while (pids := self.pids() - {os.getpid()}) and time.monotonic() < deadline:
            kill = self.cpu / "cgroup.kill" if self.cpu is not None else None
            try:
                if kill is not None and kill.exists():
                    kill.write_text("1\n")
                else:
                    raise OSError
            except OSError:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            time.sleep(0.02)
        self.remove()

    def remove(self) -> None:
        with _lock:
            for d in self.dirs():
                for gone in (d, d.parent):  # the worker's group, then the run group if it was the last one
                    if gone is d.parent and not NAME.match(gone.name):
                        break
                    try:
                        gone.rmdir()
                    except OSError:  # not empty yet, or gone: sweep() takes what is left
                        break

    def run_cpu_usec(self) -> int | None:
        """The CPU time of every worker of this run so far, ended ones included (the run group's)."""
        return None if self.cpu is None else _usage_usec(self.cpu.parent)


def create(enabled: bool | None = None) -> Group | None:
    """A new empty group below this process's own, or None where the host allows none (not root, read-only
    cgroup file systems, no cgroup2) or GUESTBENCH_CGROUP=0."""
    global _seq
    if enabled is None:
        enabled = os.environ.get(ENV_OFF, "1") != "0"
    if not enabled:
        return None
    own = _mounts()
    if "cgroup2" not in own:
        return None
    run = own_name()
    with _lock:
        _seq += 1
        name = f"w{_seq}"
        made: list[Path] = []
        try:
            cpu = _mkdir(own["cgroup2"] / run, made) / name
            cpu.mkdir()
            made.append(cpu)
            memory: Path | None = None
            if "memory" in own:  # v1
                memory = _mkdir(own["memory"] / run, made) / name
                memory.mkdir()
                made.append(memory)
            elif (cpu / "memory.peak").exists():
                memory = cpu
        except OSError:
            for d in reversed(made):
                try:
                    d.rmdir()
                except OSError:
                    pass
            return None
    return Group(cpu=cpu, memory=memory)


def _mkdir(d: Path, made: list[Path]) -> Path:
    """`d`, made if missing (and then noted in `made`, to be undone on a failure)."""
    try:
        d.mkdir()
        made.append(d)
    except FileExistsError:
        pass
    return d


def available() -> bool:
    """Whether workers get a group here (one is made and removed to find out)."""
    group = create()
    if group is None:
        return False
    group.remove()
    return True


def of_this_worker() -> Group | None:
    """The group the supervisor put this worker in, if it is in it (its own /proc/self/cgroup says so)."""
    cpu = os.environ.get(ENV_CPU) or None
    memory = os.environ.get(ENV_MEMORY) or None
    if cpu is None:
        return None
    own = _mounts()
    if own.get("cgroup2") != Path(cpu):
        return None
    return Group(cpu=Path(cpu), memory=Path(memory) if memory and Path(memory) in own.values() else None)


# ---------------------------------------------------------------------------------------------- readings


def outside(group: Group, pid: int, run: bool = False) -> bool:
    """Whether `pid` is alive outside the group (with `run`: outside its run group, every worker of the run), in
    cgroup2. False for a process already gone: a member that exited is no longer listed anywhere."""
    if group.cpu is None:
        return False
    d = (group.cpu.parent if run else group.cpu).as_posix()
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("0::"):
            parts = line[3:].strip().strip("/").split("/")  # below the cgroup2 mount: guestbench-812/w3
            # inside when the group's dir is the process's group or one of its ancestors
            return not any(p and d.endswith("/" + p) for p in ("/".join(parts[:k]) for k in range(1, len(parts) + 1)))
    return False


def cpu_usec(group: Group) -> int | None:
    """The CPU time (user + system) of everything that ran in the group, in microseconds."""
    return None if group.cpu is None else _usage_usec(group.cpu)


def _usage_usec(d: Path) -> int | None:
    try:
        for line in (d / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


class PeakMemory:
    """The highest memory charged to the group since `reset()`: v1 max_usage_in_bytes, or cgroup2 memory.peak
    through a file kept open (a write resets the peak that this file reads)."""

    def __init__(self, group: Group) -> None:
        self.dir = group.memory
        self._file: int | None = None

    def reset(self) -> bool:
        self.close()
        if self.dir is None:
            return False
        try:
            v1 = self.dir / "memory.max_usage_in_bytes"
            if v1.exists():
                v1.write_text("0\n")
                return True
            self._file = os.open(self.dir / "memory.peak", os.O_RDWR)
            os.write(self._file, b"reset\n")
            return True
        except OSError:
            self.close()
            return False

    def read(self) -> int | None:
        """Bytes, or None where no reset took."""
        if self.dir is None:
            return None
        try:
            if self._file is not None:
                os.lseek(self._file, 0, os.SEEK_SET)
                return int(os.read(self._file, 64).split()[0])
            return int((self.dir / "memory.max_usage_in_bytes").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._file is not None:
            os.close(self._file)
            self._file = None


# ---------------------------------------------------------------------------------------------- leftovers


def own_name() -> str:
    """The name of this process's run group (NAME)."""
    return f"{PREFIX}{os.getpid()}-{procs.proc_start(os.getpid())}"


def owner_of(name: str) -> tuple[int, int | None] | None:
    """(pid, start time or None) of the process a run group's name says holds it, or None if it names no run."""
    m = NAME.match(name)
    return (int(m.group(1)), int(m.group(2)) if m.group(2) else None) if m else None


def _owner_alive(pid: int, start: int | None) -> bool:
    return procs.same_process(pid, start)


def leftovers(alive_owners_too: bool = False) -> list[Path]:
    """guestbench's groups on this host (of dead owners only, unless `alive_owners_too`)."""
    out: list[Path] = []
    for name, base in _mounts().items():
        if name not in ("cgroup2", "memory"):
            continue
        try:
            entries = list(base.iterdir())
        except OSError:
            continue
        for d in entries:
            owner = owner_of(d.name)
            if owner and d.is_dir() and (alive_owners_too or not _owner_alive(*owner)):
                out.append(d)
    return sorted(out)


def sweep() -> list[str]:
    """Remove the run groups a killed run left (killing what is still in them); what was removed, one line each."""
    done = []
    for run in leftovers():
        workers = [d for d in run.iterdir() if d.is_dir()] if run.is_dir() else []
        for d in workers:  # a v1 memory dir has no cgroup.kill: its members get SIGKILL one by one
            Group(cpu=d, memory=None).end()
        try:
            run.rmdir()
        except OSError:
            pass
        if not run.exists():
            done.append(f"removed control group {run}")
    return done
