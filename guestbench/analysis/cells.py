"""The figures of a results document's cells, recomputed from the raw samples: per cell its summary (median,
CI, spread), throughput, ratio to the fastest, host load and resources; the warnings a reader must see; the
backends not usable. Results files may be partial (interrupted or still running): every key is read defensively.
"""

from __future__ import annotations
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from guestbench.util import units
from guestbench.results import figures as cell_figures
from guestbench.results.figures import number
from guestbench.util.units import NONE
from guestbench.analysis.stats import Summary, spread_warnings, summarize




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
    workload: bool = False  # a tool's figures: shown in guestbench.output.tables.metrics's tables instead
    precision: dict[str, Any] | None = None  # sampled towards a precision target (results.Precision)
    judged: int = 0  # samples whose host load was judged (guestbench.instruments.load)
    busy: int = 0  # ... of which the host was busy
    busiest: float | None = None  # the most cores other processes used during one of its samples
    shared: int = 0  # samples taken while another guestbench run was active on this host (guestbench.host.neighbours)
    cpu_s: float | None = None  # median CPU s of the cell's processes per timed step (guestbench.instruments.usage)
    peak_mib: float | None = None  # median of each step's peak PSS (RSS where no PSS was readable)
    cpu_methods: tuple[str, ...] = ()  # how the samples' CPU was counted: "cgroup", "proc" (instruments/usage.py)
    density: bool = False  # an appliance of a density level: its figures are in the density tables
    seconds: list[float] = field(default_factory=list)  # its samples' seconds, in file order


def mapping(value: Any) -> dict[str, Any]:
    """Partial files may hold null where a mapping belongs; treat that as empty."""
    return value if isinstance(value, dict) else {}


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def sample_seconds(cell: dict[str, Any]) -> list[float]:
    out = []
    for sample in listed(cell.get("samples")):
        value = number(mapping(sample).get("seconds"))
        if value is not None:
            out.append(value)
    return out


def load_figures(cell: dict[str, Any]) -> dict[str, Any]:
    """How many samples were judged for host load, how many were busy, the busiest one's other cores, and how many
    were taken beside another guestbench run."""
    loads = [mapping(mapping(s).get("load")) for s in listed(cell.get("samples"))]
    judged = [ld for ld in loads if isinstance(ld.get("busy"), bool)]
    others = [v for v in (number(ld.get("other_cores")) for ld in judged) if v is not None]
    return {"judged": len(judged), "busy": sum(1 for ld in judged if ld["busy"]),
            "busiest": max(others) if others else None,
            "shared": sum(1 for ld in loads if (number(ld.get("other_runs")) or 0) > 0)}


def _resource_figures(cell: dict[str, Any]) -> dict[str, Any]:
    """The median CPU seconds and the median peak memory (PSS, else RSS) of the cell's samples that have them."""
    used = {f.key: statistics.median(f.values) for f in cell_figures.resources(cell)}
    return {"cpu_s": used.get("cpu_s"), "peak_mib": used.get("peak_mib"),
            "cpu_methods": cell_figures.cpu_methods(cell)}


def _first_failure(cell: dict[str, Any]) -> str | None:
    failures = listed(cell.get("failures"))
    if not failures:
        return None
    reason = mapping(failures[0]).get("reason")
    return str(reason) if reason else "no reason recorded"


def doc_cells(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in listed(doc.get("cells")) if isinstance(c, dict)]


def row(cell: dict[str, Any]) -> Row:
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
        failures=len(listed(cell.get("failures"))),
        summary=summary,
        mb_per_s=throughput,
        ratio=None,
        cold_s=number(cell.get("cold_s")),
        status=str(cell.get("status") or "unknown"),
        skip_reason=cell.get("skip_reason") or None,
        first_failure=_first_failure(cell),
        workload=bool(cell.get("metrics")),
        density=cell_figures.is_density(cell),
        precision=cell.get("precision") if isinstance(cell.get("precision"), dict) else None,
        **load_figures(cell),
        **_resource_figures(cell),
        seconds=seconds,
    )


def rows(doc: dict[str, Any]) -> list[Row]:
    """One Row per cell, in file order, with ratios to the fastest median of the same label and placement."""
    result = [row(cell) for cell in doc_cells(doc)]
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


def warnings(doc: dict[str, Any], rs: list[Row]) -> list[str]:
    """Every reason a reader should distrust or miss a figure: spread, failures, skips, interruptions (`rs`: the
    document's rows)."""
    cells = doc_cells(doc)
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

    memsize = mapping(doc.get("scenario")).get("memsize")
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
    return str(mapping(doc.get("scenario")).get("name") or "unnamed scenario")


def host_line(doc: dict[str, Any]) -> str:
    host = mapping(doc.get("host"))
    cpu = host.get("cpu_model") or "unknown CPU"
    virt = mapping(host.get("virtualization")).get("summary") or "virtualization unknown"
    return f"{cpu} · {virt}"


def unusable_backends(doc: dict[str, Any]) -> dict[str, str]:
    """Backends the run could not use, with the reason, so absent rows are explained rather than silent."""
    out: dict[str, str] = {}
    for name, info in mapping(doc.get("backends")).items():
        info = mapping(info)
        if info.get("usable") is False:
            out[str(name)] = str(info.get("reason") or "no reason recorded")
    for name in mapping(nested_info(doc).get("backends")):  # probed again inside the level-1 guest
        reason = unusable_reason(doc, "nested", name)
        if reason is not None:
            out[f"{name} (nested)"] = reason
    return out


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
    reached, target = number(p.get("reached")), number(p.get("target"))
    if p.get("stopped") != "cap" or target is None or (reached is not None and reached <= target):
        return None
    got = f"±{reached:.1%}" if reached is not None else "no CI"
    return f"stopped at the cap ({p.get('cap')} samples) at {got}, short of the target ±{target:.1%}"


def nested_info(doc: dict[str, Any]) -> dict[str, Any]:
    """doc["placements"]["nested"], or {} for documents written before nested runs existed."""
    return mapping(mapping(doc.get("placements")).get("nested"))


def has_nested(doc: dict[str, Any]) -> bool:
    """Whether the document says anything about a nested run (cells or a placements.nested record)."""
    return bool(nested_info(doc)) or any(c.get("placement") == "nested" for c in doc_cells(doc))


def level1_of(doc: dict[str, Any]) -> dict[str, Any]:
    return mapping(nested_info(doc).get("level1"))


def unusable_reason(doc: dict[str, Any], placement: str, backend: str) -> str | None:
    backends = mapping(doc.get("backends")) if placement == "host" else mapping(nested_info(doc).get("backends"))
    info = mapping(backends.get(backend))
    if info.get("usable") is not False:
        return None
    return str(info.get("reason") or "no reason recorded")


def cells_and_rows(doc: dict[str, Any]) -> list[tuple[dict[str, Any], Row]]:
    """Each cell of the document with its Row, for renderers that also need the raw samples."""
    return list(zip(doc_cells(doc), rows(doc)))
