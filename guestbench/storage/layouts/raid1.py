"""md RAID1 of two disks, optionally with one leg slowed down by dm-delay (E4's fast and slow disk)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from guestbench.storage.layouts.base import Build, Layout, Stack, sh_exclusive

MD = "/dev/md0"
SLOW_LEG = "guestbench-slow"
FORGET = ("for m in /dev/md?*; do test -b $m && mdadm --stop $m >/dev/null 2>&1; done; ",
          f"dmsetup remove {SLOW_LEG} >/dev/null 2>&1; ")


@dataclass(frozen=True)
class Raid1(Layout):
    """md RAID1 of two disks; with `slow` the second leg is behind dm-delay (a fast and a slow disk).

    --assume-clean: the legs are not synchronised first. A new array otherwise resyncs in the background,
    reading one leg and writing the other, and the first samples would compete with it. The data on the
    legs does not matter: the filesystem is made fresh before every sample. No write-intent bitmap, as in
    E4's arrays (it adds a write per region). The slow leg is a plain member, not --write-mostly: E4
    measured plain RAID1, so md's own read balancing decides which leg serves a read, and every write
    waits for both legs. (Seen on the 6.1 kernels here: a sequential read is split about evenly between
    the legs, so the slow leg slows reads too, unlike E4's "reads follow the fast one".)
    """

    disks: int = 2
    whole_device: bool = True
    forget: tuple[str, ...] = FORGET
    slow: bool = False  # the second leg gets build.delay_ms on every read and write

    def predicted_mib(self, disk_mib: int) -> int:
        return disk_mib - 2

    def build(self, g: Any, stack: Stack, b: Build) -> None:
        disks = b.disks[:2]
        legs = [b.real[disks[0]], b.real[disks[1]]]
        names = list(disks)
        stack.layers = [f"{disks[0]}: disk", f"{disks[1]}: disk"]
        if self.slow:
            q = shlex.quote(legs[1])
            sh_exclusive(g, f"dmsetup remove {SLOW_LEG} >/dev/null 2>&1; modprobe dm-delay && "
                  f"s=$(blockdev --getsz {q}) && "
                  f"echo \"0 $s delay {q} 0 {b.delay_ms} {q} 0 {b.delay_ms}\" | dmsetup create {SLOW_LEG} && "
                  f"udevadm settle", "making the slow leg with dm-delay")
            stack.resources.append(("dm", SLOW_LEG))
            legs[1] = names[1] = f"/dev/mapper/{SLOW_LEG}"
            stack.layers.append(f"{names[1]}: dm-delay of {disks[1]}, +{b.delay_ms} ms on every read and write")
        sh_exclusive(g, f"mdadm --create {MD} --run --level=1 --raid-devices=2 --metadata=1.2 --assume-clean "
                        f"--bitmap=none {' '.join(map(shlex.quote, legs))} </dev/null 2>&1", "creating the RAID1 array")
        stack.resources.append(("md", MD))
        stack.device = MD
        delayed = f" (dm-delay {b.delay_ms} ms on {disks[1]})" if self.slow else ""
        stack.description = f"{stack.filesystem} on {MD} (RAID1 of {names[0]} and {names[1]}{delayed})"
        stack.layers.append(f"{MD}: md RAID1, metadata 1.2, assumed clean, no bitmap")
