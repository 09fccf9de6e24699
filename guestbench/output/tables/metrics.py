"""Tables of the figures workload tools report (fio, bonnie++, dbench, tar), laid out like the published
E2–E4 tables: one row per figure, one column per configuration (matrix combination × backend).

Every column says its backend and cache mode; every figure is a median with its min–max and n; bonnie++'s
`+++++` ("too fast to measure") is kept as such, never turned into a number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guestbench.analysis.stats import summarize
from guestbench.workloads import TOO_FAST

NONE = "—"


@dataclass
class MetricColumn:
    cell: dict[str, Any]
    header: str
    n: int
    status: str  # "" when it has samples, else why not


@dataclass
class MetricRow:
    key: str
    label: str
    unit: str
    higher_better: bool
    values: list[str]  # one per column
    medians: list[float | None]
    spans: list[tuple[float, float, int] | None] = field(default_factory=list)  # min, max, n per column


@dataclass
class MetricTable:
    group: str
    placement: str
    measurement: str
    columns: list[MetricColumn]
    rows: list[MetricRow]
    caption: str
    notes: list[str] = field(default_factory=list)


def _samples(cell: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in cell.get("samples") or [] if isinstance(s, dict)]


def figure(values: list[Any]) -> tuple[str, float | None]:
    """Median (min–max) of the numeric values; `+++++` when the tool said too fast every time."""
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    fast = sum(1 for v in values if v == TOO_FAST)
    if not nums:
        return (f"{TOO_FAST} (too fast to measure, {fast}/{len(values)})" if fast else NONE), None
    s = summarize(nums)
    med = s.median
    text = f"{fmt(med)} ({fmt(s.min)}–{fmt(s.max)})" if len(nums) > 1 else fmt(med)
    if fast:
        text += f"; {TOO_FAST} in {fast}/{len(values)}"
    return text, med


def fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _header(cell: dict[str, Any], varied: list[str]) -> str:
    variant = cell.get("variant") or {}
    parts = [f"guest {variant[k]}" if k == "guest" else str(variant[k]) for k in varied if k in variant]
    return " · ".join([*parts, str(cell.get("backend") or "?")])


def _status(cell: dict[str, Any]) -> str:
    if _samples(cell):
        return ""
    status = str(cell.get("status") or "no samples")
    reason = cell.get("skip_reason")
    if not reason and cell.get("failures"):
        reason = (cell["failures"][0] or {}).get("reason")
    return f"{status}: {reason}" if reason else status


def _durability_cells(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in cells if c.get("measurement") == "durability"]


def metric_tables(cells: list[dict[str, Any]]) -> list[MetricTable]:
    """One table per workload group and placement, in file order; durability has its own table."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cell in cells:
        if cell.get("metrics") and cell.get("measurement") != "durability":
            key = (str(cell.get("group") or cell.get("label")), str(cell.get("placement") or "host"))
            groups.setdefault(key, []).append(cell)
    verdicts = {(c.get("backend"), c.get("cache_mode"), c.get("placement")): durability_text(c)
                for c in _durability_cells(cells)}
    return [_table(group, placement, members, verdicts) for (group, placement), members in groups.items()]


def durability_text(cell: dict[str, Any]) -> str:
    """A durability cell's verdict over its trials, e.g. "honoured (5/5)" or "lost (5/5 trials)"."""
    got = [str((s.get("metrics") or {}).get("verdict")) for s in _samples(cell)]
    if not got:
        return _status(cell) or "no trials"
    counts = {v: got.count(v) for v in ("honoured", "lost", "partial") if got.count(v)}
    if len(counts) == 1:
        (v, k), = counts.items()
        return f"{v} ({k}/{len(got)} trials)"
    return "mixed: " + ", ".join(f"{v} {k}/{len(got)}" for v, k in counts.items())


@dataclass
class DurabilityRow:
    backend: str
    placement: str
    cache_mode: str
    verdict: str
    write: str  # the fsynced write's rate: median (min–max) MB/s
    n: int
    disk: str  # how the hypervisor reached the disk: a file, or NBD
    flushes: str  # flush requests that reached the disk per trial: median (min–max)


def durability_rows(cells: list[dict[str, Any]]) -> list[DurabilityRow]:
    """Per backend × cache mode: did fsynced data survive a power cut, and how fast was that write."""
    out = []
    for c in _durability_cells(cells):
        rates = [(s.get("metrics") or {}).get("write_bw") for s in _samples(c)]
        write = figure([r for r in rates if r is not None])[0] if rates else NONE
        out.append(DurabilityRow(str(c.get("backend")), str(c.get("placement") or "host"), str(c.get("cache_mode")),
                                 durability_text(c), write, len(_samples(c)), str(c.get("disk") or "?"),
                                 figure([(s.get("metrics") or {}).get("host_flushes") for s in _samples(c)
                                         if (s.get("metrics") or {}).get("host_flushes") is not None])[0]))
    return out


DURABILITY_HEADER = ["backend", "placement", "cache mode", "disk opened as", "trials", "fsync after a power cut",
                     "flushes reaching the disk per trial",
                     "write + fsync MB/s median (min–max)"]
DURABILITY_CAPTION = ("durability — each trial: a fresh appliance writes a pattern to its disk with dd conv=fsync; "
                      "then the hypervisor and the disk's volatile write cache are killed together and the host "
                      "reads the image. honoured = the data was there after every such power cut. Disk opened as file: the "
                      "hypervisor opened a plain file (nbdfuse over an nbdkit cache); NBD: qemu spoke NBD to it.")


def durability_cells(r: DurabilityRow) -> list[str]:
    return [r.backend, r.placement, r.cache_mode, r.disk, str(r.n), r.verdict, r.flushes, r.write]


