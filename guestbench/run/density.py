"""A density item (guestbench.measurements.density) on one backend: level after level of N appliances at once,
each an ordinary cell run as concurrent guests (their launches, or their jobs, start together), until a stop
rule holds. What each level reached, why the levels stopped, and how many appliances fit within the start-up
bound are kept in the results document under "density" as the levels end, so an interrupted run keeps them.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from guestbench.measurements.density import Density
from guestbench.results import Cell, DensityLevel, Spread
from guestbench.results import Density as DensityRecord
from guestbench.results import figures as cell_figures
from guestbench.run.cell import RunContext
from guestbench.plan.cells import Group, measurement_of, params_of, system_of

MEMINFO_INTERVAL_S = 0.2


def meminfo() -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes."""
    fields: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            if name in ("MemTotal", "MemAvailable"):
                fields[name] = int(value.split()[0]) * 1024
    return fields["MemTotal"], fields["MemAvailable"]


class HostMemory:
    """The host's used memory (MemTotal − MemAvailable) at its highest while a level runs, read every
    MEMINFO_INTERVAL_S."""

    def __init__(self) -> None:
        self.total, available = meminfo()
        self.before = self.peak = self.total - available
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="host-memory", daemon=True)

    def __enter__(self) -> HostMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(MEMINFO_INTERVAL_S):
            total, available = meminfo()
            self.peak = max(self.peak, total - available)


@dataclass
class Level:
    appliances: int
    launches: int  # start-ups: every launch of the level (cold, warm-up, samples); a job: every timed job
    failures: int
    wall_s: float
    seconds: list[float]  # the level's samples: start-ups, or the job's
    cpu_s: list[float]
    peak_mib: list[float]
    charged_mib: list[float]  # each appliance's peak as its control group was charged (page cache included)
    host_used_before_mib: float
    host_used_peak_mib: float
    busy: int
    job: str = "startup"

    def to_record(self) -> DensityLevel:
        """The level as the results document keeps it (every figure written, null where there is none)."""
        def spread(values: list[float]) -> Spread | None:
            return Spread.laid_out(median=statistics.median(values), min=min(values), max=max(values),
                                   n=len(values)) if values else None
        rate = round(self.launches / self.wall_s * 60, 2) if self.wall_s > 0 else None
        figures = ({"launches": self.launches, "launches_per_min": rate, "startup_s": spread(self.seconds)}
                   if self.job == "startup" else
                   {"jobs": self.launches, "jobs_per_min": rate, "job_s": spread(self.seconds)})
        return DensityLevel.laid_out(
            appliances=self.appliances, **figures, failures=self.failures, wall_s=round(self.wall_s, 3),
            cpu_s_per_launch=spread(self.cpu_s), peak_mib_per_appliance=spread(self.peak_mib),
            peak_charged_mib_per_appliance=spread(self.charged_mib),
            host_used_before_mib=round(self.host_used_before_mib, 1),
            host_used_peak_mib=round(self.host_used_peak_mib, 1), busy_samples=self.busy)

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None


