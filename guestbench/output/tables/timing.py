"""The timing table of one measurement: a row per backend and placement, every figure next to what it timed,
the backend and cache mode, n and its spread, so that no output can be quoted as a bare number; its caption.
"""

from __future__ import annotations
import math
from typing import Any
from guestbench.instruments.load import BUSY_RULE
from guestbench.analysis.stats import CI_METHOD, OUTLIER_METHOD
from guestbench.analysis.cells import Row, cores_text, no_data_text
from guestbench.util.units import number
from guestbench.analysis.placements import Level1
from guestbench.analysis.findings import Nested, RunFacts
from guestbench.util.units import NONE, fmt_seconds


COLUMNS = ("backend", "placement", "cache", "n", "failures", "median s", "mean ± stdev s", "95% CI s",
           "min–max s", "MB/s", "CPU s", "peak MiB", "× fastest")


SAMPLES_NOTE = "n counts measured samples (warm-ups excluded)"


NO_PAIRS = "No backend has samples at both placements."


def fmt_mb_per_s(x: float | None) -> str:
    return NONE if x is None else f"{x:.1f}"


def fmt_ratio(r: Row) -> str:
    if r.ratio is None:
        return NONE
    if math.isclose(r.ratio, 1.0):
        return "1.00 (fastest)"
    return f"{r.ratio:.2f}×"


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
        if p is None:
            continue
        got = f"±{p.reached:.1%}" if p.reached is not None else "no CI"
        why = {"target": "target reached", "cap": "stopped at the cap without the target",
               "ended": "ended early"}.get(str(p.stopped), "still sampling")
        parts.append(f"{r.backend} ({r.placement or NONE}) {got} at n={r.n} ({why})")
    if not parts:
        return ""
    target = group[0].precision.target if group[0].precision else None
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
            "processes without the worker (RSS where PSS is not readable), read from /proc "
            "(guestbench.instruments.usage).")


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
                      f"{cores_text(r.busiest)} cores" for r in busy)
    return f" Host BUSY during {sum(r.busy for r in busy)} of {judged} judged timed steps: {which} ({BUSY_RULE})."


def _cold_text(group: list[Row]) -> str:
    """The first launch of each backend, reported once and never sampled (appliance cache check included)."""
    colds = [f"{r.backend} ({r.placement or NONE}) {fmt_seconds(r.cold_s)} s" for r in group if r.cold_s is not None]
    return f" Cold first launch, not sampled: {'; '.join(colds)}." if colds else ""


def _drives_text(group: list[Row]) -> str:
    """How UML's drives were reached, for cells whose name does not say it (results.model.Cell.drive_paths)."""
    said = [f"{r.backend} ({r.placement or NONE}) {', '.join(r.drive_paths)}" for r in group
            if r.drive_paths and not any(r.backend.partition("@")[0].endswith(f"+{p}") for p in r.drive_paths)]
    return f" UML's drives (ubd: its block driver; vhost-user-blk: qemu-storage-daemon): {'; '.join(said)}." \
        if said else ""


def _method_text() -> str:
    return f"Seconds; {SAMPLES_NOTE}; {CI_METHOD}; outliers by {OUTLIER_METHOD}; MB = 10^6 bytes."


def _order_text(order: dict[str, Any] | None) -> str | None:
    """How the run ordered its samples (absent in files written before orders existed)."""
    mode = order.get("mode") if order is not None else None
    if order is None or not isinstance(mode, str):
        return None
    parts = f", at most {order['block_cells']} cells at once" if isinstance(order.get("block_cells"), int) else ""
    if mode == "random":
        return f"order random (seed {order.get('seed')}{parts})"
    if mode == "interleaved":
        return f"order interleaved (cells of a measurement take turns{parts})"
    return f"order {mode}"


def run_line(facts: RunFacts) -> str:
    parts = [f"results {facts.status or 'unknown'}",
             f"started {facts.started_utc or NONE}",
             f"finished {facts.finished_utc or 'not finished'}"]
    if order := _order_text(facts.order):
        parts.append(order)
    if facts.path:
        parts.append(f"file {facts.path}")
    return " · ".join(parts)


def vcpus_text(value: Any) -> str:
    return f"{integer_text(value)} vCPU{'' if value == 1 else 's'}"


def integer_text(value: Any) -> str:
    x = number(value)
    return NONE if x is None else f"{x:.0f}" if x.is_integer() else f"{x:g}"


def level1_text(level1: Level1) -> str:
    """Where the nested figures were taken, e.g. "level-1 on tcg, 2 vCPUs, 4096 MiB"."""
    return (f"level-1 on {level1.hypervisor or 'an unrecorded hypervisor'}, "
            f"{vcpus_text(level1.vcpus)}, {integer_text(level1.memory_mib)} MiB")


def nested_line(nested: Nested | None) -> str | None:
    """The level-1 guest's own host line, None when the results have no nested run."""
    if nested is None:
        return None
    line = f"{nested.host_line} · {level1_text(nested.level1)}"
    return line if nested.status in (None, "complete") else f"{line} (nested run {nested.status})"


def nested_error(nested: Nested | None) -> str | None:
    """Why the level-1 run failed, as a warning for the header, None when it did not."""
    error = nested.record.get("error") if nested is not None else None
    return f"level-1 run failed: {error}" if error else None


def caption(group: list[Row]) -> str:
    """What the clock covered, the methods, and the cold launches of one measurement's table."""
    return (f"{_timed_text(group)} {_method_text()}{_cold_text(group)}{_drives_text(group)}{_precision_text(group)}"
            f"{_resources_text(group)}{_load_text(group)}")
