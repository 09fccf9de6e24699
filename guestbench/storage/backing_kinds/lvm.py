"""An LV of a volume group on a host loop device over the image. Host LVM needs device-mapper in the host
kernel; `problem` says so (cheaply, before anything is created) instead of the kind disappearing."""

from __future__ import annotations

import itertools
import os
import time

from guestbench.util.errors import Unavailable
from guestbench.storage import backing_sys as bs
from guestbench.storage.drive import Drive
from guestbench.storage.backing_build import READY_TIMEOUT_S, Builder
from guestbench.storage.backing_kinds.base import Image
from guestbench.storage.backing_kinds.loop import Loop

LV_NAME = "disk"
_vg_serial = itertools.count(1)


def _dm_refusal(problem: str) -> str:
    return f"host LVM needs device-mapper in the host kernel: {problem}"


class Lvm(Loop):
    name = "lvm"
    label = "host LVM LV"
    programs = ("qemu-img", "losetup", "pvcreate", "vgcreate", "lvcreate", "vgremove", "pvremove")

    def problem(self, delay: bool) -> str | None:
        if problem := super().problem(delay):
            return problem
        problem = bs.device_mapper_problem()
        return _dm_refusal(problem) if problem else None

    def present(self, b: Builder, image: Image, as_file: bool, delay_ms: int | None) -> Drive:
        lv = _make_lv(b, image)
        return Drive(filename=lv, format="raw", kind=self.name, name=image.name,
                     describe=f"LV {lv} of a volume group on a loop device over a {image.describe}")


def _make_lv(b: Builder, image: Image) -> str:
    """A VG of its own on a loop device over the image, and one LV of all of it; the LV's device path."""
    # checked before anything was created (availability); checked again in case the host changed
    if problem := bs.device_mapper_problem():
        raise Unavailable(_dm_refusal(problem))
    pv = b.losetup(image.path)
    vg = f"{bs.VG_PREFIX}{os.getpid()}-{next(_vg_serial)}"  # the prefix tells a sweep it is guestbench's
    devices = ["--devices", pv]  # look at our PV only: no scan of the host's disks, no devices file
    b.res.record({"type": "vg", "vg": vg, "pv": pv})
    bs.checked([bs.exe("pvcreate"), *devices, "-ff", "-y", pv])
    bs.checked([bs.exe("vgcreate"), *devices, vg, pv])
    bs.checked([bs.exe("lvcreate"), *devices, "-y", "-n", LV_NAME, "-l", "100%FREE", vg])
    lv = f"/dev/{vg}/{LV_NAME}"
    mapper = f"/dev/mapper/{vg.replace('-', '--')}-{LV_NAME}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not os.path.exists(lv):
        if os.path.exists(mapper):
            return mapper
        if time.monotonic() > deadline:
            raise RuntimeError(f"lvcreate made {vg}/{LV_NAME} but neither {lv} nor {mapper} appeared")
        time.sleep(0.1)
    return lv
