"""A fleet run's comparison across hosts: which host and backend combination is fastest, and by how much.

Per measurement, one row per host × backend (× placement) with samples: n, median, 95% CI, and the ratio of its
median to the fastest one with the ratio's bootstrap 95% CI (stats.ratio_ci), as a one-machine table gives it.
The fastest is named only when the data supports it: every other combination's ratio CI lies above 1. Hosts
that differ in what makes figures move (their fingerprints) are named in a warning: across such hosts a ratio
is the hosts' difference as much as the backends'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from guestbench.analysis import cells as cellrows
from guestbench.output.tables import timing as timing_table
from guestbench.analysis import stats
from guestbench.results import hosts as fleet_hosts
from guestbench.util.units import NONE, fmt_seconds

HEADER = ("host", "backend", "placement", "cache", "n", "failures", "median s", "95% CI s", "× fastest",
          "ratio 95% CI")


@dataclass
class Combo:
    host: str
    row: cellrows.Row
    values: list[float]
    ratio_ci: tuple[float, float] | None = None


@dataclass
class FleetTable:
    label: str
    combos: list[Combo]
    fastest: Combo | None  # named only when every other combination's ratio CI is above 1
    caption: str

    @property
    def title(self) -> str:
        return f"{self.label}: host × backend"


def tables(doc: dict[str, Any]) -> list[FleetTable]:
    if not fleet_hosts.is_fleet(doc):
        return []
    by_label: dict[str, list[Combo]] = {}
    for name in fleet_hosts.names(doc):
        view = fleet_hosts.view(doc, name)
        for cell, row in cellrows.cells_and_rows(view):
            if row.workload or row.density:
                continue
            by_label.setdefault(row.label, []).append(Combo(name, row, cellrows.sample_seconds(cell)))
    return [_table(label, combos) for label, combos in by_label.items()]


def _table(label: str, combos: list[Combo]) -> FleetTable:
    measured = [c for c in combos if c.row.summary is not None]
    best = min(measured, key=lambda c: c.row.summary.median) if measured else None  # type: ignore[union-attr]
    for c in measured:
        assert best is not None and best.row.summary is not None and c.row.summary is not None
        c.row.ratio = c.row.summary.median / best.row.summary.median
        if c is not best:
            c.ratio_ci = stats.ratio_ci(best.values, c.values)
    others = [c for c in measured if c is not best]
    clear = bool(others) and all(c.ratio_ci is not None and not math.isnan(c.ratio_ci[0]) and c.ratio_ci[0] > 1
                                 for c in others)
    hosts = len({c.host for c in combos})
    if best is None:
        why = "No combination has samples."
    elif not others:
        why = "One combination has samples: nothing to rank."
    elif clear:
        why = (f"Fastest: {best.row.backend} on {best.host}; every other combination's ratio CI lies above 1.")
    else:
        close = [f"{c.row.backend} on {c.host}" for c in others
                 if c.ratio_ci is None or math.isnan(c.ratio_ci[0]) or c.ratio_ci[0] <= 1]
        why = (f"No combination is clearly fastest: the ratio CI of {', '.join(close)} reaches 1 (or has too few "
               "samples for one), so the lowest median is not a ranking.")
    caption = (f"{label} on {hosts} host(s). {timing_table.caption([c.row for c in combos])} × fastest: median over "
               f"the lowest median; ratio 95% CI: percentile bootstrap of the ratio of medians. {why}")
    return FleetTable(label, combos, best if clear else None, caption)


def cells(t: FleetTable, c: Combo) -> list[str]:
    r = c.row
    s = r.summary
    if s is None:
        median = cellrows.no_data_text(r)
        ci = ratio = ratio_ci = NONE
    else:
        median = fmt_seconds(s.median)
        ci = f"{fmt_seconds(s.ci_low)}–{fmt_seconds(s.ci_high)}" if s.has_ci else NONE
        ratio = f"{r.ratio:.2f}×" if r.ratio is not None else NONE
        ratio_ci = (f"{c.ratio_ci[0]:.2f}–{c.ratio_ci[1]:.2f}" if c.ratio_ci and not math.isnan(c.ratio_ci[0])
                    else NONE)
    return [c.host, r.backend, r.placement or NONE, r.cache_mode or NONE, str(r.n), str(r.failures),
            median, ci, ratio, ratio_ci]


def warnings(doc: dict[str, Any]) -> list[str]:
    """Hosts that differ in what makes figures move, and hosts that ended early."""
    out = []
    for what, values in fleet_hosts.differences(doc):
        shown = ", ".join(f"{n}: {v if v is not None else NONE}" for n, v in values.items())
        out.append(f"hosts differ in {what} ({shown}): a ratio across them measures the hosts as much as the "
                   "backends")
    for name in fleet_hosts.names(doc):
        info = doc["hosts"][name] or {}
        if info.get("error"):
            out.append(f"host {name} ({info.get('status') or 'not run'}): {info['error']}")
    return out
