"""One results file's findings, computed once: the rows of its cells, their warnings, host vs nested, cost, boot
phases and the facts the header prints. Every table, chart and export of guestbench.output reads them, never the
results document, so a figure has one place where it is computed and the document one place where it is laid out.

They read the typed model (guestbench.results.model), as loaded: `read_run` what the file says about the run as a
whole, `cells.rows` each cell's figures (through guestbench.results.figures, the one reader of a sample's figures);
everything else is computed from those."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guestbench.analysis import cells as cellrows
from guestbench.analysis import cost, phases, software
from guestbench.analysis.software import Software
from guestbench.analysis import workloads as tools
from guestbench.analysis.cells import Row
from guestbench.analysis.placements import Level1, Placements, placements
from guestbench.results.hosts import Member as Member  # a fleet host's share, as output reads it
from guestbench.results.model import Density, Placement, Run
from guestbench.scenario.prices import Prices
from guestbench.util.units import number


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

    fingerprint: dict[str, Any]  # the level-1 guest's ({} when not recorded)
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
    fingerprint: Any  # the host's, as recorded (a results file's key `host`)
    nested: Nested | None
    member: Member | None  # a fleet's host: how its share of the run ended (None: a one-machine run)
    rows: list[Row]  # a row per cell, in file order
    timing: dict[str, list[Row]]  # by label: the cells a timing table shows (no workload, no density)
    workloads: list[tools.MetricTable]  # a workload tool's figures, per group and placement
    durability: list[tools.Durability]
    placements: Placements | None
    phases: dict[str, list[phases.BackendPhases]]  # by label: the cells that recorded boot phases
    prices: Prices | None
    cost: list[cost.CostRow]
    density: list[Density]  # the density records
    unusable_at: dict[tuple[str, str], str]  # (placement, backend): why the backend was not usable there
    warnings: list[str] = field(default_factory=list)
    software: list[Software] = field(default_factory=list)  # what each backend ran on, where stacks or modes vary

    @property
    def unusable(self) -> dict[str, str]:
        """The backends not measured and why, as the table lists them: the host's by name, the level-1 guest's
        with "(nested)"."""
        return {name if where == "host" else f"{name} (nested)": why for (where, name), why in self.unusable_at.items()}

    @property
    def has_nested(self) -> bool:
        """Whether the results say anything about a nested run (a level-1 record or a nested cell)."""
        return self.nested is not None or any(r.placement == "nested" for r in self.rows)


def analyze(doc: Run, path: str | None = None, member: Member | None = None) -> Findings:
    """Each source read once, in one pass down: the run's own keys, the cells' samples (their rows and the
    warnings on them), then what is computed from those (`path`: the file it came from; `member`: the fleet's host
    whose share `doc` is)."""
    run = read_run(doc, path)
    cells = doc.cells
    rows = cellrows.rows(cells)
    timing = cellrows.by_label(r for r in rows if not r.workload and not r.density)
    warnings = cellrows.warnings(cells, rows, run.facts.status, run.memsize)
    nested = run.nested
    return Findings(
        name=run.name, facts=run.facts, host_line=run.host_line, fingerprint=run.fingerprint, nested=nested,
        member=member, rows=rows, timing=timing, phases=phases.per_label(cells, rows),
        workloads=tools.metric_tables(cells, rows), durability=tools.durability(cells, rows),
        placements=placements(rows, run.unusable_at, nested.status if nested else None,
                              nested.level1 if nested else None),
        prices=run.prices, cost=cost.per_cell(rows, run.prices), density=run.density, unusable_at=run.unusable_at,
        warnings=warnings, software=software.per_system(cells))


@dataclass(frozen=True)
class RunInfo:
    """What the results say about the run as a whole (not about one cell), read once."""

    name: str
    facts: RunFacts
    fingerprint: Any
    host_line: str
    nested: Nested | None
    density: list[Density]
    prices: Prices | None
    memsize: Any  # the scenario's appliance memory (a measurement's caveats compare with it)
    unusable_at: dict[tuple[str, str], str]  # (placement, backend): why the backend was not usable there


def read_run(run: Run, path: str | None = None) -> RunInfo:
    scenario = run.scenario or {}
    facts = RunFacts(run.status, run.started_utc, run.finished_utc, run.order, path)
    nested = run.placements.get("nested")
    nested = nested if nested is not None and nested.source_keys else None  # `{}`: nothing recorded yet
    unusable_at = {("host", name): verdict.reason or "no reason recorded"
                   for name, verdict in run.backends.items() if verdict.usable is False}
    unusable_at |= {("nested", name): verdict.reason or "no reason recorded"
                    for name, verdict in (nested.backends if nested else {}).items()
                    if verdict.usable is False}  # probed again inside the level-1 guest
    prices = scenario.get("cost")
    return RunInfo(str(scenario.get("name") or "unnamed scenario"), facts, run.host, host_line(run.host),
                   _nested(nested) if nested else None, run.density,
                   Prices.from_dict(prices) if prices else None, scenario.get("memsize"), unusable_at)


def host_line(fingerprint: dict[str, Any] | None) -> str:
    fp = fingerprint or {}
    cpu = fp.get("cpu_model") or "unknown CPU"
    virtualization = fp.get("virtualization")
    virt = (virtualization.get("summary") if isinstance(virtualization, dict) else None) or "virtualization unknown"
    return f"{cpu} · {virt}"


def _nested(info: Placement) -> Nested:
    fingerprint = info.host or {}
    record = info.level1 or {}
    level1 = Level1(record.get("hypervisor") or None, record.get("vcpus"), record.get("memory_mib"),
                    number(record.get("timeout_scale")))
    return Nested(fingerprint, host_line(fingerprint), level1, record, info.status)
