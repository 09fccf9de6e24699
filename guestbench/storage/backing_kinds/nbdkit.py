"""nbdkit's file plugin serving the image over NBD, optionally behind its delay filter (a slow disk).

Raw only: nbdkit 1.32 has no qcow2dec filter (newer ones have a read-only one). nbdkit 1.32 asks for
SIGTERM on its parent's death by itself, then ends when its last client goes.
"""

from __future__ import annotations

import os
from pathlib import Path

from guestbench.storage import backing_sys as bs
from guestbench.storage.backing_build import Builder
from guestbench.storage.backing_kinds.base import Image, NbdKind


def serve(b: Builder, name: str, image: Path, filters: list[str], params: list[str]) -> Path:
    """Serve `image` with nbdkit's file plugin behind `filters`; the socket, once nbdkit answers on it."""
    sock = b.socket(name)
    argv = [bs.exe("nbdkit"), "--foreground", "--unix", str(sock), *[f"--filter={f}" for f in filters],
            "file", f"file={image}", *params]
    env = dict(os.environ, TMPDIR=str(b.workdir))  # the cache filter's scratch file goes here
    proc = b.start(name, "nbdkit", argv, env)
    b.wait_nbd(sock, proc, "nbdkit")
    return sock


class Nbdkit(NbdKind):
    name = "nbdkit"
    label = "nbdkit"
    programs = ("qemu-img", "nbdkit")
    formats = ("raw",)
    delay = True

    def problem(self, delay: bool) -> str | None:
        if not bs.nbdkit_has("plugin", "file"):
            return "nbdkit has no file plugin on this host"
        if delay and not bs.nbdkit_has("filter", "delay"):
            return "nbdkit has no delay filter on this host"
        return None

    def format_refusal(self, fmt: str) -> str:
        version = bs.nbdkit_config().get("version", "?")
        why = ("its qcow2dec filter only reads" if bs.nbdkit_has("filter", "qcow2dec")
               else f"nbdkit {version} has no qcow2dec filter (newer ones have a read-only one)")
        return f"nbdkit serves raw images only here: {why}; use qemu-nbd to serve qcow2"

    def serve(self, b: Builder, image: Image, delay_ms: int | None) -> tuple[Path, str]:
        filters: list[str] = []
        params: list[str] = []
        if delay_ms is not None:
            filters = ["delay"]
            params = [f"delay-{op}={delay_ms}ms" for op in ("read", "write", "zero", "trim")]
        sock = serve(b, image.name, image.path, filters, params)
        served = f"{image.describe} served by nbdkit's file plugin over NBD (unix socket)"
        if delay_ms is not None:
            served += f" with the delay filter (+{delay_ms} ms per read, write, zero and trim)"
        return sock, served
