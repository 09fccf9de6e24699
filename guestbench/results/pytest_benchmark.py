"""Convert between guestbench results files and pytest-benchmark's JSON, so that one history serves both tools.

Export (results → pytest-benchmark): one benchmark per cell with samples; raw samples in ``stats.data`` and
every summary field pytest-benchmark reads, computed here the way pytest-benchmark defines them (its
quartiles: method 3 of Wikipedia's "Quartile" for odd counts, halves for even ones), so that
``pytest-benchmark compare`` and ``pytest --benchmark-compare`` can read the file. Names follow the pytest
plugin's tests (``test_upload_no_write[uml]``, group = the measurement's label), so
``pytest-benchmark compare --between`` lines a scenario run up with a pytest run. Nothing is lost: each
cell (minus its samples' seconds) is the benchmark's ``extra_info``; what pytest-benchmark has no place for
(scenario, command, backends, cells without samples) goes to a top-level ``guestbench`` section.

Import (pytest-benchmark → results): reads the same places back. Files written by the pytest plugin carry
the ``guestbench`` section and extra_info too; for other pytest-benchmark files the host is mapped from
``machine_info`` (memory and virtualization are then unknown, so ``guestbench compare`` treats the machine
as different), and benchmarks saved without raw samples (no ``--benchmark-save-data``) become skipped
cells saying so.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from datetime import datetime, UTC
from typing import Any

from guestbench.util.errors import UserError, clip
from guestbench.results import SCHEMA, SCHEMA_VERSION, ModelError, Run, read_json

SECTION = "guestbench"  # top-level key in pytest-benchmark JSON
CELL_DEFAULTS: dict[str, Any] = {"placement": "host", "params": {}, "timed": None, "cache_mode": None, "bytes": None,
                                 "warmups": [], "failures": [], "verification": None, "cold_s": None,
                                 "status": "done", "skip_reason": None}
NO_DATA = ("pytest-benchmark saved no raw samples for this benchmark (stats.data), only its summary; save runs "
           "with --benchmark-save-data (or --benchmark-json) to keep them")


# ---------------------------------------------------------------------------------------------- statistics


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def quartiles(data: list[float]) -> tuple[float, float]:
    """(q1, q3) as pytest-benchmark defines them: one value → itself; an even count → the medians of the lower
    and upper halves; an odd count → the mean of the two ways of halving (with and without the median)."""
    xs = sorted(data)
    n = len(xs)
    if n == 1:
        return xs[0], xs[0]
    half = n // 2
    if n % 2 == 0:
        return _median(xs[:half]), _median(xs[half:])
    without = (_median(xs[:half]), _median(xs[half + 1:]))
    with_median = (_median(xs[:half + 1]), _median(xs[half:]))
    return (without[0] + with_median[0]) / 2, (without[1] + with_median[1]) / 2


def stats_fields(data: list[float]) -> dict[str, Any]:
    """Every field of pytest-benchmark's ``stats`` for samples of one call each (iterations 1), data included.
    ValueError when one of them is past the largest float: finite seconds near it (a results file may hold
    1.7e308) add up to infinity, and 5e-324 s makes ops infinite, which JSON cannot hold."""
    if not data:
        raise ValueError("no samples")
    n = len(data)
    q1, q3 = quartiles(data)
    try:
        total = math.fsum(data)
    except OverflowError:
        total = math.inf
    sums = {"mean": statistics.mean(data), "stddev": statistics.stdev(data) if n > 1 else 0, "q1": q1, "q3": q3,
            "iqr": q3 - q1, "total": total, "ops": n / total if total else 0}
    past = [k for k, v in sums.items() if not math.isfinite(v)]
    if past:
        raise ValueError(f"samples of {min(data):.3g} to {max(data):.3g} s make pytest-benchmark's {', '.join(past)} "
                         "past the largest float; allowed: seconds whose sums and rates a float holds")
    mean, stddev, iqr = sums["mean"], sums["stddev"], sums["iqr"]
    low_fence, high_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    iqr_outliers = sum(1 for x in data if x < low_fence or x > high_fence)
    stddev_outliers = sum(1 for x in data if x < mean - stddev or x > mean + stddev)
    return {
        "min": min(data), "max": max(data), "mean": mean, "stddev": stddev, "rounds": n,
        "median": _median(list(data)), "iqr": iqr, "q1": q1, "q3": q3,
        "iqr_outliers": iqr_outliers, "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}",
        "ld15iqr": data[0] if n == 1 else min(x for x in data if x >= low_fence),
        "hd15iqr": data[0] if n == 1 else max(x for x in data if x <= high_fence),
        "ops": sums["ops"], "total": total, "data": list(data), "iterations": 1,
    }


# ---------------------------------------------------------------------------------------------- export


def bench_name(label: str) -> str:
    """The pytest plugin's test function name for a measurement label: upload-no-write → test_upload_no_write."""
    return "test_" + re.sub(r"[^A-Za-z0-9_]", "_", label)


