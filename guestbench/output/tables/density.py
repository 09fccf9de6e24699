"""The density tables: one per density item and backend, a row per level, from the results' "density" records
(guestbench.run.density), with why the levels stopped and how many appliances fit."""

from __future__ import annotations

from dataclasses import dataclass

from guestbench.results.model import Density, Spread

HEADER = ["appliances", "launches", "start-up median s (min–max)", "× single", "launches/min", "CPU s per launch",
          "peak MiB per appliance", "host used MiB (before → peak)", "failures", "busy"]
"""A start-up density's columns; a job's name its own (`header`)."""


@dataclass(frozen=True)
class LevelFigures:
    """Which figure a density record's levels have: start-ups (launches), or a job's seconds (jobs)."""

    key: str  # "startup_s" or "job_s"
    name: str  # "start-up" or the job's measurement
    count: str  # "launches" or "jobs"
    rate_key: str  # "launches_per_min" or "jobs_per_min"


def level_figures(rec: Density) -> LevelFigures:
    job = rec.job or "startup"
    if job == "startup":
        return LevelFigures("startup_s", "start-up", "launches", "launches_per_min")
    return LevelFigures("job_s", job, "jobs", "jobs_per_min")


def header(rec: Density) -> list[str]:
    f = level_figures(rec)
    return ["appliances", f.count, f"{f.name} median s (min–max)", "× single", f"{f.count}/min",
            f"CPU s per {'launch' if f.count == 'launches' else 'job'}", *HEADER[6:]]


@dataclass(frozen=True)
class DensityTable:
    title: str
    rows: list[list[str]]
    caption: str
    header: list[str]


def _spread(d: Spread | None, fmt: str = "{:.3g}") -> str:
    if d is None or d.median is None:
        return "–"
    if d.min is None or d.max is None:  # a spread recorded without its range: the median alone
        return fmt.format(d.median)
    med, lo, hi = (fmt.format(v) for v in (d.median, d.min, d.max))
    return med if lo == hi else f"{med} ({lo}–{hi})"


def tables(records: list[Density]) -> list[DensityTable]:
    """A table per density record, a row per level."""
    out = []
    for rec in records:
        f = level_figures(rec)
        spreads: list[Spread | None] = [getattr(lv, f.key) for lv in rec.levels]
        medians = [sp.median if sp else None for sp in spreads]
        base = medians[0] if medians else None
        rows = []
        for lv, spread, med in zip(rec.levels, spreads, medians):
            rate = getattr(lv, f.rate_key)
            rows.append([str(lv.appliances), str(getattr(lv, f.count)), _spread(spread),
                         f"{med / base:.2f}" if med and base else "–", f"{rate:.3g}" if rate else "–",
                         _spread(lv.cpu_s_per_launch), _spread(lv.peak_mib_per_appliance, "{:.0f}"),
                         f"{lv.host_used_before_mib or 0:,.0f} → {lv.host_used_peak_mib or 0:,.0f}",
                         str(lv.failures), str(lv.busy_samples) if "busy_samples" in lv.source_keys else "0"])
        title = f"density: {rec.label} on {rec.backend}" + \
            (f" ({rec.placement})" if rec.placement not in (None, "host") else "")
        what = ("Each level launches N appliances at the same moment (start-up: launch() plus one daemon round "
                "trip, each appliance with one scratch disk), every appliance a start-up cell of its own; "
                "launches/min counts every launch of the level (cold, warm-up, samples) over its wall time"
                if f.count == "launches" else
                f"Each level launches N appliances, then they do the {f.name} job together, sample by sample "
                f"({rec.timed}), every appliance a cell of that measurement; jobs/min counts every timed job "
                f"of the level (warm-ups and samples) over its wall time, launches included")
        caption = (f"{what}; CPU s per {'launch' if f.count == 'launches' else 'job'} (counted by each worker's "
                   "control group where the host allows one) and peak MiB (PSS) "
                   f"per appliance as guestbench.instruments.usage records them; host used = MemTotal − MemAvailable, "
                   f"read every "
                   f"0.2 s; the memory rule projects the next level from the largest of an appliance's PSS peak, its "
                   f"group's charged peak and the host's growth per appliance. Stopped ({rec.stopped}): {rec.why}. "
                   "Verdict: "
                   f"{rec.verdict}.")
        out.append(DensityTable(title, rows, caption, header(rec)))
    return out

