"""dbench 4.00: the command line, and its final report as metrics.

dbench's "MB/sec" is 10^6 bytes/s (it divides bytes by 1.0e6), so it is reported as "MB/s" unchanged.
dbench 4.00 has no warm-up option: it always warms up for the first seconds/5 (integer) seconds, and
only the time after that counts.
"""

from __future__ import annotations

import re
import shlex
from collections import deque
from dataclasses import dataclass

from guestbench.workloads import Metric

# Debian's dbench package; supermin copies the package's files, so the path is the same in the appliance.
LOADFILE = "/usr/share/dbench/client.txt"
MIN_SECONDS = 2  # dbench's throughput is its last 1-second report; under 2 s there may be none

_THROUGHPUT_RE = re.compile(
    r"^Throughput\s+(?P<mb>[0-9.eE+-]+)\s+MB/sec\b.*?\s(?P<clients>\d+)\s+clients\s+(?P<procs>\d+)\s+procs"
    r"\s+max_latency=(?P<lat>[0-9.]+)\s+ms\s*$", re.MULTILINE)
_OP_RE = re.compile(r"^\s*(?P<name>[A-Za-z]+)\s+(?P<count>\d+)\s+(?P<avg>[0-9.]+)\s+(?P<max>[0-9.]+)\s*$")


@dataclass(frozen=True)
class Operation:
    """One line of dbench's operation table: how often, and its mean and worst latency in ms."""

    count: int
    avg_latency_ms: float
    max_latency_ms: float


def command(directory: str, clients: int, seconds: int, loadfile: str = LOADFILE) -> str:
    """dbench with `clients` client processes for `seconds` s in `directory` (must exist)."""
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"dbench clients must be a whole number >= 1, not {clients!r}")
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < MIN_SECONDS:
        raise ValueError(f"dbench seconds must be a whole number >= {MIN_SECONDS}, not {seconds!r}")
    args = ["dbench", "-c", loadfile, "-D", directory, "-t", str(seconds), str(clients)]
    return " ".join(shlex.quote(a) for a in args)


def metrics() -> tuple[Metric, ...]:
    """What `parse` returns (the same for every run)."""
    return (
        Metric("throughput", "MB/s", True, "dbench throughput (MB = 10^6 bytes), after its warm-up"),
        Metric("max_latency", "ms", False, "dbench max_latency: worst latency seen at its 1-second reports"),
    )


def parse(text: str) -> dict[str, float]:
    """throughput (MB/s) and max_latency (ms) from dbench's final "Throughput" line.

    Raise ValueError when the line is missing (dbench failed or was cut short) or reports nothing.
    """
    last = deque(_THROUGHPUT_RE.finditer(text), maxlen=1)  # the last one
    m = last[0] if last else None
    if m is None:
        raise ValueError(f"no dbench 'Throughput ... MB/sec' line in the output: {_excerpt(text)}")
    throughput = float(m.group("mb"))
    if throughput <= 0:
        raise ValueError(f"dbench reported {m.group('mb')} MB/sec: the run ended before its first "
                         f"1-second report after the warm-up")
    return {"throughput": throughput, "max_latency": float(m.group("lat"))}


def operations(text: str) -> dict[str, Operation]:
    """dbench's operation table (NTCreateX, ReadX, WriteX, ...) summed over all clients: counts and
    latencies; {} when dbench printed none. Only the first table counts (the others are per client)."""
    out: dict[str, Operation] = {}
    in_table = False
    for line in text.splitlines():
        if line.split()[:4] == ["Operation", "Count", "AvgLat", "MaxLat"]:
            in_table = True
            continue
        if not in_table:
            continue
        if not line.strip():
            if out:
                break  # the end of the first table
            continue
        m = _OP_RE.match(line)
        if m:
            out[m.group("name")] = Operation(int(m.group("count")), float(m.group("avg")), float(m.group("max")))
    return out


def _excerpt(text: str, limit: int = 600) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else "..." + text[-limit:])
