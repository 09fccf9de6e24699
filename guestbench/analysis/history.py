"""A history of runs: per machine (the fingerprint's stable part) and cell (backend, placement, measurement, a fleet
cell's host) and figure, the series of the runs that measured it in time order, each run's median and CI, the
software each run had and where it changed, and the steps, drift and newest-run verdict of guestbench.analysis.steps.

A fleet run's hosts are machines of their own (results.hosts); pytest-benchmark's saved runs come in through the
import (results.store)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from guestbench.analysis import steps
from guestbench.analysis.compare import cell_key, cell_name
from guestbench.analysis.stats import summarize
from guestbench.host.fingerprint import machine_key, software_key
from guestbench.results import hosts as fleet_hosts
from guestbench.results.figures import SECONDS, figures, load_figures
from guestbench.results.model import Run
from guestbench.results.store import Stored
from guestbench.util.errors import UserError

SOFTWARE = (("libguestfs", "libguestfs"), ("qemu", "qemu"), ("kernel", "kernel"), ("uml", "UML kernel"),
            ("libvirt", "libvirt"), ("guestbench", "guestbench"))


@dataclass(frozen=True)
class RunEntry:
    """One run of one machine (a fleet run's host share counts as a run of that host's machine)."""

    path: str
    started: str | None
    software: dict[str, str | None]  # SOFTWARE's keys
    member: str | None  # a fleet run's host name


@dataclass(frozen=True)
class Point:
    run: int  # the index of the run in its machine's runs
    values: list[float]
    median: float
    ci: tuple[float, float]  # of the mean (stats.summarize), nan below two samples
    busy: int  # samples taken while the host was busy


@dataclass
class Series:
    machine: int  # index into History.machines
    cell: str  # backend/placement/label, as compare names it
    figure: str  # the figure's label ("seconds", or a workload's)
    key: str  # cell, plus the figure's key for a workload's figure: what --noise CELL=PCT names
    unit: str
    higher_better: bool
    points: list[Point]
    verdict: steps.Verdict


@dataclass
class Machine:
    key: dict[str, Any]  # host.machine_key
    label: str
    runs: list[RunEntry]

    def changes(self, at: int) -> list[str]:
        """What software changed between run `at - 1` and run `at`."""
        if at <= 0 or at >= len(self.runs):
            return []
        before, after = self.runs[at - 1].software, self.runs[at].software
        return [f"{what} {before[k] or '?'} → {after[k] or '?'}" for k, what in SOFTWARE if before[k] != after[k]]


@dataclass
class History:
    machines: list[Machine]
    series: list[Series]
    floors: dict[str, float] = field(default_factory=dict)  # as given (--noise)

    def regressions(self, pinned: set[tuple[int, str]] | None = None) -> list[str]:
        """One line per series whose newest run regressed, for the closing list and the CI gate; the `pinned`
        series (machine, key) are judged by a baseline instead."""
        out = []
        for s in self.series:
            if s.verdict.newest != steps.REGRESSION or (s.machine, s.key) in (pinned or set()):
                continue
            m = self.machines[s.machine]
            regressed = [st for st in s.verdict.steps if st.change == steps.REGRESSION]
            anchor = regressed[-1] if regressed else s.verdict.drift
            since = ""
            if anchor is not None:
                r = s.points[anchor.at].run
                since = f" since run {r + 1} ({m.runs[r].path})"
            out.append(f"{m.label}: {s.key}: the newest run ({m.runs[s.points[-1].run].path}) regressed{since}")
        return out


def machine_label(fp: dict[str, Any]) -> str:
    key = machine_key(fp)
    vm = key.get("vm") or "no VM"
    return f"{key.get('cpu_model') or 'unknown CPU'} × {key.get('cores') or '?'} cores, {key.get('memory_gib') or '?'} " \
           f"GiB, {vm}"


def _software(run: Run, fp: dict[str, Any]) -> dict[str, str | None]:
    found = software_key(fp)
    gb = run.guestbench or {}
    version = gb.get("version")
    commit = gb.get("git_commit")
    found["guestbench"] = f"{version}" + (f" ({str(commit)[:12]})" if commit else "") if version or commit else None
    return {k: None if found.get(k) is None else str(found.get(k)) for k, _ in SOFTWARE}


def shares(stored: list[Stored]) -> list[tuple[RunEntry, dict[str, Any], Run]]:
    """Every run as (entry, fingerprint, run): a fleet run once per host, with that host's fingerprint."""
    out = []
    for st in stored:
        parts = [(m.name, share) for m, share in (fleet_hosts.view(st.run, n) for n in fleet_hosts.names(st.run))] \
            if fleet_hosts.is_fleet(st.run) else [(None, st.run)]
        for member, run in parts:
            fp = run.host or {}
            out.append((RunEntry(st.path, run.started_utc, _software(run, fp), member), fp, run))
    return out


