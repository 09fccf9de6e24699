"""A history of runs: per machine (the fingerprint's stable part) and cell (backend, placement, measurement, a fleet
cell's host) and figure, the series of the runs that measured it in time order, each run's median and CI, the
software each run had and where it changed, and the steps, drift and newest-run verdict of guestbench.analysis.steps.

A fleet run's hosts are machines of their own (results.hosts); pytest-benchmark's saved runs come in through the
import (results.store).

A run's date is the file's own word, so a run dated after now (past SKEW) or not dated at all is kept apart: it is
never the newest run a gate judges, and the history names it. A series is judged on its newest MAX_RUNS runs.
What the gate makes of the verdicts (the regressions, the runs judged) is guestbench.analysis.history_gate's."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, UTC
from typing import Any

from guestbench.analysis import steps
from guestbench.analysis.compare import cell_key, cell_name
from guestbench.analysis.stats import summarize
from guestbench.host.fingerprint import machine_key, software_key
from guestbench.results import hosts as fleet_hosts
from guestbench.results.figures import SECONDS, figures, load_figures
from guestbench.results.model import Run
from guestbench.results.store import Stored
from guestbench.util.errors import UserError, clip_text

SKEW = timedelta(days=1)
"""How far past now a run's start may be dated and still be followed. Clocks disagree: a machine whose clock keeps
local time but says UTC is up to 14 hours ahead (UTC+14); a day covers that with room. A later date is not a run
that has happened, and would otherwise always be the newest run (the one a gate judges)."""

MAX_RUNS = 1_000
"""Runs of one series judged and shown at most: the newest, about three years of nightly runs. PELT is quadratic
in the runs when it can prune nothing (a steady series): 1,000 runs cost milliseconds in ruptures' C search, and
the cap keeps a store of many small files (or a fleet file of many hosts of one machine) from costing more."""

MAX_SERIES = 5_000
"""Series (a machine's cells and figures) at most: a scenario's matrix on a fleet is a few hundred; each series
costs a few milliseconds to judge and more to print, so a store of thousands of one-sample cells is refused, not
judged in part (a gate that skipped a series could pass a regression)."""

SOFTWARE = (("libguestfs", "libguestfs"), ("qemu", "qemu"), ("kernel", "kernel"), ("uml", "UML kernel"),
            ("libvirt", "libvirt"), ("guestbench", "guestbench"))
STACK_SOFTWARE = ("libguestfs", "qemu", "uml", "libvirt", "supermin", "kernel", "python")  # a stack's, per cell
MODE_OF = "mode of "  # and the mode each UML chose itself ("mode of uml@sid"): one that gains seccomp mode runs in it


@dataclass(frozen=True)
class RunEntry:
    """One run of one machine (a fleet run's host share counts as a run of that host's machine)."""

    path: str
    started: str | None
    software: dict[str, str | None]  # SOFTWARE's keys, and "KEY@STACK" for the stacks its cells ran on
    member: str | None  # a fleet run's host name

    def named(self) -> str:
        """The run as a line names it: its file (and host) and its start as recorded (a file's text, clipped)."""
        host = f" host {clip_text(self.member, 40)}" if self.member else ""
        return f"{self.path}{host}, started {clip_text(self.started, 40) if self.started else 'at no time recorded'}"


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
    older: int = 0  # runs before the newest MAX_RUNS, neither judged nor shown


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
        extra = sorted((set(before) | set(after)) - {k for k, _ in SOFTWARE})
        named = [*SOFTWARE, *((k, f"UML's mode of {k[len(MODE_OF):]}" if k.startswith(MODE_OF) else
                               k.replace("@", " on stack ")) for k in extra)]
        return [f"{what} {before.get(k) or '?'} → {after.get(k) or '?'}" for k, what in named
                if k in before and k in after and before[k] != after[k]]


@dataclass
class History:
    machines: list[Machine]
    series: list[Series]
    floors: dict[str, float] = field(default_factory=dict)  # as given (--noise)
    apart: list[RunEntry] = field(default_factory=list)  # dated after `until`, or not dated: never followed
    until: str = ""  # the latest start followed: now plus SKEW (ISO 8601, UTC)


def machine_label(fp: dict[str, Any]) -> str:
    key = machine_key(fp)
    vm = key.get("vm") or "no VM"
    return f"{key.get('cpu_model') or 'unknown CPU'} × {key.get('cores') or '?'} cores, " \
           f"{key.get('memory_gib') or '?'} " \
           f"GiB, {vm}"


def _software(run: Run, fp: dict[str, Any]) -> dict[str, str | None]:
    found = software_key(fp)
    gb = run.guestbench or {}
    version = gb.get("version")
    commit = gb.get("git_commit")
    found["guestbench"] = f"{version}" + (f" ({str(commit)[:12]})" if commit else "") if version or commit else None
    out = {k: None if found.get(k) is None else str(found.get(k)) for k, _ in SOFTWARE}
    for cell in run.cells:  # a stack's software, as its cells recorded it (the fingerprint is the host's)
        if not cell.software:
            continue
        if cell.stack_name != "host":
            out.update({f"{k}@{cell.stack_name}": str(cell.software[k]) for k in STACK_SOFTWARE
                        if isinstance(cell.software.get(k), str)})
        if cell.uml_mode is None and isinstance(cell.software.get("uml_mode"), str):  # the mode UML chose itself
            out[f"{MODE_OF}{cell.system}"] = cell.software["uml_mode"]
    return out


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
          default_floor: float | None = None, now: float | None = None) -> History:
    """The history of `stored`'s runs; `floors` pins the noise floor (percent) of the series they name (a cell or a
    cell and figure key), `default_floor` of every other series. Runs dated after `now` (default: the clock) plus
    SKEW, or not dated, are kept apart."""
    floors = floors or {}
    limit = (time.time() if now is None else now) + SKEW.total_seconds()
    machines: dict[str, Machine] = {}
    runs: dict[str, list[Run]] = {}
    dated: list[tuple[float, Any]] = []
    apart: list[tuple[float, Any]] = []
    for t in shares(stored):
        when = _when(t[0].started)
        (dated if when is not None and when <= limit else apart).append((when or 0.0, t))
    dated.sort(key=lambda w: (w[0], w[1][0].path, w[1][0].member or ""))
    for _, (entry, fp, run) in dated:
        mk = json.dumps(machine_key(fp), sort_keys=True)
        if mk not in machines:
            machines[mk] = Machine(machine_key(fp), machine_label(fp), [])
            runs[mk] = []
        machines[mk].runs.append(entry)
        runs[mk].append(run)
    order = list(machines)
    measured = [_measured(mi, runs[mk]) for mi, mk in enumerate(order)]
    if (count := sum(len(m) for m in measured)) > MAX_SERIES:
        raise UserError(f"{count:,} series (cells and figures, per machine); allowed: at most {MAX_SERIES:,} (name "
                        "fewer files or fewer machines' runs)", source="results")
    series = [s for m in measured for s in _judged(m, floors, default_floor)]
    named = {s.key for s in series} | {s.cell for s in series}
    unknown = sorted(set(floors) - named)
    if unknown:
        raise UserError(f"names {', '.join(unknown)}, which no series has; allowed: a cell as the table names it "
                        f"(e.g. {series[0].key if series else 'tcg/host/startup'})", source="command line",
                        key="--noise")
    until = datetime.fromtimestamp(limit, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return History([machines[mk] for mk in order], series, floors,
                   sorted((t[0] for _, t in apart), key=lambda e: (e.path, e.member or "")), until)


def _when(started: str | None) -> float | None:
    """A run's place in time: its start as recorded (ISO 8601, UTC when it names no offset); None when it recorded
    none, or one that cannot be read."""
    if not isinstance(started, str):
        return None
    try:
        when = datetime.fromisoformat(started.replace("Z", "+00:00"))
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


Measured = dict[tuple[str, str], tuple[Series, list[tuple[int, list[float], int]]]]
"""A machine's series by (key, figure key), each with its (run, values, busy) in time order, not yet judged."""


def _measured(machine: int, runs: list[Run]) -> Measured:
    found: Measured = {}
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
                if (key, f.key) not in found:
                    found[(key, f.key)] = (Series(machine, name, f.label, key, f.unit, f.higher_better, [],
                                                  steps.Verdict(0.0, None, [], 0, None, None)), [])
                found[(key, f.key)][1].append((i, f.values, busy))
    return found


def _judged(found: Measured, floors: dict[str, float], default_floor: float | None) -> list[Series]:
    """The series with their points (the newest MAX_RUNS, summarised) and verdicts."""
    for s, measured in found.values():
        s.older = max(0, len(measured) - MAX_RUNS)
        s.points = [Point(i, values, m.median, (m.ci_low, m.ci_high), busy)
                    for i, values, busy in measured[s.older:] for m in [summarize(values)]]
        floor = floors.get(s.key, floors.get(s.cell, default_floor))
        s.verdict = steps.judge([p.values for p in s.points], s.higher_better, floor)
    return [s for s, _ in found.values()]


def require_series(history: History, baseline: bool = False) -> None:
    """A history needs a cell measured in two runs on one machine (or a baseline to hold one run against)."""
    if baseline or any(len(s.points) >= 2 for s in history.series):
        return
    runs = sum(len(m.runs) for m in history.machines)
    apart = f" ({len(history.apart)} more dated after {history.until} or not dated)" if history.apart else ""
    raise UserError(f"nothing to follow: {runs} run(s) on {len(history.machines)} machine(s){apart}, and no cell was "
                    "measured in two runs on one machine; allowed: results of one machine's runs of a scenario",
                    source="command line")


def finite(x: float) -> float | None:
    return None if math.isnan(x) else x
