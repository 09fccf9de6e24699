"""Storage stacks built inside a launched appliance: the block layers under the filesystem being measured.

E3 and E4 compare the same workload on different stacks (a partition, LVM, a fresh LVM snapshot, RAID1,
loop devices 1–3 deep) and filesystems. Each stack is a layout in the registry
guestbench.storage.layouts.LAYOUTS (one class each); this module is what the rest of guestbench uses.
Each stack is built once after launch (`setup`, not timed), the filesystem under test is made fresh and
mounted at the appliance's /sysroot before every sample (`fresh`), and everything is undone before
shutdown (`teardown`), so a handle never ends with devices still in use.
"""

from __future__ import annotations

import shlex
from typing import Any

from guestbench.storage.layouts import LAYOUTS as _REGISTRY
from guestbench.storage.layouts import Layout
from guestbench.storage.layouts.base import MIB, Build, Stack, StorageError, kernel_name, mkfs, reason, sh
from guestbench.storage.layouts.loop import LOWER_ROOT
from guestbench.storage.layouts.lvm import ORIGIN_DATA, VG, snapshot_usage
from guestbench.storage.layouts.raid1 import MD, SLOW_LEG

LAYOUTS = tuple(_REGISTRY)
WHOLE_DEVICE_LAYOUTS = tuple(name for name, layout in _REGISTRY.items() if layout.whole_device)
FILESYSTEMS = ("ext2", "ext3", "ext4", "xfs", "btrfs", "jfs", "reiserfs")
# The smallest filesystem each mkfs accepts (measured: mkfs.xfs 6.1 refuses below 300 MiB, mkfs.btrfs 6.2
# below 109 MiB, mkfs.reiserfs 3.6 below 33 MiB because of its fixed 32 MiB journal, mkfs.jfs 1.1 below 16 MiB).
MIN_SIZE_MIB = {"ext2": 4, "ext3": 4, "ext4": 4, "xfs": 300, "btrfs": 109, "jfs": 16, "reiserfs": 33}
PACKAGES = {"ext2": "e2fsprogs", "ext3": "e2fsprogs", "ext4": "e2fsprogs", "xfs": "xfsprogs",
            "btrfs": "btrfs-progs", "jfs": "jfsutils", "reiserfs": "reiserfsprogs"}
# how teardown undoes each kind of Stack.resources entry
_UNDO = {"umount": "umount {q} && rmdir {q}", "loop": "losetup -d {q}", "md": "mdadm --stop {q}",
         "dm": "dmsetup remove {q}", "vg": "lvm vgchange -an {q}"}

__all__ = ["FILESYSTEMS", "LAYOUTS", "LOWER_ROOT", "MD", "MIN_SIZE_MIB", "ORIGIN_DATA", "PACKAGES", "SLOW_LEG",
           "VG", "WHOLE_DEVICE_LAYOUTS", "FilesystemUnavailable", "Stack", "StorageError", "disks_needed", "fresh",
           "filesystem_available", "kernel_name", "setup", "snapshot_usage", "teardown"]


class FilesystemUnavailable(StorageError):
    """The appliance cannot make or mount the filesystem at all: the same on every launch."""


def disks_needed(layout: str) -> int:
    return _layout(layout).disks


def filesystem_available(g: Any, fs: str) -> str | None:
    """None when this appliance can make and mount `fs`, else why not (one line)."""
    if fs not in FILESYSTEMS:
        return f"unknown filesystem {fs!r} (known: {', '.join(FILESYSTEMS)})"
    if fs in ("xfs", "btrfs") and not g.feature_available([fs]):
        return f"libguestfs says this appliance has no {fs} support (install {PACKAGES[fs]} on the host)"
    out = sh(g, f"for d in /sbin /usr/sbin /bin /usr/bin; do if test -x $d/mkfs.{fs}; then echo $d; break; fi; "
                f"done; grep -qw {fs} /proc/filesystems || modprobe {fs} >/dev/null 2>&1; "
                f"grep -qw {fs} /proc/filesystems && echo kernel; true", f"checking for {fs}")
    if not any(ln.startswith("/") for ln in out.split()):
        return f"mkfs.{fs} is not in the appliance (install {PACKAGES[fs]} on the host)"
    if "kernel" not in out.split():
        return f"the appliance's kernel cannot mount {fs} (no {fs} driver built in or as a module)"
    return None


