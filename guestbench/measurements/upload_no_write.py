"""upload-no-write: the same bytes over the channel into RAM in the appliance; no disk is written."""

from __future__ import annotations

from typing import Any

from guestbench.measurements.base import CellContext, size_param
from guestbench.measurements.upload import TARGET, Upload
from guestbench.util.units import format_size

# Room the appliance needs besides the tmpfs contents (kernel, daemon, page cache for the upload).
APPLIANCE_OVERHEAD_MIB = 384
LIBGUESTFS_DEFAULT_MEMSIZE_MIB = 1280


class UploadNoWrite(Upload):
    """Upload's timed operation and check, with a tmpfs instead of a filesystem on a disk."""

    name = "upload-no-write"
    summary = "upload the same bytes into a tmpfs in the appliance: the channel alone, no disk write"
    timed = ("upload() of a host file of incompressible bytes into a tmpfs mounted on the appliance's "
             "/sysroot (RAM), then sync(); nothing is written to any disk; the file is removed before each "
             "sample (not timed)")
    params = (size_param("size", "100MiB", "bytes uploaded per sample"),)

    def check(self, params: dict[str, Any], memsize_mib: int | None) -> list[tuple[str, str]]:
        mem = memsize_mib if memsize_mib is not None else LIBGUESTFS_DEFAULT_MEMSIZE_MIB
        need = params["size"] // 2**20 + APPLIANCE_OVERHEAD_MIB
        if need > mem:
            return [("size", f"{format_size(params['size'])} does not fit in the appliance's RAM (memsize "
                     f"{mem}MiB); allowed: set appliance.memsize to at least {need} (MiB)")]
        return []

    def image_bytes(self, params: dict[str, Any]) -> int:
        return 0  # a 16 MiB scratch disk that nothing writes

    def add_drives(self, g: Any, ctx: CellContext) -> None:
        g.add_drive_scratch(16 * 2**20)

    def after_launch(self, g: Any, ctx: CellContext) -> None:
        size_mib = ctx.params["size"] // 2**20 + 16
        g.debug("sh", [f"mount -t tmpfs -o size={size_mib}m tmpfs /sysroot"])

    def prepare(self, g: Any, ctx: CellContext) -> None:
        g.rm_f(TARGET)
