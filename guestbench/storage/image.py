"""Disk images for libguestfs's own programs to work on, made on the host without an appliance.

virt-ls, virt-cat, virt-tar-out and guestfish -i inspect the image first and refuse one with no operating
system, so an image can hold a small tree that libguestfs's inspection recognises as Debian (os-release,
fstab, /bin and /usr/bin), plus `files` small files under /srv/data for the program to chew on. mke2fs
fills the filesystem from a directory (-d), so making one takes well under a second and no launch. Every
timestamp, owner, UUID and hash seed is fixed: on one host (one e2fsprogs and its mke2fs.conf) the same
spec gives the same bytes, on every backend.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid as _uuid
from dataclasses import dataclass
from pathlib import Path

from guestbench.host import commands
from guestbench.storage.backing_kinds.base import FORMATS

FILESYSTEMS = ("ext2", "ext3", "ext4")
FIXED_TIME = 1700000000  # every timestamp in an image (2023-11-14)
DATA_DIR = "srv/data"  # where the small files are, from the image's root
OS_RELEASE = ('ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\nNAME="Debian GNU/Linux"\n'
              'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')


class ImageError(RuntimeError):
    """An image could not be made (a host tool failed or is missing); the message says which and why."""


@dataclass(frozen=True)
class ImageSpec:
    size: int  # bytes
    filesystem: str = "ext4"
    files: int = 20  # small files under /srv/data
    os_tree: bool = True  # a tree that inspection recognises as Debian 12
    format: str = "raw"


def make_image(path: Path, spec: ImageSpec) -> Path:
    """Write the image to `path` (the filesystem on the whole disk, as /dev/sda); returns path."""
    if spec.filesystem not in FILESYSTEMS:
        raise ValueError(f"filesystem {spec.filesystem!r}; allowed: {', '.join(FILESYSTEMS)}")
    if spec.format not in FORMATS:
        raise ValueError(f"format {spec.format!r}; allowed: {', '.join(FORMATS)}")
    with tempfile.TemporaryDirectory(prefix="gb-tree-", dir=path.parent) as tmp:
        root = Path(tmp) / "root"
        _tree(root, spec)
        raw = path if spec.format == "raw" else Path(tmp) / "image.raw"
        with open(raw, "wb") as f:
            f.truncate(spec.size)
        # the same spec gives the same bytes, on every backend and host: a fixed UUID, hash seed and clock
        fixed = {**os.environ, "E2FSPROGS_FAKE_TIME": str(FIXED_TIME)}
        uuid = str(_uuid.uuid5(_uuid.NAMESPACE_URL, f"guestbench-image:{spec}"))
        _run(["mke2fs", "-q", "-F", "-t", spec.filesystem, "-U", uuid, "-E", f"hash_seed={uuid}", "-d", str(root),
              str(raw)], "mke2fs", env=fixed)
        # mke2fs -d copies each file's change time, which no call can set on the host, and its owner: both are
        # set in the image
        script = Path(tmp) / "fixups"
        script.write_text("".join(f"sif {name} ctime {FIXED_TIME}\nsif {name} uid 0\nsif {name} gid 0\n"
                                  for name in ["/", *(f"/{p.relative_to(root)}" for p in sorted(root.rglob("*")))]))
        _run(["debugfs", "-w", "-f", str(script), str(raw)], "debugfs", env=fixed)
        if spec.format == "qcow2":
            _run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(path)], "qemu-img convert")
            raw.unlink()
    return path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _tree(root: Path, spec: ImageSpec) -> None:
    data = root / DATA_DIR
    data.mkdir(parents=True)
    for i in range(spec.files):
        (data / f"file{i:05d}.txt").write_text(f"guestbench file {i}\n" * (1 + i % 16))
    if spec.os_tree:
        _os_tree(root, spec)
    for path in [root, *root.rglob("*")]:
        os.utime(path, (FIXED_TIME, FIXED_TIME), follow_symlinks=False)


def _os_tree(root: Path, spec: ImageSpec) -> None:
    for d in ("etc", "bin", "usr/bin", "root", "tmp", "var/lib"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text(OS_RELEASE)
    (root / "etc/debian_version").write_text("12.0\n")
    (root / "etc/hostname").write_text("guestbench-image\n")
    (root / "etc/fstab").write_text(f"/dev/sda / {spec.filesystem} defaults 0 1\n")
    for d in ("bin", "usr/bin"):  # inspection looks for these directories; a small script will do
        (root / d / "true").write_text("#!/bin/sh\nexit 0\n")
        os.chmod(root / d / "true", 0o755)
    os.chmod(root / "tmp", 0o1777)


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    commands.checked(argv, what, 120, env=env, error=ImageError, missing="to make disk images")
