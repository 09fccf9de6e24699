"""libguestfs's drives, read from the qemu command line it gives the uml hypervisor program, and the path each takes.

Two paths reach UML's guest: its own block driver (ubd), which opens raw files and its own COW files and nothing
else, and a virtio disk served over vhost-user by qemu-storage-daemon (guestbench.backends.uml.storage_daemon),
which opens whatever qemu opens (qcow2 and its backing chains, the other image formats, NBD, HTTP) with the cache
mode, block size, discard and copy-on-read libguestfs asked for.

Every drive takes vhost-user-blk unless ubd is asked for (DRIVES_ENV): measured side by side here (docs/backends.md,
2026-12-07), ubd was faster at nothing (start-up: vhost-user-blk 1.03x [0.93, 1.14]), slower at the disk workloads
(vhost-user-blk write-no-upload 0.91x, fio 1 MiB direct writes 0.86x, reads 0.82x), and only vhost-user-blk honours
the guest's fsync (docs/experiments/durability.md). The two are
never mixed in one launch: the appliance's daemon names disks by their place in /dev/disk/by-path, where UML's ubd
devices (platform-uml-blkdev.N) sort before its virtio ones (platform-virtio-uml.N), so a mix would rename them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any

UBD, VHOST_USER_BLK = "ubd", "vhost-user-blk"
DRIVE_PATHS = (UBD, VHOST_USER_BLK)
AUTO = "auto"
DRIVES_ENV = "GUESTBENCH_UML_DRIVES"  # ubd | vhost-user-blk | auto (the default: vhost-user-blk): how drives reach UML
# qemu's -drive cache= modes as block-node options (cache.direct, cache.no-flush) and whether the device writes through
CACHE_MODES = {"writeback": (False, False, False), "none": (True, False, False), "unsafe": (False, True, False),
               "writethrough": (False, False, True), "directsync": (True, False, True)}
URL_PROTOCOLS = ("http", "https", "ftp", "ftps")


class TranslateError(Exception):
    """The qemu command line asks for something UML cannot do."""


@dataclass
class Drive:
    """One of libguestfs's -drive options, in the terms both paths need."""

    path: str  # a file or block device; for another protocol, the whole qemu file= string
    fmt: str | None  # None: not given (qemu probes it)
    appliance: bool
    readonly: bool
    drive_id: str = ""
    protocol: str = "file"
    cache: str = "writeback"
    snapshot: bool = False  # writes go to a temporary overlay (libguestfs's snapshot=on)
    discard: bool = False
    copy_on_read: bool = False
    locking_off_backing: bool = False  # libguestfs's overlay opens its backing file without locks
    blocksize: int | None = None  # physical and logical block size the device shows (bytes)
    label: str | None = None  # libguestfs's disk label (the device's serial=): neither path can show one
    # ubd: an empty qcow2 overlay over this raw image (libguestfs's protection of read-only drives): UML gets a COW
    # file of its own over the image instead, and the image is only ever opened read-only
    backing: str | None = None
    route: str = ""  # UBD or VHOST_USER_BLK, once chosen


@dataclass
class Devices:
    """What -device options said about the drives (by drive id): their block sizes."""

    blocksize: dict[str, int] = field(default_factory=dict)
    label: dict[str, str] = field(default_factory=dict)


def kv(value: str) -> dict[str, str]:
    """qemu's key=value,key=value, where ',,' is a literal comma."""
    out: dict[str, str] = {}
    for part in re.split(r"(?<!,),(?!,)", value):
        k, _, v = part.partition("=")
        out[k] = v.replace(",,", ",")
    return out


def protocol_of(path: str) -> str:
    """The protocol of a qemu file= string, as libguestfs writes them (qemu.c): file for a plain path."""
    if path.startswith("nbd:"):
        return "nbd"
    m = re.match(r"^([a-z+]+)://", path)
    if m:
        return m.group(1)
    if path.startswith(("rbd:", "json:")):
        return path.split(":", 1)[0]
    return "file"


