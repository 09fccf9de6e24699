"""Build the document of one or more results files: every table any format prints, in one place.

The same parts go to the terminal (`show`, a scenario's final print), Markdown (`show --markdown`,
report.md) and HTML (index.html), so the formats cannot drift: timing tables, workload tools' figures
(fio, bonnie++, dbench, tar), durability verdicts, host vs nested, density, cost, boot phases, backends
not measured, warnings. Only `guestbench report` adds charts and the full fingerprints (`full=True`).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from guestbench import __version__
from guestbench.output.tables import density as density_report
from guestbench.output.tables import fleet as fleet_report
from guestbench.output.tables import metrics as metrics_report
from guestbench.output.export import csv as csv_export
from guestbench.output.export import json as json_export
from guestbench.output.tables import timing as timing_table
from guestbench.output.tables import placements as placement_table
from guestbench.output.tables import phases as phase_table
from guestbench.analysis.fleet import FleetFindings, analyze_results
from guestbench.analysis.cells import Row
from guestbench.analysis import workloads
from guestbench.analysis.findings import Findings
from guestbench.results.model import Run
from guestbench.output.tables import cost as cost_table
from guestbench.output.tables import software as software_table
from guestbench.util.reasons import short_reason
from guestbench.output.document import Bullets, Document, ChartPart, Para, Part, Section, Table, slug
from guestbench.output.formats import Printable
from guestbench.util.units import NONE

INTRO = ("One section per results file. Absolute seconds compare only within one run (same machine, same "
         "time); across runs use guestbench compare, which tests the difference.")

def show_document(run: Run, *, brief: bool = False) -> Document:
    """What `show` prints: one results file, no charts. `brief` shortens reasons to a sentence (terminal)."""
    return document(analyze_results(run), brief=brief)


def document(s: Findings | FleetFindings, *, brief: bool = False) -> Document:
    if isinstance(s, FleetFindings):
        return Document(f"guestbench: {s.name}", sections=fleet_sections(s, brief=brief))
    return Document(f"guestbench: {s.name}", sections=[section(s, brief=brief)])


def printable(run: Run, path: str | None = None) -> Printable:
    """One results file in any format: `show`, and a scenario's final print (its findings computed once)."""
    s = functools.cache(lambda: analyze_results(run, path))
    return Printable(document=lambda: document(s()), brief=lambda: document(s(), brief=True),
                     summary=lambda: json_export.results_summary(s()), csv=lambda: csv_export.to_csv(s()))


def report_document(inputs: list[tuple[str, Run]], *, charts: bool = True) -> Document:
    """What `guestbench report` writes: a section per results file, with charts and fingerprints."""
    taken: set[str] = set()
    sections = []
    for path, run in inputs:
        stem = _unique_stem(path, taken)
        s = analyze_results(run, path)
        title = f"{s.name} — {Path(path).name}"
        if isinstance(s, FleetFindings):
            sections += fleet_sections(s, title=title, anchor=stem, full=True, stem=stem if charts else None)
        else:
            sections.append(section(s, title=title, anchor=stem, full=True, stem=stem if charts else None))
    intro = [Para(f"guestbench {__version__}, {len(sections)} results file(s). {INTRO}", "meta")]
    return Document("guestbench report", intro, sections)


def fleet_sections(fleet: FleetFindings, *, title: str = "", anchor: str = "", brief: bool = False,
                   full: bool = False, stem: str | None = None) -> list[Section]:
    """A fleet run: the hosts side by side (host × backend per measurement), then each host's own tables."""
    state = ", ".join(f"{h.name} ({h.status or 'not run'})" for h in fleet.hosts)
    parts: list[Part] = [Para(timing_table.run_line(fleet.facts), "meta"),
                         Para(f"Fleet: {len(fleet.hosts)} host(s): {state}", "meta"),
                         Para(f"Run from: {fleet.host_line}", "meta")]
    for t in fleet_report.tables(fleet):
        styles = {(i, fleet_report.HEADER.index("× fastest")): "best"
                  for i, c in enumerate(t.combos) if t.fastest is not None and c is t.fastest}
        parts.append(Table("fleet", t.title, list(fleet_report.HEADER), [fleet_report.cells(t, c) for c in t.combos],
                           caption=t.caption, label=t.label, numeric_from=4, styles=styles))
    parts.append(Bullets(fleet_report.warnings(fleet), title="Fleet warnings", lead="warning", style="warn"))
    out = [Section(title or "hosts", anchor or "fleet", parts)]
    for h in fleet.hosts:
        sub = slug(h.name)
        out.append(section(h.findings, title=f"host {h.name}" + (f" — {title}" if title else ""),
                           anchor=f"{anchor or 'fleet'}-{sub}", brief=brief, full=full,
                           stem=f"{stem}-{sub}" if stem is not None else None))
    return out