class DensityTrials:
    """The levels of one density item on one backend; `run_group` runs N cells at once (the runner's
    concurrent guests)."""

    def __init__(self, ctx: RunContext, template: Cell, iterations: list[str],
                 run_group: Callable[[RunContext, Group], None]) -> None:
        self.ctx = ctx
        self.template = template
        self.its = iterations
        self.run_group = run_group
        p = params_of(template)
        self.cap = p["max_appliances"]
        self.slowdown, self.budget = p["slowdown_pct"] / 100, p["memory_budget_pct"] / 100
        self.levels: list[Level] = []
        density = measurement_of(template)
        job = density.job(p) if isinstance(density, Density) else None
        self.job = "startup" if job is None else job[0].name
        self.what, self.count = ("start-up", "launches") if job is None else (self.job, "samples")
        # a job's cells are cells of that measurement (these fields of the template's replaced): one launch each,
        # then its timed repetitions
        self.job_cell: dict[str, Any] = {} if job is None else {
            "measurement": job[0].name, "params": job[1], "timed": job[0].timed,
            "cache_mode": job[0].cache_mode(job[1]), "bytes": job[0].nbytes(job[1]), "what": job[0].describe(job[1])}
        if job is not None:
            self.its = ctx.sc.iterations(False)
        self.record = DensityRecord.laid_out(
            backend=system_of(template), placement=template.placement, label=template.label,
            max_appliances=self.cap, slowdown_pct=p["slowdown_pct"], memory_budget_pct=p["memory_budget_pct"],
            job=self.job, timed=self.job_cell.get("timed", template.timed), levels=[], stopped=None, why=None,
            fits=None, verdict=None)

    def run(self) -> None:
        n = 1
        try:
            while not self.ctx.stop.is_set():
                level = self._level(n)
                self.levels.append(level)
                self.record.levels.append(level.to_record())
                stop = self._stop_rule(level)
                if stop is not None:
                    self._close(*stop)
                    return
                n *= 2
                self._save()
        finally:
            if self.record.stopped is None:
                self._close("interrupted", "a signal stopped the run during a level; its samples are kept")

    def _level(self, n: int) -> Level:
        t = self.template
        cells = [self.ctx.recorder.add_cell(t.replaced(
            **self.job_cell, label=f"{t.label}.x{n}.guest{k}",
            variant={**(t.variant or {}), "appliances": n, "guest": k}, instance=k, concurrency=n, density_level=n,
            order="sequential")) for k in range(1, n + 1)]
        with HostMemory() as mem:
            t0 = time.monotonic()
            self.run_group(self.ctx, Group(cells, self.its))
            wall = time.monotonic() - t0
        with self.ctx.recorder.lock:
            samples = [s for c in cells for s in c.samples]
            failures = sum(len(c.failures) for c in cells)
            launches = len(samples) + sum(len(c.warmups) for c in cells) + sum(
                1 for c in cells if c.cold_s is not None and self.job == "startup")
        return Level(appliances=n, launches=launches,
                     failures=failures, wall_s=wall, seconds=[s.seconds for s in samples],
                     cpu_s=[v for v in (cell_figures.cpu_s(s.resources) for s in samples) if v is not None],
                     peak_mib=[v for v in (cell_figures.peak_mib(s.resources) for s in samples) if v is not None],
                     charged_mib=[v for v in (cell_figures.charged_mib(s.resources) for s in samples)
                                  if v is not None],
                     host_used_before_mib=mem.before / 2**20, host_used_peak_mib=mem.peak / 2**20,
                     busy=sum(1 for s in samples if (s.load or {}).get("busy") is True), job=self.job)

    def _stop_rule(self, level: Level) -> tuple[str, str] | None:
        """(stopped, why) once a rule holds after this level, else None: go on to twice as many."""
        n = level.appliances
        if level.failures or level.median is None:
            return "failures", f"{level.failures} of the {n}-appliance level's {self.count} failed"
        base = self.levels[0].median
        if base and level.median >= self.slowdown * base:
            return "slowdown", (f"the {n}-appliance level's median {self.what} {level.median:.3g} s is "
                                f"{level.median / base:.2f}x the single appliance's {base:.3g} s (bound "
                                f"{self.slowdown:.2f}x)")
        if 2 * n > self.cap:
            return "cap", f"the next level ({2 * n}) is past max_appliances ({self.cap})"
        total, available = meminfo()
        per = max(statistics.median(level.peak_mib) if level.peak_mib else 0.0,
                  statistics.median(level.charged_mib) if level.charged_mib else 0.0,
                  (level.host_used_peak_mib - level.host_used_before_mib) / n)
        projected = (total - available) / 2**20 + per * 2 * n
        if projected > self.budget * total / 2**20:
            return "memory", (f"the next level ({2 * n}) would take the host's used memory to about "
                              f"{projected:,.0f} MiB ({per:.0f} MiB per appliance), past {self.budget:.0%} of its "
                              f"{total / 2**20:,.0f} MiB")
        return None

    def _close(self, stopped: str, why: str) -> None:
        base = self.levels[0].median if self.levels and not self.levels[0].failures else None
        good = [lv for lv in self.levels if not lv.failures and lv.median is not None and base
                and lv.median < self.slowdown * base]
        self.record.stopped, self.record.why = stopped, why
        if good and base:
            best = good[-1]
            assert best.median is not None
            self.record.fits, self.record.verdict = best.appliances, (
                f"{best.appliances} appliance{'s' if best.appliances > 1 else ''} fit here at once within "
                f"{best.median / base:.2f}x the single appliance's {self.what} (median {best.median:.3g} s vs "
                f"{base:.3g} s; bound {self.slowdown:.2f}x)")
        else:
            self.record.fits, self.record.verdict = 0, "no level stayed within the bound without a failure"
        self._save()

    def _save(self) -> None:
        """The record as it stands into the results file, in place of what it said before."""
        self.ctx.recorder.density(self.record)
