"""What a cell's samples measure, figure by figure: the numbers a comparison or a precision target is about.

A workload's tool reports its own figures (MB/s, IOPS, latency), each with its direction of better; its wall
time is a fixed run and no figure. Every other cell's figure is its samples' seconds, lower being better.
Beside them, what the cell's processes used per sample (guestbench.instruments.usage): CPU seconds and peak memory, lower
being better; a comparison reads them like seconds, a precision target does not.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

SECONDS = "seconds"


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_better: bool
    values: list[float]


def number(value: Any) -> float | None:
    """A finite float, or None: JSON may hold null, and bool is not a number here (one reader for every output)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def samples(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """A cell's samples (what a partial file holds as a list of objects; nothing else)."""
    found = cell.get("samples")
    return [s for s in found if isinstance(s, dict)] if isinstance(found, list) else []


def sample_seconds(cell: dict[str, Any]) -> list[float]:
    """The seconds of the cell's samples, in file order."""
    return [v for v in (number(s.get("seconds")) for s in samples(cell)) if v is not None]


def seconds(cell: dict[str, Any]) -> Figure:
    return Figure(SECONDS, SECONDS, "s", False, sample_seconds(cell))


def figures(cell: dict[str, Any]) -> list[Figure]:
    """The cell's figures: a workload's own (one per metric descriptor), else its seconds."""
    out = []
    for desc in cell.get("metrics") or []:
        if not isinstance(desc, dict) or not isinstance(desc.get("key"), str):
            continue
        values = [v for v in (number((s.get("metrics") or {}).get(desc["key"])) for s in samples(cell))
                  if v is not None]
        out.append(Figure(desc["key"], str(desc.get("label") or desc["key"]), str(desc.get("unit") or ""),
                          bool(desc.get("higher_better", True)), values))
    return out or [seconds(cell)]


def cpu_s(sample: dict[str, Any]) -> float | None:
    """The CPU seconds the sample's processes used (guestbench.instruments.usage), where recorded."""
    return number((sample.get("resources") or {}).get("cpu_s"))


def peak_mib(sample: dict[str, Any]) -> float | None:
    """The sample's peak memory: PSS, or RSS where no PSS could be read (guestbench.instruments.usage), where recorded."""
    used = sample.get("resources") or {}
    pss = number(used.get("peak_pss_mib"))
    return pss if pss is not None else number(used.get("peak_rss_mib"))


def is_density(cell: dict[str, Any]) -> bool:
    """An appliance of a density level (guestbench.run.density): shown in the density tables, not as a cell."""
    return cell.get("measurement") == "density" or cell.get("density_level") is not None


def charged_mib(sample: dict[str, Any]) -> float | None:
    """The peak memory charged to the sample's control group (page cache included), where one was counted."""
    return number((sample.get("resources") or {}).get("peak_charged_mib"))


def cpu_methods(cell: dict[str, Any]) -> tuple[str, ...]:
    """How the cell's samples counted their CPU (guestbench.instruments.usage): "cgroup", "proc", in that order, each once."""
    found = {str((s.get("resources") or {}).get("cpu_method") or "proc") for s in samples(cell)
             if s.get("resources")}
    return tuple(m for m in ("cgroup", "proc") if m in found) + tuple(sorted(found - {"cgroup", "proc"}))


def resources(cell: dict[str, Any]) -> list[Figure]:
    """CPU seconds and peak memory (MiB) of the samples that recorded them, lower being better; none where no
    sample did."""
    out = []
    for key, label, unit, read in (("cpu_s", "CPU s", "CPU s", cpu_s), ("peak_mib", "peak MiB", "MiB", peak_mib)):
        values = [v for v in (read(s) for s in samples(cell)) if v is not None]
        if values:
            out.append(Figure(key, label, unit, False, values))
    return out


def load_figures(cell: dict[str, Any]) -> dict[str, Any]:
    """How many samples were judged for host load, how many were busy, the busiest one's other cores, and how many
    were taken beside another guestbench run."""
    loads = [s.get("load") if isinstance(s.get("load"), dict) else {} for s in samples(cell)]
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


def uses(cell: dict[str, Any]) -> list[SampleUse]:
    out = []
    for s in samples(cell):
        cpu, peak, wall = cpu_s(s), peak_mib(s), number(s.get("seconds"))
        if cpu is not None and peak is not None and wall is not None:
            out.append(SampleUse(cpu, peak, wall, (s.get("load") or {}).get("busy") is True))
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
    samples: list[dict[str, Any]]  # the samples read (samples): what a workload's or a start-up's figures come from


def read(cell: dict[str, Any]) -> Reading:
    used = {f.key: statistics.median(f.values) for f in resources(cell)}
    return Reading(sample_seconds(cell), number(cell.get("cold_s")), is_density(cell), load_figures(cell),
                   used.get("cpu_s"), used.get("peak_mib"), cpu_methods(cell), uses(cell), samples(cell))