def _table(group: str, placement: str, cells: list[dict[str, Any]],
           verdicts: dict[tuple[Any, Any, Any], str]) -> MetricTable:
    varied = list(dict.fromkeys(k for c in cells for k in (c.get("variant") or {})))
    columns = [MetricColumn(c, _header(c, varied), len(_samples(c)), _status(c)) for c in cells]
    declared: dict[str, dict[str, Any]] = {}
    for c in cells:
        for mt in c.get("metrics") or []:
            declared.setdefault(mt["key"], mt)
    rows = []
    for key, mt in declared.items():
        values, medians, spans = [], [], []
        for col in columns:
            got = [(s.get("metrics") or {}).get(key) for s in _samples(col.cell)]
            got = [v for v in got if v is not None]
            text, med = figure(got) if got else (NONE if not col.status else "", None)
            values.append(text)
            medians.append(med)
            spans.append(_span(got))
        rows.append(MetricRow(key, mt["label"], mt["unit"], bool(mt.get("higher_better", True)), values, medians,
                              spans))
    _add_aggregates(columns, rows)
    seconds = [[s.get("seconds") for s in _samples(col.cell)] if col.cell else [] for col in columns]
    walls = [figure(w) if w else (NONE, None) for w in seconds]
    rows.append(MetricRow("wall_s", "wall time of the sample (what is timed, below)", "s", False,
                          [w[0] for w in walls], [w[1] for w in walls], [_span(w) for w in seconds]))
    if verdicts:  # a write figure beside its durability (E1's caveat), when this run measured it
        seen = [verdicts.get((c.get("backend"), c.get("cache_mode"), c.get("placement")), "not measured in this run")
                if c else "" for c in (col.cell for col in columns)]
        rows.append(MetricRow("durability", "fsync durability (this backend and cache mode)", "verdict", True, seen,
                              [None] * len(seen)))
    first = cells[0]
    caches = sorted({str(c.get("cache_mode") or "– (libguestfs's default for scratch disks)") for c in cells})
    caption = (f"{first.get('measurement')} — timed: {first.get('timed') or 'not recorded'}. "
               f"Cache mode: {', '.join(caches)}. Each figure: median (min–max) of n samples per column.")
    notes = [f"{col.header}: {col.status}" for col in columns if col.status]
    stacks = list(dict.fromkeys(str(c["stack"].get("description")) for c in cells if isinstance(c.get("stack"), dict)))
    notes += [f"Disk stack inside the appliance: {d}" for d in stacks]
    fixed = [str(c.get("what")) for c in cells[:1]]
    if fixed:
        notes.insert(0, f"Configuration: {fixed[0]}" + (f" (varied: {', '.join(varied)})" if varied else ""))
    return MetricTable(group, placement, str(first.get("measurement")), columns, rows, caption, notes)


RATE_UNITS = ("MB/s", "KiB/s", "IOPS", "/s", "files/s")


def _add_aggregates(columns: list[MetricColumn], rows: list[MetricRow]) -> None:
    """`concurrency: N` cells: after each backend's N guests, a column with their sum (rates only): what
    the shared disk delivered to all of them together."""
    sets: dict[tuple[Any, ...], list[int]] = {}
    for i, col in enumerate(columns):
        if int(col.cell.get("concurrency") or 1) > 1:
            variant = {k: v for k, v in (col.cell.get("variant") or {}).items() if k != "guest"}
            sets.setdefault((col.cell.get("backend"), json_key(variant)), []).append(i)
    for members in reversed(list(sets.values())):
        first = columns[members[0]].cell
        header = " · ".join([*(str(v) for k, v in (first.get("variant") or {}).items() if k != "guest"),
                             f"all {len(members)} guests", str(first.get("backend"))])
        n = min(columns[i].n for i in members)
        at = members[-1] + 1
        columns.insert(at, MetricColumn({}, header, n, ""))
        for r in rows:
            meds = [r.medians[i] for i in members]
            total = sum(m for m in meds if m is not None) if r.unit in RATE_UNITS and None not in meds else None
            r.values.insert(at, f"{fmt(total)} (sum of medians)" if total is not None else NONE)
            r.medians.insert(at, None)
            if r.spans:
                r.spans.insert(at, None)


def json_key(d: dict[str, Any]) -> str:
    return ",".join(f"{k}={d[k]}" for k in sorted(d))


RANK_MIN_N = 3  # samples a column needs before its figure is called the best of a row


def _span(values: list[Any]) -> tuple[float, float, int] | None:
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return (min(nums), max(nums), len(nums)) if nums else None


def best_marks(row: MetricRow) -> list[bool]:
    """Which column holds a row's best figure (bold in tables), only where the data supports a ranking: every
    compared column has RANK_MIN_N samples or more and the best one's range is clear of every other's."""
    none = [False] * len(row.medians)
    ranked = [(i, m) for i, m in enumerate(row.medians) if m is not None]
    spans = dict((i, row.spans[i] if i < len(row.spans) else None) for i, _ in ranked)
    if len(ranked) < 2 or any(sp is None or sp[2] < RANK_MIN_N for sp in spans.values()):
        return none
    best_i = (max if row.higher_better else min)(ranked, key=lambda im: im[1])[0]
    lo, hi, _ = spans[best_i]  # type: ignore[misc]
    clear = all((lo > sp[1] if row.higher_better else hi < sp[0]) for i, sp in spans.items() if i != best_i and sp)
    return [i == best_i for i in range(len(row.medians))] if clear else none


def header_cells(t: MetricTable) -> list[str]:
    return ["figure", *[f"{c.header} (n={c.n})" for c in t.columns]]


def row_cells(r: MetricRow) -> list[str]:
    return [f"{r.label} ({r.unit})", *r.values]
