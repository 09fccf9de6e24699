"""Host vs nested, the published E1 table's shape: a row per measurement and backend with both placements' medians
and their ratio with a CI, and a row for each side measured alone, saying why the other has no samples
(the figures: guestbench.analysis.placements)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from guestbench.analysis.placements import PlacementGap, PlacementRow, Placements
from guestbench.analysis.stats import RATIO_CI_METHOD, Summary
from guestbench.output.tables.timing import SAMPLES_NOTE, integer_text, vcpus_text
from guestbench.util.units import NONE, fmt_seconds

PLACEMENT_HEADER = ["measurement", "backend", "cache", "host: median s (n, min–max)",
                    "nested: median s (n, min–max)", "nested / host", "95% CI of nested / host"]


@dataclass
class PlacementTable:
    """Host vs nested, the published E1 table's shape: a row per measurement and backend, both placements."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str
    comparisons: list[PlacementRow]
    gaps: list[PlacementGap]


def placement_tables(p: Placements | None) -> list[PlacementTable]:
    """The host vs nested table, when the results have cells at both placements (else none)."""
    if p is None:
        return []
    rows = [_placement_cells(r) for r in p.comparisons] + [gap_cells(g) for g in p.gaps]  # a row per backend
    return [PlacementTable("host vs nested", list(PLACEMENT_HEADER), rows, _placement_caption(p), p.comparisons,
                           p.gaps)]


def gap_cells(g: PlacementGap) -> list[str]:
    """A gap's row in the host vs nested table: the present side's figures, the missing side says why in brief."""
    absent = "not usable here (see below)" if g.unusable else "no samples (see below)"
    sides = {g.present: side_text(g.summary), g.missing: absent}
    return [g.label, g.backend, g.cache_mode or NONE, sides["host"], sides["nested"], NONE, NONE]


def gap_text(g: PlacementGap) -> str:
    return f"{g.label}: {g.backend}: {g.present} only, no {g.missing} samples: {g.reason}"


def side_text(s: Summary) -> str:
    return f"{fmt_seconds(s.median)} (n={s.n}, {fmt_seconds(s.min)}–{fmt_seconds(s.max)})"


def fmt_placement_ratio(x: float) -> str:
    return NONE if math.isnan(x) else f"{x:.2f}×"


def _placement_cells(r: PlacementRow) -> list[str]:
    ci = NONE if math.isnan(r.ci_low) or math.isnan(r.ci_high) else f"{r.ci_low:.2f}–{r.ci_high:.2f}"
    return [r.label, r.backend, r.cache_mode or NONE, side_text(r.host), side_text(r.nested),
            fmt_placement_ratio(r.ratio), ci]


def _placement_caption(p: Placements) -> str:
    """What was timed per measurement, cache modes, n, where the nested figures come from, the CI method."""
    what = "; ".join(f"{label}: {' / '.join(dict.fromkeys(texts))}" for label, texts in p.timed.items())
    modes = ", ".join(dict.fromkeys(r.cache_mode or NONE for r in p.comparisons)) or NONE
    level1 = p.level1
    scaled = f", its time-outs scaled ×{level1.timeout_scale:g}" if level1.timeout_scale is not None else ""
    return (f"Timed: {what or 'not recorded'}. Cache mode of the scratch disk: {modes} (– where none applies). "
            f"Medians in seconds, min–max as spread; {SAMPLES_NOTE}. host: on this run's host; nested: the same "
            f"scenario inside a level-1 guest on {level1.hypervisor or 'an unrecorded hypervisor'} with "
            f"{vcpus_text(level1.vcpus)} / {integer_text(level1.memory_mib)} MiB{scaled}. "
            f"nested / host = ratio of medians; its CI: {RATIO_CI_METHOD}; – where a side has fewer than 2 samples.")
