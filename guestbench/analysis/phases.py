"""A start-up cell's boot phases summarised for the reports: per phase the median over samples, its range and
share, in boot order across hypervisor families (the cutting of one sample is guestbench.instruments.markers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable, Sequence

import numpy as np

from guestbench.instruments.markers import MARKERS
from guestbench.instruments.markers import host_side_names as host_side_names  # the charts name them too
from guestbench.analysis.cells import Row
from guestbench.results.model import Cell, Sample


@dataclass
class PhaseStats:
    median: float
    low: float  # min over samples
    high: float  # max over samples
    share: float  # median / sum of this backend's phase medians
    seen: int  # samples in which the phase's marker was found


@dataclass
class BackendPhases:
    """One start-up cell's phases: per phase the median over samples, and the totals they add up to."""

    backend: str
    placement: str
    n: int
    phases: dict[str, PhaseStats]
    median_total: float  # median of the samples' start-up
    max_sum_error: float  # worst relative difference between a sample's phase sum and its start-up
    cache_mode: str | None = None

    @property
    def sum_of_medians(self) -> float:
        return sum(p.median for p in self.phases.values())

    @property
    def host_side_share(self) -> float:
        """Share of the phase medians spent before the appliance's kernel runs (library, hypervisor,
        firmware): the published claim is that start-up is dominated by the appliance, not this."""
        return sum(p.share for name, p in self.phases.items() if name in host_side_names())


def cell_phases(cell: Cell, read: list[Sample]) -> BackendPhases | None:
    """Summarise a cell's phases from its samples; None when no sample has phases.

    A sample without a phase counts 0 s for it (its time went into the phase before), which keeps the
    medians of samples that saw different markers comparable.
    """
    timed = [(s.phases, s.seconds) for s in read if s.phases]
    if not timed:
        return None
    order: list[str] = []
    for phases, _ in timed:
        for p in phases:
            if p["name"] not in order:
                order.append(p["name"])
    per_sample = np.array([[sum(p["s"] for p in phases if p["name"] == name) for name in order]
                           for phases, _ in timed])
    medians = np.median(per_sample, axis=0)
    total = float(medians.sum())
    stats = {}
    for i, name in enumerate(order):
        seen = sum(1 for phases, _ in timed if any(p["name"] == name for p in phases))
        stats[name] = PhaseStats(float(medians[i]), float(per_sample[:, i].min()), float(per_sample[:, i].max()),
                                 float(medians[i]) / total if total > 0 else 0.0, seen)
    return BackendPhases(cell.system, str(cell.placement) if "placement" in cell.source_keys else "host", len(timed),
                         stats, float(np.median([seconds for _, seconds in timed])),
                         max(sum_check(phases, seconds) for phases, seconds in timed), cell.cache_mode)


def per_label(cells: list[Cell], rows: list[Row]) -> dict[str, list[BackendPhases]]:
    """The boot phases of every cell that recorded them (guestbench.instruments.markers), by the cells' label
    (`rows`: the cells' rows, their samples as read)."""
    groups: dict[str, list[BackendPhases]] = {}
    for cell, row in zip(cells, rows):
        bp = cell_phases(cell, row.samples)
        if bp is not None:
            groups.setdefault(cell.label or str(cell.measurement), []).append(bp)
    return groups


def phase_order(summaries: Iterable[BackendPhases]) -> list[str]:
    """All phase names of several backends in boot order (qemu's and UML's lists merged)."""
    order: list[str] = []
    for family in MARKERS.values():
        at = 0
        for p in family:
            if p.name in order:
                at = order.index(p.name) + 1
            else:
                order.insert(at, p.name)  # right after the phase that precedes it in its own family
                at += 1
    seen = {name for bp in summaries for name in bp.phases}
    return [n for n in order if n in seen] + sorted(seen - set(order))


def sum_check(phases: Sequence[dict[str, Any]], total: float) -> float:
    """Relative difference between the phases' sum and the total (0.0 when they agree)."""
    return abs(sum(p["s"] for p in phases) - total) / total if total > 0 else 0.0
