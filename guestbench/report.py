"""Render a results document (see `guestbench.results`) as a terminal report, Markdown, CSV or summary JSON.

Every figure is printed next to what it timed, the backend and cache mode, n and its spread, so that no
output can be quoted as a bare number. Results files may be partial (interrupted or still running): every
key is read defensively and missing data is shown as "–" or as the cell's status, never as a crash.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


from guestbench import density_report, metrics_report
from guestbench.analysis import phases
from guestbench.analysis import cost
from guestbench.util import units
from guestbench.util.errors import printable
from guestbench.output.export import columns as csv_columns
from guestbench.instruments.load import BUSY_RULE
from guestbench.results import figures as cell_figures
from guestbench.results import hosts as fleet_hosts
from guestbench.analysis.stats import (CI_METHOD, OUTLIER_METHOD, RATIO_CI_METHOD, Summary, ratio_ci, spread_warnings,
                              summarize)

CSV_HEADER = csv_columns.RESULTS

COLUMNS = ("backend", "placement", "cache", "n", "failures", "median s", "mean ± stdev s", "95% CI s",
           "min–max s", "MB/s", "CPU s", "peak MiB", "× fastest")
NONE = "–"
SAMPLES_NOTE = "n counts measured samples (warm-ups excluded)"
NO_PAIRS = "No backend has samples at both placements."


@dataclass
class Row:
    """One cell of the results document, with the figures every output needs."""

    backend: str
    placement: str
    measurement: str
    label: str
    timed: str
    cache_mode: str | None
    bytes: int | None
    n: int
    failures: int
    summary: Summary | None
    mb_per_s: float | None
    ratio: float | None
    cold_s: float | None
    status: str
    skip_reason: str | None
    first_failure: str | None
    workload: bool = False  # a tool's figures: shown in guestbench.metrics_report's tables instead
    precision: dict[str, Any] | None = None  # sampled towards a precision target (results.Precision)
    judged: int = 0  # samples whose host load was judged (guestbench.instruments.load)
    busy: int = 0  # ... of which the host was busy
    busiest: float | None = None  # the most cores other processes used during one of its samples
    shared: int = 0  # samples taken while another guestbench run was active on this host (guestbench.host.neighbours)
    cpu_s: float | None = None  # median CPU seconds of the cell's processes per timed step (guestbench.instruments.usage)
    peak_mib: float | None = None  # median of each step's peak PSS (RSS where no PSS was readable)
    cpu_methods: tuple[str, ...] = ()  # how the samples' CPU was counted: "cgroup", "proc" (guestbench.instruments.usage)
    density: bool = False  # an appliance of a density level: its figures are in the density tables


# ---------------------------------------------------------------------------------------------- reading


def _dict(value: Any) -> dict[str, Any]:
    """Partial files may hold null where a mapping belongs; treat that as empty."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _number(value: Any) -> float | None:
    """A finite float, or None: JSON may hold null, and bool is not a number here."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def sample_seconds(cell: dict[str, Any]) -> list[float]:
    out = []
    for sample in _list(cell.get("samples")):
        value = _number(_dict(sample).get("seconds"))
        if value is not None:
            out.append(value)
    return out


def load_figures(cell: dict[str, Any]) -> dict[str, Any]:
    """How many samples were judged for host load, how many were busy, the busiest one's other cores, and how many
    were taken beside another guestbench run."""
    loads = [_dict(_dict(s).get("load")) for s in _list(cell.get("samples"))]
    judged = [ld for ld in loads if isinstance(ld.get("busy"), bool)]
    others = [v for v in (_number(ld.get("other_cores")) for ld in judged) if v is not None]
    return {"judged": len(judged), "busy": sum(1 for ld in judged if ld["busy"]),
            "busiest": max(others) if others else None,
            "shared": sum(1 for ld in loads if (_number(ld.get("other_runs")) or 0) > 0)}


def _resource_figures(cell: dict[str, Any]) -> dict[str, Any]:
    """The median CPU seconds and the median peak memory (PSS, else RSS) of the cell's samples that have them."""
    used = {f.key: statistics.median(f.values) for f in cell_figures.resources(cell)}
    return {"cpu_s": used.get("cpu_s"), "peak_mib": used.get("peak_mib"),
            "cpu_methods": cell_figures.cpu_methods(cell)}


def _first_failure(cell: dict[str, Any]) -> str | None:
    failures = _list(cell.get("failures"))
    if not failures:
        return None
    reason = _dict(failures[0]).get("reason")
    return str(reason) if reason else "no reason recorded"


def doc_cells(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in _list(doc.get("cells")) if isinstance(c, dict)]


