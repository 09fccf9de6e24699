"""write-no-upload: the same number of bytes written inside the appliance; nothing crosses the channel."""

from __future__ import annotations

from typing import Any

from guestbench.measurements.base import CellContext, DiskMeasurement

TARGET = "/payload"
FILL_OCTET = 0x5A  # not zero, so no layer can turn the write into a hole


class WriteNoUpload(DiskMeasurement):
    name = "write-no-upload"
    summary = "write the same number of bytes inside the appliance to a file on the filesystem, then sync"
    timed = ("fill() — the daemon writes size bytes (0x5a) to a file on a freshly made filesystem in a disk "
             "image on the host disk — then sync(); nothing crosses the channel but the request")

    def timed_op(self, g: Any, ctx: CellContext) -> None:
        g.fill(FILL_OCTET, ctx.params["size"], TARGET)
        g.sync()

    def verify(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        got = g.filesize(TARGET)
        return {"what": "size of the written file in the appliance", "host": ctx.params["size"],
                "guest": got, "ok": got == ctx.params["size"]}
