"""What a cell's samples measure, figure by figure: the numbers a comparison or a precision target is about.

A workload's tool reports its own figures (MB/s, IOPS, latency), each with its direction of better; its wall
time is a fixed run and no figure. Every other cell's figure is its samples' seconds, lower being better.
Beside them, what the cell's processes used per sample (guestbench.instruments.usage): CPU seconds and peak memory,
lower being better; a comparison reads them like seconds, a precision target does not.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from guestbench.results.model import Cell, Sample
from guestbench.util.units import number

SECONDS = "seconds"


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_better: bool
    values: list[float]


def sample_seconds(cell: Cell) -> list[float]:
    """The seconds of the cell's samples, in file order."""
    return [float(s.seconds) for s in cell.samples]


def seconds(cell: Cell) -> Figure:
    return Figure(SECONDS, SECONDS, "s", False, sample_seconds(cell))


def figures(cell: Cell) -> list[Figure]:
    """The cell's figures: a workload's own (one per metric descriptor), else its seconds."""
    out = []
    for desc in cell.metrics or []:
        values = [v for v in (number((s.metrics or {}).get(desc["key"])) for s in cell.samples) if v is not None]
        out.append(Figure(desc["key"], str(desc.get("label") or desc["key"]), str(desc.get("unit") or ""),
                          bool(desc.get("higher_better", True)), values))
    return out or [seconds(cell)]


def cpu_s(used: Mapping[str, Any] | None) -> float | None:
    """The CPU seconds a sample's processes used (its `resources`, guestbench.instruments.usage), where recorded."""
    return number((used or {}).get("cpu_s"))


def peak_mib(used: Mapping[str, Any] | None) -> float | None:
    """A sample's peak memory (its `resources`): PSS, or RSS where no PSS could be read, where recorded."""
    pss = number((used or {}).get("peak_pss_mib"))
    return pss if pss is not None else number((used or {}).get("peak_rss_mib"))


def charged_mib(used: Mapping[str, Any] | None) -> float | None:
    """The peak memory charged to a sample's control group (page cache included), where one was counted."""
    return number((used or {}).get("peak_charged_mib"))


def is_density(cell: Cell) -> bool:
    """An appliance of a density level (guestbench.run.density): shown in the density tables, not as a cell."""
    return cell.measurement == "density" or cell.density_level is not None


def cpu_methods(cell: Cell) -> tuple[str, ...]:
    """How the cell's samples counted their CPU (guestbench.instruments.usage): "cgroup", "proc", in that order,
    each once."""
    found = {str(s.resources.get("cpu_method") or "proc") for s in cell.samples if s.resources}
    return tuple(m for m in ("cgroup", "proc") if m in found) + tuple(sorted(found - {"cgroup", "proc"}))


def used(records: Iterable[Mapping[str, Any] | None]) -> list[Figure]:
    """CPU seconds and peak memory (MiB) of the samples' `resources` that recorded them, lower being better; none
    where no sample did (a cell's, or a pytest-benchmark round's as guestbench.pytest_plugin keeps them)."""
    records = list(records)
    out = []
    for key, label, unit, read in (("cpu_s", "CPU s", "CPU s", cpu_s), ("peak_mib", "peak MiB", "MiB", peak_mib)):
        values = [v for v in map(read, records) if v is not None]
        if values:
            out.append(Figure(key, label, unit, False, values))
    return out


def resources(cell: Cell) -> list[Figure]:
    return used(s.resources for s in cell.samples)


def by_rep(cell: Cell, key: str) -> dict[int, float]:
    """One figure of the cell's samples by repetition number (seconds, cpu_s, peak_mib or a workload's key): what
    pairs a sample with the other side's of the same round."""
    readers: dict[str, Callable[[Sample], float | None]] = {
        SECONDS: lambda s: float(s.seconds), "cpu_s": lambda s: cpu_s(s.resources),
        "peak_mib": lambda s: peak_mib(s.resources)}

    def metric(s: Sample) -> float | None:
        return number((s.metrics or {}).get(key))
    read = readers.get(key, metric)
    return {s.rep: v for s in cell.samples if (v := read(s)) is not None}


def took_turns(cell: Cell) -> bool:
    """Whether the cell's samples took turns, round by round, with its item's other cells (guestbench.execute.turns)."""
    return cell.order in ("interleaved", "random")


def load_figures(cell: Cell) -> dict[str, Any]:
    """How many samples were judged for host load, how many were busy, the busiest one's other cores, and how many
    were taken beside another guestbench run."""
    loads = [s.load or {} for s in cell.samples]
    judged = [ld for ld in loads if isinstance(ld.get("busy"), bool)]
    others = [v for v in (number(ld.get("other_cores")) for ld in judged) if v is not None]
    return {"judged": len(judged), "busy": sum(1 for ld in judged if ld["busy"]),
            "busiest": max(others) if others else None,
            "shared": sum(1 for ld in loads if (number(ld.get("other_runs")) or 0) > 0)}


@dataclass(frozen=True)
class SampleUse:
    """What one sample's processes used, for its cost: where it recorded CPU, peak memory and its seconds."""

    cpu_s: float
    peak_mib: float
    seconds: float
    busy: bool  # the host was busy while it was taken


def uses(cell: Cell) -> list[SampleUse]:
    out = []
    for s in cell.samples:
        cpu, peak = cpu_s(s.resources), peak_mib(s.resources)
        if cpu is not None and peak is not None:
            out.append(SampleUse(cpu, peak, float(s.seconds), (s.load or {}).get("busy") is True))
    return out


@dataclass(frozen=True)
class Reading:
    """Every figure of a cell's samples that a report reads, read once (guestbench.analysis.cells.Row)."""

    seconds: list[float]
    cold_s: float | None
    density: bool
    load: dict[str, Any]  # load_figures
    cpu_s: float | None  # the median over the samples that recorded it
    peak_mib: float | None  # the median peak memory (PSS, else RSS) over the samples that recorded it
    cpu_methods: tuple[str, ...]
    uses: list[SampleUse]
    samples: list[Sample]  # what a workload's or a start-up's figures come from


def read(cell: Cell) -> Reading:
    medians = {f.key: statistics.median(f.values) for f in resources(cell)}
    return Reading(sample_seconds(cell), number(cell.cold_s), is_density(cell), load_figures(cell),
                   medians.get("cpu_s"), medians.get("peak_mib"), cpu_methods(cell), uses(cell), cell.samples)