def section(s: Findings, *, title: str = "", anchor: str = "", brief: bool = False, full: bool = False,
            stem: str | None = None) -> Section:
    """Every table of one results file; `stem` (a file-name stem) adds the charts, `full` the fingerprints."""
    drawn = _charts(s) if stem is not None else None
    parts: list[Part] = [*_header(s)]
    metric_tables, durable = s.workloads, s.durability
    if not s.timing and not metric_tables and not durable and not s.density:
        parts.append(Para("No measurements recorded."))
    for label, group in s.timing.items():
        parts.append(_timing_table(label, group))
        if drawn is not None and label in drawn.measured:
            parts.append(_figure(drawn.measured[label], stem))
    parts += [_metric_table(mt) for mt in metric_tables]
    parts += [_durability_table(durable)] if durable else []
    for pl in placement_table.placement_tables(s.placements):
        parts.append(Table("placements", pl.title, pl.header, pl.rows, caption=pl.caption, label=pl.title,
                           numeric_from=3, empty=timing_table.NO_PAIRS))
        parts += [Bullets([placement_table.gap_text(g) for g in pl.gaps], lead=pl.title, style="warn")] \
            if pl.gaps else []
    for i, dt in enumerate(density_report.tables(s.density)):
        parts.append(Table("density", dt.title, dt.header, dt.rows, caption=dt.caption, label=dt.title,
                           numeric_from=0))
        if drawn is not None:
            parts.append(_figure(drawn.density[i], stem))
    parts += _cost_tables(s)
    if s.software:
        parts.append(Table("software", "software", software_table.HEADER, software_table.rows(s.software),
                           caption=software_table.caption(s.software), label="software", numeric_from=len(
                               software_table.HEADER)))
    for i, pt in enumerate(phase_table.phase_tables(s.phases)):
        parts.append(Table("phases", pt.title, pt.header, pt.rows, caption=pt.caption, label=pt.title,
                           numeric_from=1))
        if drawn is not None:
            parts.append(_figure(drawn.phases[i], stem))
    parts.append(Table("unusable", "Backends not measured", ["backend", "reason"],
                       [[name, short_reason(why) if brief else why] for name, why in s.unusable.items()],
                       quiet_when_empty=True))
    parts.append(Bullets(s.warnings, title="Warnings", lead="warning", style="warn"))
    if full:
        parts += _fingerprints(s)
    return Section(title, anchor, parts)


def _header(s: Findings) -> list[Para]:
    out = [Para(timing_table.run_line(s.facts), "meta"), Para(f"Host: {s.host_line}", "meta")]
    member = s.member
    out += [Para(f"host {member.name} ({member.status}): {member.error}", "warning")] if member and member.error else []
    nested, error = timing_table.nested_line(s.nested), timing_table.nested_error(s.nested)
    out += [Para(f"Nested: {nested}", "meta")] if nested else []
    out += [Para(error, "warning")] if error else []
    return out


def _timing_table(label: str, group: list[Row]) -> Table:
    styles: dict[tuple[int, int], str] = {}
    for i, r in enumerate(group):
        if r.summary is None:
            styles[(i, timing_table.COLUMNS.index("median s"))] = "bad"
        elif r.ratio is not None and math.isclose(r.ratio, 1.0):
            styles[(i, len(timing_table.COLUMNS) - 1)] = "best"
    return Table("measurement", label, list(timing_table.COLUMNS), [timing_table.table_cells(r) for r in group],
                 caption=timing_table.caption(group), label=label, numeric_from=3, styles=styles)


def _metric_table(mt: workloads.MetricTable) -> Table:
    styles = {(i, j + 1): "best" for i, r in enumerate(mt.rows) for j, best in enumerate(r.best) if best}
    title = mt.group + (f" ({mt.placement})" if mt.placement != "host" else "")
    return Table("metrics", title, metrics_report.header_cells(mt), [metrics_report.row_cells(r) for r in mt.rows],
                 caption=metrics_report.caption(mt), notes=metrics_report.notes(mt), label=mt.group, numeric_from=1,
                 styles=styles)


def _durability_table(durable: list[workloads.Durability]) -> Table:
    verdict = metrics_report.DURABILITY_HEADER.index("fsync after a power cut")
    styles = {(i, verdict): "good" if r.verdict.startswith("honoured") else "bad" for i, r in enumerate(durable)}
    return Table("durability", "durability", list(metrics_report.DURABILITY_HEADER),
                 [metrics_report.durability_cells(r) for r in durable], caption=metrics_report.DURABILITY_CAPTION,
                 label="durability", styles=styles)


def _cost_tables(s: Findings) -> list[Table]:
    if not s.cost:
        return []
    return [Table("cost", "what it costs", cost_table.header(s.prices), [cost_table.cells(r, s.prices) for r in s.cost],
                  caption=cost_table.caption(s.cost, s.prices), label="what it costs", numeric_from=3)]


def _fingerprints(s: Findings) -> list[Part]:
    host = s.fingerprint
    parts: list[Part] = [Table("host", "Host fingerprint", ["key", "value"],
                               host_rows(host) if isinstance(host, dict) and host else [], empty="Not recorded.")]
    if s.nested is not None:
        parts.append(Table("nested-host", "Level-1 guest fingerprint (placement nested)", ["key", "value"],
                           host_rows(s.nested.fingerprint) if s.nested.fingerprint else [], empty="Not recorded."))
    return parts


def host_rows(value: Any, key: str = "") -> list[list[str]]:
    """A fingerprint as (dotted key, value) rows, every leaf as recorded; bytes also in GiB."""
    if isinstance(value, dict) and value:
        return [row for k, v in value.items() for row in host_rows(v, f"{key}.{k}" if key else str(k))]
    return [[key, _host_value(key, value)]]


def _host_value(key: str, value: Any) -> str:
    if value is None or value == [] or value == {}:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if key.endswith("_bytes") and isinstance(value, int):
        return f"{value} bytes ({value / 2**30:.1f} GiB)"
    return str(value)


def _charts(s: Findings) -> Any:  # a charts.DocumentCharts
    from guestbench.output import charts  # matplotlib: only documents with charts pay for importing it

    return charts.document_charts(s)


def _figure(chart: Any, stem: str | None) -> ChartPart:
    return ChartPart(chart, f"{stem}-{chart.name}", chart.encoding)


def _unique_stem(path: str, taken: set[str]) -> str:
    base = slug(Path(path).stem)
    stem, n = base, 1
    while stem in taken:
        n += 1
        stem = f"{base}-{n}"
    taken.add(stem)
    return stem
