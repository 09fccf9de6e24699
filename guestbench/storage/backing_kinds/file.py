"""The image file itself, opened by the hypervisor."""

from __future__ import annotations

from guestbench.storage.drive import Drive
from guestbench.storage.backing_build import Builder
from guestbench.storage.backing_kinds.base import HostKind, Image


class File(HostKind):
    name = "file"
    label = "image file"

    def present(self, b: Builder, image: Image, as_file: bool, delay_ms: int | None) -> Drive:
        return Drive(filename=str(image.path), format=image.format, kind=self.name, name=image.name,
                     describe=f"{image.describe}, opened by the hypervisor as a file")
