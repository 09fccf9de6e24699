"""dbench: a file-server trace (Samba's NetBench client load) replayed by N clients for a fixed time."""

from __future__ import annotations

from typing import Any

from guestbench.measurements.base import CellContext, int_param
from guestbench.measurements.workload import WORKDIR, StorageWorkload
from guestbench.workloads import Metric
from guestbench.workloads import dbench


class Dbench(StorageWorkload):
    name = "dbench"
    summary = "dbench (file-server trace) in a fresh filesystem on the configured disk stack; MB/s"
    timed = ("one dbench run inside the appliance for a fixed time: its own throughput (MB/s, the last "
             "report) and maximum latency; the wall time is the whole run")
    tool_params = (
        int_param("clients", 2, "dbench client processes", maximum=256),
        int_param("seconds", 30, "dbench run time in seconds", minimum=dbench.MIN_SECONDS, maximum=86400),
    )

    def metrics(self, params: dict[str, Any]) -> tuple[Metric, ...]:
        return dbench.metrics()

    def timed_op(self, g: Any, ctx: CellContext) -> dict[str, float | str]:
        cmd = dbench.command(WORKDIR, ctx.params["clients"], ctx.params["seconds"])
        return dict(dbench.parse(self.run_tool(g, cmd)))
