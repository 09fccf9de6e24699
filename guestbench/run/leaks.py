"""Leak watch for soaks: runs `guestbench scenario` and says what it gained over the run — the guestbench process's
and its worker's open fds, threads and RSS (sample to sample, after a warm-up), and the host's temp entries, loop
devices, libvirt domains and hypervisor processes (before the run against after it). All should be zero; what is
not is a leak that a long run (a CI image builder, a nightly fleet) would pay for.

Used by `make soak` (tools/soak.py) and by the suite's small soak (tests/test_soak.py).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

from guestbench.host import procs
from guestbench.host.paths import temp_root

HYPERVISORS = ("qemu-system", "linux")  # qemu's and UML's program names (UML is /usr/bin/linux)
POLL_S = 0.2
WORKER_MODULE = "guestbench.execute.worker"  # python -m guestbench.execute.worker (guestbench.execute.supervisor)
# caches a first run makes in the temp roots and keeps on purpose (UML's appliances, libguestfs's own)
KEPT = ("guestbench-appliances", ".guestfs-")
WINDOW = 6  # readings that make the baseline (after the warm-up) and the end figure (guestbench.run.leaks.growth)


@dataclass
class ProcessReading:
    fds: int
    threads: int
    rss_kib: int


def read_process(pid: int) -> ProcessReading | None:
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return ProcessReading(fds, int(fields["Threads"].strip()), int(fields["VmRSS"].split()[0]))


def workers_of(pid: int) -> list[int]:
    """The guestbench worker processes among `pid`'s children (started by any of its threads)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for c in children:
            if WORKER_MODULE in procs.argv(int(c)):
                found.append(int(c))
    return found


@dataclass
class HostReading:
    temp_entries: set[str]
    loop_devices: set[str]
    domains: set[str]
    hypervisors: set[str]

    def growth(self, later: HostReading) -> dict[str, list[str]]:
        return {k: sorted(getattr(later, k) - getattr(self, k)) for k in
                ("temp_entries", "loop_devices", "domains", "hypervisors")}


def read_host() -> HostReading:
    entries = set()
    for d in {Path("/tmp"), Path("/var/tmp"), temp_root()}:
        try:
            entries |= {str(p) for p in d.iterdir() if not p.name.startswith(KEPT)}
        except OSError:
            pass
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout.splitlines()
    from guestbench.backends.libvirt import guestfs_domains

    return HostReading(entries, {ln.split(":", 1)[0] for ln in loops if ln.strip()}, guestfs_domains(),
                       hypervisor_processes())


def hypervisor_processes() -> set[str]:
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        name = Path(argv0).name
        if state != "Z" and (name.startswith(HYPERVISORS[0]) or name == HYPERVISORS[1]):
            found.add(f"{entry.name} {name}")
    return found


@dataclass
class Growth:
    """What one soak run gained: end minus baseline for the runner (its worst cell) and its worst worker, and what
    the host kept."""

    launches: int = 0
    samples: int = 0
    failures: int = 0
    runner: dict[str, float] = field(default_factory=dict)
    worker: dict[str, float] = field(default_factory=dict)
    host: dict[str, list[str]] = field(default_factory=dict)
    exit_status: int | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def problems(self, rss_slack_kib: int = 16 * 1024) -> list[str]:
        out = []
        for who, g, slack in (("guestbench", self.runner, {}), ("its worker", self.worker, WORKER_TRANSIENT)):
            for k in ("fds", "threads"):
                if g.get(k, 0) > slack.get(k, 0):
                    out.append(f"{who} gained {g[k]:g} {k}")
            if g.get("rss_kib", 0) > rss_slack_kib:
                out.append(f"{who} gained {g['rss_kib'] / 1024:.1f} MiB RSS")
        out += [f"left on the host: {k}: {', '.join(v)}" for k, v in self.host.items() if v]
        return out


WORKER_TRANSIENT = {"fds": 2, "threads": 1}
"""What one appliance holds open in its worker while it launches and runs (its two sockets, libguestfs's thread):
a worker read at a sample is anywhere in that cycle (CI: every baseline reading between two appliances, at 4 fds and
2 threads, every end reading during a launch, at 6 and 3), so only growth past it is a leak; a leak of one per
sample passes it within four samples, and the long soak's 200."""


