"""What an appliance uses: the CPU time and memory of every process that works for one cell during a timed
step, kept with the sample beside its wall time (what a price list multiplies: core-seconds, GiB-seconds).

The cell's processes: the worker (libguestfs's library runs in it), everything below it (the hypervisor,
libguestfs's recovery process, guestbench's own helpers such as UML's hypervisor wrapper, whose vhost-user
server is a thread of it), and every process whose command line names the cell's work dir, with everything
below those (a libvirt domain's qemu, started by libvirtd; the NBD server of a workload's disk). A backend's
shared daemons (libvirtd, virtlogd) work for the launch too: their CPU time during the step is added, their
memory is not (every domain shares it); on a busy host, their work for others lands here too.

Read from /proc at the start of the step, every INTERVAL_S during it, and at its end:
- CPU: user + system time, reaped children's included (utime stime cutime cstime). The set's time at the end
  minus at the start; a process that left the set in between and was not reaped by a member of it (libvirtd
  reaps its qemu) counts with its last reading, so up to INTERVAL_S of its time can be missed. By program, a
  process counts under its own program until its last reading, and what it spent after that under the member
  that reaped it (a process born and reaped between two readings: under its parent). The meter's own thread
  runs in the worker and its CPU time is subtracted.
- Memory: the highest sum, over the readings, of RSS and of PSS (/proc/PID/smaps_rollup) of the set without the
  worker itself (guestbench's Python). PSS shares a page among the processes that map it (UML's processes all
  map its RAM file); RSS counts it once per process. A peak shorter than INTERVAL_S can be missed.
/proc counts CPU time in clock ticks (USER_HZ, 10 ms here).

Where the supervisor put the worker in a control group (guestbench.host.cgroups), the kernel's count replaces the
/proc one for everything in the group: its CPU is exact (nothing missed between readings, a daemonised helper
included) and `cpu_s` is the group's time plus the /proc time of the cell's processes outside it (a libvirt
domain's qemu) plus the daemons'. `cpu_by_program` still comes from /proc; what only the group saw is listed as
UNSEEN. The group's peak charged memory (page cache and tmpfs included) is kept beside the PSS peak.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guestbench.host import procs
from guestbench.host import cgroups

INTERVAL_S = 0.2
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 2**20
UNSEEN = "(seen by the control group only)"

@dataclass(frozen=True)
class Proc:
    ppid: int
    ticks: int  # user + system of the process and of the children it reaped
    rss_pages: int


def _stat(pid: int) -> Proc | None:
    st = procs.stat(pid)
    return None if st is None else Proc(st.ppid, st.ticks, st.rss_pages)


def program(pid: int) -> str:
    """A process's program as a reader knows it: `python -m MODULE` → MODULE, else the executable's name."""
    argv = procs.argv(pid)
    if not argv:
        return "?"
    name = os.path.basename(argv[0])
    if name.startswith("python") and "-m" in argv[1:-1]:
        return argv[argv.index("-m", 1) + 1]
    return name


def processes(root: int, marker: str | None = None) -> dict[int, Proc]:
    """The cell's processes now: `root` and its descendants, and every process whose command line names `marker`
    with its descendants."""
    seen: dict[int, Proc] = {}
    children: dict[int, list[int]] = {}
    roots = {root}
    wanted = marker or None
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        st = _stat(pid)
        if st is None:
            continue
        seen[pid] = st
        children.setdefault(st.ppid, []).append(pid)
        if wanted is not None and wanted in procs.proc_cmdline(pid):
            roots.add(pid)
    out: dict[int, Proc] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in out or pid not in seen:
            continue
        out[pid] = seen[pid]
        todo.extend(children.get(pid, []))
    return out


def ticks(root: int, marker: str | None = None) -> int:
    """CPU ticks of the cell's processes alive now, each with the children it reaped."""
    return sum(p.ticks for p in processes(root, marker).values())


