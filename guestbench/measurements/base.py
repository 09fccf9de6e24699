"""The measurement interface: what a measurement accepts, what it times, and how it runs in the worker.

A measurement is split so that the clock covers exactly one thing: ``add_drives`` and ``after_launch``
and ``prepare`` are never timed; ``timed_op`` is (for ``startup``, the launch itself is the timed part).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guestbench.util.errors import clip, one_line
from guestbench.util.units import SIZE_HELP, format_size, parse_size

FILESYSTEMS = ("ext2", "ext3", "ext4", "xfs", "btrfs")
DISK_FORMATS = ("raw", "qcow2")
C_INT_MAX = 2**31 - 1  # the most any integer parameter may be: what libguestfs and the tools take as an int
# libguestfs's add_drive accepts exactly these two cache modes.
CACHE_MODES = ("writeback", "unsafe")


def min_disk_size(size: int) -> int:
    """The smallest image that holds `size` bytes in a file: room for filesystem metadata and journal."""
    return size + size // 10 + 64 * 2**20


@dataclass(frozen=True)
class Param:
    """One scenario parameter of a measurement: its default and how to check a user's value."""

    name: str
    kind: str  # "size" | "choice" | "int" | "bool" | "argv" (a command) | "text"
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: int = 1  # for "int"
    maximum: int | None = None  # None: up to C_INT_MAX
    # left out of a cell's parameters at its default: a setting added later (upload's verify) changes neither the
    # cells of older results files nor how they compare with new ones
    optional: bool = False

    def parse(self, value: object) -> Any:
        """Return the normalised value or raise ValueError saying what is allowed."""
        if self.kind == "size":
            return parse_size(value)
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum or \
                    (self.maximum is not None and value > self.maximum):
                raise ValueError(f"{clip(value)} is not allowed; allowed: {self.allowed()}")
            if value > C_INT_MAX:
                raise ValueError(f"{clip(value)} is too large; allowed: {self.allowed()} and <= {C_INT_MAX}")
            return value
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{clip(value)} is not allowed; allowed: true, false")
            return value
        if self.kind == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(f"{clip(value)} is not allowed; allowed: {', '.join(self.choices)}")
            return value
        if self.kind == "argv":
            if isinstance(value, str):
                try:
                    value = shlex.split(value)
                except ValueError as e:
                    raise ValueError(f"{clip(value)} cannot be split into words ({e}); allowed: {self.allowed()}") \
                        from None
            if not isinstance(value, list) or not value or not all(isinstance(a, str) and a for a in value):
                raise ValueError(f"{clip(value)} is not allowed; allowed: {self.allowed()}")
            return list(value)
        if self.kind == "text":
            if not isinstance(value, str):
                raise ValueError(f"{clip(value)} is not allowed; allowed: {self.allowed()}")
            return value
        raise AssertionError(self.kind)

    def allowed(self) -> str:
        if self.kind == "int":
            top = f" and <= {self.maximum}" if self.maximum is not None else ""
            return f"an integer >= {self.minimum}{top}"
        if self.kind == "bool":
            return "true or false"
        if self.kind == "argv":
            return "a non-empty list of non-empty strings, or one string split as a shell would"
        if self.kind == "text":
            return "a string"
        return SIZE_HELP if self.kind == "size" else "one of " + ", ".join(self.choices)

    def show(self, value: Any) -> str:
        if self.kind == "bool":
            return "true" if value else "false"
        if self.kind in ("argv", "text"):
            # a command's words name cells and their directories: no control character reaches a terminal or a path
            text = one_line(shlex.join(value) if isinstance(value, list) else " ".join(str(value).split()))
            return text if len(text) <= 40 else text[:37] + "..."
        return format_size(value) if self.kind == "size" else str(value)


def size_param(name: str, default: str, help: str) -> Param:
    return Param(name, "size", parse_size(default), help)


