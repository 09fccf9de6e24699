"""The whole disk, nothing between it and the filesystem."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guestbench.storage.layouts.base import Build, Layout, Stack


@dataclass(frozen=True)
class Disk(Layout):
    whole_device: bool = True

    def predicted_mib(self, disk_mib: int) -> int:
        return disk_mib

    def build(self, g: Any, stack: Stack, b: Build) -> None:
        disk = b.disks[0]
        stack.device, stack.description = disk, f"{stack.filesystem} on {disk}"
        stack.layers = [f"{disk}: whole disk"]
