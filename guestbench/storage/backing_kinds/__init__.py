"""The registry of host storage kinds: how the host presents a disk image to the hypervisor.

Adding a kind: a module here with a HostKind subclass (see base.py), and one line below.
"""

from __future__ import annotations

from guestbench.storage.backing_kinds import file, loop, lvm, nbdkit, qemu_nbd
from guestbench.storage.backing_kinds.base import FORMATS, HostKind, Image, NbdKind

KINDS: dict[str, HostKind] = {kind.name: kind for kind in (
    file.File(),
    loop.Loop(),
    qemu_nbd.QemuNbd(),
    nbdkit.Nbdkit(),
    lvm.Lvm(),
)}

__all__ = ["FORMATS", "KINDS", "HostKind", "Image", "NbdKind"]