def _utc_to_iso(utc: Any) -> str | None:
    if not isinstance(utc, str):
        return None
    try:
        return datetime.strptime(utc, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).isoformat()
    except ValueError:
        return utc


def _machine_info(host: dict[str, Any]) -> dict[str, Any]:
    """pytest-benchmark's machine_info keys that guestbench's fingerprint can fill."""
    versions = _mapping(host.get("versions"))
    return {"node": host.get("hostname"), "machine": host.get("arch"), "release": host.get("kernel"),
            "system": "Linux", "python_version": versions.get("python"), "python_implementation": "CPython",
            "cpu": {"brand_raw": host.get("cpu_model"), "count": host.get("cores")}}


def _commit_info(gb: Any) -> dict[str, Any]:
    commit = gb.get("git_commit") if isinstance(gb, dict) else None
    dirty = isinstance(commit, str) and commit.endswith("+dirty")
    return {"id": commit.removesuffix("+dirty") if isinstance(commit, str) else "unversioned", "dirty": dirty,
            "project": "guestbench", "branch": None, "time": None, "author_time": None}


def export(run: Run, source: str | None = None) -> dict[str, Any]:
    """A guestbench results document (read from `source`) as pytest-benchmark JSON (see the module docstring)."""
    scenario = run.scenario or {}
    prefix = f"guestbench:{scenario.get('source') or scenario.get('name') or 'results'}"
    benchmarks, without = [], []
    for index, cell in enumerate(run.cells):
        written = cell.to_dict()
        if not cell.samples:
            without.append(written)
            continue
        extra = {k: v for k, v in written.items() if k not in ("samples", "pytest_benchmark")}
        extra["sample_meta"] = [{k: v for k, v in s.items() if k != "seconds"} for s in written["samples"]]
        label = cell.label or cell.measurement or "?"
        backend = cell.system if cell.backend else "?"
        origin = _mapping(cell.extra.get("pytest_benchmark"))
        placement = cell.placement or "host"
        param = backend if placement == "host" else f"{backend}-{placement}"  # host and nested: distinct names
        name = f"{bench_name(label)}[{param}]"
        try:
            stats = stats_fields([float(s.seconds) for s in cell.samples])
        except ValueError as e:
            raise UserError(str(e), source=source, key=f"cells[{index}].samples") from None
        benchmarks.append({
            "group": origin.get("group", label), "name": origin.get("name", name),
            "fullname": origin.get("fullname", f"{prefix}::{name}"),
            "params": origin.get("params", {"guestbench_backend": backend}), "param": origin.get("param", param),
            "extra_info": extra,
            "options": origin.get("options", {"timer": "perf_counter", "warmup": bool(cell.warmups)}),
            "stats": stats,
        })
    section = {k: v for k, v in run.to_dict().items() if k != "cells"}
    section["cells_without_samples"] = without
    return {"machine_info": _machine_info(run.host or {}), "commit_info": _commit_info(run.guestbench),
            "benchmarks": benchmarks, "datetime": _utc_to_iso(run.started_utc), "version": _format_version(),
            SECTION: section}


def _format_version() -> str:
    """pytest-benchmark's version, which the JSON's "version" names; guestbench itself does not need it."""
    try:
        from importlib.metadata import version

        return version("pytest-benchmark")
    except Exception:
        return "unknown"


def _mapping(value: Any) -> dict[str, Any]:
    """Files from elsewhere may hold anything where a mapping belongs; treat that as empty."""
    return value if isinstance(value, dict) else {}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ---------------------------------------------------------------------------------------------- import


def _iso_to_utc(text: Any) -> str | None:
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _host_from_machine_info(mi: dict[str, Any]) -> dict[str, Any]:
    """What pytest-benchmark's machine_info says about the host; the rest of guestbench's fingerprint is None."""
    cpu = _mapping(mi.get("cpu"))
    return {"hostname": mi.get("node"), "cpu_model": cpu.get("brand_raw"), "cores": cpu.get("count"),
            "memory_bytes": None, "kernel": mi.get("release"), "os": mi.get("system"), "arch": mi.get("machine"),
            "virtualization": {"summary": "unknown (pytest-benchmark's machine_info does not record it)"},
            "versions": {"python": mi.get("python_version"), "kernel": mi.get("release")},
            "source": "pytest-benchmark machine_info"}


