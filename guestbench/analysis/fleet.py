"""A fleet run's findings: each host's share analysed as a one-machine run's, and the comparison across hosts: per
measurement, each host × backend combination's figures, the ratio of its median to the fastest one with the ratio's
bootstrap 95% CI (stats.ratio_ci), and whether the data name a fastest combination (every other one's ratio CI lies
above 1); the hosts' differences that make figures move."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from guestbench.analysis import stats
from guestbench.analysis.cells import Row
from guestbench.analysis.findings import Findings, RunFacts, analyze, read_run
from guestbench.results import hosts as fleet_hosts
from guestbench.results.model import Run


@dataclass
class HostFindings:
    """One host of a fleet: the findings of its share of the results, as of a one-machine run."""

    name: str
    status: str | None
    error: str | None  # why it ended early
    findings: Findings


@dataclass
class Combo:
    host: str
    row: Row  # its own copy: the ratio is to the fastest combination across hosts, not within its host
    values: list[float]
    ratio_ci: tuple[float, float] | None = None


@dataclass
class FleetComparison:
    label: str
    combos: list[Combo]
    fastest: Combo | None  # named only when every other combination's ratio CI is above 1
    why: str  # why it is named, or why none is


@dataclass
class FleetFindings:
    """Every figure and fact the tables of a fleet run print: its hosts side by side, then each host's own."""

    name: str
    facts: RunFacts
    fingerprint: Any  # of the machine the run was started from, as recorded
    host_line: str
    hosts: list[HostFindings]  # those that ran cells first, each in name order
    comparisons: list[FleetComparison]
    differences: list[tuple[str, dict[str, Any]]]  # fingerprint keys whose value differs between hosts that ran cells


def analyze_fleet(doc: Run, path: str | None = None) -> FleetFindings:
    differences = fleet_hosts.differences(doc)
    views = [fleet_hosts.view(doc, name) for name in fleet_hosts.names(doc)]
    run = read_run(doc, path)
    hosts = [HostFindings(member.name, member.status, member.error, analyze(share, path, member))
             for member, share in views]
    return FleetFindings(run.name, run.facts, run.fingerprint, run.host_line, hosts, comparisons(hosts), differences)


def comparisons(hosts: list[HostFindings]) -> list[FleetComparison]:
    """One comparison per measurement label that a timing table shows (no workload, no density), in host order."""
    by_label: dict[str, list[Combo]] = {}
    for h in hosts:
        for row in h.findings.rows:
            if row.workload or row.density:
                continue
            by_label.setdefault(row.label, []).append(Combo(h.name, dataclasses.replace(row), row.seconds))
    return [_compare(label, combos) for label, combos in by_label.items()]


def _compare(label: str, combos: list[Combo]) -> FleetComparison:
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
    return FleetComparison(label, combos, best if clear else None, why)


def analyze_results(doc: Run, path: str | None = None) -> Findings | FleetFindings:
    """A results file's findings: a fleet run's hosts side by side and each host's own, or one machine's."""
    return analyze_fleet(doc, path) if fleet_hosts.is_fleet(doc) else analyze(doc, path)
