"""bonnie++: the published E2/E3/E4 benchmark, its CSV columns kept with their units and %CPU."""

from __future__ import annotations

from typing import Any

from guestbench.measurements.base import CellContext, bool_param, int_param, size_param
from guestbench.measurements.workload import WORKDIR, StorageWorkload
from guestbench.workloads import Metric
from guestbench.workloads import bonnie

MiB = 2**20
# what guestfs_get_memsize() gives when nothing sets it (libguestfs 1.48, x86_64)
LIBGUESTFS_DEFAULT_MEMSIZE_MIB = 1280


class Bonnie(StorageWorkload):
    name = "bonnie"
    summary = "bonnie++ in a fresh filesystem on the configured disk stack; its CSV columns with %CPU"
    timed = ("one bonnie++ run inside the appliance: its own rates (K/s with K = 1024 bytes, seeks/s, files/s) "
             "and %CPU for per-char and block output, rewrite, per-char and block input, random seeks and the "
             "file create/read/delete tests; +++++ = too fast to measure; the wall time is the whole run")
    tool_params = (
        size_param("size", "1GiB", "bonnie++ -s: the I/O test file (at least twice ram)"),
        size_param("ram", "512MiB", "bonnie++ -r: the RAM bonnie++ assumes; give the appliance at most this "
                   "much memory (appliance.memsize) so its page cache cannot hold the file"),
        int_param("files", 1024, "bonnie++ -n: files for the create/read/delete tests (a multiple of 1024; 0 "
                  "skips them)", minimum=0),
        bool_param("per_char", True, "run the per-char tests (slow: one system call per byte)"),
    )

    def _args(self, params: dict[str, Any]) -> tuple[int, int, int, bool]:
        return params["size"] // MiB, params["ram"] // MiB, params["files"], not params["per_char"]

    def check(self, params: dict[str, Any], memsize_mib: int | None) -> list[tuple[str, str]]:
        problems = super().check(params, memsize_mib)
        size, ram, files, skip = self._args(params)
        try:
            bonnie.command(WORKDIR, size, ram, files, skip_per_char=skip)
        except ValueError as e:
            problems.append(("size" if "size" in str(e) or "ram" in str(e) else "files", str(e)))
        if params["size"] + 64 * MiB > params["disk_size"]:
            problems.append(("size", "does not fit the disk with room for the filesystem; allowed: at most "
                             "disk_size - 64MiB"))
        return problems

    def caveats(self, params: dict[str, Any], memsize_mib: int | None) -> list[str]:
        """bonnie++ sizes its file from `ram`; an appliance with more memory than that can cache the file, and
        then its read figures measure the guest's page cache (E2's "absurd" loopback read)."""
        memory = memsize_mib if memsize_mib is not None else LIBGUESTFS_DEFAULT_MEMSIZE_MIB
        if params["ram"] // MiB >= memory:
            return []
        whose = "appliance.memsize" if memsize_mib is not None else "libguestfs's default appliance memory"
        return [f"bonnie++ ram {params['ram'] // MiB} MiB is below {whose} ({memory} MiB): the guest's page "
                f"cache can hold much of the {params['size'] // MiB} MiB file, so reads may measure memory"]

    def metrics(self, params: dict[str, Any]) -> tuple[Metric, ...]:
        size, _, files, skip = self._args(params)
        return bonnie.metrics(size, files, skip_per_char=skip)

    def timed_op(self, g: Any, ctx: CellContext) -> dict[str, float | str]:
        size, ram, files, skip = self._args(ctx.params)
        return dict(bonnie.parse(self.run_tool(g, bonnie.command(WORKDIR, size, ram, files, skip_per_char=skip))))
