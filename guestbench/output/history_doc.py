"""Build the document of `guestbench history`: per machine its runs and software, its series with their steps
and verdicts, each series run by run (with a trend chart in the HTML page), then the regressions of the newest
runs, so that every format says the same. Everything it says was decided once (guestbench.analysis.history_gate):
here it is only laid out."""

from __future__ import annotations

from pathlib import Path

from guestbench.analysis.history import MAX_RUNS
from guestbench.analysis.history_gate import HistoryFindings
from guestbench.output.document import Bullets, Document, ChartPart, Heading, Para, Part, Section, slug
from guestbench.output.export import json as json_export
from guestbench.output.formats import Printable
from guestbench.output.tables import history as history_table

INTRO = ("A series is one cell's figure on one machine (the fingerprint's CPU, cores, memory, VM and /dev/kvm), "
         "run after run in the order they started. Runs are the units: a run's samples share its boot, load and "
         "build, so they are not independent of each other.")


def printable(f: HistoryFindings) -> Printable:
    return Printable(document=lambda: document(f), summary=lambda: json_export.history_summary(f),
                     no_csv="is not available with history; allowed: --json, --markdown, --html DIR or the table")


def page(f: HistoryFindings, out_dir: Path) -> None:
    """The HTML page (--html): the document with a trend chart per series of two runs or more."""
    from guestbench.output import charts  # matplotlib: only the page pays for importing it
    from guestbench.output.render import html

    figs = {(s.machine, s.key): ChartPart(chart, f"{chart.name}", chart.caption)
            for s in f.history.series if len(s.points) > 1 for chart in [charts.trend_chart(f, s)]}
    html.write_document(document(f, charts=figs), out_dir, key="--html")


def document(f: HistoryFindings, *, charts: dict[tuple[int, str], ChartPart] | None = None) -> Document:
    """`charts`: a trend chart per machine and series key (the HTML page)."""
    h, judged = f.history, f.baseline
    sections = []
    for mi, m in enumerate(h.machines):
        parts: list[Part] = [Para(f"{len(m.runs)} run(s).", "meta"), history_table.software_table(m),
                             history_table.series_table(f, mi)]
        for s in (x for x in h.series if x.machine == mi):
            parts.append(Heading(f"{s.cell}: {s.figure}", 2))
            if s.older:
                parts.append(Para(f"{s.older:,} older run(s) of this series neither judged nor shown: a series is "
                                  f"judged on its newest {MAX_RUNS:,} runs.", "meta"))
            if charts and (mi, s.key) in charts:
                parts.append(charts[(mi, s.key)])
            parts.append(history_table.points_table(f, s))
        sections.append(Section(f"Machine: {m.label}", slug(f"machine-{mi}-{m.label}"), parts))
    found = list(f.verdict.regressions)
    tail = Section("", parts=[Bullets(found, title="Regressions in the newest runs", lead="REGRESSION",
                                      style="regression")] if found else
                   [Heading("Regressions in the newest runs"),
                    Para("None: no series' latest change is a regression (beyond its noise floor, with a CI that "
                         "excludes no change), and no newest run missed its baseline.", "good")])
    tail.parts.append(Bullets(list(f.verdict.judged), title="The newest runs judged", lead="judged",
                              empty="None: no series has a run."))
    if judged is not None:
        tail.parts.append(Bullets(judged.notes, title="Baseline", lead="note", style="warn",
                                  empty="Every machine and series the baseline pins was measured here."))
    apart = f.verdict.apart_line
    intro = [Para(INTRO, "meta"), *([Para(apart, "warning")] if apart else [])]
    return Document("guestbench history", intro, [*sections, tail])
