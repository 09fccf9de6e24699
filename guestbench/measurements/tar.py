"""tar: extract a tree of many small files (a source tree's shape), then archive it again (E4's tar)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from guestbench.measurements.base import CellContext, int_param
from guestbench.measurements.workload import WORKDIR, StorageWorkload
from guestbench.host.paths import cache_dir
from guestbench.workloads import Metric
from guestbench.workloads import tartree

ARCHIVE_IN = "/sysroot/guestbench-tree.tar"  # uploaded before every sample, not timed
TREE = f"{WORKDIR}/tree"
ARCHIVE_OUT = f"{WORKDIR}/created.tar"


class Tar(StorageWorkload):
    name = "tar"
    summary = "tar: extract a tree of many small files, then create an archive of it (each followed by sync)"
    timed = ("tar -x of a generated tree of small files (most 1–16 KiB) into the filesystem under test, then "
             "sync; then tar -c of that tree into one archive on the same filesystem, then sync (many small "
             "reads, one large write); the archive was uploaded before the sample, not timed")
    needs_payload = True
    tool_params = (int_param("files", 4000, "files in the generated tree", maximum=1_000_000),)

    def make_payload(self, params: dict[str, Any]) -> tuple[Path, str]:
        tree = tartree.ensure_tree(cache_dir() / "tar-trees", files=params["files"])
        return tree.path, tree.sha256

    def metrics(self, params: dict[str, Any]) -> tuple[Metric, ...]:
        return (Metric("extract_s", "s", False, "tar -x and sync"),
                Metric("extract_files", "files/s", True, "files extracted per second"),
                Metric("create_s", "s", False, "tar -c and sync"),
                Metric("create_bw", "MB/s", True, "archive bytes written per second by tar -c (MB = 10^6 bytes)"))

    def prepare(self, g: Any, ctx: CellContext) -> None:
        super().prepare(g, ctx)
        assert ctx.payload is not None
        g.upload(str(ctx.payload), ARCHIVE_IN.removeprefix("/sysroot"))
        g.sync()

    def timed_op(self, g: Any, ctx: CellContext) -> dict[str, float | str]:
        t0 = time.perf_counter()
        self.run_tool(g, tartree.extract_command(ARCHIVE_IN, TREE))
        t1 = time.perf_counter()
        self.run_tool(g, tartree.create_command(TREE, ARCHIVE_OUT))
        t2 = time.perf_counter()
        size = int(g.filesize(ARCHIVE_OUT.removeprefix("/sysroot")))
        return {"extract_s": t1 - t0, "extract_files": ctx.params["files"] / (t1 - t0), "create_s": t2 - t1,
                "create_bw": size / (t2 - t1) / 1e6}

    def verify(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        got = tartree.parse_verify(self.run_tool(g, tartree.verify_command(TREE)))
        return {"what": "files extracted by tar", "host": ctx.params["files"], "guest": got.files,
                "ok": got.files == ctx.params["files"]}
