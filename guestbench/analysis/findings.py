"""One results file's findings, computed once: every table of guestbench.output reads them and calls nothing
back into the analysis (the rows of its cells, their warnings, host vs nested, cost, boot phases and the facts the
header prints), so a figure has one place where it is computed and the document one place where it is laid out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guestbench.analysis import cells as cellrows
from guestbench.analysis import cost, phases
from guestbench.analysis.cells import Row
from guestbench.analysis.placements import Level1, Placements, level1, placements
from guestbench.scenario.prices import Prices


@dataclass(frozen=True)
class RunFacts:
    """What the run line says: the run's status and times, how it ordered its samples, the file it came from."""

    status: str | None
    started_utc: str | None
    finished_utc: str | None
    order: dict[str, Any] | None  # {"mode", "seed", "block_cells"} as recorded (None before orders existed)
    path: str | None  # the results file (report) or None (show)


@dataclass(frozen=True)
class Nested:
    """The level-1 guest of a run with a nested placement."""

    host: dict[str, Any]  # its fingerprint ({} when not recorded)
    host_line: str
    level1: Level1
    record: dict[str, Any]  # the level-1 guest's record as the run wrote it (image, seconds, error ...)
    status: Any  # the nested run's status


@dataclass
class Findings:
    """Every figure and fact the tables of one results file print."""

    name: str
    facts: RunFacts
    host_line: str
    host: Any  # the host's fingerprint as recorded
    nested: Nested | None
    fleet_host: dict[str, Any]  # a fleet host's own view: its name, status and error
    cells: list[dict[str, Any]]  # the cells, and their rows in the same order
    rows: list[Row]
    timing: dict[str, list[Row]]  # by label: the cells a timing table shows (no workload, no density)
    placements: Placements | None
    phases: dict[str, list[phases.BackendPhases]]  # by label: the cells that recorded boot phases
    prices: Prices | None
    cost: list[cost.CostRow]
    density: list[dict[str, Any]]  # the density records, as the run wrote them
    unusable: dict[str, str]
    warnings: list[str] = field(default_factory=list)

    @property
    def has_nested(self) -> bool:
        """Whether the results say anything about a nested run (a level-1 record or a nested cell)."""
        return self.nested is not None or any(r.placement == "nested" for r in self.rows)


def analyze(doc: dict[str, Any]) -> Findings:
    rows = cellrows.rows(doc)
    prices = cost.prices_of(doc)
    return Findings(
        name=cellrows.scenario_name(doc), facts=facts(doc), host_line=cellrows.host_line(doc), host=doc.get("host"),
        nested=_nested(doc), fleet_host=cellrows.mapping(doc.get("fleet_host")), cells=cellrows.doc_cells(doc), rows=rows,
        timing=cellrows.by_label(r for r in rows if not r.workload and not r.density), placements=placements(doc),
        phases=_phases(doc), prices=prices, cost=cost.rows(doc, prices),
        density=[r for r in cellrows.listed(doc.get("density")) if isinstance(r, dict)],
        unusable=cellrows.unusable_backends(doc), warnings=cellrows.warnings(doc, rows))


def facts(doc: dict[str, Any]) -> RunFacts:
    order = doc.get("order")
    return RunFacts(doc.get("status"), doc.get("started_utc"), doc.get("finished_utc"),
                    order if isinstance(order, dict) else None, doc.get("_path"))


def _nested(doc: dict[str, Any]) -> Nested | None:
    info = cellrows.nested_info(doc)
    if not info:
        return None
    host = cellrows.mapping(info.get("host"))
    return Nested(host, cellrows.host_line({"host": host}), level1(doc), cellrows.level1_of(doc), info.get("status"))


def _phases(doc: dict[str, Any]) -> dict[str, list[phases.BackendPhases]]:
    """The boot phases of every cell that recorded them (guestbench.instruments.markers), by label."""
    groups: dict[str, list[phases.BackendPhases]] = {}
    for cell in cellrows.doc_cells(doc):
        bp = phases.cell_phases(cell)
        if bp is not None:
            groups.setdefault(str(cell.get("label") or cell.get("measurement")), []).append(bp)
    return groups
