"""Build the document of `guestbench compare` (and `guestbench ab`): a table per OTHER file with its method
and notes, then the regressions, so the terminal and Markdown print the same verdicts."""

from __future__ import annotations

from collections.abc import Sequence

from guestbench.analysis import compare
from guestbench.output.export import csv as csv_export, json as json_export
from guestbench.output.tables import comparison as comparison_table
from guestbench.output.document import Bullets, Document, Heading, Para, Section, Table
from guestbench.output.formats import Printable


def printable(comparisons: Sequence[compare.Comparison], fail_above_pct: float | None) -> Printable:
    """`compare`'s and `ab`'s verdicts in any format."""
    return Printable(document=lambda: compare_document(comparisons, fail_above_pct),
                     summary=lambda: json_export.comparison_summary(comparisons, fail_above_pct),
                     csv=lambda: csv_export.comparison_csv(comparisons, fail_above_pct))


def compare_document(comparisons: Sequence[compare.Comparison], fail_above_pct: float | None) -> Document:
    sections = [_section(c, fail_above_pct) for c in comparisons]
    found = comparison_table.regression_lines(comparisons, fail_above_pct)
    tail = Section("", parts=[Bullets(found, title="Regressions", lead="REGRESSION", style="regression")] if found
                   else [Heading("Regressions"),
                         Para(comparison_table.no_regression_text(fail_above_pct),
                              "good" if fail_above_pct is not None else "")])
    return Document("guestbench compare", sections=[*sections, tail])


def _section(c: compare.Comparison, fail_above_pct: float | None) -> Section:
    title = f"{c.other_path} vs baseline {c.base_path}"
    verdict = len(comparison_table.COLUMNS) - 1
    rows, styles = [], {}
    for i, r in enumerate(c.rows):
        cells = comparison_table.table_cells(r)
        if r.is_regression(fail_above_pct):
            cells[verdict] = f"REGRESSION: {cells[verdict]}"
            styles.update({(i, j): "regression" for j in range(len(cells))})
        elif r.change == compare.REGRESSION:
            styles[(i, verdict)] = "warn"
        elif r.change == compare.IMPROVEMENT:
            styles[(i, verdict)] = "good"
        rows.append(cells)
    table = Table("comparison", title, list(comparison_table.COLUMNS), rows,
                  caption=comparison_table.method_text(c, fail_above_pct), label=title, numeric_from=3, styles=styles,
                  empty="No cell has samples in both files.")
    return Section("", parts=[table, Bullets(comparison_table.notes(c), lead="note", style="warn")])
