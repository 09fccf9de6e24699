"""A host loop device over the image (raw only: a loop device presents bytes; qcow2 behind it would still
need qemu and could not grow past the device)."""

from __future__ import annotations

from typing import ClassVar

from guestbench.storage import backing_sys as bs
from guestbench.storage.drive import Drive
from guestbench.storage.backing_build import Builder
from guestbench.storage.backing_kinds.base import HostKind, Image


class Loop(HostKind):
    name = "loop"
    label = "host loop device"
    programs: ClassVar[tuple[str, ...]] = ("qemu-img", "losetup")
    formats: ClassVar[tuple[str, ...]] = ("raw",)

    def problem(self, delay: bool) -> str | None:
        problem = bs.loop_problem()
        return f"host {self.name} storage: {problem}" if problem else None

    def format_refusal(self, fmt: str) -> str:
        return (f"{self.name} is raw only: a loop device presents the image's bytes, so a qcow2 image behind it "
                "would still be decoded by qemu and could not grow past the device's fixed size; use qemu-nbd "
                "to serve qcow2")

    def present(self, b: Builder, image: Image, as_file: bool, delay_ms: int | None) -> Drive:
        device = b.losetup(image.path)
        return Drive(filename=device, format="raw", kind=self.name, name=image.name,
                     describe=f"{image.describe} reached through {device}")