def choice_param(name: str, default: str, choices: tuple[str, ...], help: str) -> Param:
    return Param(name, "choice", default, help, choices)


def int_param(name: str, default: int, help: str, minimum: int = 1, maximum: int | None = None) -> Param:
    return Param(name, "int", default, help, minimum=minimum, maximum=maximum)


def bool_param(name: str, default: bool, help: str) -> Param:
    return Param(name, "bool", default, help)


DISK_SIZE = size_param("disk_size", "1GiB", "size of the disk image created on the host for the filesystem")
FILESYSTEM = choice_param("filesystem", "ext2", FILESYSTEMS, "filesystem made fresh before every sample")
FORMAT = choice_param("format", "raw", DISK_FORMATS, "disk image format on the host (sparse)")
CACHE = choice_param("cache", "writeback", CACHE_MODES,
                     "libguestfs cache mode of the disk: writeback honours flush/fsync, unsafe ignores it")


@dataclass
class CellContext:
    """What the worker hands a measurement: parameters, where to put files, the payload."""

    params: dict[str, Any]
    workdir: Path
    payload: Path | None
    payload_sha256: str | None
    memsize_mib: int | None
    drives: list[dict[str, Any]] = field(default_factory=list)  # host-side disks made by the runner
    backend: dict[str, Any] = field(default_factory=dict)  # the backend's HandleConfig, as a dict
    state: dict[str, Any] = field(default_factory=dict)  # what after_launch built, for prepare/timed_op


