"""What every guest layout is, what it builds into, and the shell helpers layouts build with.

Commands the libguestfs API has no call for (losetup, mdadm, dmsetup, lvm snapshots) run through
`g.debug("sh", ...)`, outside the daemon; there the disks have their real names (/dev/ubda under UML,
/dev/sda under qemu), so those are looked up once (`Build.real`). Descriptions always use the daemon's names.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from guestbench.util.errors import one_line

MIB = 2**20
_DISK_PREFIXES = ("sd", "ubd", "vd", "hd", "xvd")


class StorageError(RuntimeError):
    """A stack could not be built or reset inside the appliance; the message is one line saying why."""


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


@dataclass(frozen=True)
class Build:
    """What `setup` hands a layout: its disks and the options (see guestbench.storage.guest.setup)."""

    disks: list[str]  # the daemon's names, as many as the layout needs
    real: dict[str, str]  # the kernel's name of each, for commands run through sh
    size_mib: int | None
    partition_table: str
    delay_ms: int
    origin_fill: float
    snapshot_chunk_kib: int
    preallocate: bool


@dataclass(frozen=True)
class Layout:
    """One block stack under the filesystem under test.

    A new layout is a subclass (in a module of this package) with `build` and `predicted_mib`, and one line
    in guestbench.storage.layouts.LAYOUTS; `setup`, `fresh`, the workload's `layout` parameter and the
    scenario checks take it from there.
    """

    name: str
    disks: int = 1  # how many disks it is built on
    whole_device: bool = False  # built on whole disks: size_mib does not apply
    keeps_filesystem: bool = False  # `build` makes the filesystem once; `fresh` only empties it
    # shell commands that undo what an earlier launch or layout may have left on the disks (an active VG, an
    # assembled array): every layout's run before any layout is built
    forget: tuple[str, ...] = ()

    def predicted_mib(self, disk_mib: int) -> int:
        """About how big the device under test will be on disks of disk_mib, for checks before building."""
        raise NotImplementedError

    def build(self, g: Any, stack: Stack, b: Build) -> None:
        """Build the stack on b.disks: set stack.device, description and layers, and record in
        stack.resources everything teardown must undo, as soon as it exists."""
        raise NotImplementedError


def reason(exc: BaseException | str) -> str:
    """An appliance's error in one line, without the "debug: " that g.debug puts before a script's error."""
    return one_line(exc, squeeze=True).removeprefix("debug: ")[:400]


def sh(g: Any, script: str, what: str) -> str:
    """Run a shell command in the appliance (outside /sysroot); a failure is a StorageError saying what."""
    try:
        return str(g.debug("sh", [script]))
    except RuntimeError as exc:
        raise StorageError(f"{what}: {reason(exc)}") from None


def sh_exclusive(g: Any, script: str, what: str, attempts: int = 3) -> str:
    """`sh` for a command that opens disks exclusively (mdadm --create): retried, after udev has settled,
    while it fails with EBUSY.

    udev answers the close of a disk opened for writing (wipefs in the clean slate) with a synthesized change
    event that re-reads the partition table, and the kernel claims the disk for that re-read: an exclusive
    open in that moment fails with "Device or resource busy" (seen once in a loaded suite run: mdadm
    --create on a blank /dev/sdb). A disk that stays busy still fails, on the last attempt, with its reason.
    """
    for attempt in range(attempts):
        try:
            return sh(g, f"udevadm settle >/dev/null 2>&1; {script}", what)
        except StorageError as exc:
            if "Device or resource busy" not in str(exc) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def kernel_name(g: Any, dev: str) -> str:
    """The kernel's name for a device the daemon calls `dev` (under UML /dev/sda is /dev/ubda).

    The daemon names disks in the order they were added, whatever the kernel calls them: when the SCSI disks
    are probed out of order (seen under load) the kernel may call the appliance's root /dev/sda and our disks
    sdb and sdc, which the daemon still shows as sda and sdb. So a SCSI disk is found by its place in SCSI
    address order (libguestfs attaches the drives in add order, the appliance last), not by its letter.
    """
    m = re.fullmatch(r"/dev/sd([a-z]+)(\d*)", dev)
    if m is None:
        return dev  # /dev/loopN, /dev/md0, /dev/VG/LV: the same for the daemon and the kernel
    letters, part = m.groups()
    index = 0
    for ch in letters:
        index = index * 26 + (ord(ch) - ord("a") + 1)
    index -= 1
    out = sh(g, "for d in /sys/block/sd*; do test -e $d/device && echo \"$(basename $(readlink -f $d/device)) "
                "${d##*/}\"; done | sort -t: -k1,1n -k2,2n -k3,3n -k4,4n; "
                f"for p in {' '.join(f'/dev/{x}{letters}' for x in _DISK_PREFIXES if x != 'sd')}; do "
                "test -b $p && echo \"other $p\"; done; true", f"looking up {dev}")
    lines = [ln.split() for ln in out.splitlines() if len(ln.split()) == 2]
    other = [name for addr, name in lines if addr == "other"]
    if other:  # UML's ubd (or vd, hd, xvd): the letter is the drive's place
        return other[0] + part
    scsi = [name for addr, name in lines if addr != "other"]
    if index >= len(scsi):
        raise StorageError(f"no block device in the appliance for {dev} (SCSI disks: {', '.join(scsi) or 'none'})")
    return f"/dev/{scsi[index]}{part}"


def mkfs(g: Any, fs: str, device: str) -> None:
    """libguestfs's mkfs, except for reiserfs: mkfs.reiserfs wants -f twice before it formats a whole disk
    without asking (libguestfs gives it once, and the question fails the call)."""
    if fs == "reiserfs":
        sh(g, f"mkfs.reiserfs -f -f -q {shlex.quote(kernel_name(g, device))} 2>&1", f"mkfs.reiserfs {device}")
    else:
        g.mkfs(fs, device)


def avail_bytes(g: Any, path: str) -> int:
    out = sh(g, f"df -B1 --output=avail {shlex.quote(path)} | tail -n 1", f"df {path}").strip()
    return int(out)
