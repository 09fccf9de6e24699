"""qemu-nbd serving the image over NBD; it serves raw or qcow2, and the drive is then raw (qemu-nbd
decodes)."""

from __future__ import annotations

from pathlib import Path

from guestbench.storage import backing_sys as bs
from guestbench.storage.backing_build import Builder
from guestbench.storage.backing_kinds.base import Image, NbdKind


class QemuNbd(NbdKind):
    name = "qemu-nbd"
    label = "qemu-nbd"
    programs = ("qemu-img", "qemu-nbd")

    def serve(self, b: Builder, image: Image, delay_ms: int | None) -> tuple[Path, str]:
        sock = b.socket(image.name)
        # --cache=writeback: the host page cache, flushes honoured, as for the file kind (qemu's default
        # drive cache mode); --persistent: libguestfs connects once per launch, and our readiness probe too
        proc = b.start(image.name, "qemu-nbd", [bs.exe("qemu-nbd"), f"--socket={sock}", f"--format={image.format}",
                                                "--cache=writeback", "--aio=threads", "--persistent", "--shared=16",
                                                str(image.path)])
        b.wait_nbd(sock, proc, "qemu-nbd")
        decoded = ", qcow2 decoded by qemu-nbd" if image.format == "qcow2" else ""
        return sock, f"{image.describe} served by qemu-nbd over NBD (unix socket{decoded})"
