"""One partition (MBR or GPT) on the disk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guestbench.storage.layouts.base import Build, Layout, Stack


@dataclass(frozen=True)
class Partition(Layout):
    def predicted_mib(self, disk_mib: int) -> int:
        return disk_mib - 2

    def build(self, g: Any, stack: Stack, b: Build) -> None:
        """One partition from 1 MiB (aligned for any erase block or RAID stripe) to the end or size_mib."""
        disk, table = b.disks[0], b.partition_table
        g.part_init(disk, "gpt" if table == "gpt" else "msdos")
        end = -34 if table == "gpt" else -1  # GPT keeps its backup header in the last 33 sectors
        if b.size_mib is not None:
            total = int(g.blockdev_getsz(disk))
            last = total - 34 if table == "gpt" else total - 1
            end = min(2048 + b.size_mib * 2048 - 1, last)
        g.part_add(disk, "p", 2048, end)
        stack.device = f"{disk}1"
        stack.description = f"{stack.filesystem} on {stack.device} ({table.upper()} partition on {disk})"
        stack.layers = [f"{disk}: disk", f"{stack.device}: {table.upper()} partition from 1 MiB"]