def drive(d: dict[str, str]) -> Drive:
    """One -drive, in either of the spellings libguestfs uses (file=...,format=... or, for its overlays,
    file.file.filename=...,file.driver=qcow2)."""
    path = d.get("file") or d.get("file.file.filename") or d.get("file.filename")
    if not path:
        raise TranslateError(f"a -drive without a file: {','.join(f'{k}={v}' for k, v in d.items())}")
    fmt = d.get("format") or d.get("file.driver") or None
    cache = d.get("cache") or "writeback"
    if cache not in CACHE_MODES:
        raise TranslateError(f"cache mode {cache} of drive {path} is not one qemu has ({', '.join(CACHE_MODES)})")
    return Drive(path, fmt, d.get("id") == "appliance", d.get("readonly") in ("on", ""), drive_id=d.get("id", ""),
                 protocol=protocol_of(path), cache=cache, snapshot=d.get("snapshot") == "on",
                 discard=d.get("discard") == "unmap", copy_on_read=d.get("copy-on-read") == "on",
                 locking_off_backing=d.get("file.backing.file.locking") == "off")


def device(d: dict[str, str], devices: Devices) -> None:
    """Note what one -device says about its drive (scsi-hd or virtio-blk: physical/logical_block_size)."""
    if d.get("drive") and d.get("serial"):
        devices.label[d["drive"]] = d["serial"]
    size = d.get("logical_block_size") or d.get("physical_block_size")
    if d.get("drive") and size:
        try:
            devices.blocksize[d["drive"]] = int(size)
        except ValueError:
            raise TranslateError(f"block size {size!r} of drive {d['drive']} is not a number") from None


def choose(drives: list[Drive], wanted: str) -> None:
    """Set each drive's route (UBD or VHOST_USER_BLK) as `wanted` (DRIVES_ENV) says: auto is vhost-user-blk (the
    module docstring says why); ubd takes every drive or refuses the launch, saying which drive it cannot open. The
    appliance's root is always ubd (UML boots from it before any module loads)."""
    if wanted not in (AUTO, *DRIVE_PATHS):
        raise TranslateError(f"{DRIVES_ENV}={wanted!r}: allowed {AUTO}, {', '.join(DRIVE_PATHS)}")
    for d in drives:
        if d.label is not None:
            raise TranslateError(f"drive {d.path} has the label {d.label!r}: UML's disks cannot carry one (neither "
                                 "ubd nor qemu-storage-daemon's vhost-user-blk gives the guest a serial number); add "
                                 "it without a label")
    for d in drives:
        if d.appliance:
            d.route = UBD
            continue
        if wanted == UBD and (why_not := ubd_refusal(d)) is not None:
            raise TranslateError(f"UML's block driver cannot take {d.path} ({why_not}); {DRIVES_ENV}={UBD} "
                                 f"asked for it alone")
        if wanted != UBD and CACHE_MODES[d.cache][2]:  # the init turns every virtio disk's write cache on
            raise TranslateError(f"cache mode {d.cache} of drive {d.path} cannot reach UML's virtio disks (their "
                                 "write cache is on, for the guest to flush); libguestfs's writeback and unsafe can")
        d.route = UBD if wanted == UBD else VHOST_USER_BLK


def unguarded(drives: list[Drive]) -> list[str]:
    """Warnings for writable drives added without a format: qemu refuses a guest's write that would make a probed
    raw image's first sector look like another format; neither of UML's paths can (qemu-storage-daemon is given the
    format qemu probed; ubd never looks), so a later open that probes the image may take it for what the guest
    wrote. Asked once a launch (qemu-img), only for such drives."""
    return [f"drive {d.path} was added without a format and probes as raw: unlike qemu, UML's disks do not guard "
            "its first sector against a guest that would make it look like another format; add it with format=raw"
            for d in drives if not d.appliance and d.fmt is None and not d.readonly and not d.snapshot
            and d.protocol == "file" and probed_format(d.path) == "raw"]


