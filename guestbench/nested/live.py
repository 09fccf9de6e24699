"""Snapshots of the level-1 guest's results file, written to a raw disk the host reads while the guest runs.

Why: the output disk is only readable after the guest powers off, but samples taken inside must survive a
Ctrl-C, a deadline or a crash of the level-1 guest. The guest rewrites one snapshot whenever its results
file changes; the host polls the disk image and keeps the last snapshot that checks out. Layout: the
content from byte HEADER_SIZE on, then the header at byte 0 (written last): magic, sequence number, length
and SHA-256 of the content. A host read that races a guest write sees a checksum mismatch and keeps the
snapshot it had.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"GBLIVE1"
HEADER_SIZE = 4096
DISK_SIZE = 64 * 2**20


@dataclass(frozen=True)
class Snapshot:
    seq: int
    content: bytes


def write(device: str | Path, seq: int, content: bytes) -> None:
    """Guest side: content first, header last, each forced to the (virtual) disk."""
    if len(content) > DISK_SIZE - HEADER_SIZE:
        raise ValueError(f"snapshot of {len(content)} bytes does not fit the {DISK_SIZE} byte live disk")
    header = b"%s %d %d %s\n" % (MAGIC, seq, len(content), hashlib.sha256(content).hexdigest().encode())
    fd = os.open(device, os.O_WRONLY)
    try:
        os.pwrite(fd, content, HEADER_SIZE)
        os.fsync(fd)
        os.pwrite(fd, header.ljust(HEADER_SIZE, b"\0"), 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: str | Path) -> Snapshot | None:
    """Host side: the snapshot on the disk image, or None when there is none or it is being rewritten."""
    try:
        with open(path, "rb") as f:
            header = f.read(HEADER_SIZE)
            fields = header.split(b"\n", 1)[0].split(b" ")
            if len(fields) != 4 or fields[0] != MAGIC:
                return None
            seq, length, digest = int(fields[1]), int(fields[2]), fields[3].decode("ascii", "replace")
            if not 0 <= length <= DISK_SIZE - HEADER_SIZE:
                return None
            content = f.read(length)
    except (OSError, ValueError):
        return None
    if len(content) != length or hashlib.sha256(content).hexdigest() != digest:
        return None
    return Snapshot(seq, content)