def _cell(bench: dict[str, Any], index: int) -> tuple[dict[str, Any], str | None]:
    """One results cell from one benchmark, and a warning when it has no raw samples."""
    where = f"benchmarks[{index}]"
    extra = _mapping(bench.get("extra_info"))
    stats = bench.get("stats")
    if not isinstance(stats, dict):
        raise UserError("key 'stats' is missing or not a mapping", key=where)
    name = str(bench.get("name") or f"benchmark {index}")
    measurement = extra.get("measurement") or name.split("[")[0]
    cell: dict[str, Any] = {"backend": extra.get("backend") or bench.get("param") or "-",
                            "measurement": measurement,
                            "label": extra.get("label") or bench.get("group") or measurement}
    meta = extra.get("sample_meta")
    cell.update({k: v for k, v in extra.items() if k != "sample_meta"})
    for key, default in CELL_DEFAULTS.items():
        cell.setdefault(key, json.loads(json.dumps(default)))
    if cell["timed"] is None:
        cell["timed"] = f"what pytest-benchmark timed in {bench.get('fullname') or name}"
    data = stats.get("data")
    iterations = stats.get("iterations", 1)
    warning = None
    if isinstance(data, list) and data and all(_is_number(x) for x in data):
        metas = (meta if isinstance(meta, list) and len(meta) == len(data)
                 else [{"rep": i + 1} for i in range(len(data))])
        cell["samples"] = [{**(m if isinstance(m, dict) else {}), "seconds": float(x)} for m, x in zip(metas, data)]
        if isinstance(iterations, int) and iterations > 1 and isinstance(cell["timed"], str):  # else refused below
            cell["timed"] += f" (each sample: the mean of {iterations} iterations)"
    elif data is None or data == []:
        cell["samples"] = []
        cell["status"] = "skipped"
        median = stats.get("median")
        shown = f"; its median was {median:.6g} s over {stats.get('rounds')} rounds" if _is_number(median) else ""
        cell["skip_reason"] = NO_DATA + shown
        warning = f"{cell['backend']}/{cell['label']}: {NO_DATA}"
    else:
        raise UserError("stats.data must be a list of numbers (seconds)", key=where)
    cell["pytest_benchmark"] = {k: bench[k] for k in ("name", "fullname", "group", "param", "params", "options")
                                if k in bench}
    return cell, warning


def _commit(ci: dict[str, Any], source: str) -> str | None:
    """guestbench's git_commit for pytest-benchmark's commit_info: its id (a commit hash), "+dirty" when dirty."""
    commit = ci.get("id")
    if commit in (None, "unversioned"):
        return None
    if not isinstance(commit, str):
        raise UserError(f"{clip(commit)} is not a string; allowed: a commit id (text), \"unversioned\" or null",
                        source=source, key="commit_info.id")
    return commit + "+dirty" if commit and ci.get("dirty") else commit


def import_(bench_doc: Any, source: str) -> tuple[dict[str, Any], list[str]]:
    """A guestbench results document from pytest-benchmark JSON, and warnings (benchmarks without samples)."""
    if not isinstance(bench_doc, dict) or not isinstance(bench_doc.get("benchmarks"), list):
        raise UserError("not a pytest-benchmark JSON file (key 'benchmarks' must be a list)", source=source)
    section = _mapping(bench_doc.get(SECTION))
    mi = _mapping(bench_doc.get("machine_info"))
    commit = _commit(_mapping(bench_doc.get("commit_info")), source)
    when = _iso_to_utc(bench_doc.get("datetime"))
    doc: dict[str, Any] = {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "guestbench": {"version": None, "git_commit": commit},
        "status": "complete", "started_utc": when, "finished_utc": when,
        "command": ["guestbench", "import", source],
        "scenario": {"name": "pytest-benchmark", "source": source},
        "host": _host_from_machine_info(mi), "backends": {},
    }
    doc.update({k: v for k, v in section.items() if k not in ("cells", "cells_without_samples", "schema",
                                                              "schema_version")})
    doc["imported_from"] = {"format": "pytest-benchmark", "version": bench_doc.get("version"), "file": source}
    if not isinstance(doc.get("backends"), dict):
        doc["backends"] = {}
    cells, warnings = [], []
    for i, bench in enumerate(bench_doc["benchmarks"]):
        if not isinstance(bench, dict):
            raise UserError("not a mapping", source=source, key=f"benchmarks[{i}]")
        try:
            cell, warning = _cell(bench, i)
        except UserError as e:
            raise UserError(str(e), source=source) from None
        cells.append(cell)
        if warning:
            warnings.append(warning)
    if cells and all(not c["samples"] for c in cells):
        raise UserError(f"no benchmark has raw samples: {NO_DATA}", source=source)
    without = section.get("cells_without_samples")
    cells += [c for c in without if isinstance(c, dict)] if isinstance(without, list) else []
    for c in cells:  # a backend with samples was usable, whatever else the file says
        doc["backends"].setdefault(str(c.get("backend")), {"usable": True, "reason": "measured (pytest-benchmark)",
                                                            "details": {}})
    doc["cells"] = cells
    try:  # extra_info is copied into the cells as is: what guestbench could not read back is refused here
        Run.from_dict(doc)
    except ModelError as e:
        raise UserError(f"{e.message} (a benchmark's extra_info or the file's guestbench section sets it; "
                        "guestbench show would refuse the imported file)", source=source, key=e.key) from None
    return doc, warnings


def load_pytest_benchmark(path: str) -> dict[str, Any]:
    """Read a pytest-benchmark JSON file; any problem is a one-line UserError."""
    # a params or extra_info of Infinity (pytest-benchmark writes them with Python's json) is kept as text; one where
    # guestbench reads a figure is refused by the model, in one line
    doc = read_json(path, "pytest-benchmark file", "pytest-benchmark JSON", nonfinite=[])
    return doc
