"""Tables of the figures workload tools report (fio, bonnie++, dbench, tar), laid out like the published
E2–E4 tables: one row per figure, one column per configuration (matrix combination × backend); and the
durability verdicts. The figures are guestbench.analysis.workloads'; this module words them.

Every column says its backend and cache mode; every figure is a median with its min–max and n; bonnie++'s
`+++++` ("too fast to measure") is kept as such, never turned into a number.
"""

from __future__ import annotations

from typing import Any

from guestbench.analysis.workloads import Durability, MetricRow, MetricTable, Spot
from guestbench.workloads import TOO_FAST

NONE = "—"

DURABILITY_HEADER = ["backend", "placement", "cache mode", "disk opened as", "trials", "fsync after a power cut",
                     "flushes reaching the disk per trial",
                     "write + fsync MB/s median (min–max)"]
DURABILITY_CAPTION = ("durability — each trial: a fresh appliance writes a pattern to its disk with dd conv=fsync; "
                      "then the hypervisor and the disk's volatile write cache are killed together and the host "
                      "reads the image. honoured = the data was there after every such power cut. "
                      "Disk opened as file: the "
                      "hypervisor opened a plain file (nbdfuse over an nbdkit cache); NBD: qemu spoke NBD to it.")


def fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def text(s: Spot) -> str:
    """A figure as a table shows it: median (min–max), `+++++` counted, a verdict or a sum as such."""
    if s.verdict is not None:
        return s.verdict
    if s.summed is not None:
        return f"{fmt(s.summed)} (sum of medians)"
    if s.median is None:
        if s.fast:
            return f"{TOO_FAST} (too fast to measure, {s.fast}/{s.total})"
        return "" if s.blank else NONE
    assert s.low is not None and s.high is not None
    out = f"{fmt(s.median)} ({fmt(s.low)}–{fmt(s.high)})" if s.n > 1 else fmt(s.median)
    return out + (f"; {TOO_FAST} in {s.fast}/{s.total}" if s.fast else "")


def values(r: MetricRow) -> list[str]:
    return [text(s) for s in r.spots]


def caption(t: MetricTable) -> str:
    return (f"{t.measurement} — timed: {t.timed or 'not recorded'}. "
            f"Cache mode: {', '.join(t.caches)}. Each figure: median (min–max) of n samples per column.")


def notes(t: MetricTable) -> list[str]:
    """The configuration the columns share, why a column has no samples, the disk stacks inside the appliance."""
    return [f"Configuration: {t.what}" + (f" (varied: {', '.join(t.varied)})" if t.varied else ""),
            *(f"{col.header}: {col.status}" for col in t.columns if col.status),
            *(f"Disk stack inside the appliance: {d}" for d in t.stacks)]


def header_cells(t: MetricTable) -> list[str]:
    return ["figure", *[f"{c.header} (n={c.n})" for c in t.columns]]


def row_cells(r: MetricRow) -> list[str]:
    return [f"{r.label} ({r.unit})", *values(r)]


def durability_cells(d: Durability) -> list[str]:
    return [d.backend, d.placement, d.cache_mode, d.disk, str(d.n), d.verdict, text(d.flushes), text(d.write)]


def durability_dict(d: Durability) -> dict[str, Any]:
    """A durability row for `--json`, its figures worded as the table words them."""
    return {"backend": d.backend, "placement": d.placement, "cache_mode": d.cache_mode, "verdict": d.verdict,
            "write": text(d.write), "n": d.n, "disk": d.disk, "flushes": text(d.flushes)}
