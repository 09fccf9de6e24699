"""LVM inside the appliance: an LV of one VG on the disk, or E3's fresh snapshot of an LV that holds data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guestbench.storage.layouts.base import MIB, Build, Layout, Stack, avail_bytes, mkfs, sh

VG = "guestbench"
ORIGIN_DATA = "origin-data"
FORGET_VG = f"lvm vgchange -an {VG} >/dev/null 2>&1; "


def _make_vg(g: Any, stack: Stack, disk: str) -> None:
    g.pvcreate(disk)
    g.vgcreate(VG, [disk])
    stack.resources.append(("vg", VG))


def _free_extents(g: Any) -> int:
    return int(sh(g, f"lvm vgs --noheadings -o vg_free_count {VG}", "reading the VG").strip())


def _extent_size(g: Any) -> int:
    return int(float(sh(g, f"lvm vgs --noheadings --units b --nosuffix -o vg_extent_size {VG}",
                        "reading the VG").strip()))


@dataclass(frozen=True)
class Lvm(Layout):
    forget: tuple[str, ...] = (FORGET_VG,)

    def predicted_mib(self, disk_mib: int) -> int:
        return (disk_mib - 1) // 4 * 4

    def build(self, g: Any, stack: Stack, b: Build) -> None:
        """A PV on the whole disk, one VG, one LV of all its extents (or size_mib)."""
        disk = b.disks[0]
        _make_vg(g, stack, disk)
        extents = _free_extents(g)
        n = extents if b.size_mib is None else min(extents, -(-b.size_mib * MIB // _extent_size(g)))
        sh(g, f"lvm lvcreate --yes -n test -l {n} {VG}", "creating the LV")
        stack.device = f"/dev/{VG}/test"
        stack.description = f"{stack.filesystem} on LV {VG}/test (LVM on {disk})"
        stack.layers = [f"{disk}: LVM physical volume", f"VG {VG}", f"{stack.device}: LV of {n} extents"]


@dataclass(frozen=True)
class LvmSnapshot(Layout):
    """E3's fresh snapshot: the filesystem under test is a snapshot of an origin that already holds data.

    E3 ran bonnie++ in a guest whose disk was a new snapshot of a used volume: first runs wrote at 1/5–1/10
    of the plain volume's speed, later runs recovered, because every first write to a chunk copies the
    origin's chunk into the snapshot's COW space and later writes to it do not. To show that here:
    - the origin's filesystem is made once and given a file of `origin_fill` of its free space (a guest's
      existing data, still visible in the snapshot), and the rest of its free space is written once and
      freed again, so the blocks the workload will allocate hold real data on the origin (not holes of a
      sparse image, which the host reads for free);
    - chunks are `snapshot_chunk_kib` (64 KiB), larger than a filesystem block: today's dm-snapshot skips
      the copy when a write covers a whole chunk, so with LVM's default 4 KiB chunks almost nothing would be
      copied, while E3's kernel copied on every first write;
    - the snapshot gets all the VG's extents after the origin's (at least the origin's size plus one
      extent), so it can never fill up and be invalidated;
    - `fresh` never remakes the filesystem: samples run on the same aging snapshot, one after another.
    """

    keeps_filesystem: bool = True
    forget: tuple[str, ...] = (FORGET_VG,)

    def predicted_mib(self, disk_mib: int) -> int:
        return ((disk_mib - 1) // 4 - 1) // 2 * 4

    def build(self, g: Any, stack: Stack, b: Build) -> None:
        disk = b.disks[0]
        _make_vg(g, stack, disk)
        extents, extent = _free_extents(g), _extent_size(g)
        n = (extents - 1) // 2
        if b.size_mib is not None:
            n = min(n, -(-b.size_mib * MIB // extent))
        sh(g, f"lvm lvcreate --yes -n origin -l {n} {VG}", "creating the origin LV")
        origin = f"/dev/{VG}/origin"
        data_mib = _fill_origin(g, stack.filesystem, origin, b.origin_fill)
        chunk_kib = b.snapshot_chunk_kib
        sh(g, f"lvm lvcreate --yes -s -n snap -c {chunk_kib}k -l 100%FREE {VG}/origin", "creating the snapshot")
        stack.device = f"/dev/{VG}/snap"
        g.mount_options(stack.mount_options, stack.device, "/")
        stack.keep = list(g.ls("/"))
        stack.description = (f"{stack.filesystem} on snapshot {VG}/snap of LV {VG}/origin ({chunk_kib} KiB "
                             f"chunks; LVM on {disk})")
        stack.layers = [f"{disk}: LVM physical volume", f"VG {VG}",
                        f"{origin}: origin LV of {n} extents, {stack.filesystem} with {data_mib} MiB of data",
                        f"{stack.device}: snapshot of the origin, {extents - n} extents of COW space",
                        f"{stack.filesystem} made once on the origin, mounted from the snapshot"]


def _fill_origin(g: Any, fs: str, origin: str, fill: float) -> int:
    """Make the origin's filesystem, give it `fill` of its free space as data and write the rest once;
    unmounted again. The MiB of data."""
    mkfs(g, fs, origin)
    g.mount(origin, "/")
    avail = avail_bytes(g, "/sysroot")
    data_mib = int(avail * fill) // MIB
    if data_mib:
        sh(g, f"dd if=/dev/zero of=/sysroot/{ORIGIN_DATA} bs=1M count={data_mib} status=none",
           "writing the origin's data")
    # btrfs's free space is an estimate: running out of it early is fine, the rest is written all the same
    spare_mib = (avail_bytes(g, "/sysroot") * 9 // 10) // MIB
    if spare_mib:
        sh(g, f"dd if=/dev/zero of=/sysroot/.gb-free bs=1M count={spare_mib} status=none 2>/dev/null; sync; "
              f"rm /sysroot/.gb-free", "writing the origin's free space once")
    g.sync()
    g.umount_all()
    return data_mib


def snapshot_usage(g: Any, stack: Stack) -> float | None:
    """lvm-snapshot: the percentage of the snapshot's copy-on-write space in use (how far it has diverged)."""
    if stack.layout != "lvm-snapshot":
        return None
    out = sh(g, f"lvm lvs --noheadings -o snap_percent {VG}/snap", "reading the snapshot's usage").strip()
    return float(out.replace(",", ".")) if out else None
