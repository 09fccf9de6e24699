"""The guest layout registry without an appliance: a fake libguestfs handle answers the shell commands a
layout runs, so that what each layout asks for, describes and undoes is checked in milliseconds.

test_storage_guest.py builds the same stacks in real appliances.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from guestbench.storage import guest
from guestbench.storage.layouts import LAYOUTS, Layout
from guestbench.storage.layouts.base import MIB, Build, Stack, StorageError

DISK_BYTES = 1024 * MIB


class FakeG:
    """Records every call; answers what the layouts read back with plausible values."""

    def __init__(self, disks: int = 2, disk_bytes: int = DISK_BYTES, kernel_prefix: str = "sd",
                 fail: str | None = None) -> None:
        self.devices = [f"/dev/sd{chr(ord('a') + i)}" for i in range(disks)]
        self.disk_bytes = disk_bytes
        self.kernel_prefix = kernel_prefix
        self.fail = fail  # a shell command containing this fails
        self.calls: list[tuple[Any, ...]] = []
        self._loops = itertools.count()

    def list_devices(self) -> list[str]:
        return list(self.devices)

    def blockdev_getsize64(self, dev: str) -> int:
        return self.disk_bytes if dev in self.devices else self.disk_bytes // 2

    def blockdev_getsz(self, dev: str) -> int:
        return self.blockdev_getsize64(dev) // 512

    def feature_available(self, features: list[str]) -> bool:
        return True

    def ls(self, path: str) -> list[str]:
        return ["lost+found", "origin-data"]

    def debug(self, cmd: str, args: list[str]) -> str:
        script = args[0]
        self.calls.append(("sh", script))
        if self.fail and self.fail in script:
            raise RuntimeError(f"debug: {self.fail} failed:\nsome output\n  more")
        if script.startswith("for d in /sys/block/sd*"):  # the kernel's disks: SCSI addresses, or UML's ubd
            if self.kernel_prefix == "sd":
                return "".join(f"2:0:{i}:0 sd{chr(ord('a') + i)}\n" for i in range(len(self.devices) + 1))
            letters = re.search(rf"/dev/{self.kernel_prefix}([a-z]+)", script)
            return f"other /dev/{self.kernel_prefix}{letters.group(1) if letters else 'a'}\n"
        if "losetup -f --show" in script:
            return f"/dev/loop{next(self._loops)}\n"
        answers = {"vg_free_count": "255", "vg_extent_size": "4194304", "df -B1": "500000000",
                   "mkfs.": "/sbin\nkernel\n", "snap_percent": " 12,50"}
        return next((out for key, out in answers.items() if key in script), "")

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> None:
            self.calls.append((name, *args))
        return call


def test_the_registry_names_every_layout_once_and_guest_reads_it() -> None:
    assert guest.LAYOUTS == tuple(LAYOUTS) == ("disk", "partition", "lvm", "lvm-snapshot", "raid1", "raid1-mixed",
                                               "loop1", "loop2", "loop3")
    assert all(name == layout.name and isinstance(layout, Layout) for name, layout in LAYOUTS.items())
    assert guest.WHOLE_DEVICE_LAYOUTS == ("disk", "raid1", "raid1-mixed")
    assert [guest.disks_needed(name) for name in LAYOUTS] == [1, 1, 1, 1, 2, 2, 1, 1, 1]
    with pytest.raises(ValueError, match="unknown layout 'raid5'"):
        guest.disks_needed("raid5")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_builds_describes_and_undoes_what_it_made(layout: str) -> None:
    g = FakeG(kernel_prefix="ubd")
    stack = guest.setup(g, layout, g.list_devices(), "ext4")
    assert stack.layout == layout and stack.filesystem == "ext4" and stack.device
    assert stack.description.startswith("ext4 on ") and "ubd" not in stack.description  # the daemon's names
    assert stack.size_bytes >= 4 * MIB and stack.layers[0].startswith("/dev/sda")
    kept = LAYOUTS[layout].keeps_filesystem
    assert stack.layers[-1] == ("ext4 made once on the origin, mounted from the snapshot" if kept
                                else "ext4 made fresh before every sample")
    made = list(stack.resources)
    assert guest.teardown(g, stack) == [] and stack.resources == []
    undone = [c[1] for c in g.calls if c[0] == "sh"][-len(made):] if made else []
    assert len(undone) == len(made) and all(name in cmd for (_, name), cmd in zip(reversed(made), undone))


def test_clean_slate_forgets_what_every_layout_may_leave() -> None:
    g = FakeG()
    guest.setup(g, "disk", g.list_devices(), "ext2")
    clean = next(c[1] for c in g.calls if c[0] == "sh" and "wipefs" in c[1])
    assert clean.index(f"vgchange -an {guest.VG}") < clean.index("mdadm --stop") < \
        clean.index(f"dmsetup remove {guest.SLOW_LEG}") < clean.index("wipefs -a")
    assert clean.count("mdadm --stop") == 1 and clean.count("vgchange") == 1


def test_raid1_mixed_slows_the_second_leg_by_its_kernel_name() -> None:
    g = FakeG(kernel_prefix="ubd")
    stack = guest.setup(g, "raid1-mixed", g.list_devices(), "ext2", delay_ms=7)
    delay = next(c[1] for c in g.calls if c[0] == "sh" and "dmsetup create" in c[1])
    assert "/dev/ubdb 0 7" in delay and stack.resources == [("dm", guest.SLOW_LEG), ("md", guest.MD)]
    assert stack.description == f"ext2 on {guest.MD} (RAID1 of /dev/sda and /dev/mapper/{guest.SLOW_LEG} " \
                                "(dm-delay 7 ms on /dev/sdb))"


def test_loop3_nests_three_layers() -> None:
    g = FakeG()
    stack = guest.setup(g, "loop3", g.list_devices(), "ext2", preallocate=False)
    assert stack.device == "/dev/loop2"
    assert stack.description == ("ext2 on /dev/loop2 (file on ext2 on /dev/loop1 (file on ext2 on /dev/loop0 "
                                 "(file on ext2 on /dev/sda)))")
    assert [kind for kind, _ in stack.resources] == ["umount", "loop"] * 3
    assert any("sparse" in layer for layer in stack.layers)


def test_fresh_keeps_the_snapshots_filesystem_and_remakes_the_others() -> None:
    g = FakeG()
    snap = guest.setup(g, "lvm-snapshot", g.list_devices(), "ext4")
    assert snap.keep == ["lost+found", "origin-data"] and guest.snapshot_usage(g, snap) == 12.5
    g.calls.clear()
    guest.fresh(g, snap)
    assert not any(c[0] == "mkfs" for c in g.calls)
    plain = guest.setup(g, "lvm", g.list_devices(), "ext4")
    g.calls.clear()
    guest.fresh(g, plain)
    assert ("mkfs", "ext4", f"/dev/{guest.VG}/test") in g.calls and guest.snapshot_usage(g, plain) is None


def test_a_failed_build_is_undone_and_said_in_one_line() -> None:
    g = FakeG(fail="mdadm --create")
    with pytest.raises(StorageError) as e:
        guest.setup(g, "raid1-mixed", g.list_devices(), "ext2")
    assert str(e.value) == ("building ext2 on raid1-mixed: creating the RAID1 array: mdadm --create failed: "
                            "some output more")
    assert g.calls[-1] == ("sh", f"dmsetup remove {guest.SLOW_LEG}")


def test_refusals_before_anything_is_built() -> None:
    g = FakeG(disks=1, disk_bytes=200 * MIB)
    with pytest.raises(ValueError, match=r"xfs on layout lvm-snapshot needs at least 300 MiB.*at least \d+ MiB"):
        guest.setup(g, "lvm-snapshot", g.list_devices(), "xfs")
    with pytest.raises(ValueError, match="layout raid1 needs 2 disks, the appliance has 1"):
        guest.setup(g, "raid1", g.list_devices(), "ext2")
    with pytest.raises(ValueError, match="unknown filesystem"):
        guest.setup(g, "disk", g.list_devices(), "zfs")
    with pytest.raises(ValueError, match="snapshot_chunk_kib"):
        guest.setup(g, "disk", g.list_devices(), "ext2", snapshot_chunk_kib=3)
    assert g.calls == []


def test_a_new_layout_is_one_class_and_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    class Mirror(Layout):
        def predicted_mib(self, disk_mib: int) -> int:
            return disk_mib

        def build(self, g: Any, stack: Stack, b: Build) -> None:
            stack.device, stack.description, stack.layers = b.disks[0], "mirror", ["m"]

    monkeypatch.setitem(LAYOUTS, "mirror", Mirror("mirror"))
    g = FakeG()
    assert guest.disks_needed("mirror") == 1
    assert guest.setup(g, "mirror", g.list_devices(), "ext2").layers == ["m", "ext2 made fresh before every sample"]
