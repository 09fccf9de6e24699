"""Loop devices inside the appliance, `depth` deep: each on an image file in an ext2 on the layer below."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guestbench.storage.layouts.base import MIB, Build, Layout, Stack, StorageError, avail_bytes, reason, sh

LOWER_ROOT = "/run/guestbench"  # lower loop layers are mounted here, outside /sysroot (a tmpfs)


@dataclass(frozen=True)
class Loops(Layout):
    """`depth` loop devices, each on an image file in an ext2 on the layer below; the last one is tested.

    The lower filesystems are ext2 with 4 KiB blocks, few inodes and no reserved blocks: the cheapest
    way to hold one big file, and not what is measured (E4 measured the loop layers, not their hosts).
    Images are written in full unless preallocate=False: a sparse image would make every first write
    through the loop device allocate blocks in the filesystem below. Each image is the most that fits,
    or, with size_mib, about what the layer above needs.
    """

    depth: int = 1

    def predicted_mib(self, disk_mib: int) -> int:
        size = disk_mib
        for _ in range(self.depth):
            size = size - size // 100 - 3
        return size

    def build(self, g: Any, stack: Stack, b: Build) -> None:
        need = [b.size_mib * MIB if b.size_mib is not None else None]
        for _ in range(self.depth - 1):
            above = need[0]
            need.insert(0, None if above is None else above + above // 100 + 8 * MIB)
        disk = b.disks[0]
        below, below_name, inner = b.real[disk], disk, ""
        stack.layers = [f"{disk}: disk"]
        for level in range(1, self.depth + 1):
            dev = _layer(g, stack, level, below, below_name, need[level - 1], b.preallocate)
            inner = f"file on ext2 on {below_name}" + (f" ({inner})" if inner else "")
            below = below_name = dev
        stack.device = below
        stack.description = f"{stack.filesystem} on {below} ({inner})"


def _layer(g: Any, stack: Stack, level: int, below: str, below_name: str, needed: int | None,
           preallocate: bool) -> str:
    """One loop layer on `below`: an ext2 holding an image of `needed` bytes (None: all that fits), and a
    loop device on it; the device."""
    mnt = f"{LOWER_ROOT}/layer{level}"
    sh(g, f"mke2fs -q -F -t ext2 -b 4096 -m 0 -i 1048576 -O ^resize_inode {below} && mkdir -p {mnt} && "
          f"mount -t ext2 {below} {mnt}", f"making the ext2 of loop layer {level}")
    stack.resources.append(("umount", mnt))
    avail = avail_bytes(g, mnt)
    fits = (avail - avail // 256 - MIB) // MIB  # ext2's indirect blocks come out of the free space
    want = fits if needed is None else min(fits, -(-needed // MIB))
    image = f"{mnt}/image"
    write = (f"dd if=/dev/zero of={image} bs=1M count={want} status=none" if preallocate
             else f"truncate -s {want}M {image}")
    dev = sh(g, f"{write} && losetup -f --show {image}", f"making the image of loop layer {level}").strip()
    if not dev.startswith("/dev/loop"):
        raise StorageError(f"losetup gave no loop device for {image}: {reason(dev)}")
    stack.resources.append(("loop", dev))
    stack.layers.append(f"ext2 on {below_name}, holding {image} ({want} MiB{'' if preallocate else ', sparse'})")
    stack.layers.append(f"{dev}: loop device on that file")
    return dev