def _row(cell: dict[str, Any]) -> Row:
    seconds = sample_seconds(cell)
    summary = summarize(seconds) if seconds else None
    nbytes = cell.get("bytes")
    nbytes = nbytes if isinstance(nbytes, int) and not isinstance(nbytes, bool) else None
    throughput = None
    if nbytes is not None and summary is not None and summary.median > 0:
        throughput = units.mb_per_s(nbytes, summary.median)
    measurement = str(cell.get("measurement") or "?")
    return Row(
        backend=str(cell.get("backend") or "?"),
        placement=str(cell.get("placement") or ""),
        measurement=measurement,
        label=str(cell.get("label") or measurement),
        timed=str(cell.get("timed") or ""),
        cache_mode=cell.get("cache_mode") or None,
        bytes=nbytes,
        n=len(seconds),
        failures=len(_list(cell.get("failures"))),
        summary=summary,
        mb_per_s=throughput,
        ratio=None,
        cold_s=_number(cell.get("cold_s")),
        status=str(cell.get("status") or "unknown"),
        skip_reason=cell.get("skip_reason") or None,
        first_failure=_first_failure(cell),
        workload=bool(cell.get("metrics")),
        density=cell_figures.is_density(cell),
        precision=cell.get("precision") if isinstance(cell.get("precision"), dict) else None,
        **load_figures(cell),
        **_resource_figures(cell),
    )


def rows(doc: dict[str, Any]) -> list[Row]:
    """One Row per cell, in file order, with ratios to the fastest median of the same label and placement."""
    result = [_row(cell) for cell in doc_cells(doc)]
    fastest: dict[tuple[str, str], float] = {}
    for r in result:
        if r.summary is not None:
            key = (r.label, r.placement)
            fastest[key] = min(fastest.get(key, math.inf), r.summary.median)
    for r in result:
        best = fastest.get((r.label, r.placement))
        if r.summary is not None and best:
            r.ratio = r.summary.median / best
    return result


def by_label(rs: Iterable[Row]) -> dict[str, list[Row]]:
    """Rows grouped by measurement label, labels in order of first appearance."""
    groups: dict[str, list[Row]] = {}
    for r in rs:
        groups.setdefault(r.label, []).append(r)
    return groups


def _by_label_placement(rs: Iterable[Row]) -> dict[tuple[str, str], list[Row]]:
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rs:
        groups.setdefault((r.label, r.placement), []).append(r)
    return groups


def _group_names(rs: list[Row]) -> dict[int, str]:
    """Name each row by label (plus placement when a label has several) so warnings are unambiguous."""
    placements: dict[str, set[str]] = {}
    for r in rs:
        placements.setdefault(r.label, set()).add(r.placement)
    return {id(r): f"{r.label} ({r.placement or NONE})" if len(placements[r.label]) > 1 else r.label
            for r in rs}


def backend_names(group: list[Row]) -> list[str]:
    """Backend names, qualified by cache mode when a backend appears twice in one comparison."""
    counts: dict[str, int] = {}
    for r in group:
        counts[r.backend] = counts.get(r.backend, 0) + 1
    return [f"{r.backend} (cache {r.cache_mode or NONE})" if counts[r.backend] > 1 else r.backend
            for r in group]


def _status_warning(r: Row, run_status: Any) -> str | None:
    if r.status == "skipped":
        return f"skipped: {r.skip_reason or 'no reason recorded'}"
    if r.status == "interrupted":
        return f"interrupted after {r.n} sample(s)"
    if r.status in ("pending", "running") and run_status not in ("running", None):
        return f"never finished ({r.status} when the run ended {run_status}), {r.n} sample(s)"
    return None


def _verification_failed(cell: dict[str, Any]) -> str | None:
    """A transfer whose data did not arrive intact has meaningless timings: say so loudly."""
    verification = cell.get("verification")
    if not isinstance(verification, dict) or verification.get("ok") is not False:
        return None
    what = verification.get("what") or "check"
    return f"data verification failed ({what}: host {verification.get('host')}, guest {verification.get('guest')})"


def warnings(doc: dict[str, Any]) -> list[str]:
    """Every reason a reader should distrust or miss a figure: spread, failures, skips, interruptions."""
    cells = doc_cells(doc)
    rs = rows(doc)
    names = _group_names(rs)
    out: list[str] = []
    for group in _by_label_placement(rs).values():
        # a tool's wall time (dbench runs for a fixed time) is no figure to rank; nor is one appliance of a density
        # level (its level is judged as a whole in the density table)
        if group[0].workload or group[0].density:
            continue
        summaries = {name: r.summary for name, r in zip(backend_names(group), group) if r.summary is not None}
        out.extend(spread_warnings(names[id(group[0])], summaries))
    out.extend(_caveats(doc, cells, rs, names))
    for cell, r in zip(cells, rs):
        prefix = f"{names[id(r)]}: {r.backend}"
        if r.failures:
            out.append(f"{prefix}: {r.failures} of {r.n + r.failures} samples failed: {r.first_failure}")
        # a density appliance's busy samples are counted in its level's row (the density table's busy column)
        for problem in (_status_warning(r, doc.get("status")), _verification_failed(cell), _precision_warning(r),
                        None if r.density else _load_warning(r)):
            if problem:
                out.append(f"{prefix}: {problem}")
    return out


