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

from guestbench.analysis.cells import no_data_text
from guestbench.analysis.fleet import Combo, FleetComparison, FleetFindings
from guestbench.output.tables import timing as timing_table
from guestbench.util.units import NONE, fmt_seconds

HEADER = ("host", "backend", "placement", "cache", "n", "failures", "median s", "95% CI s", "× fastest",
          "ratio 95% CI")


@dataclass
class FleetTable:
    label: str
    combos: list[Combo]
    fastest: Combo | None  # named only when every other combination's ratio CI is above 1
    caption: str

    @property
    def title(self) -> str:
        return f"{self.label}: host × backend"


def tables(fleet: FleetFindings) -> list[FleetTable]:
    return [_table(c) for c in fleet.comparisons]


def _table(c: FleetComparison) -> FleetTable:
    hosts = len({combo.host for combo in c.combos})
    caption = (f"{c.label} on {hosts} host(s). {timing_table.caption([combo.row for combo in c.combos])} × fastest: "
               f"median over the lowest median; ratio 95% CI: percentile bootstrap of the ratio of medians. {c.why}")
    return FleetTable(c.label, c.combos, c.fastest, caption)


def cells(t: FleetTable, c: Combo) -> list[str]:
    r = c.row
    s = r.summary
    if s is None:
        median = no_data_text(r)
        ci = ratio = ratio_ci = NONE
    else:
        median = fmt_seconds(s.median)
        ci = f"{fmt_seconds(s.ci_low)}–{fmt_seconds(s.ci_high)}" if s.has_ci else NONE
        ratio = f"{r.ratio:.2f}×" if r.ratio is not None else NONE
        ratio_ci = (f"{c.ratio_ci[0]:.2f}–{c.ratio_ci[1]:.2f}" if c.ratio_ci and not math.isnan(c.ratio_ci[0])
                    else NONE)
    return [c.host, r.backend, r.placement or NONE, r.cache_mode or NONE, str(r.n), str(r.failures),
            median, ci, ratio, ratio_ci]


def warnings(fleet: FleetFindings) -> list[str]:
    """Hosts that differ in what makes figures move, and hosts that ended early."""
    out = []
    for what, values in fleet.differences:
        shown = ", ".join(f"{n}: {v if v is not None else NONE}" for n, v in values.items())
        out.append(f"hosts differ in {what} ({shown}): a ratio across them measures the hosts as much as the "
                   "backends")
    out += [f"host {h.name} ({h.status or 'not run'}): {h.error}" for h in fleet.hosts if h.error]
    return out
