"""fio: one job as a shell command line, and its JSON output as metrics.

Bandwidth is reported in MB/s (10^6 bytes/s, from fio's ``bw_bytes``), latencies in ms from fio's
completion-latency percentiles (``clat_ns``, nanoseconds in fio 3.x).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

from guestbench.workloads import Metric

RW_MODES = ("read", "write", "randread", "randwrite", "rw", "randrw")
_READS = frozenset({"read", "randread", "rw", "randrw"})
_WRITES = frozenset({"write", "randwrite", "rw", "randrw"})
_MIXED = frozenset({"rw", "randrw"})
# Asked for explicitly, so the percentile keys in the JSON do not depend on fio's default list.
PERCENTILES = (50, 95, 99)
DIRECTIONS = ("read", "write")


@dataclass(frozen=True)
class FioJob:
    """One fio job. Sizes are bytes; `size` is per job (numjobs jobs each do `size`).

    ioengine "libaio" is the default because it is the engine whose iodepth means something; with
    direct=0 Linux completes libaio submissions synchronously (the queue depth is then effectively 1),
    which fio still runs correctly (checked inside the qemu workload appliance with direct=0 and 1).
    "psync" is the fallback should an appliance's fio lack libaio.
    """

    rw: str
    bs: int
    size: int
    direct: bool = False
    iodepth: int = 1
    ioengine: str = "libaio"
    numjobs: int = 1
    rwmixread: int = 50
    runtime_s: int | None = None  # set: time-based run of this many seconds (size then bounds the file)
    name: str = "guestbench"

    def __post_init__(self) -> None:
        if self.rw not in RW_MODES:
            raise ValueError(f"fio rw {self.rw!r} is not allowed; allowed: {', '.join(RW_MODES)}")
        for field_name in ("bs", "size", "iodepth", "numjobs"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"fio {field_name} must be a whole number >= 1, not {value!r}")
        if self.bs > self.size:
            raise ValueError(f"fio bs ({self.bs} bytes) is larger than size ({self.size} bytes)")
        if not 0 <= self.rwmixread <= 100:
            raise ValueError(f"fio rwmixread must be 0..100 (percent of reads), not {self.rwmixread!r}")
        if self.runtime_s is not None and self.runtime_s < 1:
            raise ValueError(f"fio runtime_s must be >= 1 second or None, not {self.runtime_s!r}")
        if not self.ioengine or not self.ioengine.replace("_", "").isalnum():
            raise ValueError(f"bad fio ioengine {self.ioengine!r}")
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValueError(f"fio job name {self.name!r} must be letters, digits, '-', '_' or '.'")

    @property
    def reads(self) -> bool:
        return self.rw in _READS

    @property
    def writes(self) -> bool:
        return self.rw in _WRITES


def command(job: FioJob, directory: str) -> str:
    """The shell command line running `job` on files in `directory` (which must exist), JSON on stdout."""
    args = [
        "fio",
        f"--directory={directory}",
        f"--rw={job.rw}",
        f"--bs={job.bs}",
        f"--size={job.size}",
        f"--direct={int(job.direct)}",
        f"--ioengine={job.ioengine}",
        f"--iodepth={job.iodepth}",
        # Drop the file's pages from the page cache before the job, so a buffered read job reads the
        # disk rather than what fio's own lay-out just wrote (fio's default, stated so it can't drift).
        "--invalidate=1",
        "--group_reporting",  # one result for all the jobs
        "--percentile_list=" + ":".join(str(p) for p in PERCENTILES),
        "--output-format=json",
    ]
    if job.rw in _MIXED:
        args.append(f"--rwmixread={job.rwmixread}")
    if job.writes:
        # Without it, buffered (direct=0) writes end in the page cache and fio reports memory speed.
        # end_fsync=1 fsyncs the file at the end of the job *inside* the job's run time, so the
        # bandwidth counts the data reaching the disk. With direct=1 it also flushes the disk's cache.
        args.append("--end_fsync=1")
    if job.runtime_s is not None:
        args += ["--time_based=1", f"--runtime={job.runtime_s}s"]
    # The options above are global (before the first --name). Each job names its file explicitly:
    # without --filename, fio uses the job name itself as the file when a directory or device of that
    # name exists in the current directory (e.g. "guestbench" in a checkout of this project).
    for n in range(job.numjobs):
        args += [f"--name={job.name}-{n}", f"--filename=guestbench-fio.{n}"]
    return " ".join(shlex.quote(a) for a in args)


def metrics(job: FioJob) -> tuple[Metric, ...]:
    """What `parse` returns for `job`: per direction that does I/O, then the run time."""
    out: list[Metric] = []
    for direction in DIRECTIONS:
        if (direction == "read" and not job.reads) or (direction == "write" and not job.writes):
            continue
        out.append(Metric(f"{direction}_bw", "MB/s", True, f"fio {direction} bandwidth (MB = 10^6 bytes)"))
        out.append(Metric(f"{direction}_iops", "IOPS", True, f"fio {direction} I/O operations per second"))
        for p in PERCENTILES:
            out.append(Metric(f"{direction}_lat_p{p}", "ms", False,
                              f"fio {direction} completion latency, {p}th percentile"))
    out.append(Metric("runtime_s", "s", False, "fio job run time (incl. the final fsync of write jobs)"))
    return tuple(out)


def _json_object(text: str) -> dict[str, Any]:
    """The JSON object in fio's output: fio may print warnings ("fio: ...") on stdout before it."""
    decoder = json.JSONDecoder()
    for start in re.finditer(r"^\{", text, re.MULTILINE):  # fio starts its JSON on a line of its own
        try:
            obj, _ = decoder.raw_decode(text, start.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "jobs" in obj:
            return obj
    raise ValueError(f"fio printed no JSON output (did fio start?): {_excerpt(text)}")


def _excerpt(text: str, limit: int = 600) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _warnings(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.startswith("fio:")]
    return ("; fio said: " + " | ".join(lines[:5])) if lines else ""


def parse(text: str) -> dict[str, float]:
    """Metrics of one `command` run: {read,write}_{bw,iops,lat_p50,lat_p95,lat_p99} for the directions
    that did I/O, and runtime_s. Raise ValueError when fio failed or the output is not fio's JSON."""
    data = _json_object(text)
    jobs = data.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise ValueError(f"fio JSON has no jobs: {_excerpt(text)}")
    if len(jobs) != 1:
        raise ValueError(f"fio JSON has {len(jobs)} job results; expected 1 (run with --group_reporting)")
    job = jobs[0]
    err = job.get("error", 0)
    if err:
        raise ValueError(f"fio job {job.get('jobname')!r} failed with error {err} "
                         f"({os.strerror(err) if isinstance(err, int) else err}){_warnings(text)}")
    out: dict[str, float] = {}
    for direction in DIRECTIONS:
        d = job.get(direction)
        if not isinstance(d, dict) or not d.get("io_bytes"):
            continue  # this direction did no I/O (e.g. the write side of a read job)
        if not d.get("runtime"):
            raise ValueError(f"fio {direction}: {d['io_bytes']} bytes in 0 ms; the job is too small to measure")
        out[f"{direction}_bw"] = d["bw_bytes"] / 1e6
        out[f"{direction}_iops"] = float(d["iops"])
        out.update(_percentiles(direction, d))
    if not out:
        raise ValueError(f"fio job {job.get('jobname')!r} did no I/O{_warnings(text)}")
    out["runtime_s"] = job["job_runtime"] / 1000.0
    return out


def _percentiles(direction: str, d: dict[str, Any]) -> dict[str, float]:
    """Completion-latency percentiles in ms; fio 3.x gives ns (clat_ns), older fio gave µs (clat)."""
    if isinstance(d.get("clat_ns"), dict):
        clat, to_ms = d["clat_ns"], 1e-6
    elif isinstance(d.get("clat"), dict):
        clat, to_ms = d["clat"], 1e-3
    else:
        raise ValueError(f"fio {direction}: no completion latency (clat_ns) in the JSON")
    table = clat.get("percentile") or {}
    by_number = {float(k): v for k, v in table.items()}
    out = {}
    for p in PERCENTILES:
        if float(p) not in by_number:
            raise ValueError(f"fio {direction}: no {p}th completion-latency percentile in the JSON "
                             f"(have {sorted(by_number)})")
        out[f"{direction}_lat_p{p}"] = by_number[float(p)] * to_ms
    return out