def _caveats(doc: dict[str, Any], cells: list[dict[str, Any]], rs: list[Any], names: dict[int, str]) -> list[str]:
    """What a measurement says about its own settings (e.g. bonnie++'s ram below the appliance's memory),
    once per measurement label."""
    from guestbench.measurements import MEASUREMENTS  # the registry imports the backends: only when needed

    memsize = _dict(doc.get("scenario")).get("memsize")
    out: dict[str, None] = {}
    for cell, r in zip(cells, rs):
        m = MEASUREMENTS.get(str(cell.get("measurement")))
        params = cell.get("params")
        if m is None or not isinstance(params, dict):
            continue
        try:
            found = m.caveats({**m.defaults(), **params}, memsize if isinstance(memsize, int) else None)
        except (KeyError, TypeError, ValueError):  # a file from another version: no caveat rather than a crash
            continue
        for text in found:
            out.setdefault(f"{names[id(r)]}: {text}", None)
    return list(out)


def scenario_name(doc: dict[str, Any]) -> str:
    return str(_dict(doc.get("scenario")).get("name") or "unnamed scenario")


def host_line(doc: dict[str, Any]) -> str:
    host = _dict(doc.get("host"))
    cpu = host.get("cpu_model") or "unknown CPU"
    virt = _dict(host.get("virtualization")).get("summary") or "virtualization unknown"
    return f"{cpu} · {virt}"


def unusable_backends(doc: dict[str, Any]) -> dict[str, str]:
    """Backends the run could not use, with the reason, so absent rows are explained rather than silent."""
    out: dict[str, str] = {}
    for name, info in _dict(doc.get("backends")).items():
        info = _dict(info)
        if info.get("usable") is False:
            out[str(name)] = str(info.get("reason") or "no reason recorded")
    for name in _dict(_nested_info(doc).get("backends")):  # probed again inside the level-1 guest
        reason = _unusable_reason(doc, "nested", name)
        if reason is not None:
            out[f"{name} (nested)"] = reason
    return out


# ---------------------------------------------------------------------------------------------- formatting


def fmt_seconds(x: float | None) -> str:
    """Three significant figures (11.9, 0.412, 147), whole seconds from 1000 s up, "–" when missing."""
    if x is None or math.isnan(x):
        return NONE
    if abs(x) >= 999.5:
        return f"{x:.0f}"
    text = f"{x:#.3g}"
    if "e" in text:
        return f"{x:.3g}"
    return text.rstrip(".")


def fmt_mb_per_s(x: float | None) -> str:
    return NONE if x is None else f"{x:.1f}"


def fmt_ratio(r: Row) -> str:
    if r.ratio is None:
        return NONE
    if math.isclose(r.ratio, 1.0):
        return "1.00 (fastest)"
    return f"{r.ratio:.2f}×"


def no_data_text(r: Row) -> str:
    """What to show instead of numbers for a cell without samples: its status and why."""
    parts: list[str] = []
    if r.status in ("skipped", "unavailable"):
        parts.append(f"{r.status}: {r.skip_reason or 'no reason recorded'}")
    elif r.status != "done":
        parts.append(r.status)
    if r.first_failure:
        parts.append(f"{r.failures} failed: {r.first_failure}")
    return "; ".join(parts) or "no samples"


def _figures(r: Row) -> list[str]:
    """The numeric columns, median s through × fastest."""
    s = r.summary
    if s is None:
        return [no_data_text(r)] + [NONE] * 7
    return [
        fmt_seconds(s.median),
        f"{fmt_seconds(s.mean)} ± {fmt_seconds(s.stdev)}",
        NONE if not s.has_ci else f"{fmt_seconds(s.ci_low)}–{fmt_seconds(s.ci_high)}",
        f"{fmt_seconds(s.min)}–{fmt_seconds(s.max)}",
        fmt_mb_per_s(r.mb_per_s),
        NONE if r.cpu_s is None else f"{r.cpu_s:.3g}",
        NONE if r.peak_mib is None else f"{r.peak_mib:.0f}",
        fmt_ratio(r),
    ]


def table_cells(r: Row) -> list[str]:
    return [r.backend, r.placement or NONE, r.cache_mode or NONE, str(r.n), str(r.failures), *_figures(r)]


def _timed_text(group: list[Row]) -> str:
    """What the clock covered; listed per backend when the backends of one table timed different things."""
    distinct = list(dict.fromkeys(r.timed for r in group))
    if len(distinct) == 1:
        return f"Timed: {distinct[0] or 'not recorded'}."
    return "Timed: " + "; ".join(f"{r.backend} ({r.placement or NONE}): {r.timed or 'not recorded'}"
                                 for r in group) + "."


