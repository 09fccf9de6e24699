"""fio: one job (rw mode, block size, size, direct, iodepth) on a file in the filesystem under test."""

from __future__ import annotations

from typing import Any

from guestbench.measurements.base import CellContext, bool_param, choice_param, int_param, size_param
from guestbench.measurements.workload import WORKDIR, StorageWorkload
from guestbench.workloads import Metric
from guestbench.workloads import fio


def job(params: dict[str, Any]) -> fio.FioJob:
    return fio.FioJob(rw=params["rw"], bs=params["bs"], size=params["size"], direct=params["direct"],
                      iodepth=params["iodepth"])


class Fio(StorageWorkload):
    name = "fio"
    summary = "a fio job on a file in a fresh filesystem on the configured disk stack; fio's JSON figures"
    timed = ("one fio job run inside the appliance (fio's own bandwidth, IOPS and completion-latency "
             "percentiles; write jobs end with an fsync inside the job); the wall time is the whole fio "
             "command as seen from the host")
    tool_params = (
        choice_param("rw", "write", fio.RW_MODES, "fio --rw: access pattern"),
        size_param("bs", "1MiB", "fio --bs: block size"),
        size_param("size", "256MiB", "fio --size: bytes of the file the job reads or writes"),
        bool_param("direct", True, "fio --direct: O_DIRECT, bypassing the appliance's page cache"),
        int_param("iodepth", 4, "fio --iodepth (libaio)", maximum=1024),
    )

    def check(self, params: dict[str, Any], memsize_mib: int | None) -> list[tuple[str, str]]:
        problems = super().check(params, memsize_mib)
        try:
            job(params)
        except ValueError as e:
            problems.append(("bs", str(e)))
        if params["size"] + 64 * 2**20 > params["disk_size"]:
            problems.append(("size", "does not fit the disk with room for the filesystem; allowed: at most "
                             "disk_size - 64MiB"))
        return problems

    def metrics(self, params: dict[str, Any]) -> tuple[Metric, ...]:
        return fio.metrics(job(params))

    def timed_op(self, g: Any, ctx: CellContext) -> dict[str, float | str]:
        return dict(fio.parse(self.run_tool(g, fio.command(job(ctx.params), WORKDIR))))