def build(stored: list[Stored], floors: dict[str, float] | None = None,
          default_floor: float | None = None) -> History:
    """The history of `stored`'s runs; `floors` pins the noise floor (percent) of the series they name (a cell or a
    cell and figure key), `default_floor` of every other series."""
    floors = floors or {}
    machines: dict[str, Machine] = {}
    runs: dict[str, list[Run]] = {}
    for entry, fp, run in sorted(shares(stored), key=lambda t: (_when(t[0].started), t[0].path, t[0].member or "")):
        mk = json.dumps(machine_key(fp), sort_keys=True)
        if mk not in machines:
            machines[mk] = Machine(machine_key(fp), machine_label(fp), [])
            runs[mk] = []
        machines[mk].runs.append(entry)
        runs[mk].append(run)
    order = list(machines)
    series: list[Series] = []
    for mi, mk in enumerate(order):
        series += _series(mi, runs[mk], floors, default_floor)
    named = {s.key for s in series} | {s.cell for s in series}
    unknown = sorted(set(floors) - named)
    if unknown:
        raise UserError(f"names {', '.join(unknown)}, which no series has; allowed: a cell as the table names it "
                        f"(e.g. {series[0].key if series else 'tcg/host/startup'})", source="command line",
                        key="--noise")
    return History([machines[mk] for mk in order], series, floors)


def _when(started: str | None) -> tuple[int, float]:
    """A run's place in time: its start as recorded (ISO 8601, UTC); a run that recorded none, or one that cannot
    be read, comes after every dated one (by file name)."""
    try:
        return 0, datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp()
    except (TypeError, ValueError, OverflowError, OSError):
        return 1, 0.0


def _series(machine: int, runs: list[Run], floors: dict[str, float], default_floor: float | None) -> list[Series]:
    found: dict[tuple[str, str], Series] = {}
    for i, run in enumerate(runs):
        for cell in run.cells:
            if not cell.samples:
                continue
            name = cell_name(cell_key(cell))
            busy = load_figures(cell)["busy"]
            for f in figures(cell):
                if not f.values:
                    continue
                key = name if f.key == SECONDS else f"{name} {f.key}"
                s = summarize(f.values)
                point = Point(i, f.values, s.median, (s.ci_low, s.ci_high), busy)
                if (key, f.key) not in found:
                    found[(key, f.key)] = Series(machine, name, f.label, key, f.unit, f.higher_better, [],
                                                 steps.Verdict(0.0, None, [], 0, None, None))
                found[(key, f.key)].points.append(point)
    for s in found.values():
        floor = floors.get(s.key, floors.get(s.cell, default_floor))
        s.verdict = steps.judge([p.values for p in s.points], s.higher_better, floor)
    return list(found.values())


def check(history: History, baseline: bool = False) -> None:
    """A history needs a cell measured in two runs on one machine (or a baseline to hold one run against)."""
    if baseline or any(len(s.points) >= 2 for s in history.series):
        return
    runs = sum(len(m.runs) for m in history.machines)
    raise UserError(f"nothing to follow: {runs} run(s) on {len(history.machines)} machine(s), and no cell was measured "
                    "in two runs on one machine; allowed: results of one machine's runs of a scenario",
                    source="command line")


def finite(x: float) -> float | None:
    return None if math.isnan(x) else x
