"""upload: host file → file on a fresh filesystem in a disk image, over the daemon channel."""

from __future__ import annotations

from typing import Any

from guestbench.measurements.base import CellContext, DiskMeasurement, Param

TARGET = "/payload"


class Upload(DiskMeasurement):
    name = "upload"
    summary = "upload a host file of random bytes into a file on a fresh filesystem in a disk image"
    timed = ("upload() of a host file of incompressible bytes into a file on a freshly made filesystem in a "
             "disk image on the host disk, then sync(); the filesystem is re-made before each sample (not timed)")
    needs_payload = True
    params = (*DiskMeasurement.params,
              Param("verify", "choice", "first", "compare the uploaded file's sha256 with the host's after the "
                    "cell's first sample, or after every sample (a soak; not timed)", ("first", "every"),
                    optional=True))

    def timed_op(self, g: Any, ctx: CellContext) -> None:
        assert ctx.payload is not None
        g.upload(str(ctx.payload), TARGET)
        g.sync()

    def verify(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        """sha256 of the file as the appliance sees it vs the host's: proves every byte arrived."""
        guest = g.checksum("sha256", TARGET)
        return {"what": "sha256 of the uploaded file, appliance vs host", "host": ctx.payload_sha256,
                "guest": guest, "ok": guest == ctx.payload_sha256}
