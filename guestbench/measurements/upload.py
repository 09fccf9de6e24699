"""upload: host file → file on a fresh filesystem in a disk image, over the daemon channel."""

from __future__ import annotations

from typing import Any

from guestbench.measurements.base import (CACHE, DISK_SIZE, FILESYSTEM, FORMAT, CellContext, Measurement,
                                          create_disk, fresh_filesystem, size_param)

TARGET = "/payload"


class Upload(Measurement):
    name = "upload"
    summary = "upload a host file of random bytes into a file on a fresh filesystem in a disk image"
    timed = ("upload() of a host file of incompressible bytes into a file on a freshly made filesystem in a "
             "disk image on the host disk, then sync(); the filesystem is re-made before each sample (not timed)")
    params = (size_param("size", "100MiB", "bytes uploaded per sample"), DISK_SIZE, FILESYSTEM, FORMAT, CACHE)
    moves_bytes = True
    needs_payload = True

    def add_drives(self, g: Any, ctx: CellContext) -> None:
        create_disk(g, ctx)

    def prepare(self, g: Any, ctx: CellContext) -> None:
        fresh_filesystem(g, ctx)

    def timed_op(self, g: Any, ctx: CellContext) -> None:
        assert ctx.payload is not None
        g.upload(str(ctx.payload), TARGET)
        g.sync()

    def verify(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        return verify_checksum(g, ctx, TARGET)


def verify_checksum(g: Any, ctx: CellContext, path: str) -> dict[str, Any]:
    """sha256 of the file as the appliance sees it vs the host's: proves every byte arrived."""
    guest = g.checksum("sha256", path)
    return {"what": "sha256 of the uploaded file, appliance vs host", "host": ctx.payload_sha256,
            "guest": guest, "ok": guest == ctx.payload_sha256}