def ubd_refusal(d: Drive) -> str | None:
    """Why UML's own block driver cannot take drive `d`, or None (setting d.backing for an empty overlay)."""
    if d.protocol != "file":
        return f"a {d.protocol} drive"
    if d.blocksize:
        return f"a block size of {d.blocksize} bytes"
    if d.copy_on_read:
        return "copy-on-read"
    fmt = d.fmt or probed_format(d.path)
    if d.snapshot:  # writes go to a COW file of UML's over the image, as to qemu's temporary overlay
        d.backing = d.path
        return None if fmt == "raw" else f"a snapshot of {fmt}, not raw"
    if fmt == "qcow2":
        why, d.backing = raw_backing_of_empty_overlay(d.path)
        return why
    return None if fmt == "raw" else f"{fmt}, not raw"


def qemu_img(path: str, *args: str) -> object:
    """qemu-img's JSON answer about `path`, read with --force-share (libguestfs opens an overlay's backing file
    without locks: the image may be the disk of a running VM); TranslateError when it cannot read it."""
    try:
        out = subprocess.run(["qemu-img", *args, "-U", "--output=json", path], capture_output=True, text=True,
                             timeout=60, check=True, stdin=subprocess.DEVNULL).stdout
        return json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        said = getattr(exc, "stderr", None) or exc
        raise TranslateError(f"qemu-img {args[0]} cannot read {path}: {' '.join(str(said).split())}") from None


@functools.cache
def probed_format(path: str) -> str:
    """The format qemu would probe for an image given without one; asked once a launch (the hypervisor program is one
    launch), however many of choose(), unguarded() and the storage daemon's nodes want it."""
    info = qemu_img(path, "info")
    fmt = info.get("format") if isinstance(info, dict) else None
    if not isinstance(fmt, str):
        raise TranslateError(f"qemu-img cannot tell the format of {path}")
    return fmt


def backing_of(path: str) -> tuple[dict[str, Any], str | None, str | None]:
    """qemu-img's info on an image, its backing file (None: it has none) and that file's format as the image states it
    (None: unstated)."""
    info = qemu_img(path, "info")
    if not isinstance(info, dict):
        return {}, None, None
    backing = info.get("full-backing-filename") or info.get("backing-filename")
    fmt = info.get("backing-filename-format")
    return info, backing if isinstance(backing, str) and backing else None, fmt if isinstance(fmt, str) else None


def raw_backing_of_empty_overlay(path: str) -> tuple[str | None, str | None]:
    """(None, the raw image) for a qcow2 overlay that holds nothing of its own over a raw image of its size, else
    (why not, None). libguestfs puts such an overlay over every read-only drive (virt-ls, guestfish --ro,
    readonly=true) so that the image is never written; a UML COW file over the raw image gives the same protection."""
    info, backing, fmt = backing_of(path)
    if not backing:
        return "qcow2 with no backing file", None
    if fmt != "raw":
        return f"qcow2 over {fmt or 'an image of unstated format'}", None
    extents = qemu_img(path, "map")
    if not isinstance(extents, list) or any(e.get("depth") == 0 for e in extents):
        return "a qcow2 overlay holding data of its own", None
    try:
        fd = os.open(backing, os.O_RDONLY)
        try:
            size = os.lseek(fd, 0, os.SEEK_END)  # a block device's size too (its st_size is 0)
        finally:
            os.close(fd)
    except OSError as exc:
        raise TranslateError(f"the backing file {backing} of {path} cannot be opened: {exc.strerror}") from None
    if info.get("virtual-size") != -(-size // 512) * 512:  # qemu rounds an image up to whole sectors
        return "a qcow2 overlay of another size than its backing file", None
    return None, str(backing)
