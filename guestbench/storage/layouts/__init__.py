"""The registry of guest layouts: the block stacks built inside the appliance under the filesystem.

Adding a layout: a Layout subclass (see base.py) in a module here, and one line below.
"""

from __future__ import annotations

from guestbench.storage.layouts import disk, loop, lvm, partition, raid1
from guestbench.storage.layouts.base import Layout

LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    disk.Disk("disk"),
    partition.Partition("partition"),
    lvm.Lvm("lvm"),
    lvm.LvmSnapshot("lvm-snapshot"),
    raid1.Raid1("raid1"),
    raid1.Raid1("raid1-mixed", slow=True),
    loop.Loops("loop1", depth=1),
    loop.Loops("loop2", depth=2),
    loop.Loops("loop3", depth=3),
)}

__all__ = ["LAYOUTS", "Layout"]