def _precision_text(group: list[Row]) -> str:
    """Where each cell's sampling towards its precision target got, and why it stopped."""
    parts = []
    for r in group:
        p = r.precision
        if not p:
            continue
        reached = _number(p.get("reached"))
        got = f"±{reached:.1%}" if reached is not None else "no CI"
        why = {"target": "target reached", "cap": "stopped at the cap without the target",
               "ended": "ended early"}.get(str(p.get("stopped")), "still sampling")
        parts.append(f"{r.backend} ({r.placement or NONE}) {got} at n={r.n} ({why})")
    if not parts:
        return ""
    target = _number(group[0].precision.get("target")) if group[0].precision else None
    goal = f"target ±{target:.1%}, " if target is not None else ""
    return f" Precision ({goal}half-width of the 95% CI / median): {'; '.join(parts)}."


def _resources_text(group: list[Row]) -> str:
    """What the CPU s and peak MiB columns are (nothing when no sample recorded them)."""
    if all(r.cpu_s is None and r.peak_mib is None for r in group):
        return ""
    methods = sorted({m for r in group for m in r.cpu_methods})
    how = {"cgroup": "counted by the kernel in each worker's control group (plus /proc for the cell's processes "
                     "outside it)", "proc": "read from /proc"}
    counted = "; ".join(f"{how.get(m, m)}" for m in methods) or "read from /proc"
    return (" CPU s: median user+system CPU seconds of the cell's processes during the timed step (hypervisor, "
            f"helpers, libguestfs's library), {counted}; peak MiB: median of each step's peak PSS of those "
            "processes without the worker (RSS where PSS is not readable), read from /proc (guestbench.instruments.usage).")


def _load_text(group: list[Row]) -> str:
    """Whether the host was busy while the table's samples were timed (nothing when no sample was judged), and
    whether another guestbench run measured on it meanwhile."""
    return _busy_text(group) + _shared_text(group)


def _shared_text(group: list[Row]) -> str:
    shared = [r for r in group if r.shared]
    if not shared:
        return ""
    which = "; ".join(f"{r.backend} ({r.placement or NONE}) {r.shared} of {r.n}" for r in shared)
    return (f" SHARED host: {sum(r.shared for r in shared)} samples were taken while another guestbench run was "
            f"active on this host: {which}.")


def _busy_text(group: list[Row]) -> str:
    judged = sum(r.judged for r in group)
    if not judged:
        return ""
    busy = [r for r in group if r.busy]
    if not busy:
        return f" Host quiet during all {judged} judged timed steps ({BUSY_RULE})."
    which = "; ".join(f"{r.backend} ({r.placement or NONE}) {r.busy} of {r.judged}, other processes up to "
                      f"{r.busiest:.2g} cores" for r in busy)
    return f" Host BUSY during {sum(r.busy for r in busy)} of {judged} judged timed steps: {which} ({BUSY_RULE})."


def _load_warning(r: Row) -> str | None:
    if r.shared and not r.busy:
        return (f"{r.shared} of {r.n} samples were taken while another guestbench run was active on this host: "
                "its figures may be slowed by that run")
    if not r.busy:
        return None
    return (f"the host was busy during {r.busy} of {r.judged} samples (other processes up to {r.busiest:.2g} "
            "cores): its figures may be slowed by the rest of the machine")


def _precision_warning(r: Row) -> str | None:
    p = r.precision or {}
    reached, target = _number(p.get("reached")), _number(p.get("target"))
    if p.get("stopped") != "cap" or target is None or (reached is not None and reached <= target):
        return None
    got = f"±{reached:.1%}" if reached is not None else "no CI"
    return f"stopped at the cap ({p.get('cap')} samples) at {got}, short of the target ±{target:.1%}"


def _cold_text(group: list[Row]) -> str:
    """The first launch of each backend, reported once and never sampled (appliance cache check included)."""
    colds = [f"{r.backend} ({r.placement or NONE}) {fmt_seconds(r.cold_s)} s" for r in group if r.cold_s is not None]
    return f" Cold first launch, not sampled: {'; '.join(colds)}." if colds else ""


def _method_text() -> str:
    return f"Seconds; {SAMPLES_NOTE}; {CI_METHOD}; outliers by {OUTLIER_METHOD}; MB = 10^6 bytes."


def _order_text(doc: dict[str, Any]) -> str | None:
    """How the run ordered its samples (absent in files written before orders existed)."""
    order = _dict(doc.get("order"))
    mode = order.get("mode")
    if not isinstance(mode, str):
        return None
    parts = f", at most {order['block_cells']} cells at once" if isinstance(order.get("block_cells"), int) else ""
    if mode == "random":
        return f"order random (seed {order.get('seed')}{parts})"
    if mode == "interleaved":
        return f"order interleaved (cells of a measurement take turns{parts})"
    return f"order {mode}"


def run_line(doc: dict[str, Any]) -> str:
    parts = [f"results {doc.get('status') or 'unknown'}",
             f"started {doc.get('started_utc') or NONE}",
             f"finished {doc.get('finished_utc') or 'not finished'}"]
    if order := _order_text(doc):
        parts.append(order)
    if doc.get("_path"):
        parts.append(f"file {doc['_path']}")
    return " · ".join(parts)


