"""The figures workload tools report (fio, bonnie++, dbench, tar), per workload group and placement as the published
E2–E4 tables lay them out: a column per configuration (matrix combination × backend), a row per figure, each figure
its samples' median with min–max and n; bonnie++'s `+++++` ("too fast to measure") counted, never made a number.
Beside them the durability verdicts: did fsynced data survive a power cut (guestbench.run.powercut).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guestbench.analysis.stats import summarize
from guestbench.analysis.cells import Row, status
from guestbench.results.model import Cell, Sample
from guestbench.workloads import TOO_FAST

RATE_UNITS = ("MB/s", "KiB/s", "IOPS", "/s", "files/s")
RANK_MIN_N = 3  # samples a column needs before its figure is called the best of a row


@dataclass(frozen=True)
class Spot:
    """One figure of one column: the values its samples recorded, summarised (or why there are none)."""

    median: float | None = None  # of the numeric values
    low: float | None = None
    high: float | None = None
    n: int = 0  # numeric values
    fast: int = 0  # values the tool called too fast to measure
    total: int = 0  # values recorded
    blank: bool = False  # no value, in a column that says why it has no samples
    summed: float | None = None  # a concurrency set's column: the sum of its guests' medians (rates only)
    verdict: str | None = None  # a word in place of a figure (the durability row)


def spot(values: list[Any]) -> Spot:
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    fast = sum(1 for v in values if v == TOO_FAST)
    if not nums:
        return Spot(fast=fast, total=len(values))
    s = summarize(nums)
    return Spot(s.median, s.min, s.max, len(nums), fast, len(values))


@dataclass
class MetricColumn:
    cell: Cell | None  # None for a concurrency set's sum
    header: str
    n: int
    status: str  # "" when it has samples, else why not
    samples: list[Sample] = field(default_factory=list)  # the cell's samples (its row's)


@dataclass
class MetricRow:
    key: str
    label: str
    unit: str
    higher_better: bool
    spots: list[Spot]  # one per column
    spans: list[tuple[float, float, int] | None] = field(default_factory=list)  # min, max, n per column
    best: list[bool] = field(default_factory=list)  # the column whose figure is the row's best, where the data say

    @property
    def medians(self) -> list[float | None]:
        return [s.median for s in self.spots]


@dataclass
class MetricTable:
    group: str
    placement: str
    measurement: str
    columns: list[MetricColumn]
    rows: list[MetricRow]
    timed: str | None
    caches: list[str]  # the cells' cache modes
    what: str | None  # the configuration every column shares
    varied: list[str]  # the matrix keys the columns vary
    stacks: list[str]  # the disk stacks inside the appliance


@dataclass
class Durability:
    """Per backend × cache mode: did fsynced data survive a power cut, and how fast was that write."""

    backend: str
    placement: str
    cache_mode: str
    verdict: str
    write: Spot  # the fsynced write's rate, MB/s
    n: int
    disk: str  # how the hypervisor reached the disk: a file, or NBD
    flushes: Spot  # flush requests that reached the disk per trial


def _header(cell: Cell, varied: list[str]) -> str:
    variant = cell.variant or {}
    parts = [f"guest {variant[k]}" if k == "guest" else str(variant[k]) for k in varied if k in variant]
    return " · ".join([*parts, cell.system if cell.backend else "?"])


def _status(cell: Cell, read: list[Sample]) -> str:
    if read:
        return ""
    said = status(cell, unknown="no samples")
    reason = cell.skip_reason
    if not reason and cell.failures:
        reason = cell.failures[0].reason
    return f"{said}: {reason}" if reason else said


def metric_tables(cells: list[Cell], rows: list[Row]) -> list[MetricTable]:
    """One table per workload group and placement, in file order; durability has its own table (`rows`: the
    cells' rows, their samples as read)."""
    groups: dict[tuple[str, str], list[tuple[Cell, list[Sample]]]] = {}
    verdicts: dict[tuple[Any, Any, Any], str] = {}
    for cell, row in zip(cells, rows):
        if cell.measurement == "durability":
            verdicts[(cell.system, cell.cache_mode, cell.placement)] = durability_text(cell, row.samples)
        elif cell.metrics:
            key = (cell.group or cell.label, cell.placement or "host")
            groups.setdefault(key, []).append((cell, row.samples))
    return [_table(group, placement, members, verdicts) for (group, placement), members in groups.items()]


def durability_text(cell: Cell, read: list[Sample]) -> str:
    """A durability cell's verdict over its trials, e.g. "honoured (5/5)" or "lost (5/5 trials)"."""
    got = [str((s.metrics or {}).get("verdict")) for s in read]
    if not got:
        return _status(cell, read) or "no trials"
    counts = {v: got.count(v) for v in ("honoured", "lost", "partial") if got.count(v)}
    if len(counts) == 1:
        (v, k), = counts.items()
        return f"{v} ({k}/{len(got)} trials)"
    return "mixed: " + ", ".join(f"{v} {k}/{len(got)}" for v, k in counts.items())


def durability(cells: list[Cell], rows: list[Row]) -> list[Durability]:
    out = []
    for c, row in zip(cells, rows):
        if c.measurement != "durability":
            continue
        figures = [s.metrics or {} for s in row.samples]
        write = spot([f["write_bw"] for f in figures if f.get("write_bw") is not None])
        flushes = spot([f["host_flushes"] for f in figures if f.get("host_flushes") is not None])
        out.append(Durability(c.system, c.placement or "host", str(c.cache_mode),
                              durability_text(c, row.samples), write, len(figures), c.disk or "?",
                              flushes))
    return out


def _table(group: str, placement: str, members: list[tuple[Cell, list[Sample]]],
           verdicts: dict[tuple[Any, Any, Any], str]) -> MetricTable:
    cells = [c for c, _ in members]
    varied = list(dict.fromkeys(k for c in cells for k in (c.variant or {})))
    columns = [MetricColumn(c, _header(c, varied), len(read), _status(c, read), read) for c, read in members]
    declared: dict[str, dict[str, Any]] = {}
    for c in cells:
        for mt in c.metrics or []:
            declared.setdefault(mt["key"], mt)
    rows = []
    for key, mt in declared.items():
        spots, spans = [], []
        for col in columns:
            got = [v for v in ((s.metrics or {}).get(key) for s in col.samples) if v is not None]
            spots.append(spot(got) if got else Spot(blank=bool(col.status)))
            spans.append(_span(got))
        rows.append(MetricRow(key, mt["label"], mt["unit"], bool(mt.get("higher_better", True)), spots, spans))
    _add_aggregates(columns, rows)
    seconds = [[s.seconds for s in col.samples] if col.cell else [] for col in columns]
    rows.append(MetricRow("wall_s", "wall time of the sample (what is timed, below)", "s", False,
                          [spot(w) for w in seconds], [_span(w) for w in seconds]))
    if verdicts:  # a write figure beside its durability (E1's caveat), when this run measured it
        seen = [verdicts.get((c.system, c.cache_mode, c.placement), "not measured in this run")
                if c else "" for c in (col.cell for col in columns)]
        rows.append(MetricRow("durability", "fsync durability (this backend and cache mode)", "verdict", True,
                              [Spot(verdict=v) for v in seen]))
    for r in rows:
        r.best = best_marks(r)
    first = cells[0]
    caches = sorted({c.cache_mode or "– (libguestfs's default for scratch disks)" for c in cells})
    return MetricTable(group, placement, str(first.measurement), columns, rows, first.timed, caches, str(first.what),
                       varied, list(dict.fromkeys(str(c.stack.get("description"))
                                                  for c in cells if c.stack is not None)))


def _add_aggregates(columns: list[MetricColumn], rows: list[MetricRow]) -> None:
    """`concurrency: N` cells: after each backend's N guests, a column with their sum (rates only): what
    the shared disk delivered to all of them together."""
    sets: dict[tuple[Any, ...], list[int]] = {}
    for i, col in enumerate(columns):
        if col.cell is not None and (col.cell.concurrency or 1) > 1:
            variant = {k: v for k, v in (col.cell.variant or {}).items() if k != "guest"}
            sets.setdefault((col.cell.system, json_key(variant)), []).append(i)
    for members in reversed(list(sets.values())):
        first = columns[members[0]].cell
        assert first is not None  # a set is made of cells' columns
        header = " · ".join([*(str(v) for k, v in (first.variant or {}).items() if k != "guest"),
                             f"all {len(members)} guests", first.system])
        n = min(columns[i].n for i in members)
        at = members[-1] + 1
        columns.insert(at, MetricColumn(None, header, n, ""))
        for r in rows:
            meds = [r.spots[i].median for i in members]
            total = sum(m for m in meds if m is not None) if r.unit in RATE_UNITS and None not in meds else None
            r.spots.insert(at, Spot(summed=total))
            if r.spans:
                r.spans.insert(at, None)


def json_key(d: dict[str, Any]) -> str:
    return ",".join(f"{k}={d[k]}" for k in sorted(d))


def _span(values: list[Any]) -> tuple[float, float, int] | None:
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return (min(nums), max(nums), len(nums)) if nums else None


def best_marks(row: MetricRow) -> list[bool]:
    """Which column holds a row's best figure (bold in tables), only where the data supports a ranking: every
    compared column has RANK_MIN_N samples or more and the best one's range is clear of every other's."""
    medians = row.medians
    none = [False] * len(medians)
    ranked = [(i, m) for i, m in enumerate(medians) if m is not None]
    spans = dict((i, row.spans[i] if i < len(row.spans) else None) for i, _ in ranked)
    if len(ranked) < 2 or any(sp is None or sp[2] < RANK_MIN_N for sp in spans.values()):
        return none
    best_i = (max if row.higher_better else min)(ranked, key=lambda im: im[1])[0]
    lo, hi, _ = spans[best_i]  # type: ignore[misc]
    clear = all((lo > sp[1] if row.higher_better else hi < sp[0]) for i, sp in spans.items() if i != best_i and sp)
    return [i == best_i for i in range(len(medians))] if clear else none
