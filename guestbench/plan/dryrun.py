"""`guestbench scenario FILE --dry-run`: what a run would do, and roughly how long it would take, with nothing
launched.

The cells come from the same plan the runner uses (plan.cells), for every placement. The backends' verdicts are
the cached ones only (a probe would launch): a backend without one is listed as 'would be probed'. The
estimate of a cell is its iterations times the median sample of the same cell in earlier results files
in the newest earlier results file that has one (same placement, backend, measurement and parameters; else the
same measurement with other parameters, said so), plus one appliance start-up per cell where the measurement does
not time the launch itself. A cell with no earlier figure has no estimate and is counted apart: the total never
pretends to know it.

Each cell that runs a user's program on the host (a command measurement's argv or guestfish script) or sets an
environment is listed with them: they run as the user guestbench runs as, root, so a reviewer of a scenario sees
that code before it runs.
"""

from __future__ import annotations

import statistics
import sys
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guestbench.backends import BACKENDS
from guestbench.util import walk
from guestbench.util.errors import UserError, one_line
from guestbench.measurements import get as get_measurement
from guestbench.results.figures import sample_seconds
from guestbench.results import Cell, load_results, store
from guestbench.results.limits import MAX_BYTES
from guestbench.plan import cells as planner
from guestbench.execute import probe
from guestbench.stacks import store as stacks
from guestbench.scenario import Scenario


@dataclass(frozen=True)
class Verdict:
    """A backend's cached verdict, or none yet (its probe would launch it once, up to `probe_s`)."""

    state: str  # usable, not usable, would be probed
    reason: str
    probe_s: float = 0.0  # the time a probe would add to the run


@dataclass
class PlannedCell:
    placement: str
    backend: str
    label: str
    measurement: str
    params: dict[str, Any]
    iterations: int  # launches of the cell: cold + warm-ups + repetitions (the cap, with a precision target)
    estimate_s: float | None = None
    basis: str = "no earlier figure"
    env: dict[str, str] = field(default_factory=dict)  # the scenario item's, for its workers and programs
    program: dict[str, Any] = field(default_factory=dict)  # the user's argv (and script) it runs on the host


@dataclass
class DryRun:
    scenario: Scenario
    verdicts: dict[str, Verdict]
    cells: list[PlannedCell]
    history: list[str] = field(default_factory=list)  # the earlier results files read

    @property
    def probe_s(self) -> float:
        return sum(v.probe_s for v in self.verdicts.values())

    @property
    def estimated_s(self) -> float:
        return self.probe_s + sum(c.estimate_s for c in self.cells if c.estimate_s is not None)

    @property
    def unknown(self) -> list[PlannedCell]:
        return [c for c in self.cells if c.estimate_s is None]


def verdict(name: str) -> Verdict:
    """The cached verdict of a backend; never probes, never starts a daemon. A stack's backend: whether the stack
    is there (its verdict's key is asked inside the stack, which a dry run does not enter)."""
    base, _, stack = name.partition("@")
    if stack:
        try:
            st = stacks.load(stack)
        except UserError as e:
            return Verdict("not usable", str(e))
        if st.problem:
            return Verdict("not usable", f"stack {stack}: {st.problem}")
        return Verdict("would be probed", f"stack {stack} ({st.suite}, built {st.built_utc}): set up and probed with "
                       "one launch in its sandbox first, unless a verdict is cached", BACKENDS[base].probe_timeout())
    backend = BACKENDS[name]
    cached = probe.cached_verdict(backend, backend.probe_key())
    if cached is None:
        return Verdict("would be probed", "no cached verdict: the run probes it with one launch first",
                       backend.probe_timeout())
    return Verdict("usable" if cached.usable else "not usable", cached.reason)


@dataclass(frozen=True)
class Earlier:
    """A cell with samples in an earlier results file (`file`: its name)."""

    file: str
    cell: Cell

    @property
    def placement(self) -> str | None:
        """As the cell recorded it; a cell written before placements existed ran on the host."""
        return self.cell.placement if "placement" in self.cell.source_keys else "host"


