"""Build the document of `guestbench history`: per machine its runs and software, its series with their steps
and verdicts, each series run by run (with a trend chart in the HTML page), then the regressions of the newest
runs, so that every format says the same."""

from __future__ import annotations

from guestbench.analysis.history import History
from guestbench.output.document import Bullets, Document, Figure, Heading, Para, Part, Section, slug
from guestbench.output.export import json as json_export
from guestbench.output.formats import Printable
from guestbench.output.tables import history as history_table

INTRO = ("A series is one cell's figure on one machine (the fingerprint's CPU, cores, memory, VM and /dev/kvm), "
         "run after run in the order they started. Runs are the units: a run's samples share its boot, load and "
         "build, so they are not independent of each other.")


def printable(h: History, baseline_lines: list[str] | None = None) -> Printable:
    return Printable(document=lambda: document(h, baseline_lines=baseline_lines),
                     brief=lambda: document(h, brief=True, baseline_lines=baseline_lines),
                     summary=lambda: json_export.history_summary(h, baseline_lines or []),
                     no_csv="is not available with history; allowed: --json, --markdown, --html DIR or the table")


def document(h: History, *, brief: bool = False, charts: dict[str, Figure] | None = None,
             baseline_lines: list[str] | None = None) -> Document:
    """`brief`: the series' lines without each series run by run (the terminal); `charts`: a trend chart per
    series key (the HTML page)."""
    sections = []
    for mi, m in enumerate(h.machines):
        parts: list[Part] = [Para(f"{len(m.runs)} run(s).", "meta"), history_table.software_table(m),
                             history_table.series_table(h, mi)]
        for s in (x for x in h.series if x.machine == mi):
            if brief:
                break
            parts.append(Heading(f"{s.cell}: {s.figure}", 2))
            if charts and s.key in charts:
                parts.append(charts[s.key])
            parts.append(history_table.points_table(h, s))
        sections.append(Section(f"Machine: {m.label}", slug(f"machine-{mi}-{m.label}"), parts))
    found = h.regressions() + (baseline_lines or [])
    tail = Section("", parts=[Bullets(found, title="Regressions in the newest runs", lead="REGRESSION",
                                      style="regression")] if found else
                   [Heading("Regressions in the newest runs"),
                    Para("None: no series' newest run is worse than where it started, or than its segment, beyond "
                         "its noise floor with a CI that excludes no change.", "good")])
    intro = [Para(INTRO, "meta")]
    return Document("guestbench history", intro, [*sections, tail])
