"""What the rest of the machine was doing during each sample (kept with the sample), so a figure taken on a busy
host is flagged; the machine's settings that make timings drift are guestbench.host.tuning's (in the fingerprint).

Per sample, `LoadMeter` reads /proc/stat (the whole machine's CPU time, and steal time where a VM reports it)
and the CPU time of the measuring worker's own process tree (its hypervisor and everything it started,
children it reaped included), plus every process that names the cell's work dir (a libvirt domain's qemu,
the NBD server of a workload disk), at the start and the end of the timed step. Kernel threads (a loop
device's) belong to nobody and count as other work. What the machine spent beyond our
tree is other processes' work: more than BUSY_OTHER_CORES cores on average, or more than BUSY_STEAL of the
machine's time stolen by the hypervisor below, and the sample is marked busy (kept, flagged in the reports).
/proc/stat counts in clock ticks (USER_HZ, 100 per second), so a sample shorter than MIN_JUDGED_S is not judged.

Where the worker is in a control group (guestbench.host.cgroups), ours is instead the CPU of the run's group (every
worker of this guestbench process: the concurrent peers of a density level or a concurrency group, also one that
ended during the step) plus the processes naming the work dir that are outside it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from guestbench.host import cgroups
from guestbench.instruments import usage

BUSY_OTHER_CORES = 0.5
BUSY_STEAL = 0.10
MIN_JUDGED_S = 0.5
TICK_S = usage.TICK_S
BUSY_RULE = (f"busy: other processes used more than {BUSY_OTHER_CORES:g} of a core on average during the timed "
             f"step, or more than {BUSY_STEAL:.0%} of the machine's CPU time was stolen by the hypervisor below "
             f"(steps shorter than {MIN_JUDGED_S:g} s are not judged)")


# ---------------------------------------------------------------------------------------------- per sample


@dataclass(frozen=True)
class _Reading:
    at: float  # time.monotonic()
    busy_ticks: int  # every CPU's non-idle, non-steal ticks
    steal_ticks: int
    ours_ticks: float  # our process tree's user+system ticks, reaped children included (or the run group's)


def _machine_ticks() -> tuple[int, int]:
    """(busy, steal) clock ticks of all CPUs so far; busy = user nice system irq softirq (guest time is in user)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    values = [int(v) for v in fields] + [0] * 8
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return user + nice + system + irq + softirq, steal


class LoadMeter:
    """Brackets one timed step: `start()` before it, `stop()` after; the record says what the rest of the
    machine did meanwhile."""

    def __init__(self, root: int | None = None, marker: str | None = None,
                 group: cgroups.Group | None = None) -> None:
        self.root = root or os.getpid()
        self.marker = marker  # the cell's work dir: processes naming it work for the cell (usage.processes)
        self.group = group
        self._start: _Reading | None = None

    def _read(self) -> _Reading:
        busy, steal = _machine_ticks()
        return _Reading(time.monotonic(), busy, steal, self._ours())

    def _ours(self) -> float:
        run = self.group.run_cpu_usec() if self.group is not None else None
        if run is None:
            return usage.ticks(self.root, self.marker)
        outside = {pid: p for pid, p in usage.processes(self.root, self.marker).items()
                   if self.group is not None and cgroups.outside(self.group, pid, run=True)}
        return run / 1e6 / TICK_S + sum(p.ticks for p in outside.values())

    def start(self) -> None:
        try:
            self._start = self._read()
        except OSError:  # no /proc: nothing to say about the host
            self._start = None

    def ours_s(self) -> float | None:
        """CPU seconds the cell's own processes used since start() (what the busy check subtracts from the
        machine's), None before start()."""
        if self._start is None:
            return None
        return (self._ours() - self._start.ours_ticks) * TICK_S

    def stop(self) -> dict[str, Any] | None:
        """{"other_cores", "steal", "load1", "busy"} over the step, or None when it could not be read."""
        if self._start is None:
            return None
        try:
            end = self._read()
            load1 = os.getloadavg()[0]
        except OSError:
            return None
        return judge(self._start, end, load1, os.cpu_count() or 1)


def judge(a: _Reading, b: _Reading, load1: float, cpus: int) -> dict[str, Any]:
    wall = max(b.at - a.at, 1e-9)
    other = max(0, (b.busy_ticks - a.busy_ticks) - (b.ours_ticks - a.ours_ticks)) * TICK_S / wall
    steal = (b.steal_ticks - a.steal_ticks) * TICK_S / (wall * cpus)
    record: dict[str, Any] = {"other_cores": round(other, 3), "steal": round(max(0.0, steal), 4),
                              "load1": round(load1, 2)}
    if wall >= MIN_JUDGED_S:
        record["busy"] = other > BUSY_OTHER_CORES or steal > BUSY_STEAL
    return record