# ---------------------------------------------------------------------------------------------- CSV


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


def to_csv(doc: dict[str, Any]) -> str:
    """Header `CSV_HEADER` plus one line per cell; empty fields where a figure does not exist. A fleet run's
    lines end with the host's name, under an added last column `host`."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if not fleet_hosts.is_fleet(doc):
        writer.writerow(CSV_HEADER.split(","))
        for r in rows(doc):
            writer.writerow(csv_row(_csv_record(r)))
        return buf.getvalue()
    writer.writerow([*CSV_HEADER.split(","), "host"])
    for name in fleet_hosts.names(doc):
        for r in rows(fleet_hosts.view(doc, name)):
            writer.writerow(csv_row([*_csv_record(r), name]))
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- JSON


def _json_float(x: float | None) -> float | None:
    """NaN and infinity are not JSON; None is (a figure overflows on a doctored file: 1e308 seconds)."""
    return None if x is None or not math.isfinite(x) else x


def _row_dict(r: Row) -> dict[str, Any]:
    s = r.summary
    figures = {
        "median_s": s.median if s else None, "mean_s": s.mean if s else None,
        "stdev_s": s.stdev if s else None, "ci_low_s": s.ci_low if s else None,
        "ci_high_s": s.ci_high if s else None, "min_s": s.min if s else None,
        "max_s": s.max if s else None, "cv": s.cv if s else None,
    }
    return {
        "backend": r.backend, "placement": r.placement, "measurement": r.measurement, "label": r.label,
        "n": r.n, "failures": r.failures,
        **{k: _json_float(v) for k, v in figures.items()},
        "outliers": s.outliers if s else None,
        "bytes": r.bytes, "mb_per_s": _json_float(r.mb_per_s), "ratio": _json_float(r.ratio),
        "median_cpu_s": _json_float(r.cpu_s), "median_peak_mib": _json_float(r.peak_mib),
        "cold_s": _json_float(r.cold_s), "cache_mode": r.cache_mode, "timed": r.timed,
        "status": r.status, "skip_reason": r.skip_reason, "first_failure": r.first_failure,
        **({"precision": r.precision} if r.precision else {}),
        **({"host_load": {"judged": r.judged, "busy": r.busy, "busiest_other_cores": r.busiest,
                          **({"shared": r.shared} if r.shared else {})}} if r.judged or r.shared else {}),
    }


def _short_host(doc: dict[str, Any]) -> dict[str, Any]:
    return _short_fingerprint(_dict(doc.get("host")))


def _short_fingerprint(host: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint keys a reader of the summary needs, of the host or of the level-1 guest."""
    short: dict[str, Any] = {k: host[k] for k in ("hostname", "cores", "memory_bytes", "os", "kernel", "arch") if k in host}
    versions = _dict(host.get("versions"))
    tools = {k: versions[k] for k in ("libguestfs", "qemu", "libvirt", "uml") if versions.get(k)}
    return {"cpu_model": host.get("cpu_model"),
            "virtualization": _dict(host.get("virtualization")).get("summary"), **short, "versions": tools}


def _phase_dict(bp: phases.BackendPhases) -> dict[str, Any]:
    return {"backend": bp.backend, "placement": bp.placement, "n": bp.n, "cache_mode": bp.cache_mode,
            "median_total_s": bp.median_total, "sum_of_medians_s": bp.sum_of_medians,
            "host_side_share": bp.host_side_share, "max_sum_error": bp.max_sum_error,
            "phases": [{"name": name, "median_s": p.median, "min_s": p.low, "max_s": p.high, "share": p.share,
                        "seen": p.seen} for name, p in bp.phases.items()]}


def _cost_dict(doc: dict[str, Any]) -> dict[str, Any]:
    """{"cost": prices and rows} where samples recorded what they used (guestbench.analysis.cost), else nothing."""
    prices = cost.prices_of(doc)
    cost_rows = cost.rows(doc, prices)
    return {"cost": {"prices": prices.to_dict() if prices else None, "rows": cost.to_dicts(cost_rows)}} \
        if cost_rows else {}


def to_summary_json(doc: dict[str, Any]) -> dict[str, Any]:
    """Recomputed summaries for machines; valid strict JSON (no NaN). A fleet run: each host's summary under
    `hosts` (the host × backend tables are guestbench.fleet_report's)."""
    if fleet_hosts.is_fleet(doc):
        return {"scenario": scenario_name(doc), "status": doc.get("status"), "results_file": doc.get("_path"),
                "host": _short_host(doc),
                "hosts": {n: _host_summary(fleet_hosts.view(doc, n)) for n in fleet_hosts.names(doc)}}
    return {
        "scenario": scenario_name(doc),
        "status": doc.get("status"),
        "results_file": doc.get("_path"),
        **({"order": doc["order"]} if isinstance(doc.get("order"), dict) else {}),
        "host": _short_host(doc),
        "methods": {"ci": CI_METHOD, "outliers": OUTLIER_METHOD, "mb": "10^6 bytes"},
        "rows": [_row_dict(r) for r in rows(doc)],
        **{k: v for k, v in metrics_report.to_dicts(doc).items() if v},  # present for workload runs only
        **_cost_dict(doc),
        **({"density": density_report.to_dicts(doc)} if doc.get("density") else {}),
        "phases": [{"label": pt.title, "backends": [_phase_dict(bp) for bp in pt.summaries]}
                   for pt in phase_tables(doc)],
        "unusable_backends": unusable_backends(doc),
        "warnings": warnings(doc),
        **_placements_json(doc),
    }


