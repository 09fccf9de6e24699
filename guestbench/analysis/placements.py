"""Host vs nested, the published E1 table's figures: per measurement and backend both placements' samples, the ratio
of their medians with a CI, and for a backend measured at one placement only why the other has no samples."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from guestbench.analysis.cells import Row, no_data_text
from guestbench.analysis.stats import Summary, ratio_ci, summarize
from guestbench.results.model import verdict_name


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


def _gap_reason(missing: Row | None, placement: str, backend: str, nested_status: Any,
                unusable: str | None) -> str:
    """The missing side's own account (cell status, skip reason, failures), then the backend's probe verdict."""
    parts = [no_data_text(missing) if missing is not None else "no cell recorded"]
    if placement == "nested" and nested_status not in (None, "complete"):
        parts.append(f"nested run {nested_status}")
    if unusable is not None and unusable not in parts[0]:
        where = "on the host" if placement == "host" else "in the level-1 guest"
        parts.append(f"{backend} not usable {where}: {unusable}")
    return "; ".join(parts)


def placements(rows: list[Row], unusable_at: dict[tuple[str, str], str], nested_status: Any,
               level1: Level1 | None) -> Placements | None:
    """Both placements side by side, when the results have cells at both (else None). `unusable_at`: (placement,
    backend) → why it was not usable there; `nested_status`, `level1`: the nested run's status and guest."""
    if not {"host", "nested"} <= {r.placement for r in rows}:
        return None
    sides: dict[tuple[str, str, str | None], dict[str, Row]] = {}
    for r in rows:  # (label, backend, cache) in file order; the first cell of each placement counts
        if r.placement in ("host", "nested"):
            sides.setdefault((r.label, r.backend, r.cache_mode), {}).setdefault(r.placement, r)
    out = Placements([], [], {}, level1 or Level1(None, None, None, None))
    for (label, backend, cache_mode), by_placement in sides.items():
        present = [p for p in ("host", "nested") if p in by_placement and by_placement[p].seconds]
        if not present:
            continue  # no samples anywhere: the measurement table already says why
        for r in by_placement.values():
            out.timed.setdefault(label, []).append(r.timed or "not recorded")
        if len(present) == 1:
            missing = "nested" if present == ["host"] else "host"
            unusable = unusable_at.get((missing, verdict_name(backend)))
            out.gaps.append(PlacementGap(label, backend, cache_mode, present[0], missing,
                                         _gap_reason(by_placement.get(missing), missing, backend, nested_status,
                                                     unusable),
                                         summarize(by_placement[present[0]].seconds), unusable is not None))
            continue
        host_s, nested_s = by_placement["host"].seconds, by_placement["nested"].seconds
        host, nested = summarize(host_s), summarize(nested_s)
        ratio = nested.median / host.median if host.median else math.nan
        low, high = ratio_ci(host_s, nested_s)
        out.comparisons.append(PlacementRow(label, backend, cache_mode, host, nested, ratio, low, high))
    return out
