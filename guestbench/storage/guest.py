"""Storage stacks built inside a launched appliance: the block layers under the filesystem being measured.

E3 and E4 compare the same workload on different stacks (a partition, LVM, a fresh LVM snapshot, RAID1,
loop devices 1–3 deep) and filesystems. Each stack is built once after launch (`setup`, not timed), the
filesystem under test is made fresh and mounted at the appliance's /sysroot before every sample (`fresh`),
and everything is undone before shutdown (`teardown`), so a handle never ends with devices still in use.

Commands the libguestfs API has no call for (losetup, mdadm, dmsetup, lvm snapshots) run through
`g.debug("sh", ...)`, outside the daemon; there the disks have their real names (/dev/ubda under UML,
/dev/sda under qemu), so those are looked up once. Descriptions always use the daemon's names.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

LAYOUTS = ("disk", "partition", "lvm", "lvm-snapshot", "raid1", "raid1-mixed", "loop1", "loop2", "loop3")
WHOLE_DEVICE_LAYOUTS = ("disk", "raid1", "raid1-mixed")  # size_mib does not apply: they use whole disks
FILESYSTEMS = ("ext2", "ext3", "ext4", "xfs", "btrfs", "jfs", "reiserfs")
# The smallest filesystem each mkfs accepts (measured: mkfs.xfs 6.1 refuses below 300 MiB, mkfs.btrfs 6.2
# below 109 MiB, mkfs.reiserfs 3.6 below 33 MiB because of its fixed 32 MiB journal, mkfs.jfs 1.1 below 16 MiB).
MIN_SIZE_MIB = {"ext2": 4, "ext3": 4, "ext4": 4, "xfs": 300, "btrfs": 109, "jfs": 16, "reiserfs": 33}
PACKAGES = {"ext2": "e2fsprogs", "ext3": "e2fsprogs", "ext4": "e2fsprogs", "xfs": "xfsprogs",
            "btrfs": "btrfs-progs", "jfs": "jfsutils", "reiserfs": "reiserfsprogs"}
VG = "guestbench"
MD = "/dev/md0"
SLOW_LEG = "guestbench-slow"
LOWER_ROOT = "/run/guestbench"  # lower loop layers are mounted here, outside /sysroot (a tmpfs)
ORIGIN_DATA = "origin-data"
MIB = 2**20
_DISK_PREFIXES = ("sd", "ubd", "vd", "hd", "xvd")


class StorageError(RuntimeError):
    """A stack could not be built or reset inside the appliance; the message is one line saying why."""


class FilesystemUnavailable(StorageError):
    """The appliance cannot make or mount the filesystem at all: the same on every launch."""


@dataclass
class Stack:
    """A built stack: what is measured, how it was made, and what `fresh` and `teardown` need."""

    layout: str
    filesystem: str
    device: str  # the device under test, a name the daemon accepts
    description: str  # e.g. "ext4 on /dev/loop1 (file on ext2 on /dev/loop0 (file on ext2 on /dev/sda))"
    layers: list[str]  # bottom up, one line each
    size_bytes: int  # of the device under test
    mount_options: str = ""
    # what was made, in order; teardown undoes it backwards: ("umount", dir) ("loop", dev) ("md", dev)
    # ("dm", name) ("vg", name)
    resources: list[tuple[str, str]] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)  # lvm-snapshot: top-level names that are not the workload's

    def record(self) -> dict[str, Any]:
        """What a results file keeps about the stack."""
        d = asdict(self)
        del d["resources"], d["keep"]
        return d


def disks_needed(layout: str) -> int:
    _check_layout(layout)
    return 2 if layout.startswith("raid1") else 1


def filesystem_available(g: Any, fs: str) -> str | None:
    """None when this appliance can make and mount `fs`, else why not (one line)."""
    if fs not in FILESYSTEMS:
        return f"unknown filesystem {fs!r} (known: {', '.join(FILESYSTEMS)})"
    if fs in ("xfs", "btrfs") and not g.feature_available([fs]):
        return f"libguestfs says this appliance has no {fs} support (install {PACKAGES[fs]} on the host)"
    out = _sh(g, f"for d in /sbin /usr/sbin /bin /usr/bin; do if test -x $d/mkfs.{fs}; then echo $d; break; fi; "
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
    see `_lvm_snapshot`. preallocate: loop images written in full (not sparse), see `_loops`.
    On failure whatever was made is undone before the error is raised.
    """
    _check_layout(layout)
    if filesystem not in FILESYSTEMS:
        raise ValueError(f"unknown filesystem {filesystem!r} (known: {', '.join(FILESYSTEMS)})")
    if len(devices) < disks_needed(layout):
        raise ValueError(f"layout {layout} needs {disks_needed(layout)} disks, the appliance has {len(devices)}")
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
    disks = devices[:disks_needed(layout)]
    disk_mib = min(int(g.blockdev_getsize64(d)) for d in disks) // MIB
    predicted = _predicted_mib(layout, disk_mib)
    if size_mib is not None and layout not in WHOLE_DEVICE_LAYOUTS:
        predicted = min(predicted, size_mib)
    _check_size(layout, filesystem, predicted, disk_mib)

    if (why := filesystem_available(g, filesystem)) is not None:
        raise FilesystemUnavailable(why)
    real = _real_names(g, disks)
    _clean_slate(g, list(real.values()))
    stack = Stack(layout, filesystem, "", "", [], 0, mount_options)
    try:
        if layout == "disk":
            stack.device, stack.description = disks[0], f"{filesystem} on {disks[0]}"
            stack.layers = [f"{disks[0]}: whole disk"]
        elif layout == "partition":
            _partition(g, stack, disks[0], partition_table, size_mib)
        elif layout == "lvm":
            _lvm(g, stack, disks[0], size_mib)
        elif layout == "lvm-snapshot":
            _lvm_snapshot(g, stack, disks[0], size_mib, origin_fill, snapshot_chunk_kib)
        elif layout in ("raid1", "raid1-mixed"):
            _raid1(g, stack, disks, real, delay_ms if layout == "raid1-mixed" else None)
        else:
            _loops(g, stack, disks[0], real[disks[0]], int(layout[-1]), size_mib, preallocate)
        stack.size_bytes = int(g.blockdev_getsize64(stack.device))
        _check_size(layout, filesystem, stack.size_bytes // MIB, disk_mib)
        if layout == "lvm-snapshot":
            stack.layers.append(f"{filesystem} made once on the origin, mounted from the snapshot")
        else:
            stack.layers.append(f"{filesystem} made fresh before every sample")
    except BaseException as exc:
        teardown(g, stack)
        if isinstance(exc, RuntimeError):  # libguestfs's errors and ours, said with the stack they are about
            raise StorageError(f"building {filesystem} on {layout}: {_one_line(exc)}") from None
        raise
    return stack


def fresh(g: Any, stack: Stack) -> None:
    """Before every sample (not timed): a new filesystem mounted at /, and cold caches.

    lvm-snapshot keeps its filesystem (E3 measured a snapshot aging run after run): only what the last
    sample left at the top level is removed. Caches are dropped so that no sample reads what the previous
    one left in the page cache of a lower layer (loop images are cached files).
    """
    try:
        if stack.layout == "lvm-snapshot":
            if not _sysroot_mounted(g):  # never clean (and then fill) the appliance's own empty /sysroot
                g.mount_options(stack.mount_options, stack.device, "/")
            for name in g.ls("/"):
                if name not in stack.keep:
                    g.rm_rf("/" + name)
        else:
            g.umount_all()
            _mkfs(g, stack.filesystem, stack.device)
            g.mount_options(stack.mount_options, stack.device, "/")
        g.sync()
        g.drop_caches(3)
    except RuntimeError as exc:
        raise StorageError(f"fresh {stack.filesystem} on {stack.device} ({stack.layout}): {_one_line(exc)}") \
            from None


def teardown(g: Any, stack: Stack) -> list[str]:
    """Undo the stack, best effort, before shutdown: returns what could not be undone (empty: all gone)."""
    problems = []
    try:
        g.umount_all()
    except RuntimeError as exc:
        problems.append(f"umount_all: {_one_line(exc)}")
    for kind, name in reversed(stack.resources):
        q = shlex.quote(name)
        cmd = {"umount": f"umount {q} && rmdir {q}", "loop": f"losetup -d {q}", "md": f"mdadm --stop {q}",
               "dm": f"dmsetup remove {q}", "vg": f"lvm vgchange -an {q}"}[kind]
        try:
            _sh(g, cmd, f"undo {kind} {name}")
        except StorageError as exc:
            problems.append(str(exc))
    stack.resources.clear()
    return problems


def snapshot_usage(g: Any, stack: Stack) -> float | None:
    """lvm-snapshot: the percentage of the snapshot's copy-on-write space in use (how far it has diverged)."""
    if stack.layout != "lvm-snapshot":
        return None
    out = _sh(g, f"lvm lvs --noheadings -o snap_percent {VG}/snap", "reading the snapshot's usage").strip()
    return float(out.replace(",", ".")) if out else None


# ---- layouts ----

def _partition(g: Any, stack: Stack, disk: str, table: str, size_mib: int | None) -> None:
    """One partition from 1 MiB (aligned for any erase block or RAID stripe) to the end or size_mib."""
    g.part_init(disk, "gpt" if table == "gpt" else "msdos")
    end = -34 if table == "gpt" else -1  # GPT keeps its backup header in the last 33 sectors
    if size_mib is not None:
        total = int(g.blockdev_getsz(disk))
        last = total - 34 if table == "gpt" else total - 1
        end = min(2048 + size_mib * 2048 - 1, last)
    g.part_add(disk, "p", 2048, end)
    stack.device = f"{disk}1"
    stack.description = f"{stack.filesystem} on {stack.device} ({table.upper()} partition on {disk})"
    stack.layers = [f"{disk}: disk", f"{stack.device}: {table.upper()} partition from 1 MiB"]


def _lvm(g: Any, stack: Stack, disk: str, size_mib: int | None) -> None:
    """A PV on the whole disk, one VG, one LV of all its extents (or size_mib)."""
    g.pvcreate(disk)
    g.vgcreate(VG, [disk])
    stack.resources.append(("vg", VG))
    extents = _free_extents(g)
    n = extents if size_mib is None else min(extents, -(-size_mib * MIB // _extent_size(g)))
    _sh(g, f"lvm lvcreate --yes -n test -l {n} {VG}", "creating the LV")
    stack.device = f"/dev/{VG}/test"
    stack.description = f"{stack.filesystem} on LV {VG}/test (LVM on {disk})"
    stack.layers = [f"{disk}: LVM physical volume", f"VG {VG}", f"{stack.device}: LV of {n} extents"]


def _lvm_snapshot(g: Any, stack: Stack, disk: str, size_mib: int | None, fill: float, chunk_kib: int) -> None:
    """E3's fresh snapshot: the filesystem under test is a snapshot of an origin that already holds data.

    E3 ran bonnie++ in a guest whose disk was a new snapshot of a used volume: first runs wrote at 1/5–1/10
    of the plain volume's speed, later runs recovered, because every first write to a chunk copies the
    origin's chunk into the snapshot's COW space and later writes to it do not. To show that here:
    - the origin's filesystem is made once and given a file of `fill` of its free space (a guest's
      existing data, still visible in the snapshot), and the rest of its free space is written once and
      freed again, so the blocks the workload will allocate hold real data on the origin (not holes of a
      sparse image, which the host reads for free);
    - chunks are `chunk_kib` (64 KiB), larger than a filesystem block: today's dm-snapshot skips the copy
      when a write covers a whole chunk, so with LVM's default 4 KiB chunks almost nothing would be copied,
      while E3's kernel copied on every first write;
    - the snapshot gets all the VG's extents after the origin's (at least the origin's size plus one
      extent), so it can never fill up and be invalidated;
    - `fresh` never remakes the filesystem: samples run on the same aging snapshot, one after another.
    """
    g.pvcreate(disk)
    g.vgcreate(VG, [disk])
    stack.resources.append(("vg", VG))
    extents, extent = _free_extents(g), _extent_size(g)
    n = (extents - 1) // 2
    if size_mib is not None:
        n = min(n, -(-size_mib * MIB // extent))
    _sh(g, f"lvm lvcreate --yes -n origin -l {n} {VG}", "creating the origin LV")
    origin = f"/dev/{VG}/origin"
    _mkfs(g, stack.filesystem, origin)
    g.mount(origin, "/")
    avail = _avail_bytes(g, "/sysroot")
    data_mib = int(avail * fill) // MIB
    if data_mib:
        _sh(g, f"dd if=/dev/zero of=/sysroot/{ORIGIN_DATA} bs=1M count={data_mib} status=none",
            "writing the origin's data")
    # btrfs's free space is an estimate: running out of it early is fine, the rest is written all the same
    spare_mib = (_avail_bytes(g, "/sysroot") * 9 // 10) // MIB
    if spare_mib:
        _sh(g, f"dd if=/dev/zero of=/sysroot/.gb-free bs=1M count={spare_mib} status=none 2>/dev/null; sync; "
               f"rm /sysroot/.gb-free", "writing the origin's free space once")
    g.sync()
    g.umount_all()
    _sh(g, f"lvm lvcreate --yes -s -n snap -c {chunk_kib}k -l 100%FREE {VG}/origin", "creating the snapshot")
    stack.device = f"/dev/{VG}/snap"
    g.mount_options(stack.mount_options, stack.device, "/")
    stack.keep = list(g.ls("/"))
    snap_extents = extents - n
    stack.description = (f"{stack.filesystem} on snapshot {VG}/snap of LV {VG}/origin ({chunk_kib} KiB chunks; "
                         f"LVM on {disk})")
    stack.layers = [f"{disk}: LVM physical volume", f"VG {VG}",
                    f"{origin}: origin LV of {n} extents, {stack.filesystem} with {data_mib} MiB of data",
                    f"{stack.device}: snapshot of the origin, {snap_extents} extents of COW space"]


def _raid1(g: Any, stack: Stack, disks: list[str], real: dict[str, str], delay_ms: int | None) -> None:
    """md RAID1 of two disks; with delay_ms the second leg is behind dm-delay (a fast and a slow disk).

    --assume-clean: the legs are not synchronised first. A new array otherwise resyncs in the background,
    reading one leg and writing the other, and the first samples would compete with it. The data on the
    legs does not matter: the filesystem is made fresh before every sample. No write-intent bitmap, as in
    E4's arrays (it adds a write per region). The slow leg is a plain member, not --write-mostly: E4
    measured plain RAID1, so md's own read balancing decides which leg serves a read, and every write
    waits for both legs. (Seen on the 6.1 kernels here: a sequential read is split about evenly between
    the legs, so the slow leg slows reads too, unlike E4's "reads follow the fast one".)
    """
    legs = [real[disks[0]], real[disks[1]]]
    names = [disks[0], disks[1]]
    stack.layers = [f"{disks[0]}: disk", f"{disks[1]}: disk"]
    if delay_ms is not None:
        b = shlex.quote(legs[1])
        _sh(g, f"modprobe dm-delay && s=$(blockdev --getsz {b}) && "
               f"echo \"0 $s delay {b} 0 {delay_ms} {b} 0 {delay_ms}\" | dmsetup create {SLOW_LEG} && "
               f"udevadm settle", "making the slow leg with dm-delay")
        stack.resources.append(("dm", SLOW_LEG))
        legs[1] = names[1] = f"/dev/mapper/{SLOW_LEG}"
        stack.layers.append(f"{names[1]}: dm-delay of {disks[1]}, +{delay_ms} ms on every read and write")
    _sh(g, f"mdadm --create {MD} --run --level=1 --raid-devices=2 --metadata=1.2 --assume-clean --bitmap=none "
           f"{' '.join(map(shlex.quote, legs))} </dev/null 2>&1", "creating the RAID1 array")
    stack.resources.append(("md", MD))
    stack.device = MD
    slow = f" (dm-delay {delay_ms} ms on {disks[1]})" if delay_ms is not None else ""
    stack.description = f"{stack.filesystem} on {MD} (RAID1 of {names[0]} and {names[1]}{slow})"
    stack.layers.append(f"{MD}: md RAID1, metadata 1.2, assumed clean, no bitmap")


def _loops(g: Any, stack: Stack, disk: str, real_disk: str, depth: int, size_mib: int | None,
           preallocate: bool) -> None:
    """`depth` loop devices, each on an image file in an ext2 on the layer below; the last one is tested.

    The lower filesystems are ext2 with 4 KiB blocks, few inodes and no reserved blocks: the cheapest
    way to hold one big file, and not what is measured (E4 measured the loop layers, not their hosts).
    Images are written in full unless preallocate=False: a sparse image would make every first write
    through the loop device allocate blocks in the filesystem below. Each image is the most that fits,
    or, with size_mib, about what the layer above needs.
    """
    need = [size_mib * MIB if size_mib is not None else None]
    for _ in range(depth - 1):
        above = need[0]
        need.insert(0, None if above is None else above + above // 100 + 8 * MIB)
    below, below_name, inner = real_disk, disk, ""
    stack.layers = [f"{disk}: disk"]
    for level in range(1, depth + 1):
        mnt = f"{LOWER_ROOT}/layer{level}"
        _sh(g, f"mke2fs -q -F -t ext2 -b 4096 -m 0 -i 1048576 -O ^resize_inode {below} && mkdir -p {mnt} && "
               f"mount -t ext2 {below} {mnt}", f"making the ext2 of loop layer {level}")
        stack.resources.append(("umount", mnt))
        avail = _avail_bytes(g, mnt)
        fits = (avail - avail // 256 - MIB) // MIB  # ext2's indirect blocks come out of the free space
        needed = need[level - 1]
        want = fits if needed is None else min(fits, -(-needed // MIB))
        image = f"{mnt}/image"
        write = (f"dd if=/dev/zero of={image} bs=1M count={want} status=none" if preallocate
                 else f"truncate -s {want}M {image}")
        dev = _sh(g, f"{write} && losetup -f --show {image}", f"making the image of loop layer {level}").strip()
        if not dev.startswith("/dev/loop"):
            raise StorageError(f"losetup gave no loop device for {image}: {_one_line(dev)}")
        stack.resources.append(("loop", dev))
        stack.layers.append(f"ext2 on {below_name}, holding {image} ({want} MiB"
                            f"{'' if preallocate else ', sparse'})")
        stack.layers.append(f"{dev}: loop device on that file")
        inner = f"file on ext2 on {below_name}" + (f" ({inner})" if inner else "")
        below = below_name = dev
    stack.device = below
    stack.description = f"{stack.filesystem} on {below} ({inner})"


# ---- helpers ----

def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")


def _predicted_mib(layout: str, disk_mib: int) -> int:
    """About how big the device under test will be on disks of disk_mib, for checks before building."""
    if layout == "disk":
        return disk_mib
    if layout in ("partition", "raid1", "raid1-mixed"):
        return disk_mib - 2
    if layout == "lvm":
        return (disk_mib - 1) // 4 * 4
    if layout == "lvm-snapshot":
        return ((disk_mib - 1) // 4 - 1) // 2 * 4
    size = disk_mib
    for _ in range(int(layout[-1])):
        size = size - size // 100 - 3
    return size


def _check_size(layout: str, fs: str, size_mib: int, disk_mib: int) -> None:
    """ValueError naming the layout, filesystem and disk size needed when the filesystem cannot fit."""
    need = MIN_SIZE_MIB[fs]
    if size_mib >= need:
        return
    disk_need = next(d for d in range(need, 64 * need + 1024) if _predicted_mib(layout, d) >= need)
    raise ValueError(f"{fs} on layout {layout} needs at least {need} MiB, but it would have {size_mib} MiB: "
                     f"use disks of at least {disk_need} MiB (these are {disk_mib} MiB) or ask for more size")


def _real_names(g: Any, devices: list[str]) -> dict[str, str]:
    """The kernel's names for the daemon's /dev/sdX (under UML /dev/ubdX), for commands run through sh."""
    return {dev: kernel_name(g, dev) for dev in devices}


def kernel_name(g: Any, dev: str) -> str:
    if not dev.startswith("/dev/sd"):
        return dev  # /dev/loopN, /dev/md0, /dev/VG/LV: the same for the daemon and the kernel
    rest = dev.removeprefix("/dev/sd")
    cands = " ".join(f"/dev/{p}{rest}" for p in _DISK_PREFIXES)
    out = _sh(g, f"for d in {cands}; do if test -b $d; then echo $d; break; fi; done; true",
              f"looking up {dev}").strip()
    if not out:
        raise StorageError(f"no block device in the appliance for {dev} (tried {cands})")
    return out


def _mkfs(g: Any, fs: str, device: str) -> None:
    """libguestfs's mkfs, except for reiserfs: mkfs.reiserfs wants -f twice before it formats a whole disk
    without asking (libguestfs gives it once, and the question fails the call)."""
    if fs == "reiserfs":
        _sh(g, f"mkfs.reiserfs -f -f -q {shlex.quote(kernel_name(g, device))} 2>&1", f"mkfs.reiserfs {device}")
    else:
        g.mkfs(fs, device)


def _clean_slate(g: Any, real: list[str]) -> None:
    """Forget what an earlier launch or layout on the same disks left: the appliance may have activated our
    VG or assembled our array at boot, and old signatures would make mdadm and lvm ask questions.

    Until udev has settled, a stopped array can come back (udev's incremental assembly sees its legs'
    change events) and then holds a disk that wipefs cannot open, and the kernel keeps an old partition
    table until it is read again: so settle, clear, check, and go round again while a signature is left.
    """
    disks = " ".join(map(shlex.quote, real))
    _sh(g, f"for i in 1 2 3 4 5; do udevadm settle >/dev/null 2>&1; lvm vgchange -an {VG} >/dev/null 2>&1; "
           f"for m in /dev/md?*; do test -b $m && mdadm --stop $m >/dev/null 2>&1; done; "
           f"dmsetup remove {SLOW_LEG} >/dev/null 2>&1; "
           f"for d in {disks}; do wipefs -a $d >/dev/null 2>&1; blockdev --rereadpt $d >/dev/null 2>&1; done; "
           f"udevadm settle >/dev/null 2>&1; left=; "
           f"for d in {disks}; do test -n \"$(wipefs --noheadings $d 2>/dev/null)\" && left=\"$left $d\"; "
           f"ls /sys/class/block/${{d##*/}}/ | grep -q \"^${{d##*/}}[0-9]\" && left=\"$left $d\"; done; "
           f"test -z \"$left\" && break; done; true", "clearing old signatures")


def _free_extents(g: Any) -> int:
    return int(_sh(g, f"lvm vgs --noheadings -o vg_free_count {VG}", "reading the VG").strip())


def _extent_size(g: Any) -> int:
    return int(float(_sh(g, f"lvm vgs --noheadings --units b --nosuffix -o vg_extent_size {VG}",
                         "reading the VG").strip()))


def _sysroot_mounted(g: Any) -> bool:
    mounts = _sh(g, "cat /proc/mounts", "reading /proc/mounts")
    return any(ln.split()[1:2] == ["/sysroot"] for ln in mounts.splitlines())


def _avail_bytes(g: Any, path: str) -> int:
    out = _sh(g, f"df -B1 --output=avail {shlex.quote(path)} | tail -n 1", f"df {path}").strip()
    return int(out)


def _sh(g: Any, script: str, what: str) -> str:
    """Run a shell command in the appliance (outside /sysroot); a failure is a StorageError saying what."""
    try:
        return str(g.debug("sh", [script]))
    except RuntimeError as exc:
        raise StorageError(f"{what}: {_one_line(exc)}") from None


def _one_line(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split())
    return text.removeprefix("debug: ")[:400]