def _host_summary(view: dict[str, Any]) -> dict[str, Any]:
    return {**to_summary_json(view), "fleet_host": view["fleet_host"]}


# ---------------------------------------------------------------------------------------------- phases


@dataclass
class PhaseTable:
    """The boot-phase breakdown of one start-up measurement: a row per phase, a column per backend."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str
    summaries: list[phases.BackendPhases]


def phase_tables(doc: dict[str, Any]) -> list[PhaseTable]:
    """One table per measurement label whose cells recorded phases (see guestbench.instruments.markers)."""
    groups: dict[str, list[phases.BackendPhases]] = {}
    for cell in doc_cells(doc):
        bp = phases.cell_phases(cell)
        if bp is not None:
            groups.setdefault(str(cell.get("label") or cell.get("measurement")), []).append(bp)
    return [_phase_table(label, bps) for label, bps in groups.items()]


def _phase_column(bp: phases.BackendPhases) -> str:
    return f"{bp.backend} ({bp.placement})" if bp.placement != "host" else bp.backend


def _phase_table(label: str, bps: list[phases.BackendPhases]) -> PhaseTable:
    header = ["phase", *(f"{_phase_column(bp)}: median s (min–max), share" for bp in bps)]
    rows = []
    for name in phases.phase_order(bps):
        row = [name]
        for bp in bps:
            p = bp.phases.get(name)
            row.append(NONE if p is None else
                       f"{fmt_seconds(p.median)} ({fmt_seconds(p.low)}–{fmt_seconds(p.high)}), {p.share:.0%}")
        rows.append(row)
    rows.append(["sum of phase medians", *(f"{fmt_seconds(bp.sum_of_medians)}" for bp in bps)])
    rows.append(["median start-up (n)", *(f"{fmt_seconds(bp.median_total)} (n={bp.n})" for bp in bps)])
    rows.append(["host side (library, hypervisor, firmware)", *(f"{bp.host_side_share:.0%}" for bp in bps)])
    worst = max(bp.max_sum_error for bp in bps)
    caption = (f"Timed: each start-up sample cut into boot phases at marker lines of libguestfs's event stream "
               f"(appliance console, library log), stamped on arrival on the clock that timed the launch; "
               f"phases of every sample sum to its start-up (largest difference {worst:.2%}). Median per "
               f"phase over n samples, min–max as spread; share = phase median / sum of phase medians. "
               f"Recorded with a verbose appliance console, which itself slows start-up, most on TCG. "
               f"Cache mode of the scratch disk: "
               f"{', '.join(sorted({str(c) for c in _cache_modes(bps)}))}.")
    return PhaseTable(f"{label}: boot phases", header, rows, caption, bps)


def _cache_modes(bps: list[phases.BackendPhases]) -> list[str]:
    return [bp.cache_mode or NONE for bp in bps]


# ---------------------------------------------------------------------------------------------- placements


PLACEMENT_HEADER = ["measurement", "backend", "cache", "host: median s (n, min–max)",
                    "nested: median s (n, min–max)", "nested / host", "95% CI of nested / host"]


@dataclass
class PlacementRow:
    """One backend and measurement sampled both on the host and inside the level-1 guest."""

    label: str
    backend: str
    cache_mode: str | None
    host: Summary
    nested: Summary
    ratio: float  # median nested / median host; nan when the host median is 0
    ci_low: float  # nan when a side has fewer than 2 samples (see stats.ratio_ci)
    ci_high: float


@dataclass
class PlacementGap:
    """A backend and measurement with samples at one placement only, and why the other has none."""

    label: str
    backend: str
    cache_mode: str | None
    present: str
    missing: str
    reason: str
    summary: Summary  # the present side's samples
    unusable: bool  # the backend was not usable at the missing placement (else: it ran there but has no samples)

    @property
    def cells(self) -> list[str]:
        """Its row in the host vs nested table: the present side's figures, the missing side says why in brief."""
        absent = "not usable here (see below)" if self.unusable else "no samples (see below)"
        sides = {self.present: _side_text(self.summary), self.missing: absent}
        return [self.label, self.backend, self.cache_mode or NONE, sides["host"], sides["nested"], NONE, NONE]

    @property
    def text(self) -> str:
        return f"{self.label}: {self.backend}: {self.present} only, no {self.missing} samples: {self.reason}"


