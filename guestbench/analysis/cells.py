"""The figures of a run's cells, recomputed from the raw samples: per cell its summary (median, CI, spread),
throughput, ratio to the fastest, host load and resources; the warnings a reader must see. The cells are the typed
model's (guestbench.results.model), which has refused what no run writes; a partial file (interrupted or still
running) still lacks figures, which every reader allows for."""

from __future__ import annotations
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from guestbench.util import units
from guestbench.results import figures as cell_figures
from guestbench.results.model import Cell, Precision, Sample
from guestbench.util.units import NONE
from guestbench.analysis.stats import Summary, spread_warnings, summarize


@dataclass
class Row:
    """One cell of the results document, with the figures every output needs."""

    backend: str
    placement: str
    measurement: str
    label: str
    timed: str
    cache_mode: str | None
    bytes: int | None
    n: int
    failures: int
    summary: Summary | None
    mb_per_s: float | None
    ratio: float | None
    cold_s: float | None
    status: str
    skip_reason: str | None
    first_failure: str | None
    workload: bool = False  # a tool's figures: shown in guestbench.output.tables.metrics's tables instead
    precision: Precision | None = None  # sampled towards a precision target
    judged: int = 0  # samples whose host load was judged (guestbench.instruments.load)
    busy: int = 0  # ... of which the host was busy
    busiest: float | None = None  # the most cores other processes used during one of its samples
    shared: int = 0  # samples taken while another guestbench run was active on this host (guestbench.host.neighbours)
    cpu_s: float | None = None  # median CPU s of the cell's processes per timed step (guestbench.instruments.usage)
    peak_mib: float | None = None  # median of each step's peak PSS (RSS where no PSS was readable)
    cpu_methods: tuple[str, ...] = ()  # how the samples' CPU was counted: "cgroup", "proc" (instruments/usage.py)
    density: bool = False  # an appliance of a density level: its figures are in the density tables
    drive_paths: tuple[str, ...] = ()  # uml: how each of its drives reached UML (ubd, vhost-user-blk)
    seconds: list[float] = field(default_factory=list)  # its samples' seconds, in file order
    uses: list[cell_figures.SampleUse] = field(default_factory=list)  # what its samples used (its cost)
    samples: list[Sample] = field(default_factory=list)  # the cell's samples (a workload's or boot phases' figures)


def _first_failure(cell: Cell) -> str | None:
    if not cell.failures:
        return None
    return cell.failures[0].reason or "no reason recorded"


def status(cell: Cell, unknown: str = "unknown") -> str:
    """The cell's status as the file says it (`unknown` when it says none: an older or hand-made file)."""
    return cell.status if "status" in cell.source_keys or not cell.source_keys else unknown


def row(cell: Cell) -> Row:
    measurement = cell.measurement or "?"
    f = cell_figures.read(cell)  # after this module's own readers: the data goes down once
    summary = summarize(f.seconds) if f.seconds else None
    nbytes = cell.bytes if isinstance(cell.bytes, int) else None
    throughput = None
    if nbytes is not None and summary is not None and summary.median > 0:
        throughput = units.mb_per_s(nbytes, summary.median)
    return Row(
        backend=cell.system if cell.backend else "?",
        placement=cell.placement or "",
        measurement=measurement,
        label=cell.label or measurement,
        timed=cell.timed or "",
        cache_mode=cell.cache_mode or None,
        bytes=nbytes,
        n=len(f.seconds),
        failures=len(cell.failures),
        summary=summary,
        mb_per_s=throughput,
        ratio=None,
        cold_s=f.cold_s,
        status=status(cell),
        skip_reason=cell.skip_reason or None,
        first_failure=_first_failure(cell),
        workload=bool(cell.metrics),
        density=f.density,
        drive_paths=tuple(cell.drive_paths or ()),
        precision=cell.precision,
        **f.load,
        cpu_s=f.cpu_s,
        peak_mib=f.peak_mib,
        cpu_methods=f.cpu_methods,
        seconds=f.seconds,
        uses=f.uses,
        samples=f.samples,
    )


def rows(cells: list[Cell]) -> list[Row]:
    """One Row per cell, in file order, with ratios to the fastest median of the same label and
    placement."""
    result = [row(cell) for cell in cells]
    fastest: dict[tuple[str, str], float] = {}
    for r in result:
        if r.summary is not None:
            key = (r.label, r.placement)
            fastest[key] = min(fastest.get(key, math.inf), r.summary.median)
    for r in result:
        best = fastest.get((r.label, r.placement))
        if r.summary is not None and best:
            r.ratio = r.summary.median / best
    return result


def by_label(rs: Iterable[Row]) -> dict[str, list[Row]]:
    """Rows grouped by measurement label, labels in order of first appearance."""
    groups: dict[str, list[Row]] = {}
    for r in rs:
        groups.setdefault(r.label, []).append(r)
    return groups


def _by_label_placement(rs: Iterable[Row]) -> dict[tuple[str, str], list[Row]]:
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rs:
        groups.setdefault((r.label, r.placement), []).append(r)
    return groups


