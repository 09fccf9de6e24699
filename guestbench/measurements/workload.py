"""The base of the storage workloads (fio, bonnie++, dbench, tar, durability): a tool run inside the workload
appliance on a disk stack that the scenario describes from the host side (image format, preallocation,
cache mode, how the image reaches the hypervisor) to the guest side (layout, filesystem).

Host-side disks are made by the runner (guestbench.storage.backing), not by the worker: the runner outlives a
killed worker, so loop devices and NBD servers are always removed. The guest side is built once per launch
(guestbench.storage.guest) and the filesystem made fresh before every sample (not timed).
"""

from __future__ import annotations

from typing import Any

from guestbench.util.errors import Unavailable
from guestbench.measurements.base import CACHE, CellContext, Measurement, Param, choice_param, int_param, size_param
from guestbench.storage import guest as guest_storage
from guestbench.storage import backing
from guestbench.util.units import format_size

WORKDIR = "/sysroot/guestbench"  # where a tool works, inside the filesystem under test

DISK_SIZE = size_param("disk_size", "1GiB", "size of each disk image made on the host")
FORMAT = choice_param("format", "raw", backing.FORMATS, "disk image format on the host")
PREALLOCATION = choice_param("preallocation", "off", backing.PREALLOCATIONS,
                             "qemu-img preallocation of the image (metadata: qcow2 only)")
HOST = choice_param("host", "file", backing.HOST_KINDS,
                    "how the image reaches the hypervisor: a file on the host fs, a host loop device, an NBD "
                    "server (qemu-nbd or nbdkit), or an LV of a loop-backed host VG")
LAYOUT = choice_param("layout", "disk", guest_storage.LAYOUTS,
                      "the block stack inside the appliance under the filesystem")
FILESYSTEM = choice_param("filesystem", "ext4", guest_storage.FILESYSTEMS, "filesystem made fresh before every sample")
CONCURRENCY = int_param("concurrency", 1, "appliances running the same workload at once, on images in the same "
                        "host directory", maximum=8)
STORAGE_PARAMS: tuple[Param, ...] = (DISK_SIZE, FORMAT, PREALLOCATION, CACHE, HOST, LAYOUT, FILESYSTEM, CONCURRENCY)


def stack_text(params: dict[str, Any]) -> str:
    """The disk stack in one phrase, host side first, for table captions."""
    host = backing.KINDS[params["host"]].label
    prealloc = f", preallocation={params['preallocation']}" if params["preallocation"] != "off" else ""
    return (f"{params['filesystem']} on {params['layout']} · {params['format']}{prealloc} via {host} · "
            f"cache={params['cache']} · disks {format_size(params['disk_size'])}")


class StorageWorkload(Measurement):
    """Runs a tool on the filesystem under test; subclasses give the command, its parser and metrics."""

    workload = True
    tool_params: tuple[Param, ...] = ()

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.params = (*cls.tool_params, *STORAGE_PARAMS)

    def cache_mode(self, params: dict[str, Any]) -> str | None:
        return params["cache"]

    def nbytes(self, params: dict[str, Any]) -> int | None:
        return None  # the tool reports its own rates

    def describe(self, params: dict[str, Any]) -> str:
        tool = ", ".join(f"{p.name}={p.show(params[p.name])}" for p in self.tool_params)
        return f"{self.name}({tool}) on {stack_text(params)}"

    def check(self, params: dict[str, Any], memsize_mib: int | None) -> list[tuple[str, str]]:
        problems = []
        if params["preallocation"] == "metadata" and params["format"] != "qcow2":
            problems.append(("preallocation", "metadata is for qcow2 only; allowed with raw: off, falloc, full"))
        if (why := backing.format_problem(params["host"], params["format"])) is not None:
            problems.append(("host", why))
        return problems

    def image_bytes(self, params: dict[str, Any]) -> int:
        return params["disk_size"] * guest_storage.disks_needed(params["layout"]) * params["concurrency"]

    # ---- host side (runner) ----
    def host_drives(self, storage: backing.Backings, params: dict[str, Any], *, opens_nbd: bool,
                    instance: int = 0) -> list[dict[str, Any]]:
        """Make this cell's disks on the host; a hypervisor that cannot open NBD (`opens_nbd`, a Backend
        property: UML opens only files) gets NBD exports as files (nbdfuse). Raises Unavailable
        when the host cannot do it."""
        as_file = not opens_nbd and params["host"] in backing.NBD_KINDS
        why = backing.availability(params["host"], as_file=as_file)
        if why is not None:
            raise Unavailable(why)
        return [storage.add(params["host"], f"i{instance}-disk{k}", params["disk_size"], fmt=params["format"],
                            preallocation=params["preallocation"], as_file=as_file).to_dict()
                for k in range(guest_storage.disks_needed(params["layout"]))]

    # ---- worker side ----
    def add_drives(self, g: Any, ctx: CellContext) -> None:
        for d in ctx.drives:
            g.add_drive(**backing.Drive.from_dict(d).add_drive_kwargs(), cachemode=ctx.params["cache"])

    def after_launch(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        try:
            stack = guest_storage.setup(g, ctx.params["layout"], g.list_devices(), ctx.params["filesystem"])
        except guest_storage.FilesystemUnavailable as e:
            raise Unavailable(str(e)) from None
        ctx.state["stack"] = stack
        return {"stack": stack.record()}

    def prepare(self, g: Any, ctx: CellContext) -> None:
        guest_storage.fresh(g, ctx.state["stack"])
        g.debug("sh", [f"mkdir -p {WORKDIR}"])

    def before_shutdown(self, g: Any, ctx: CellContext) -> None:
        if "stack" in ctx.state:
            guest_storage.teardown(g, ctx.state["stack"])

    def run_tool(self, g: Any, command: str) -> str:
        """The tool's output; its exit status is checked in the shell, so a failure carries its last lines."""
        wrapped = f"{{ {command} ; }} >/tmp/gb.out 2>/tmp/gb.err; rc=$?; if [ $rc -ne 0 ]; then " \
                  f"echo \"exit status $rc: $(tail -n 3 /tmp/gb.err | tr '\\n' ' ')\" >&2; exit 1; fi; cat /tmp/gb.out"
        return str(g.debug("sh", [wrapped]))
