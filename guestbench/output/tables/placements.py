"""Host vs nested, the published E1 table's shape: a row per measurement and backend with both placements' medians
and their ratio with a CI, and a row for each side measured alone, saying why the other has no samples."""

from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Any
from guestbench.analysis.stats import RATIO_CI_METHOD, Summary, ratio_ci, summarize
from guestbench.output.tables.timing import SAMPLES_NOTE, integer_text, vcpus_text
from guestbench.analysis.cells import (level1_of, nested_info, number, row, unusable_reason, doc_cells, no_data_text,
                                       sample_seconds)
from guestbench.util.units import NONE, fmt_seconds


PLACEMENT_HEADER = ["measurement", "backend", "cache", "host: median s (n, min–max)",
                    "nested: median s (n, min–max)", "nested / host", "95% CI of nested / host"]


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

    @property
    def cells(self) -> list[str]:
        """Its row in the host vs nested table: the present side's figures, the missing side says why in brief."""
        absent = "not usable here (see below)" if self.unusable else "no samples (see below)"
        sides = {self.present: side_text(self.summary), self.missing: absent}
        return [self.label, self.backend, self.cache_mode or NONE, sides["host"], sides["nested"], NONE, NONE]

    @property
    def text(self) -> str:
        return f"{self.label}: {self.backend}: {self.present} only, no {self.missing} samples: {self.reason}"


@dataclass
class PlacementTable:
    """Host vs nested, the published E1 table's shape: a row per measurement and backend, both placements."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str
    comparisons: list[PlacementRow]
    gaps: list[PlacementGap]


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


def placement_tables(doc: dict[str, Any]) -> list[PlacementTable]:
    """The host vs nested table, when the document has cells at both placements (else none)."""
    cells = doc_cells(doc)
    found = {c.get("placement") for c in cells}
    if not {"host", "nested"} <= found:
        return []
    sides: dict[tuple[str, str, str | None], dict[str, dict[str, Any]]] = {}
    for c in cells:  # (label, backend, cache) in file order; the first cell of each placement counts
        placement = c.get("placement")
        if placement in ("host", "nested"):
            r = row(c)
            sides.setdefault((r.label, r.backend, r.cache_mode), {}).setdefault(str(placement), c)
    comparisons: list[PlacementRow] = []
    gaps: list[PlacementGap] = []
    timed: dict[str, list[str]] = {}
    for (label, backend, cache_mode), by_placement in sides.items():
        samples = {p: sample_seconds(c) for p, c in by_placement.items()}
        present = [p for p in ("host", "nested") if samples.get(p)]
        if not present:
            continue  # no samples anywhere: the measurement table already says why
        for c in by_placement.values():
            timed.setdefault(label, []).append(str(c.get("timed") or "not recorded"))
        if len(present) == 1:
            missing = "nested" if present == ["host"] else "host"
            gaps.append(PlacementGap(label, backend, cache_mode, present[0], missing,
                                     _gap_reason(doc, missing, backend, by_placement.get(missing)),
                                     summarize(samples[present[0]]),
                                     unusable_reason(doc, missing, backend) is not None))
            continue
        host_s, nested_s = samples["host"], samples["nested"]
        host, nested = summarize(host_s), summarize(nested_s)
        ratio = nested.median / host.median if host.median else math.nan
        low, high = ratio_ci(host_s, nested_s)
        comparisons.append(PlacementRow(label, backend, cache_mode, host, nested, ratio, low, high))
    rows = [_placement_cells(r) for r in comparisons] + [g.cells for g in gaps]  # one row per backend measured
    return [PlacementTable("host vs nested", list(PLACEMENT_HEADER), rows,
                           _placement_caption(doc, comparisons, timed), comparisons, gaps)]


def side_text(s: Summary) -> str:
    return f"{fmt_seconds(s.median)} (n={s.n}, {fmt_seconds(s.min)}–{fmt_seconds(s.max)})"


def fmt_placement_ratio(x: float) -> str:
    return NONE if math.isnan(x) else f"{x:.2f}×"


def _placement_cells(r: PlacementRow) -> list[str]:
    ci = NONE if math.isnan(r.ci_low) or math.isnan(r.ci_high) else f"{r.ci_low:.2f}–{r.ci_high:.2f}"
    return [r.label, r.backend, r.cache_mode or NONE, side_text(r.host), side_text(r.nested),
            fmt_placement_ratio(r.ratio), ci]


def _placement_caption(doc: dict[str, Any], comparisons: list[PlacementRow], timed: dict[str, list[str]]) -> str:
    """What was timed per measurement, cache modes, n, where the nested figures come from, the CI method."""
    what = "; ".join(f"{label}: {' / '.join(dict.fromkeys(texts))}" for label, texts in timed.items())
    modes = ", ".join(dict.fromkeys(r.cache_mode or NONE for r in comparisons)) or NONE
    level1 = level1_of(doc)
    scale = number(level1.get("timeout_scale"))
    scaled = f", its time-outs scaled ×{scale:g}" if scale is not None else ""
    return (f"Timed: {what or 'not recorded'}. Cache mode of the scratch disk: {modes} (– where none applies). "
            f"Medians in seconds, min–max as spread; {SAMPLES_NOTE}. host: on this run's host; nested: the same "
            f"scenario inside a level-1 guest on {level1.get('hypervisor') or 'an unrecorded hypervisor'} with "
            f"{vcpus_text(level1.get('vcpus'))} / {integer_text(level1.get('memory_mib'))} MiB{scaled}. "
            f"nested / host = ratio of medians; its CI: {RATIO_CI_METHOD}; – where a side has fewer than 2 samples.")