def _group_names(rs: list[Row]) -> dict[int, str]:
    """Name each row by label (plus placement when a label has several) so warnings are unambiguous."""
    placements: dict[str, set[str]] = {}
    for r in rs:
        placements.setdefault(r.label, set()).add(r.placement)
    return {id(r): f"{r.label} ({r.placement or NONE})" if len(placements[r.label]) > 1 else r.label
            for r in rs}


def backend_names(group: list[Row]) -> list[str]:
    """Backend names, qualified by cache mode when a backend appears twice in one comparison."""
    counts: dict[str, int] = {}
    for r in group:
        counts[r.backend] = counts.get(r.backend, 0) + 1
    return [f"{r.backend} (cache {r.cache_mode or NONE})" if counts[r.backend] > 1 else r.backend
            for r in group]


def _status_warning(r: Row, run_status: Any) -> str | None:
    if r.status == "skipped":
        return f"skipped: {r.skip_reason or 'no reason recorded'}"
    if r.status == "interrupted":
        return f"interrupted after {r.n} sample(s)"
    if r.status in ("pending", "running") and run_status not in ("running", None):
        return f"never finished ({r.status} when the run ended {run_status}), {r.n} sample(s)"
    return None


def _verification_failed(cell: Cell) -> str | None:
    """A transfer whose data did not arrive intact has meaningless timings: say so loudly."""
    verification = cell.verification
    if verification is None or verification.get("ok") is not False:
        return None
    what = verification.get("what") or "check"
    return f"data verification failed ({what}: host {verification.get('host')}, guest {verification.get('guest')})"


def warnings(cells: list[Cell], rs: list[Row], run_status: Any, memsize: Any) -> list[str]:
    """Every reason a reader should distrust or miss a figure: spread, caveats, failures, skips, interruptions (`rs`:
    the rows of `cells`; `run_status` and `memsize` the run's)."""
    names = _group_names(rs)
    caveats = _caveats(cells, rs, names, memsize)
    problems: list[str] = []
    for cell, r in zip(cells, rs):
        prefix = f"{names[id(r)]}: {r.backend}"
        if r.failures:
            problems.append(f"{prefix}: {r.failures} of {r.n + r.failures} samples failed: {r.first_failure}")
        # a density appliance's busy samples are counted in its level's row (the density table's busy column)
        for problem in (_status_warning(r, run_status), _verification_failed(cell), _precision_warning(r),
                        None if r.density else _load_warning(r)):
            if problem:
                problems.append(f"{prefix}: {problem}")
    spread: list[str] = []
    for group in _by_label_placement(rs).values():
        # a tool's wall time (dbench runs for a fixed time) is no figure to rank; nor is one appliance of a density
        # level (its level is judged as a whole in the density table)
        if group[0].workload or group[0].density:
            continue
        summaries = {name: r.summary for name, r in zip(backend_names(group), group) if r.summary is not None}
        spread.extend(spread_warnings(names[id(group[0])], summaries))
    return spread + caveats + problems


def _caveats(cells: list[Cell], rs: list[Row], names: dict[int, str], memsize: Any) -> list[str]:
    """What a measurement says about its own settings (e.g. bonnie++'s ram below the appliance's memory),
    once per measurement label."""
    from guestbench.measurements import MEASUREMENTS  # the registry imports the backends: only when needed

    out: dict[str, None] = {}
    for cell, r in zip(cells, rs):
        m = MEASUREMENTS.get(str(cell.measurement))
        params = cell.params
        if m is None or params is None:
            continue
        try:
            found = m.caveats({**m.defaults(), **params}, memsize if isinstance(memsize, int) else None)
        except (KeyError, TypeError, ValueError):  # a file from another version: no caveat rather than a crash
            continue
        for text in found:
            out.setdefault(f"{names[id(r)]}: {text}", None)
    return list(out)


def no_data_text(r: Row) -> str:
    """What to show instead of numbers for a cell without samples: its status and why."""
    parts: list[str] = []
    if r.status in ("skipped", "unavailable"):
        parts.append(f"{r.status}: {r.skip_reason or 'no reason recorded'}")
    elif r.status != "done":
        parts.append(r.status)
    if r.first_failure:
        parts.append(f"{r.failures} failed: {r.first_failure}")
    return "; ".join(parts) or "no samples"


def _load_warning(r: Row) -> str | None:
    if r.shared and not r.busy:
        return (f"{r.shared} of {r.n} samples were taken while another guestbench run was active on this host: "
                "its figures may be slowed by that run")
    if not r.busy:
        return None
    return (f"the host was busy during {r.busy} of {r.judged} samples (other processes up to {cores_text(r.busiest)} "
            "cores): its figures may be slowed by the rest of the machine")


def cores_text(cores: float | None) -> str:
    """The other processes' cores of a busy sample; a sample may say it was busy without saying how busy."""
    return "?" if cores is None else f"{cores:.2g}"


def _precision_warning(r: Row) -> str | None:
    p = r.precision
    if p is None or p.stopped != "cap" or (p.reached is not None and p.reached <= p.target):
        return None
    got = f"±{p.reached:.1%}" if p.reached is not None else "no CI"
    return f"stopped at the cap ({p.cap} samples) at {got}, short of the target ±{p.target:.1%}"
