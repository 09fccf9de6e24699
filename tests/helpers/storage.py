"""Guest-side storage stacks as the tests exercise them inside a launched appliance (a guestfs handle, UML's or
TCG's): built, written through, checked to be what they claim, made fresh and torn down with nothing left."""

from __future__ import annotations

import time
from typing import Any

from guestbench.storage import guest
from guestbench.storage.guest import Stack


def sh(g: Any, cmd: str) -> str:
    """`cmd`'s output, run by the appliance's shell (guestfs's debug sh)."""
    return str(g.debug("sh", [cmd]))


def sysroot_mount(g: Any) -> tuple[str, str]:
    """The device and filesystem type mounted at the appliance's /sysroot (the appliance has no awk)."""
    found = [ln.split() for ln in sh(g, "cat /proc/mounts").splitlines() if ln.split()[1:2] == ["/sysroot"]]
    assert len(found) == 1, found
    return found[0][0], found[0][2]


def assert_nothing_left(g: Any) -> None:
    """No mount under /sysroot or /run/guestbench, no loop device, no md array, no device-mapper device."""
    mounts = [ln for ln in sh(g, "cat /proc/mounts").splitlines()
              if " /sysroot" in ln or guest.LOWER_ROOT in ln]
    assert mounts == []
    assert sh(g, "losetup -a").strip() == ""
    assert "active" not in sh(g, "cat /proc/mdstat 2>/dev/null; true")  # no md module loaded yet: no file
    assert sh(g, "dmsetup ls 2>&1").strip() == "No devices found"


def check_structure(g: Any, stack: Stack, real: dict[str, str]) -> None:
    """The stack is what it says, seen from the appliance's kernel."""
    layout = stack.layout
    # the daemon's own order: the kernel may name the appliance's root /dev/sda and our disks sdb, sdc
    first, second = g.list_devices()[:2]
    sda = real[first]
    mounted = sysroot_mount(g)[0]
    kernel_dev = stack.device  # the daemon's /dev/sdX is /dev/vdX (or /dev/ubdX) under UML
    for daemon_name, real_name in real.items():
        kernel_dev = kernel_dev.replace(daemon_name, real_name)
    assert sh(g, f"readlink -f {mounted}").strip() == sh(g, f"readlink -f {kernel_dev}").strip()
    dev_type = sh(g, f"lsblk -dno TYPE {kernel_dev}").strip()
    if layout == "disk":
        assert sh(g, f"lsblk -dno TYPE {sda}").strip() == "disk"
        assert mounted == sda
    elif layout == "partition":
        assert sh(g, f"lsblk -dno TYPE {sda}1").strip() == "part"
        assert mounted == f"{sda}1"
    elif layout == "lvm":
        assert dev_type == "lvm"
        assert sh(g, "lvm pvs --noheadings -o pv_name,vg_name").split() == [sda, guest.VG]
    elif layout == "lvm-snapshot":
        attrs = dict(ln.split() for ln in sh(g, f"lvm lvs --noheadings -o lv_name,lv_attr {guest.VG}").splitlines())
        assert attrs["snap"].startswith("s") and attrs["origin"].startswith("o"), attrs
        assert " snapshot " in sh(g, f"dmsetup table {guest.VG}-snap")
        assert g.exists(f"/{guest.ORIGIN_DATA}")
    elif layout.startswith("raid1"):
        mdstat = sh(g, "cat /proc/mdstat")
        assert "md0 : active raid1" in mdstat, mdstat
        assert sda.removeprefix("/dev/") in mdstat
        if layout == "raid1-mixed":
            table = sh(g, f"dmsetup table {guest.SLOW_LEG}")
            assert " delay " in table and table.split()[-1] == "5", table
            slow = sh(g, f"readlink -f /dev/mapper/{guest.SLOW_LEG}").strip().removeprefix("/dev/")
            assert f"{slow}[1]" in mdstat, mdstat
        else:
            assert real[second].removeprefix("/dev/") in mdstat
    else:
        depth = int(layout[-1])
        assert dev_type == "loop"
        assert len(sh(g, "losetup -a").splitlines()) == depth
        assert stack.description.count("file on ext2") == depth
        assert len([ln for ln in sh(g, "cat /proc/mounts").splitlines() if guest.LOWER_ROOT in ln]) == depth


def exercise(g: Any, layout: str, fs: str, size_mib: int | None = None) -> tuple[Stack, float]:
    """Build, write, check, fresh, write again, fresh, tear down: returns the stack and the set-up time."""
    devices = g.list_devices()
    real = guest.real_names(g, devices)
    t0 = time.monotonic()
    stack = guest.setup(g, layout, devices, fs, size_mib=size_mib)
    took = time.monotonic() - t0
    try:
        assert stack.filesystem == fs and stack.layout == layout
        assert stack.description.startswith(f"{fs} on ")
        assert stack.size_bytes >= guest.MIN_SIZE_MIB[fs] * 2**20
        guest.fresh(g, stack)
        g.mkdir_p("/guestbench")
        g.write("/guestbench/probe", b"written through the stack")
        g.sync()
        g.drop_caches(3)
        assert g.cat("/guestbench/probe") == "written through the stack"
        assert sysroot_mount(g)[1] == fs
        check_structure(g, stack, real)
        guest.fresh(g, stack)
        assert not g.exists("/guestbench")
        assert g.statvfs("/")["blocks"] > 0
        if layout == "lvm-snapshot":
            check_structure(g, stack, real)  # the origin's data stays, the snapshot is still one
        g.write("/again", b"x")
        guest.fresh(g, stack)
        assert not g.exists("/again")
    finally:
        problems = guest.teardown(g, stack)
    assert problems == []
    assert_nothing_left(g)
    return stack, took