def growth(series: list[list[ProcessReading]], warmup: int, window: int = WINDOW) -> dict[str, float]:
    """The worst end-minus-baseline over `series` (each a run of readings at the same moment of the same loop: one
    cell's samples, one worker's): `window` readings after the warm-up against the last `window`."""
    worst: dict[str, float] = {}
    for readings in series:
        if len(readings) < warmup + 2 * window:
            continue
        base, end = readings[warmup:warmup + window], readings[-window:]
        for k in ("fds", "threads"):
            # how far the end's floor rose above everything the baseline saw: a reading may catch a launch's sockets
            # and helper threads, or a shut-down appliance's closed (seen: a start-up worker at 4, 5 and 6 fds
            # sample by sample); a leak lifts every reading past that range
            g = max(0, min(getattr(r, k) for r in end) - max(getattr(r, k) for r in base))
            worst[k] = max(worst.get(k, g), g)
        g = statistics.median(r.rss_kib for r in end) - statistics.median(r.rss_kib for r in base)
        worst["rss_kib"] = max(worst.get("rss_kib", g), g)
    return worst


Moment = tuple[int, int]  # a reading's moment: cell i had just written its n-th sample


def judged(readings: dict[Any, list[tuple[Moment, ProcessReading]]], cells: list[dict[str, Any]]) -> list[
        list[ProcessReading]]:
    """The readings taken while the cell whose sample prompted them had samples to come: at its last one the runner
    has gone on to the next cell's set-up (seen: the next payload made, +14 MiB RSS for a moment here, and 17.5 MiB
    of "growth" in CI, where the soak read later still) and the next cell's worker is starting."""
    return [[r for (i, n), r in series if i < len(cells) and n < len(cells[i]["samples"])]
            for series in readings.values()]


def _cells(results: Path) -> list[dict[str, Any]] | None:
    """The run's cells so far (None: no results file yet, or caught mid-write)."""
    files = list(results.glob("*.json")) if results.exists() else []
    try:
        return list(json.loads(files[0].read_text())["cells"]) if files else None
    except (OSError, ValueError, KeyError):
        return None


def _launches(cells: list[dict[str, Any]]) -> int:
    """A start-up sample or failure is a launch; any other cell launches once (its worker keeps the appliance)."""
    return sum(len(c["samples"]) + len(c["failures"]) if c["measurement"] == "startup"
               else (1 if c["samples"] or c["failures"] else 0) for c in cells)


def soak(scenario: Path, results: Path, *args: str, warmup: int = 4, window: int = WINDOW,
         timeout_s: float = 6 * 3600, env: dict[str, str] | None = None,
         read: Callable[[], HostReading] = read_host) -> Growth:
    """Run the scenario and read the runner and its worker at every sample written (a reading at a cell's last sample
    is not judged: see judged); the host before and after.
    A cell or worker is judged when it has warmup + 2 * window readings (the suite's short soak: a smaller window).
    `read` reads the host: all of it (`make soak`, on a machine of its own), or what a caller knows is its own."""
    before = read()
    t0 = time.monotonic()
    results.mkdir(parents=True, exist_ok=True)
    log = open(results / "soak.log", "w")  # its output, one line per sample: a pipe nobody reads would fill up
    proc = subprocess.Popen([sys.executable, "-m", "guestbench", "scenario", str(scenario), "--results", str(results),
                             *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    runner: dict[int, list[tuple[Moment, ProcessReading]]] = {}  # by cell
    workers: dict[int, list[tuple[Moment, ProcessReading]]] = {}  # by worker pid
    seen: dict[int, int] = {}
    try:
        while proc.poll() is None:
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"the soak did not finish within {timeout_s:g} s")
            now = _cells(results) or []
            grew = [i for i, c in enumerate(now) if len(c["samples"]) > seen.get(i, 0)]
            for i in grew:  # a sample of cell i was written: the same moment of the same loop each time
                seen[i] = len(now[i]["samples"])
                if (r := read_process(proc.pid)) is not None:
                    runner.setdefault(i, []).append(((i, seen[i]), r))
            if grew:
                for w in workers_of(proc.pid):
                    if (r := read_process(w)) is not None:
                        workers.setdefault(w, []).append(((grew[-1], seen[grew[-1]]), r))
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
        log.close()
    cells = _cells(results) or []
    deadline = time.monotonic() + 10
    after = read()
    while any(before.growth(after).values()) and time.monotonic() < deadline:  # a moment for reaping
        time.sleep(0.2)
        after = read()
    return Growth(launches=_launches(cells), samples=sum(len(c["samples"]) for c in cells),
                  failures=sum(len(c["failures"]) for c in cells),
                  runner=growth(judged(runner, cells), warmup, window),
                  worker=growth(judged(workers, cells), warmup, window), host=before.growth(after),
                  exit_status=proc.returncode, seconds=round(time.monotonic() - t0, 1))
