"""What every host storage kind is: how it says whether this host can provide it, which image formats it
takes, and how it presents a new image to the hypervisor.

Every caching choice is made the same way for every kind: the image file is reached through the host page
cache and guest flushes reach the disk (qemu-nbd --cache=writeback, nbdkit's file plugin default, losetup
without direct I/O). The kinds then differ by the layer in between, not by cache policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from guestbench.storage.drive import Drive
from guestbench.storage.backing_build import Builder

FORMATS = ("raw", "qcow2")


@dataclass(frozen=True)
class Image:
    """A new image in the work dir, made for a kind to present."""

    name: str  # the drive's name
    path: Path
    format: str
    describe: str  # e.g. "raw image (preallocation=off) on the host's ext4"


class HostKind:
    """One way the host presents an image to the hypervisor.

    A new kind is a module with a subclass that sets the class attributes and `present`, and one line in
    guestbench.storage.backing_kinds.KINDS; Backings.add, `availability` and the workload's `host`
    parameter take it from there.
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""  # a few words for table captions, e.g. "host loop device"
    programs: ClassVar[tuple[str, ...]] = ("qemu-img",)  # needed on the host (qemu-img makes every image)
    formats: ClassVar[tuple[str, ...]] = FORMATS  # image formats it can present
    nbd: ClassVar[bool] = False  # an NBD export: can be shown as a plain file through nbdfuse (as_file)
    delay: ClassVar[bool] = False  # can add a delay to every request (delay_ms)

    def problem(self, delay: bool) -> str | None:
        """Why this host cannot provide the kind beyond a missing program (cheap, creates nothing); None if it can."""
        return None

    def format_refusal(self, fmt: str) -> str:
        """Why `fmt` (not in `formats`) cannot be presented this way, for the ValueError."""
        return f"{self.name} presents {', '.join(self.formats)} images only"

    def present(self, b: Builder, image: Image, as_file: bool, delay_ms: int | None) -> Drive:
        """Present `image` to the hypervisor, recording every piece made in `b`."""
        raise NotImplementedError


class NbdKind(HostKind):
    """An NBD server on a unix socket in the work dir; the drive is NBD, or with as_file a FUSE file."""

    nbd = True

    def serve(self, b: Builder, image: Image, delay_ms: int | None) -> tuple[Path, str]:
        """Start serving `image`: the socket, once the server answers, and how the image is served."""
        raise NotImplementedError

    def present(self, b: Builder, image: Image, as_file: bool, delay_ms: int | None) -> Drive:
        sock, served = self.serve(b, image, delay_ms)
        if as_file:
            path = b.fuse(image.name, sock)
            return Drive(filename=path, format="raw", describe=f"{served}, presented as a plain host file by nbdfuse",
                         kind=self.name, name=image.name)
        return Drive(filename="", format="raw", protocol="nbd", server=[f"unix:{sock}"], describe=served,
                     kind=self.name, name=image.name)
