"""Incompressible host files to upload, generated once per size and kept in the cache."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path

import numpy as np

from guestbench.host import locks
from guestbench.host import owned
from guestbench.host import space
from guestbench.util.errors import Unavailable
from guestbench.host.paths import cache_dir
from guestbench.util.units import format_size

CHUNK = 8 * 2**20
LOCK_WAIT_S = 1800.0  # another run making the same payload: minutes for GiBs on a slow disk
_MAKING = threading.Lock()  # the cells of a block set up at once: one thread makes a payload, the others reuse it


def payload(size: int) -> tuple[Path, str]:
    """Return (path, sha256) of a file of `size` random bytes; made atomically, reused when intact.

    Raises Unavailable when the cache's filesystem cannot hold it (checked first, and on ENOSPC while writing):
    the cell says where and how much, and the run goes on."""
    d = cache_dir() / "payloads"
    lock = cache_dir() / "locks" / f"payload-{size}.lock"
    with _MAKING, locks.exclusive(lock, f"the {format_size(size)} payload", LOCK_WAIT_S):
        try:
            return _payload(d, size)
        except OSError as e:
            if e.errno in space.NO_SPACE:
                raise Unavailable(f"cannot make the {format_size(size)} payload: {space.os_error_line(e)}") from None
            raise


def _payload(d: Path, size: int) -> tuple[Path, str]:
    owned.ensure_dir(d, "the payloads' directory", env="GUESTBENCH_CACHE")
    path = d / f"random-{size}.bin"
    sums = d / f"random-{size}.sha256"
    if path.exists() and sums.exists() and path.stat().st_size == size:
        digest = sums.read_text().strip()
        if re.fullmatch(r"[0-9a-f]{64}", digest):  # an empty or torn checksum file means: make it again
            return path, digest
    space.require(d, size, f"the {format_size(size)} payload")
    rng = np.random.default_rng(size)  # random bytes compress to nothing; seeded so reruns match
    h = hashlib.sha256()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            left = size
            while left:
                block = rng.bytes(min(CHUNK, left))
                h.update(block)
                f.write(block)
                left -= len(block)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    digest = h.hexdigest()
    tmp_sums = sums.with_name(f".{sums.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp_sums.write_text(digest + "\n")
    os.replace(tmp_sums, sums)
    return path, digest
