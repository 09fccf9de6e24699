"""JSON: the summary a command prints with --json (one document on stdout; no NaN, no infinity)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING
import math
from typing import Any
from guestbench.output.tables import fleet as fleet_report
from guestbench.output.tables import metrics as metrics_report
import dataclasses
from guestbench.analysis import phases
from guestbench.analysis import cost
from guestbench.analysis.fleet import FleetFindings
from guestbench.analysis.placements import PlacementRow
from guestbench.analysis.findings import Findings, Member, Nested
from guestbench.analysis.history_gate import HistoryFindings
from guestbench.analysis.steps import METHOD as HISTORY_METHOD
from guestbench.analysis.stats import CI_METHOD, OUTLIER_METHOD, RATIO_CI_METHOD, Summary
from guestbench.output.tables.phases import phase_tables
from guestbench.analysis.compare import ALPHA, Comparison, ComparisonRow
from guestbench.output.tables.comparison import fmt_threshold, regression_lines
from guestbench.analysis.stats import PAIRED_METHOD, PERMUTATION_METHOD, TEST_METHOD
from collections.abc import Sequence
from guestbench.analysis.cells import Row
from guestbench.util.units import number

if TYPE_CHECKING:
    from guestbench.output.formats import Printable
    from guestbench.plan.dryrun import DryRun


def json_float(x: float | None) -> float | None:
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
        **{k: json_float(v) for k, v in figures.items()},
        "outliers": s.outliers if s else None,
        "bytes": r.bytes, "mb_per_s": json_float(r.mb_per_s), "ratio": json_float(r.ratio),
        "median_cpu_s": json_float(r.cpu_s), "median_peak_mib": json_float(r.peak_mib),
        "cold_s": json_float(r.cold_s), "cache_mode": r.cache_mode, "timed": r.timed,
        "status": r.status, "skip_reason": r.skip_reason, "first_failure": r.first_failure,
        **({"precision": r.precision.to_dict()} if r.precision else {}),
        **({"host_load": {"judged": r.judged, "busy": r.busy, "busiest_other_cores": r.busiest,
                          **({"shared": r.shared} if r.shared else {})}} if r.judged or r.shared else {}),
    }


def _mapping(value: Any) -> dict[str, Any]:
    """A fingerprint's part, which the results keep as recorded (a raw JSON object, or not one)."""
    return value if isinstance(value, dict) else {}


