"""The boot-phase table of one start-up measurement: a row per phase, a column per backend."""

from __future__ import annotations
from dataclasses import dataclass
from guestbench.analysis import phases
from guestbench.util.units import NONE, fmt_seconds


@dataclass
class PhaseTable:
    """The boot-phase breakdown of one start-up measurement: a row per phase, a column per backend."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str
    summaries: list[phases.BackendPhases]


def phase_tables(groups: dict[str, list[phases.BackendPhases]]) -> list[PhaseTable]:
    """One table per measurement label whose cells recorded phases (see guestbench.instruments.markers)."""
    return [_phase_table(label, bps) for label, bps in groups.items()]


def _phase_column(bp: phases.BackendPhases) -> str:
    return f"{bp.backend} ({bp.placement})" if bp.placement != "host" else bp.backend


def _phase_table(label: str, bps: list[phases.BackendPhases]) -> PhaseTable:
    header = ["phase", *(f"{_phase_column(bp)}: median s (min–max), share" for bp in bps)]
    rows = []
    for name in phases.phase_order(bps):
        row = [name]
        for bp in bps:
            p = bp.phases.get(name)
            row.append(NONE if p is None else
                       f"{fmt_seconds(p.median)} ({fmt_seconds(p.low)}–{fmt_seconds(p.high)}), {p.share:.0%}")
        rows.append(row)
    rows.append(["sum of phase medians", *(f"{fmt_seconds(bp.sum_of_medians)}" for bp in bps)])
    rows.append(["median start-up (n)", *(f"{fmt_seconds(bp.median_total)} (n={bp.n})" for bp in bps)])
    rows.append(["host side (library, hypervisor, firmware)", *(f"{bp.host_side_share:.0%}" for bp in bps)])
    worst = max(bp.max_sum_error for bp in bps)
    caption = (f"Timed: each start-up sample cut into boot phases at marker lines of libguestfs's event stream "
               f"(appliance console, library log), stamped on arrival on the clock that timed the launch; "
               f"phases of every sample sum to its start-up (largest difference {worst:.2%}). Median per "
               f"phase over n samples, min–max as spread; share = phase median / sum of phase medians. "
               f"Recorded with a verbose appliance console, which itself slows start-up, most on TCG. "
               f"Cache mode of the scratch disk: "
               f"{', '.join(sorted({str(c) for c in _cache_modes(bps)}))}.")
    return PhaseTable(f"{label}: boot phases", header, rows, caption, bps)


def _cache_modes(bps: list[phases.BackendPhases]) -> list[str]:
    return [bp.cache_mode or NONE for bp in bps]