def setup(g: Any, layout: str, devices: list[str], filesystem: str, *, size_mib: int | None = None,
          mount_options: str = "", partition_table: str = "mbr", delay_ms: int = 5, origin_fill: float = 0.5,
          snapshot_chunk_kib: int = 64, preallocate: bool = True) -> Stack:
    """Build `layout` on `devices` (the daemon's names, e.g. g.list_devices()) for `filesystem`; not timed.

    size_mib: the size of the device under test; None or more than fits gives the most that fits. Layouts
    that use whole devices (disk, raid1, raid1-mixed) always use all of them. partition_table: "mbr" or
    "gpt". delay_ms: the slow leg's added read and write delay (raid1-mixed). origin_fill, snapshot_chunk_kib:
    see layouts.lvm.LvmSnapshot. preallocate: loop images written in full (not sparse), see layouts.loop.Loops.
    On failure whatever was made is undone before the error is raised.
    """
    lay = _layout(layout)
    if filesystem not in FILESYSTEMS:
        raise ValueError(f"unknown filesystem {filesystem!r} (known: {', '.join(FILESYSTEMS)})")
    if len(devices) < lay.disks:
        raise ValueError(f"layout {layout} needs {lay.disks} disks, the appliance has {len(devices)}")
    _check_options(size_mib, partition_table, delay_ms, origin_fill, snapshot_chunk_kib)
    disks = devices[:lay.disks]
    disk_mib = min(int(g.blockdev_getsize64(d)) for d in disks) // MIB
    predicted = lay.predicted_mib(disk_mib)
    if size_mib is not None and not lay.whole_device:
        predicted = min(predicted, size_mib)
    _check_size(lay, filesystem, predicted, disk_mib)

    if (why := filesystem_available(g, filesystem)) is not None:
        raise FilesystemUnavailable(why)
    real = real_names(g, disks)
    _clean_slate(g, list(real.values()))
    stack = Stack(layout, filesystem, "", "", [], 0, mount_options)
    try:
        lay.build(g, stack, Build(disks, real, size_mib, partition_table, delay_ms, origin_fill, snapshot_chunk_kib,
                                  preallocate))
        stack.size_bytes = int(g.blockdev_getsize64(stack.device))
        _check_size(lay, filesystem, stack.size_bytes // MIB, disk_mib)
        if not lay.keeps_filesystem:
            stack.layers.append(f"{filesystem} made fresh before every sample")
    except BaseException as exc:
        teardown(g, stack)
        if isinstance(exc, RuntimeError):  # libguestfs's errors and ours, said with the stack they are about
            raise StorageError(f"building {filesystem} on {layout}: {reason(exc)}") from None
        raise
    return stack


def fresh(g: Any, stack: Stack) -> None:
    """Before every sample (not timed): a new filesystem mounted at /, and cold caches.

    lvm-snapshot (a layout that keeps its filesystem) keeps it (E3 measured a snapshot aging run after run):
    only what the last sample left at the top level is removed. Caches are dropped so that no sample reads
    what the previous one left in the page cache of a lower layer (loop images are cached files).
    """
    try:
        if _layout(stack.layout).keeps_filesystem:
            if not _sysroot_mounted(g):  # never clean (and then fill) the appliance's own empty /sysroot
                g.mount_options(stack.mount_options, stack.device, "/")
            for name in g.ls("/"):
                if name not in stack.keep:
                    g.rm_rf("/" + name)
        else:
            g.umount_all()
            mkfs(g, stack.filesystem, stack.device)
            g.mount_options(stack.mount_options, stack.device, "/")
        g.sync()
        g.drop_caches(3)
    except RuntimeError as exc:
        raise StorageError(f"fresh {stack.filesystem} on {stack.device} ({stack.layout}): {reason(exc)}") \
            from None


def teardown(g: Any, stack: Stack) -> list[str]:
    """Undo the stack, best effort, before shutdown: returns what could not be undone (empty: all gone)."""
    problems = []
    try:
        g.umount_all()
    except RuntimeError as exc:
        problems.append(f"umount_all: {reason(exc)}")
    for kind, name in reversed(stack.resources):
        try:
            sh(g, _UNDO[kind].format(q=shlex.quote(name)), f"undo {kind} {name}")
        except StorageError as exc:
            problems.append(str(exc))
    stack.resources.clear()
    return problems


# ---- helpers ----

def _layout(layout: str) -> Layout:
    if layout not in _REGISTRY:
        raise ValueError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    return _REGISTRY[layout]


def _check_options(size_mib: int | None, partition_table: str, delay_ms: int, origin_fill: float,
                   snapshot_chunk_kib: int) -> None:
    """ValueError for a `setup` option no layout could use."""
    if size_mib is not None and (isinstance(size_mib, bool) or not isinstance(size_mib, int) or size_mib < 1):
        raise ValueError(f"size_mib must be a positive integer, not {size_mib!r}")
    if partition_table not in ("mbr", "gpt"):
        raise ValueError(f"partition_table must be mbr or gpt, not {partition_table!r}")
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
        raise ValueError(f"delay_ms must be an integer >= 0, not {delay_ms!r}")
    if not 0 <= origin_fill <= 0.9:
        raise ValueError(f"origin_fill must be between 0 and 0.9, not {origin_fill!r}")
    if snapshot_chunk_kib not in (4, 8, 16, 32, 64, 128, 256, 512):
        raise ValueError(f"snapshot_chunk_kib must be a power of two from 4 to 512, not {snapshot_chunk_kib!r}")


def _check_size(layout: Layout, fs: str, size_mib: int, disk_mib: int) -> None:
    """ValueError naming the layout, filesystem and disk size needed when the filesystem cannot fit."""
    need = MIN_SIZE_MIB[fs]
    if size_mib >= need:
        return
    disk_need = next(d for d in range(need, 64 * need + 1024) if layout.predicted_mib(d) >= need)
    raise ValueError(f"{fs} on layout {layout.name} needs at least {need} MiB, but it would have {size_mib} MiB: "
                     f"use disks of at least {disk_need} MiB (these are {disk_mib} MiB) or ask for more size")


def real_names(g: Any, devices: list[str]) -> dict[str, str]:
    """The kernel's names for the daemon's /dev/sdX (under UML /dev/vdX or /dev/ubdX), for commands run through sh."""
    return {dev: kernel_name(g, dev) for dev in devices}


def _clean_slate(g: Any, real: list[str]) -> None:
    """Forget what an earlier launch or layout on the same disks left: the appliance may have activated our
    VG or assembled our array at boot, and old signatures would make mdadm and lvm ask questions (every
    layout's `forget` commands).

    Until udev has settled, a stopped array can come back (udev's incremental assembly sees its legs'
    change events) and then holds a disk that wipefs cannot open, and the kernel keeps an old partition
    table until it is read again: so settle, clear, check, and go round again (at most 5 times: a disk that
    is busy on purpose stays busy, and the layout's own step then says so) while something is left.
    """
    disks = " ".join(map(shlex.quote, real))
    forget = "".join(dict.fromkeys(cmd for layout in _REGISTRY.values() for cmd in layout.forget))
    # A disk is clean when it has no signature, no partition and no holder (an array or a mapping that came
    # back). The change event after a wipe is triggered, not left to udev's watch of the closed device, so
    # the settle that follows waits for it and lvm and mdadm then read udev's new view of the disk.
    sh(g, f"for i in 1 2 3 4 5; do udevadm settle >/dev/null 2>&1; {forget}"
          f"for d in {disks}; do wipefs -a $d >/dev/null 2>&1; blockdev --rereadpt $d >/dev/null 2>&1; "
          f"udevadm trigger --action=change $d >/dev/null 2>&1; done; "
          f"udevadm settle >/dev/null 2>&1; left=; "
          f"for d in {disks}; do b=/sys/class/block/${{d##*/}}; "
          f"test -n \"$(wipefs --noheadings $d 2>/dev/null)\" && left=\"$left $d\"; "
          f"ls $b/ | grep -q \"^${{d##*/}}[0-9]\" && left=\"$left $d\"; "
          f"ls $b/holders/ 2>/dev/null | grep -q . && left=\"$left $d\"; done; "
          f"test -z \"$left\" && break; done; true", "clearing old signatures")


def _sysroot_mounted(g: Any) -> bool:
    mounts = sh(g, "cat /proc/mounts", "reading /proc/mounts")
    return any(ln.split()[1:2] == ["/sysroot"] for ln in mounts.splitlines())
