"""The density tables: one per density item and backend, a row per level, from the results' "density" records
(guestbench.run.density), with why the levels stopped and how many appliances fit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HEADER = ["appliances", "launches", "start-up median s (min–max)", "× single", "launches/min", "CPU s per launch",
          "peak MiB per appliance", "host used MiB (before → peak)", "failures", "busy"]


@dataclass(frozen=True)
class DensityTable:
    title: str
    rows: list[list[str]]
    caption: str


def _spread(d: Any, fmt: str = "{:.3g}") -> str:
    if not isinstance(d, dict) or d.get("median") is None:
        return "–"
    med, lo, hi = (fmt.format(d[k]) for k in ("median", "min", "max"))
    return med if lo == hi else f"{med} ({lo}–{hi})"


def tables(doc: dict[str, Any]) -> list[DensityTable]:
    out = []
    for rec in doc.get("density") or []:
        if not isinstance(rec, dict):
            continue
        levels = [lv for lv in rec.get("levels") or [] if isinstance(lv, dict)]
        base = ((levels[0].get("startup_s") or {}).get("median")) if levels else None
        rows = []
        for lv in levels:
            med = (lv.get("startup_s") or {}).get("median")
            rows.append([str(lv.get("appliances")), str(lv.get("launches")), _spread(lv.get("startup_s")),
                         f"{med / base:.2f}" if med and base else "–",
                         f"{lv['launches_per_min']:.3g}" if lv.get("launches_per_min") else "–",
                         _spread(lv.get("cpu_s_per_launch")), _spread(lv.get("peak_mib_per_appliance"), "{:.0f}"),
                         f"{lv.get('host_used_before_mib', 0):,.0f} → {lv.get('host_used_peak_mib', 0):,.0f}",
                         str(lv.get("failures")), str(lv.get("busy_samples", 0))])
        title = f"density: {rec.get('label')} on {rec.get('backend')}" + \
            (f" ({rec['placement']})" if rec.get("placement") not in (None, "host") else "")
        caption = (f"Each level launches N appliances at the same moment (start-up: launch() plus one daemon round "
                   f"trip, each appliance with one scratch disk), every appliance a start-up cell of its own; "
                   f"launches/min counts every launch of the level (cold, warm-up, samples) over its wall time; CPU s "
                   f"and peak MiB per appliance from /proc (guestbench.usage); host used = MemTotal − MemAvailable, "
                   f"read every 0.2 s. Stopped ({rec.get('stopped')}): {rec.get('why')}. Verdict: "
                   f"{rec.get('verdict')}.")
        out.append(DensityTable(title, rows, caption))
    return out


def to_dicts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc.get("density") or [] if isinstance(r, dict)]
