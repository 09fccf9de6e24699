"""Guest-side storage stacks, built for real inside launched appliances (one UML appliance; TCG in make test-long).

Every layout is built, a file written and read back, the stack checked to be what it claims (lsblk,
dmsetup, /proc/mdstat, losetup, lvs), the filesystem made fresh twice, and the stack torn down with
nothing left behind in the appliance (no mount, loop device, md array or device-mapper device).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

import guestbench.host.paths
from guestbench.storage import guest
from guestbench.storage.guest import StorageError

from helpers.leaks import processes_mentioning
from helpers.session import session_tmp_path
from helpers.storage import assert_nothing_left, check_structure, exercise, sh, sysroot_mount

pytestmark = pytest.mark.launch

DISK_MIB = 400
UML_DISK_MIB = 320  # what xfs needs on raid1 (300 MiB) and a little more: UML's disk writes are slow here


def _scratch_dir() -> Path:
    """Under the session's temp root, so that conftest's leak checks see any hypervisor we leave."""
    return Path(tempfile.mkdtemp(prefix="storage-", dir=session_tmp_path() / "tmp"))


def _add_disks(g: Any, d: Path, n: int = 2, mib: int = DISK_MIB) -> None:
    for k in range(n):
        path = str(d / f"disk{k}.raw")
        g.disk_create(path, "raw", mib * 2**20)  # sparse
        g.add_drive(path, format="raw")


@pytest.fixture(scope="module")
def tcg() -> Iterator[Any]:
    """One TCG appliance for the whole module: a launch costs 15–40 s here."""
    import guestfs

    d = _scratch_dir()
    g = guestfs.GuestFS(python_return_dict=True, close_on_exit=False)
    sockdirs: set[str] = set()
    try:
        g.set_backend("direct")
        g.set_backend_settings(["force_tcg"])
        g.set_tmpdir(str(d))
        _add_disks(g, d)
        g.launch()
        sockdirs = our_sockdirs(d)
        yield g
        g.shutdown()
    finally:
        g.close()
        shutil.rmtree(d, ignore_errors=True)
    assert_no_leftovers(sockdirs, d)


@pytest.fixture(scope="module")
def uml() -> Iterator[Any]:
    """One UML appliance for the module's tests of the stacks' logic (set-up, sizing, aging, undo, refusals):
    guestbench's own code, the same on every backend; a UML launch costs a quarter of a TCG one. What is qemu's: its
    drives (a host loop device, qemu-nbd, FUSE) in test_storage_host; layouts on its /dev/sdX (where the daemon's
    names are the kernel's: UML's ubdX here is the case that maps them) in make test-long."""
    import guestfs
    from guestbench.backends import get

    d = _scratch_dir()
    cfg = get("uml").handle_config(guestbench.host.paths.cache_dir())
    saved = dict(os.environ)
    os.environ[guestbench.host.paths.WORKDIR_ENV] = str(d)
    os.environ.update(cfg.env)  # read when the handle is made (LIBGUESTFS_PATH) and by the launch
    g = guestfs.GuestFS(python_return_dict=True, close_on_exit=False)
    sockdirs: set[str] = set()
    try:
        g.set_backend(cfg.libguestfs_backend)
        g.set_backend_settings(list(cfg.settings))
        if cfg.hv:
            g.set_hv(cfg.hv)
        g.set_tmpdir(str(d))
        _add_disks(g, d, mib=UML_DISK_MIB)
        g.launch()
        os.environ.clear()  # the hypervisor has its environment; the module's other tests get theirs back
        os.environ.update(saved)
        sockdirs = our_sockdirs(d)
        yield g
        g.shutdown()
    finally:
        g.close()
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(d, ignore_errors=True)
    assert_no_leftovers(sockdirs, d)


def our_sockdirs(scratch: Path) -> set[str]:
    """The socket directories of the hypervisor using our scratch dir (a child of this process), from its
    command line.

    Other people's appliances run on this machine at the same time, so a before/after listing of /tmp
    would blame us for theirs.
    """
    found = set()
    for entry in os.listdir("/proc"):
        try:
            if not entry.isdigit() or Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1] \
                    != str(os.getpid()):
                continue
            args = Path(f"/proc/{entry}/cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if str(scratch) not in args:
            continue  # this module's other appliance
        found.update(m.group(1) for m in re.finditer(r"(/tmp/libguestfs\w{6})/", args))
    assert found, "no hypervisor child with a libguestfs socket directory"
    return found


def assert_no_leftovers(sockdirs: set[str], scratch: Path, timeout: float = 10.0) -> None:
    """No hypervisor mentioning our scratch dir, no socket dir of ours: other appliances (this module's
    other one, other people's) run here at the same time, so conftest's machine-wide checks would blame us."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and processes_mentioning(str(scratch)):
        time.sleep(0.2)
    assert processes_mentioning(str(scratch)) == []
    left = [s for s in sockdirs if Path(s).exists()]
    assert left == [], f"libguestfs socket directories left behind: {left}"


# Every layout runs under UML below (a few seconds each there), and the logic of set-up, sizing, aging, undo and
# refusal on the same UML appliance: it is guestbench's own. What qemu adds is its device naming (/dev/sdX, the
# daemon's own names, which UML's /dev/vdX here has to be mapped from) and its drives: a host loop device, qemu-nbd
# and FUSE drives in test_storage_host, whose TCG appliance also builds raid1 on two of them (with exercise(),
# helpers.storage); raid1-mixed and lvm-snapshot on TCG's own drives, and fio on raid1 over host loop devices
# (test_workload_run), in make test-long (a TCG launch and its set-up writes cost 40-60 s each here).
TCG_LAYOUTS = (pytest.param("raid1-mixed", marks=pytest.mark.long),
               pytest.param("lvm-snapshot", marks=pytest.mark.long))
# Under UML what differs is the device naming (/dev/vdX; /dev/ubdX on ubd) each layout builds on: partitions, LVM (with
# a snapshot: plain LVM is its first half, in test_sized_layouts_on_uml; the snapshot with ext4 in
# test_ext4_snapshot_ages_on_uml), md over a disk and a partition, stacked loops (loop2 in
# test_sized_layouts_on_uml; disk in test_workload_run), and raid1 with xfs below
UML_LAYOUTS = ("partition", "raid1-mixed", "loop3")


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("layout", TCG_LAYOUTS)
def test_layout_ext2_on_tcg(tcg: Any, layout: str) -> None:
    stack, took = exercise(tcg, layout, "ext2")
    print(f"{layout}: {stack.description}; {stack.size_bytes // 2**20} MiB; set-up {took:.1f} s")


@pytest.mark.timeout(1200)
def test_ext4_snapshot_ages_on_uml(uml: Any) -> None:
    """lvm-snapshot (its structure as the kernel sees it) keeps its filesystem: what a sample leaves is removed,
    the COW space only grows."""
    g = uml
    real = guest.real_names(g, g.list_devices())
    stack = guest.setup(g, "lvm-snapshot", g.list_devices(), "ext4", size_mib=48)
    try:
        assert guest.ORIGIN_DATA in stack.keep
        before = guest.snapshot_usage(g, stack)
        guest.fresh(g, stack)
        check_structure(g, stack, real)
        sh(g, "mkdir -p /sysroot/guestbench && dd if=/dev/zero of=/sysroot/guestbench/f bs=64k count=160 "
              "conv=fsync 2>/dev/null")
        after = guest.snapshot_usage(g, stack)
        assert before is not None and after is not None and after > before
        guest.fresh(g, stack)
        assert g.ls("/") == stack.keep
        assert g.filesize(f"/{guest.ORIGIN_DATA}") > 0
        g.umount_all()  # a sample that lost the mount: fresh mounts the snapshot again, never cleans /sysroot
        guest.fresh(g, stack)
        assert sysroot_mount(g)[1] == "ext4" and g.ls("/") == stack.keep
    finally:
        assert guest.teardown(g, stack) == []
    assert_nothing_left(g)


@pytest.mark.timeout(1200)
def test_clear_refusals_on_uml(uml: Any) -> None:
    g = uml
    with pytest.raises(ValueError, match=r"xfs on layout lvm-snapshot needs at least 300 MiB.*at least \d+ MiB"):
        guest.setup(g, "lvm-snapshot", g.list_devices(), "xfs")
    with pytest.raises(ValueError, match=r"btrfs on layout lvm needs at least 109 MiB.*ask for more"):
        guest.setup(g, "lvm", g.list_devices(), "btrfs", size_mib=50)
    with pytest.raises(ValueError, match="layout raid1 needs 2 disks"):
        guest.setup(g, "raid1", g.list_devices()[:1], "ext2")
    with pytest.raises(ValueError, match="unknown layout"):
        guest.disks_needed("raid5")
    with pytest.raises(StorageError, match="^mkfs.jfs is not in the appliance"):
        guest.setup(g, "disk", g.list_devices(), "jfs")
    assert_nothing_left(g)
    # the standard appliance has no jfsutils; the rest is there
    assert guest.filesystem_available(g, "jfs") == "mkfs.jfs is not in the appliance (install jfsutils on the host)"
    for fs in ("ext2", "ext3", "ext4", "xfs", "btrfs"):
        assert guest.filesystem_available(g, fs) is None, fs
    assert "unknown filesystem" in (guest.filesystem_available(g, "zfs") or "")


@pytest.mark.timeout(1200)
def test_failed_setup_undoes_what_it_made_on_uml(uml: Any) -> None:
    """raid1-mixed with its fast leg busy (mounted): the slow leg is made, mdadm fails, the slow leg goes."""
    g = uml
    first = g.list_devices()[0]
    sda = guest.real_names(g, [first])[first]
    g.mkfs("ext2", first)
    sh(g, f"mkdir -p /run/busy && mount {sda} /run/busy")
    try:
        with pytest.raises(StorageError, match=r"^building ext2 on raid1-mixed: creating the RAID1 array: .*busy"):
            guest.setup(g, "raid1-mixed", g.list_devices(), "ext2")
        assert sh(g, "dmsetup ls 2>&1").strip() == "No devices found"
    finally:
        sh(g, "umount /run/busy && rmdir /run/busy")
    assert_nothing_left(g)


@pytest.mark.timeout(1200)
def test_sized_layouts_on_uml(uml: Any) -> None:
    """size_mib sizes the device under test where the layout carves space."""
    g = uml
    for layout, want in (("partition", 16), ("lvm", 16), ("loop2", 16)):
        stack = guest.setup(g, layout, g.list_devices(), "ext2", size_mib=want)
        try:
            assert want * 2**20 <= stack.size_bytes < (want + 4) * 2**20, (layout, stack.size_bytes)
        finally:
            assert guest.teardown(g, stack) == []
    assert_nothing_left(g)


@pytest.mark.timeout(1200)
def test_layouts_on_uml(uml: Any) -> None:
    """The same stacks under User-Mode Linux, whose disks are /dev/vdX (virtio disks served by qemu-storage-daemon;
    /dev/ubdX on UML's own block driver) where the daemon says /dev/sdX."""
    g = uml
    assert guest.real_names(g, ["/dev/sda"]) == {"/dev/sda": "/dev/vda"}
    for layout in UML_LAYOUTS:  # 16 MiB where the layout carves space: loop3's images are written in full
        t0 = time.monotonic()
        stack, took = exercise(g, layout, "ext2", size_mib=16)
        print(f"uml {layout}: {stack.description}; set-up {took:.1f} s; all {time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    exercise(g, "raid1", "xfs")
    print(f"uml raid1 xfs: all {time.monotonic() - t0:.1f} s")
    assert_nothing_left(g)
