"""CSV: the rows a command prints with --csv, under the header its help names (output/export/columns.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING
import csv
import io
import math
from guestbench.util.errors import printable
from guestbench.output.export import columns as csv_columns
from guestbench.analysis.cells import Row
from guestbench.analysis.fleet import FleetFindings
from guestbench.analysis.findings import Findings
from guestbench.analysis.compare import Comparison
from collections.abc import Sequence
from guestbench.util.errors import UserError

if TYPE_CHECKING:
    from guestbench.output.formats import Printable


CSV_HEADER = csv_columns.RESULTS


def _csv_float(x: float | None) -> str:
    return "" if x is None or math.isnan(x) else f"{x:.6f}"


FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a cell starting so is a formula to a spreadsheet (OWASP)


def csv_text(value: object) -> str:
    """A text field (a name, a label, a verdict) as a spreadsheet and a terminal take it only as text: free of
    control characters (`printable`), and with a ' before a first character that would start a formula
    (=HYPERLINK(...) in a label would be a link, or worse, in whatever opens the CSV), as OWASP says. Figures
    are written by this module as plain numbers and never pass here: -1.5 stays a number."""
    text = printable(value)
    return "'" + text if text.lstrip(" ").startswith(FORMULA) else text


def _csv_record(r: Row) -> list[str]:
    s = r.summary
    stats = [s.median, s.mean, s.stdev, s.ci_low, s.ci_high] if s else [None] * 5
    return [csv_text(r.backend), csv_text(r.placement), csv_text(r.label), str(r.n), str(r.failures),
            *(_csv_float(x) for x in stats), _csv_float(r.mb_per_s), _csv_float(r.cpu_s), _csv_float(r.peak_mib)]


def to_csv(s: Findings | FleetFindings) -> str:
    """Header `CSV_HEADER` plus one line per cell; empty fields where a figure does not exist. A fleet run's
    lines end with the host's name, under an added last column `host`."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if isinstance(s, Findings):
        writer.writerow(CSV_HEADER.split(","))
        for r in s.rows:
            writer.writerow(_csv_record(r))
        return buf.getvalue()
    writer.writerow([*CSV_HEADER.split(","), "host"])
    for h in s.hosts:
        for r in h.findings.rows:
            writer.writerow([*_csv_record(r), csv_text(h.name)])
    return buf.getvalue()



COMPARISON_HEADER = csv_columns.COMPARISON


def _figure(x: float, fmt: str = ".6f") -> str:
    return "" if math.isnan(x) else format(x, fmt)


def comparison_csv(comparisons: Sequence[Comparison], fail_above_pct: float | None) -> str:
    """`COMPARISON_HEADER` plus one line per row; `regression` is empty without a threshold. One OTHER file only,
    since the fixed header has no column naming the file."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COMPARISON_HEADER.split(","))
    for c in comparisons:
        for r in c.rows:
            regression = "" if fail_above_pct is None else str(r.is_regression(fail_above_pct)).lower()
            writer.writerow([csv_text(r.backend), csv_text(r.placement), csv_text(r.measurement), r.n_base, r.n_other,
                             _figure(r.median_base), _figure(r.median_other), _figure(r.ratio),
                             _figure(r.ci_low), _figure(r.ci_high), _figure(r.p_value, ".6g"),
                             csv_text(r.verdict_text()), regression])
    return buf.getvalue()


def emit(p: Printable) -> None:
    if p.csv is None:
        raise UserError(p.no_csv, source="command line", key="--csv")
    sys.stdout.write(p.csv())