class Measurement:
    """Base class; subclasses set the metadata and override the worker-side steps."""

    name: str = ""
    summary: str = ""  # one line for --help listings
    timed: str = ""  # exactly what the clock covers; printed under every table
    params: tuple[Param, ...] = ()
    times_launch: bool = False  # True: each sample is a fresh launch, and the launch is what is timed
    moves_bytes: bool = False  # True: `size` bytes move per sample; MB/s is reported
    needs_payload: bool = False  # True: a host file of `size` random bytes is made before the cell
    workload: bool = False  # True: runs in the workload appliance on disks the runner made (guestbench.storage)
    kills_hypervisor: bool = False  # True: each sample ends with a power cut (guestbench.measurements.durability)
    density: bool = False  # True: run level by level, N appliances at once (guestbench.run.density)
    # False: the worker launches no appliance; every step gets g=None and the timed operation runs libguestfs
    # programs that launch their own (guestbench.measurements.command)
    launches: bool = True

    # ---- host side ----
    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params if not p.optional}

    def nbytes(self, params: dict[str, Any]) -> int | None:
        return int(params["size"]) if self.moves_bytes else None

    def cache_mode(self, params: dict[str, Any]) -> str | None:
        return params.get("cache")

    def check(self, params: dict[str, Any], memsize_mib: int | None) -> list[tuple[str, str]]:
        """Cross-parameter checks; returns (key, message) problems."""
        problems: list[tuple[str, str]] = []
        if "size" in params and "disk_size" in params:
            need = min_disk_size(params["size"])
            if params["disk_size"] < need:
                problems.append(("disk_size", f"{format_size(params['disk_size'])} is too small for size "
                                 f"{format_size(params['size'])}; allowed: at least size + 10% + 64MiB"))
        return problems

    def caveats(self, params: dict[str, Any], memsize_mib: int | None) -> list[str]:
        """Valid settings that still weaken the figures (printed with the run's warnings, never refused)."""
        return []

    def image_bytes(self, params: dict[str, Any]) -> int:
        """Host bytes its disk images may take in the cell's work dir, checked free before the cell starts: a
        sparse image counts at its full size when the measurement writes it, nothing when it stays empty."""
        return 0

    def timed_text(self, cold: bool) -> str:
        """What the clock covers in a cell of a scenario that takes (`cold`) or skips its cold launch."""
        return self.timed

    def describe(self, params: dict[str, Any]) -> str:
        shown = ", ".join(f"{p.name}={p.show(params[p.name])}" for p in self.params if p.name in params)
        return f"{self.name}({shown})" if shown else self.name

    def host_program(self, params: dict[str, Any]) -> dict[str, Any]:
        """The user's program the cell runs on the host (as root), for a dry run to show before it runs:
        {"argv": [...]} and, for a script, {"script": text}; {} when it runs only guestbench's own code."""
        return {}

    def make_payload(self, params: dict[str, Any]) -> tuple[Path, str]:
        """The host file the worker reads (path, sha256), made once per cell before any worker starts."""
        from guestbench.measurements.payload import payload

        return payload(params["size"])

    def host_drives(self, storage: Any, params: dict[str, Any], *, opens_nbd: bool,
                    instance: int = 0) -> list[dict[str, Any]]:
        """Disks the runner makes on the host for a workload cell (guestbench.storage.backing); none otherwise."""
        return []

    # ---- worker side (run inside guestbench.execute.worker, one appliance at a time) ----
    def add_drives(self, g: Any, ctx: CellContext) -> None:
        """Add the drives this measurement needs to a fresh handle, before launch (not timed)."""

    def after_launch(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        """One-off set-up after a launch (not timed); what it returns is kept in the cell."""
        return None

    def prepare(self, g: Any, ctx: CellContext) -> None:
        """Per-sample set-up, e.g. a fresh filesystem (not timed)."""

    def timed_op(self, g: Any, ctx: CellContext) -> dict[str, float | str] | None:
        """The timed operation (not used when ``times_launch``); a workload returns the figures its tool
        reported (metric key -> value, or TOO_FAST), kept with the sample beside its wall time."""
        return None

    def metrics(self, params: dict[str, Any]) -> tuple[Any, ...]:
        """The Metric records timed_op reports for these parameters (none for the plain timings)."""
        return ()

    def before_shutdown(self, g: Any, ctx: CellContext) -> None:
        """Undo in-appliance set-up before a clean shutdown (md arrays, loop devices); best effort."""

    def verify(self, g: Any, ctx: CellContext) -> dict[str, Any] | None:
        """Check once per cell that the data really arrived; return a verification record."""
        return None


def verification_problem(record: dict[str, Any]) -> str | None:
    """What a failed verification record says, in one line; None when the data arrived intact."""
    if record.get("ok"):
        return None
    return f"verification failed: {record['what']}: host {record['host']} != appliance {record['guest']}"


def create_disk(g: Any, ctx: CellContext, name: str = "disk") -> Path:
    """Create a sparse image on the host disk in the cell's work dir and add it to the handle."""
    path = ctx.workdir / f"{name}.{ctx.params['format']}"
    if path.exists():
        path.unlink()
    g.disk_create(str(path), ctx.params["format"], ctx.params["disk_size"])
    g.add_drive(str(path), format=ctx.params["format"], cachemode=ctx.params["cache"])
    return path


def fresh_filesystem(g: Any, ctx: CellContext) -> None:
    """Unmount, make a new filesystem on the whole disk and mount it at / (the appliance's /sysroot)."""
    g.umount_all()
    g.mkfs(ctx.params["filesystem"], "/dev/sda")
    g.mount("/dev/sda", "/")


class DiskMeasurement(Measurement):
    """A measurement on a file in a fresh filesystem in one disk image on the host disk."""

    params: tuple[Param, ...] = (size_param("size", "100MiB", "bytes moved per sample"), DISK_SIZE, FILESYSTEM,
                                 FORMAT, CACHE)
    moves_bytes = True

    def image_bytes(self, params: dict[str, Any]) -> int:
        return int(params["disk_size"])

    def add_drives(self, g: Any, ctx: CellContext) -> None:
        create_disk(g, ctx)

    def prepare(self, g: Any, ctx: CellContext) -> None:
        fresh_filesystem(g, ctx)