@dataclass
class PlacementTable:
    """Host vs nested, the published E1 table's shape: a row per measurement and backend, both placements."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str
    comparisons: list[PlacementRow]
    gaps: list[PlacementGap]


def _nested_info(doc: dict[str, Any]) -> dict[str, Any]:
    """doc["placements"]["nested"], or {} for documents written before nested runs existed."""
    return _dict(_dict(doc.get("placements")).get("nested"))


def has_nested(doc: dict[str, Any]) -> bool:
    """Whether the document says anything about a nested run (cells or a placements.nested record)."""
    return bool(_nested_info(doc)) or any(c.get("placement") == "nested" for c in doc_cells(doc))


def _vcpus_text(value: Any) -> str:
    return f"{_integer_text(value)} vCPU{'' if value == 1 else 's'}"


def _integer_text(value: Any) -> str:
    x = _number(value)
    return NONE if x is None else f"{x:.0f}" if x.is_integer() else f"{x:g}"


def _level1(doc: dict[str, Any]) -> dict[str, Any]:
    return _dict(_nested_info(doc).get("level1"))


def _level1_text(doc: dict[str, Any]) -> str:
    """Where the nested figures were taken, e.g. "level-1 on tcg, 2 vCPUs, 4096 MiB"."""
    level1 = _level1(doc)
    return (f"level-1 on {level1.get('hypervisor') or 'an unrecorded hypervisor'}, "
            f"{_vcpus_text(level1.get('vcpus'))}, {_integer_text(level1.get('memory_mib'))} MiB")


def nested_line(doc: dict[str, Any]) -> str | None:
    """The level-1 guest's own host line, None when the document has no nested run."""
    info = _nested_info(doc)
    if not info:
        return None
    line = f"{host_line({'host': info.get('host')})} · {_level1_text(doc)}"
    status = info.get("status")
    return line if status in (None, "complete") else f"{line} (nested run {status})"


