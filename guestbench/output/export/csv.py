"""CSV: the rows a command prints with --csv, under the header its help names (output/export/columns.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING
import csv
import io
import math
from collections.abc import Iterable
from typing import Any
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


def csv_row(values: Iterable[Any]) -> list[Any]:
    """A CSV line's fields with the text from results files (names, labels) free of control characters, which
    a terminal printing the CSV would obey."""
    return [printable(v) if isinstance(v, str) else v for v in values]


def _csv_record(r: Row) -> list[str]:
    s = r.summary
    stats = [s.median, s.mean, s.stdev, s.ci_low, s.ci_high] if s else [None] * 5
    return [r.backend, r.placement, r.label, str(r.n), str(r.failures),
            *(_csv_float(x) for x in stats), _csv_float(r.mb_per_s), _csv_float(r.cpu_s), _csv_float(r.peak_mib)]


def to_csv(s: Findings | FleetFindings) -> str:
    """Header `CSV_HEADER` plus one line per cell; empty fields where a figure does not exist. A fleet run's
    lines end with the host's name, under an added last column `host`."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if isinstance(s, Findings):
        writer.writerow(CSV_HEADER.split(","))
        for r in s.rows:
            writer.writerow(csv_row(_csv_record(r)))
        return buf.getvalue()
    writer.writerow([*CSV_HEADER.split(","), "host"])
    for h in s.hosts:
        for r in h.findings.rows:
            writer.writerow(csv_row([*_csv_record(r), h.name]))
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
            writer.writerow(csv_row([r.backend, r.placement, r.measurement, r.n_base, r.n_other,
                                     _figure(r.median_base), _figure(r.median_other), _figure(r.ratio),
                                     _figure(r.ci_low), _figure(r.ci_high), _figure(r.p_value, ".6g"),
                                     r.verdict_text(), regression]))
    return buf.getvalue()


def emit(p: Printable) -> None:
    if p.csv is None:
        raise UserError(p.no_csv, source="command line", key="--csv")
    sys.stdout.write(p.csv())
