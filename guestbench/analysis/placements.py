"""Host vs nested, the published E1 table's figures: per measurement and backend both placements' samples, the ratio
of their medians with a CI, and for a backend measured at one placement only why the other has no samples."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from guestbench.analysis.cells import (doc_cells, level1_of, nested_info, no_data_text, number, row, sample_seconds,
                                       unusable_reason)
from guestbench.analysis.stats import Summary, ratio_ci, summarize


@dataclass
class PlacementRow:
    """One backend and measurement sampled both on the host and inside the level-1 guest."""

    label: str
    backend: str
    cache_mode: str | None
    host: Summary
    nested: Summary
    ratio: float  # median nested / median host; nan when the host median is 0
    ci_low: float  # nan when a side has fewer than 2 samples (see stats.ratio_ci)
    ci_high: float


@dataclass
class PlacementGap:
    """A backend and measurement with samples at one placement only, and why the other has none."""

    label: str
    backend: str
    cache_mode: str | None
    present: str
    missing: str
    reason: str
    summary: Summary  # the present side's samples
    unusable: bool  # the backend was not usable at the missing placement (else: it ran there but has no samples)


@dataclass(frozen=True)
class Level1:
    """Where the nested figures were taken: the level-1 guest as the run recorded it."""

    hypervisor: str | None
    vcpus: Any
    memory_mib: Any
    timeout_scale: float | None


@dataclass
class Placements:
    """The host vs nested comparison of one results file (absent unless it has cells at both placements)."""

    comparisons: list[PlacementRow]
    gaps: list[PlacementGap]
    timed: dict[str, list[str]]  # per measurement label, what each cell's clock covered
    level1: Level1


def level1(doc: dict[str, Any]) -> Level1:
    info = level1_of(doc)
    return Level1(info.get("hypervisor") or None, info.get("vcpus"), info.get("memory_mib"),
                  number(info.get("timeout_scale")))


def _gap_reason(doc: dict[str, Any], placement: str, backend: str, cell: dict[str, Any] | None) -> str:
    """The missing side's own account (cell status, skip reason, failures), then the backend's probe verdict."""
    parts = [no_data_text(row(cell)) if cell is not None else "no cell recorded"]
    status = nested_info(doc).get("status")
    if placement == "nested" and status not in (None, "complete"):
        parts.append(f"nested run {status}")
    unusable = unusable_reason(doc, placement, backend)
    if unusable is not None and unusable not in parts[0]:
        where = "on the host" if placement == "host" else "in the level-1 guest"
        parts.append(f"{backend} not usable {where}: {unusable}")
    return "; ".join(parts)


def placements(doc: dict[str, Any]) -> Placements | None:
    """Both placements side by side, when the document has cells at both (else None)."""
    cells = doc_cells(doc)
    if not {"host", "nested"} <= {c.get("placement") for c in cells}:
        return None
    sides: dict[tuple[str, str, str | None], dict[str, dict[str, Any]]] = {}
    for c in cells:  # (label, backend, cache) in file order; the first cell of each placement counts
        placement = c.get("placement")
        if placement in ("host", "nested"):
            r = row(c)
            sides.setdefault((r.label, r.backend, r.cache_mode), {}).setdefault(str(placement), c)
    out = Placements([], [], {}, level1(doc))
    for (label, backend, cache_mode), by_placement in sides.items():
        samples = {p: sample_seconds(c) for p, c in by_placement.items()}
        present = [p for p in ("host", "nested") if samples.get(p)]
        if not present:
            continue  # no samples anywhere: the measurement table already says why
        for c in by_placement.values():
            out.timed.setdefault(label, []).append(str(c.get("timed") or "not recorded"))
        if len(present) == 1:
            missing = "nested" if present == ["host"] else "host"
            out.gaps.append(PlacementGap(label, backend, cache_mode, present[0], missing,
                                         _gap_reason(doc, missing, backend, by_placement.get(missing)),
                                         summarize(samples[present[0]]),
                                         unusable_reason(doc, missing, backend) is not None))
            continue
        host_s, nested_s = samples["host"], samples["nested"]
        host, nested = summarize(host_s), summarize(nested_s)
        ratio = nested.median / host.median if host.median else math.nan
        low, high = ratio_ci(host_s, nested_s)
        out.comparisons.append(PlacementRow(label, backend, cache_mode, host, nested, ratio, low, high))
    return out