def daemon_ticks(names: tuple[str, ...]) -> dict[int, tuple[str, int]]:
    """The CPU ticks of every process whose command name is one of `names` (a backend's shared daemons)."""
    if not names:
        return {}
    out: dict[int, tuple[str, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry.name}/comm").read_text().strip()
        except OSError:
            continue
        if comm in names and (st := _stat(int(entry.name))) is not None:
            out[int(entry.name)] = (comm, st.ticks)
    return out


def _pss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass
class _Track:
    """The readings of one step so far."""

    start: dict[int, Proc]
    last: dict[int, Proc]
    # program → ticks of processes that left the set: their own time until their last reading, under their own
    # program; one reaped by a member is taken back from that member (its time is now in the member's cutime)
    moved: dict[str, int] = field(default_factory=dict)
    peak_rss: int = 0  # bytes
    peak_pss: int | None = None  # bytes; None where no process's PSS could be read
    programs: dict[int, str] | None = None


class UsageMeter:
    """Brackets one timed step: `start()` before it, `stop()` after; the record says what the cell's processes
    used meanwhile."""

    def __init__(self, root: int | None = None, marker: str | None = None, interval: float = INTERVAL_S,
                 daemons: list[str] | tuple[str, ...] = (), group: cgroups.Group | None = None) -> None:
        self.root = root or os.getpid()
        self.group = group if group is not None and group.cpu is not None else None
        self._outside: _Track | None = None  # the cell's processes outside the group (their CPU from /proc)
        self._group_usec = 0
        self._charged = cgroups.PeakMemory(group) if group is not None else None
        # the sampling thread runs in this process: its CPU is taken out where this process is counted
        self._meter_counted = (not cgroups.outside(self.group, os.getpid()) if self.group is not None
                               else self.root == os.getpid())
        self.marker = marker
        self.daemons = tuple(daemons)
        self._daemons_at_start: dict[int, tuple[str, int]] = {}
        self.interval = interval
        self._track: _Track | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_cpu = 0.0  # the sampling thread's own CPU seconds (it runs in the worker: not the cell's)
        self._names: dict[int, str] = {}

    def start(self) -> None:
        try:
            now = processes(self.root, self.marker)
        except OSError:  # no /proc: nothing to say
            self._track = None
            return
        self._names = {}
        self._daemons_at_start = daemon_ticks(self.daemons)
        self._track = _Track(start=dict(now), last=now)  # two dicts: a reading pops from start
        if self.group is not None:
            outside = self._without_group(now)
            self._outside = _Track(start=dict(outside), last=outside)
            self._group_usec = cgroups.cpu_usec(self.group) or 0
            if self._charged is not None:
                self._charged.reset()
        self._remember(now)
        self._measure_memory(now)
        self._thread_cpu = 0.0
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="usage-meter", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any] | None:
        """{"cpu_s", "peak_rss_mib", "peak_pss_mib", "cpu_by_program", "interval_s"}, or None when /proc could not
        be read."""
        if self._track is None:
            return None
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self._read()
        except OSError:
            return None
        t = self._track
        self._track = None
        return self._record(t)

    # ------------------------------------------------------------------ readings
    def _sample(self) -> None:
        t0 = time.thread_time()
        try:
            while not self._stop.wait(self.interval):
                self._read()
        except OSError:
            pass
        finally:
            self._thread_cpu = time.thread_time() - t0

    def _read(self) -> None:
        now = processes(self.root, self.marker)
        outside = self._without_group(now) if self.group is not None else None
        with self._lock:
            t = self._track
            if t is None:
                return
            self._advance(t, now)
            if self._outside is not None and outside is not None:
                self._advance(self._outside, outside)
            self._remember(now)
        self._measure_memory(now)

    def _advance(self, t: _Track, now: dict[int, Proc]) -> None:
        for pid, before in t.last.items():
            if pid in now:
                continue
            name = self._names.get(pid, "?")
            t.moved[name] = t.moved.get(name, 0) + before.ticks - t.start.pop(pid, Proc(0, 0, 0)).ticks
            if before.ppid in now:  # reaped by its parent, a member: in the parent's figure from now on
                parent = self._names.get(before.ppid, "?")
                t.moved[parent] = t.moved.get(parent, 0) - before.ticks
        t.last = now

    def _without_group(self, now: dict[int, Proc]) -> dict[int, Proc]:
        """The processes of `now` known to be outside the group: a member that exited since the scan is no
        longer listed in the group, and must not count twice."""
        if self.group is None:
            return {}
        inside = self.group.pids()
        return {pid: p for pid, p in now.items() if pid not in inside and cgroups.outside(self.group, pid)}

    def _remember(self, now: dict[int, Proc]) -> None:
        for pid in now:
            if pid not in self._names:
                self._names[pid] = program(pid)

    def _measure_memory(self, now: dict[int, Proc]) -> None:
        members = [pid for pid in now if pid != self.root]
        rss = sum(now[pid].rss_pages for pid in members) * PAGE
        pss_values = [_pss_kib(pid) for pid in members]
        pss = sum(v for v in pss_values if v is not None) * 1024 if any(v is not None for v in pss_values) else None
        with self._lock:
            t = self._track
            if t is None:
                return
            t.peak_rss = max(t.peak_rss, rss)
            if pss is not None:
                t.peak_pss = max(t.peak_pss or 0, pss)

    def _by_program(self, t: _Track) -> dict[str, int]:
        """Ticks by program over the step: those that left the set, and those still in it since the start."""
        by_program: dict[str, int] = dict(t.moved)
        for pid, p in t.last.items():
            name = self._names.get(pid, "?")
            by_program[name] = by_program.get(name, 0) + p.ticks - t.start.get(pid, Proc(0, 0, 0)).ticks
        return by_program

    def _record(self, t: _Track) -> dict[str, Any]:
        by_program = self._by_program(t)
        daemons: dict[str, int] = {}
        for pid, (name, n) in daemon_ticks(self.daemons).items():  # still running: their time since the start
            if pid in self._daemons_at_start:
                daemons[name] = daemons.get(name, 0) + n - self._daemons_at_start[pid][1]
        for name, n in daemons.items():
            by_program[name] = by_program.get(name, 0) + n
        worker = self._names.get(self.root)
        shown = {name: round(max(0.0, n * TICK_S - (self._thread_cpu if name == worker and self._meter_counted
                                                    else 0.0)), 3)
                 for name, n in sorted(by_program.items(), key=lambda kv: -kv[1]) if n > 0}
        meter = self._thread_cpu if self._meter_counted else 0.0
        total = max(0.0, sum(by_program.values()) * TICK_S - meter)
        charged, method = None, "proc"
        if self.group is not None and self._outside is not None and (usec := cgroups.cpu_usec(self.group)) is not None:
            method = "cgroup"
            outside = sum(self._by_program(self._outside).values()) + sum(daemons.values())
            total = max(0.0, (usec - self._group_usec) / 1e6 + outside * TICK_S - meter)
            if (unseen := total - sum(shown.values())) >= 2 * TICK_S:  # beyond the ticks' rounding
                shown[UNSEEN] = round(unseen, 3)
            peak = self._charged.read() if self._charged is not None else None
            charged = None if peak is None else round(peak / MIB, 1)
        if self._charged is not None:
            self._charged.close()
        return {"cpu_s": round(total, 3), "cpu_by_program": shown, "meter_cpu_s": round(self._thread_cpu, 3),
                "cpu_method": method,
                "peak_rss_mib": round(t.peak_rss / MIB, 1),
                "peak_pss_mib": None if t.peak_pss is None else round(t.peak_pss / MIB, 1),
                **({"peak_charged_mib": charged} if charged is not None else {}),
                "interval_s": self.interval}