def nested_host(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The level-1 guest's fingerprint ({} when not recorded), None when the document has no nested run."""
    info = _nested_info(doc)
    return _dict(info.get("host")) if info else None


def nested_error(doc: dict[str, Any]) -> str | None:
    """Why the level-1 run failed, as a warning for the header, None when it did not."""
    error = _level1(doc).get("error")
    return f"level-1 run failed: {error}" if error else None


def _unusable_reason(doc: dict[str, Any], placement: str, backend: str) -> str | None:
    backends = _dict(doc.get("backends")) if placement == "host" else _dict(_nested_info(doc).get("backends"))
    info = _dict(backends.get(backend))
    if info.get("usable") is not False:
        return None
    return str(info.get("reason") or "no reason recorded")


def _gap_reason(doc: dict[str, Any], placement: str, backend: str, cell: dict[str, Any] | None) -> str:
    """The missing side's own account (cell status, skip reason, failures), then the backend's probe verdict."""
    parts = [no_data_text(_row(cell)) if cell is not None else "no cell recorded"]
    status = _nested_info(doc).get("status")
    if placement == "nested" and status not in (None, "complete"):
        parts.append(f"nested run {status}")
    unusable = _unusable_reason(doc, placement, backend)
    if unusable is not None and unusable not in parts[0]:
        where = "on the host" if placement == "host" else "in the level-1 guest"
        parts.append(f"{backend} not usable {where}: {unusable}")
    return "; ".join(parts)


def placement_tables(doc: dict[str, Any]) -> list[PlacementTable]:
    """The host vs nested table, when the document has cells at both placements (else none)."""
    cells = doc_cells(doc)
    found = {c.get("placement") for c in cells}
    if not {"host", "nested"} <= found:
        return []
    sides: dict[tuple[str, str, str | None], dict[str, dict[str, Any]]] = {}
    for c in cells:  # (label, backend, cache) in file order; the first cell of each placement counts
        placement = c.get("placement")
        if placement in ("host", "nested"):
            r = _row(c)
            sides.setdefault((r.label, r.backend, r.cache_mode), {}).setdefault(str(placement), c)
    comparisons: list[PlacementRow] = []
    gaps: list[PlacementGap] = []
    timed: dict[str, list[str]] = {}
    for (label, backend, cache_mode), by_placement in sides.items():
        samples = {p: sample_seconds(c) for p, c in by_placement.items()}
        present = [p for p in ("host", "nested") if samples.get(p)]
        if not present:
            continue  # no samples anywhere: the measurement table already says why
        for c in by_placement.values():
            timed.setdefault(label, []).append(str(c.get("timed") or "not recorded"))
        if len(present) == 1:
            missing = "nested" if present == ["host"] else "host"
            gaps.append(PlacementGap(label, backend, cache_mode, present[0], missing,
                                     _gap_reason(doc, missing, backend, by_placement.get(missing)),
                                     summarize(samples[present[0]]),
                                     _unusable_reason(doc, missing, backend) is not None))
            continue
        host_s, nested_s = samples["host"], samples["nested"]
        host, nested = summarize(host_s), summarize(nested_s)
        ratio = nested.median / host.median if host.median else math.nan
        low, high = ratio_ci(host_s, nested_s)
        comparisons.append(PlacementRow(label, backend, cache_mode, host, nested, ratio, low, high))
    rows = [_placement_cells(r) for r in comparisons] + [g.cells for g in gaps]  # one row per backend measured
    return [PlacementTable("host vs nested", list(PLACEMENT_HEADER), rows,
                           _placement_caption(doc, comparisons, timed), comparisons, gaps)]


def _side_text(s: Summary) -> str:
    return f"{fmt_seconds(s.median)} (n={s.n}, {fmt_seconds(s.min)}–{fmt_seconds(s.max)})"


def fmt_placement_ratio(x: float) -> str:
    return NONE if math.isnan(x) else f"{x:.2f}×"


def _placement_cells(r: PlacementRow) -> list[str]:
    ci = NONE if math.isnan(r.ci_low) or math.isnan(r.ci_high) else f"{r.ci_low:.2f}–{r.ci_high:.2f}"
    return [r.label, r.backend, r.cache_mode or NONE, _side_text(r.host), _side_text(r.nested),
            fmt_placement_ratio(r.ratio), ci]


def _placement_caption(doc: dict[str, Any], comparisons: list[PlacementRow], timed: dict[str, list[str]]) -> str:
    """What was timed per measurement, cache modes, n, where the nested figures come from, the CI method."""
    what = "; ".join(f"{label}: {' / '.join(dict.fromkeys(texts))}" for label, texts in timed.items())
    modes = ", ".join(dict.fromkeys(r.cache_mode or NONE for r in comparisons)) or NONE
    level1 = _level1(doc)
    scale = _number(level1.get("timeout_scale"))
    scaled = f", its time-outs scaled ×{scale:g}" if scale is not None else ""
    return (f"Timed: {what or 'not recorded'}. Cache mode of the scratch disk: {modes} (– where none applies). "
            f"Medians in seconds, min–max as spread; {SAMPLES_NOTE}. host: on this run's host; nested: the same "
            f"scenario inside a level-1 guest on {level1.get('hypervisor') or 'an unrecorded hypervisor'} with "
            f"{_vcpus_text(level1.get('vcpus'))} / {_integer_text(level1.get('memory_mib'))} MiB{scaled}. "
            f"nested / host = ratio of medians; its CI: {RATIO_CI_METHOD}; – where a side has fewer than 2 samples.")


def _side_dict(s: Summary) -> dict[str, Any]:
    return {"median_s": s.median, "n": s.n, "min_s": s.min, "max_s": s.max}


def _placement_dict(r: PlacementRow) -> dict[str, Any]:
    side = _side_dict
    return {"label": r.label, "backend": r.backend, "cache_mode": r.cache_mode, "host": side(r.host),
            "nested": side(r.nested), "ratio": _json_float(r.ratio), "ratio_ci_low": _json_float(r.ci_low),
            "ratio_ci_high": _json_float(r.ci_high)}


def _level1_dict(doc: dict[str, Any]) -> dict[str, Any] | None:
    info = _nested_info(doc)
    if not info:
        return None
    level1 = _level1(doc)

    def text(key: str) -> str | None:
        value = level1.get(key)
        return None if value is None else str(value)

    def number(key: str) -> int | float | None:  # ints stay ints; NaN, strings and bools become null
        value = level1.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else _number(value)

    return {"hypervisor": text("hypervisor"),
            **{k: number(k) for k in ("memory_mib", "vcpus", "timeout_scale", "seconds")},
            "image": text("image"), "error": text("error"),
            "status": None if info.get("status") is None else str(info.get("status")),
            "host": _short_fingerprint(_dict(info.get("host")))}


def _placements_json(doc: dict[str, Any]) -> dict[str, Any]:
    """Summary-JSON keys of the host vs nested comparison; none for documents without a nested run."""
    if not has_nested(doc):
        return {}
    tables = placement_tables(doc)
    return {"placements": [_placement_dict(r) for t in tables for r in t.comparisons],
            "placements_missing": [{"label": g.label, "backend": g.backend, "cache_mode": g.cache_mode,
                                    "present": g.present, "missing": g.missing, "reason": g.reason,
                                    "unusable": g.unusable, g.present: _side_dict(g.summary)}
                                   for t in tables for g in t.gaps],
            "placements_method": RATIO_CI_METHOD,
            "level1": _level1_dict(doc)}


def caption(group: list[Row]) -> str:
    """What the clock covered, the methods, and the cold launches of one measurement's table."""
    return (f"{_timed_text(group)} {_method_text()}{_cold_text(group)}{_precision_text(group)}"
            f"{_resources_text(group)}{_load_text(group)}")


def cells_and_rows(doc: dict[str, Any]) -> list[tuple[dict[str, Any], Row]]:
    """Each cell of the document with its Row, for renderers that also need the raw samples."""
    return list(zip(doc_cells(doc), rows(doc)))