def _short_fingerprint(host: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint keys a reader of the summary needs, of the host or of the level-1 guest."""
    short: dict[str, Any] = {k: host[k] for k in ("hostname", "cores", "memory_bytes", "os", "kernel", "arch")
                             if k in host}
    versions = _mapping(host.get("versions"))
    tools = {k: versions[k] for k in ("libguestfs", "qemu", "libvirt", "uml") if versions.get(k)}
    return {"cpu_model": host.get("cpu_model"),
            "virtualization": _mapping(host.get("virtualization")).get("summary"), **short, "versions": tools}


def _phase_dict(bp: phases.BackendPhases) -> dict[str, Any]:
    return {"backend": bp.backend, "placement": bp.placement, "n": bp.n, "cache_mode": bp.cache_mode,
            "median_total_s": bp.median_total, "sum_of_medians_s": bp.sum_of_medians,
            "host_side_share": bp.host_side_share, "max_sum_error": bp.max_sum_error,
            "phases": [{"name": name, "median_s": p.median, "min_s": p.low, "max_s": p.high, "share": p.share,
                        "seen": p.seen} for name, p in bp.phases.items()]}


def _cost_dict(s: Findings) -> dict[str, Any]:
    """{"cost": prices and rows} where samples recorded what they used (guestbench.analysis.cost), else nothing."""
    return {"cost": {"prices": s.prices.to_dict() if s.prices else None, "rows": _cost_rows(s.cost)}} if s.cost else {}


def to_summary_json(s: Findings) -> dict[str, Any]:
    """Recomputed summaries for machines; valid strict JSON (no NaN)."""
    return {
        "scenario": s.name,
        "status": s.facts.status,
        "results_file": s.facts.path,
        **({"order": s.facts.order} if s.facts.order is not None else {}),
        "host": _short_fingerprint(s.fingerprint if isinstance(s.fingerprint, dict) else {}),
        "methods": {"ci": CI_METHOD, "outliers": OUTLIER_METHOD, "mb": "10^6 bytes"},
        "rows": [_row_dict(r) for r in s.rows],
        **{k: v for k, v in _metrics(s).items() if v},  # present for workload runs only
        **_cost_dict(s),
        **({"density": [d.to_dict() for d in s.density]} if s.density else {}),
        "phases": [{"label": pt.title, "backends": [_phase_dict(bp) for bp in pt.summaries]}
                   for pt in phase_tables(s.phases)],
        "unusable_backends": s.unusable,
        "warnings": s.warnings,
        **_placements_json(s),
    }


def _side_dict(s: Summary) -> dict[str, Any]:
    return {"median_s": s.median, "n": s.n, "min_s": s.min, "max_s": s.max}


def _placement_dict(r: PlacementRow) -> dict[str, Any]:
    side = _side_dict
    return {"label": r.label, "backend": r.backend, "cache_mode": r.cache_mode, "host": side(r.host),
            "nested": side(r.nested), "ratio": json_float(r.ratio), "ratio_ci_low": json_float(r.ci_low),
            "ratio_ci_high": json_float(r.ci_high)}


def _level1_dict(nested: Nested | None) -> dict[str, Any] | None:
    if nested is None:
        return None
    level1 = nested.record

    def text(key: str) -> str | None:
        value = level1.get(key)
        return None if value is None else str(value)

    def amount(key: str) -> int | float | None:  # ints stay ints; NaN, strings and bools become null
        value = level1.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else number(value)

    return {"hypervisor": text("hypervisor"),
            **{k: amount(k) for k in ("memory_mib", "vcpus", "timeout_scale", "seconds")},
            "image": text("image"), "error": text("error"),
            "status": None if nested.status is None else str(nested.status),
            "host": _short_fingerprint(nested.fingerprint)}


def _placements_json(s: Findings) -> dict[str, Any]:
    """Summary-JSON keys of the host vs nested comparison; none for documents without a nested run."""
    if not s.has_nested:
        return {}
    p = s.placements
    return {"placements": [_placement_dict(r) for r in (p.comparisons if p else [])],
            "placements_missing": [{"label": g.label, "backend": g.backend, "cache_mode": g.cache_mode,
                                    "present": g.present, "missing": g.missing, "reason": g.reason,
                                    "unusable": g.unusable, g.present: _side_dict(g.summary)}
                                   for g in (p.gaps if p else [])],
            "placements_method": RATIO_CI_METHOD,
            "level1": _level1_dict(s.nested)}



def _comparison_row(r: ComparisonRow, fail_above_pct: float | None) -> dict[str, Any]:
    return {
        "backend": r.backend, "placement": r.placement, "measurement": r.measurement,
        "n_base": r.n_base, "n_other": r.n_other,
        "median_base_s": json_float(r.median_base), "median_other_s": json_float(r.median_other),
        "ratio": json_float(r.ratio), "ratio_ci_low": json_float(r.ci_low),
        "ratio_ci_high": json_float(r.ci_high), "p_value": json_float(r.p_value), "test": r.test,
        "p_permutation": json_float(r.p_perm), "figure": r.figure, "unit": r.unit,
        "higher_better": r.higher_better, "change": r.change,
        "verdict": r.verdict, "note": r.note, "differences": list(r.differences),
        "regression": None if fail_above_pct is None else r.is_regression(fail_above_pct),
        "gated": r.gated,
    }


def comparison_summary(comparisons: Sequence[Comparison], fail_above_pct: float | None) -> dict[str, Any]:
    """Everything the table shows, for machines; strict JSON (no NaN)."""
    return {
        "baseline": comparisons[0].base_path if comparisons else None,
        "methods": {"test": TEST_METHOD, "permutation": PERMUTATION_METHOD, "ci": RATIO_CI_METHOD, "alpha": ALPHA,
                    **({"paired": PAIRED_METHOD} if any(r.test == "paired" for c in comparisons for r in c.rows)
                       else {}),
                    "ratio": "median other / median baseline",
                    "noise_percent": comparisons[0].noise_pct if comparisons else None},
        "fail_above_percent": fail_above_pct,
        "regression_rule": fmt_threshold(fail_above_pct),
        "comparisons": [{
            "other": c.other_path, "host_differences": c.host_differences,
            "software_changes": c.software_changes,
            "only_in_baseline": c.only_in_base, "only_in_other": c.only_in_other,
            "rows": [_comparison_row(r, fail_above_pct) for r in c.rows],
        } for c in comparisons],
        "regressions": regression_lines(comparisons, fail_above_pct),
    }



def _cost_rows(rs: list[cost.CostRow]) -> list[dict[str, Any]]:
    def sp(s: cost.Spread | None) -> dict[str, float] | None:
        return None if s is None else {"median": s.median, "min": s.low, "max": s.high}
    return [{"backend": r.backend, "placement": r.placement, "measurement": r.label, "per": r.per, "n": r.n,
             "core_s": sp(r.core_s), "gib_s": sp(r.gib_s), "peak_mib": sp(r.peak_mib), "wall_s": sp(r.wall_s),
             "per_1000": sp(r.per_1000), "per_gb": sp(r.per_gb), "busy_samples": r.busy} for r in rs]



def _metrics(s: Findings) -> dict[str, Any]:
    """The workload tools' figures and the durability verdicts for `--json`: the same tables `show` prints,
    each figure as its median and its sample range (min, max, n) per column."""
    tables = []
    for mt in s.workloads:
        columns = [{"header": c.header, "backend": c.cell.backend if c.cell else None,
                    "label": c.cell.label if c.cell else None, "n": c.n,
                    "status": c.status or None} for c in mt.columns]
        rows = [{"key": r.key, "label": r.label, "unit": r.unit, "higher_better": r.higher_better,
                 "values": metrics_report.values(r), "medians": r.medians,
                 "ranges": [list(sp) if sp else None for sp in r.spans] if r.spans else None}
                for r in mt.rows]
        tables.append({"group": mt.group, "placement": mt.placement, "measurement": mt.measurement,
                       "caption": metrics_report.caption(mt), "notes": metrics_report.notes(mt), "columns": columns,
                       "rows": rows})
    return {"metrics": tables, "durability": [metrics_report.durability_dict(d) for d in s.durability]}


def fleet_tables(fleet: FleetFindings) -> list[dict[str, Any]]:
    out = []
    for t in fleet_report.tables(fleet):
        rows = []
        for c in t.combos:
            s = c.row.summary
            rows.append({"host": c.host, "backend": c.row.backend, "placement": c.row.placement, "n": c.row.n,
                         "failures": c.row.failures, "median_s": s.median if s else None,
                         "ratio": c.row.ratio if s else None,
                         "ratio_ci": list(c.ratio_ci) if c.ratio_ci and not math.isnan(c.ratio_ci[0]) else None})
        out.append({"label": t.label, "rows": rows,
                    "fastest": {"host": t.fastest.host, "backend": t.fastest.row.backend} if t.fastest else None})
    return out


def results_summary(s: Findings | FleetFindings) -> dict[str, Any]:
    """The --json summary of a results file; a fleet run's has each host's summary under `hosts` and the hosts side
    by side under `fleet`."""
    if isinstance(s, Findings):
        return to_summary_json(s)
    return {"scenario": s.name, "status": s.facts.status, "results_file": s.facts.path,
            "host": _short_fingerprint(s.fingerprint if isinstance(s.fingerprint, dict) else {}),
            "hosts": {h.name: {**to_summary_json(h.findings), "fleet_host": _member(h.findings.member)}
                      for h in s.hosts},
            "fleet": {"tables": fleet_tables(s), "warnings": fleet_report.warnings(s)}}



def _member(m: Member | None) -> dict[str, Any]:
    return {} if m is None else {"name": m.name, "status": m.status, "error": m.error, "address": m.address}


def dryrun_summary(dr: DryRun) -> dict[str, Any]:
    """The dry run for `--json`."""
    return {"scenario": dr.scenario.name, "source": dr.scenario.source,
            "backends": {n: dataclasses.asdict(v) for n, v in dr.verdicts.items()},
            "cells": [{**dataclasses.asdict(c), "estimate_s": json_float(c.estimate_s)} for c in dr.cells],
            "estimated_s": json_float(dr.estimated_s), "probe_s": json_float(dr.probe_s),
            "cells_without_estimate": len(dr.unknown), "history": dr.history}


def emit(p: Printable) -> None:
    sys.stdout.write(json.dumps(p.summary(), indent=2, allow_nan=False) + "\n")


def _shift_dict(st: Any) -> dict[str, Any]:
    sh = st.shift
    return {"at_index": st.at, "change": st.change, "newest_only": st.newest, "before": json_float(sh.before),
            "after": json_float(sh.after), "ratio": json_float(sh.ratio),
            "ratio_ci": [json_float(x) for x in sh.ratio_ci],
            "diff": json_float(sh.diff), "diff_ci": [json_float(x) for x in sh.diff_ci]}


def history_summary(f: HistoryFindings) -> dict[str, Any]:
    """`guestbench history --json`: the machines and their runs, every series with its points, steps, drift and
    verdict (a step's `at_index` indexes the series' points), and the regressions; strict JSON."""
    h = f.history
    machines = [{"label": m.label, "key": m.key,
                 "runs": [{"file": r.path, "started_utc": r.started, "host": r.member, "software": r.software}
                          for r in m.runs]} for m in h.machines]
    series = []
    for s in h.series:
        v = s.verdict
        series.append({
            "machine": s.machine, "cell": s.cell, "figure": s.figure, "key": s.key, "unit": s.unit,
            "higher_better": s.higher_better, "floor_percent": json_float(v.floor_pct),
            "noise_percent": None if v.sigma_pct is None else json_float(v.sigma_pct),
            "points": [{"run": p.run, "median": p.median, "ci": [json_float(x) for x in p.ci], "n": len(p.values),
                        "busy_samples": p.busy} for p in s.points],
            "steps": [{**_shift_dict(st), "run": s.points[st.at].run,
                       "software_changes": list(f.changes[s.machine][s.points[st.at].run])} for st in v.steps],
            "drift": {**_shift_dict(v.drift), "run": s.points[v.drift.at].run} if v.drift else None,
            "newest": v.newest, "note": v.note, "baseline": f.pinned(s),
            "older_runs": s.older})
    apart = [{"file": r.path, "started_utc": r.started, "host": r.member} for r in h.apart]
    return {"method": HISTORY_METHOD, "machines": machines, "series": series, "apart": apart, "followed_until": h.until,
            "judged": list(f.verdict.judged), "regressions": list(f.verdict.regressions),
            "baseline_notes": f.baseline.notes if f.baseline else []}