def earlier_cells(results_dir: Path) -> tuple[list[str], list[Earlier]]:
    """The readable results files in `results_dir` and their cells with samples; the files the model refuses are
    passed over (a dry run reports, it does not judge). The directory is read as `history` reads one
    (guestbench.util.walk, results.store's budget): newest first, and past the budget's files or bytes the older
    ones are passed over, said in one line; a file swapped while it is read is passed over, said in one line."""
    names, cells = [], []
    if not results_dir.is_dir():  # no results directory yet: nothing to estimate from
        return [], []
    spent = store.budget(depth=0)
    spent.strict = False
    try:
        with closing(walk.files(results_dir, ".json", spent, newest_first=True)) as listed:
            for f in listed:
                try:  # bounded: a FIFO or a device among them is passed over, not waited on (results.limits)
                    found = [c for c in load_results(f.path, f.read("results file", MAX_BYTES)).cells if c.samples]
                except walk.Capped as e:
                    _warn(f"{e}; the older results files are not in the estimate")
                    break
                except walk.Changed as e:
                    _warn(str(e))
                    continue
                except UserError:
                    continue
                if found:
                    names.append(Path(f.path).name)
                    cells += [Earlier(Path(f.path).name, c) for c in found]
    except walk.Capped as e:  # more entries than a results directory has: refused while listed, nothing read
        _warn(f"{e}; no earlier results are in the estimate")
    if spent.passed_over:
        _warn(f"{results_dir}: {spent.passed_over:,} older results files passed over; the estimate reads the newest "
              f"{spent.files:,} at most")
    return names[::-1], [c for group in _by_file(cells)[::-1] for c in group]  # oldest first, as named


def _by_file(cells: list[Earlier]) -> list[list[Earlier]]:
    """`cells` (newest file first) grouped by file, in that order."""
    groups: list[list[Earlier]] = []
    for c in cells:
        if groups and groups[-1][0].file == c.file:
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def _warn(text: str) -> None:
    sys.stderr.write(f"guestbench: warning: {one_line(text)}\n")


def _launch_s(backend: str, placement: str, earlier: list[Earlier]) -> float | None:
    """An appliance start-up on this backend and placement, from earlier start-up cells."""
    found = [s for e in earlier if e.cell.system == backend and e.placement == placement
             and e.cell.measurement == "startup" for s in sample_seconds(e.cell)]
    return statistics.median(found) if found else None


def estimate(cell: PlannedCell, earlier: list[Earlier]) -> None:
    """Fill in the cell's estimate and the figure it rests on, from the closest earlier cell."""
    same = [e for e in earlier if e.cell.system == cell.backend and e.cell.measurement == cell.measurement
            and e.placement == cell.placement]
    exact = [e for e in same if e.cell.params == cell.params]
    if not (exact or same):
        return
    newest = (exact or same)[-1].file  # the newest file says most about this machine as it is now
    pick = [e for e in exact or same if e.file == newest]
    per = statistics.median(s for e in pick for s in sample_seconds(e.cell))
    total = per * cell.iterations
    basis = f"{cell.iterations} × median {per:.1f} s ({pick[-1].file}{'' if exact else ', other parameters'})"
    if not get_measurement(cell.measurement).times_launch:
        launch = _launch_s(cell.backend, cell.placement, earlier)
        if launch is None:
            return  # its launches are part of the cost and nothing says how long they take
        total += launch * cell.iterations
        basis += f" + {cell.iterations} start-ups of {launch:.1f} s"
    cell.estimate_s, cell.basis = total, basis


def dry_run(sc: Scenario, results_dir: Path) -> DryRun:
    names = planner.verdict_names(sc)
    verdicts = {n: verdict(n) for n in names}
    runnable = [n for n in names if verdicts[n].state != "not usable"]
    files, earlier = earlier_cells(results_dir)
    cells = []
    for placement in sc.placements:
        for group in planner.plan(sc, runnable):
            for c in group.cells:
                system = planner.system_of(c)
                params = planner.params_of(c)
                cells.append(PlannedCell(placement, system, c.label, str(c.measurement), params,
                                         len(group.iterations), env=dict(c.env or {}),
                                         program=planner.measurement_of(c).host_program(params)))
    for cell in cells:
        estimate(cell, earlier)
    return DryRun(sc, verdicts, cells, files)
