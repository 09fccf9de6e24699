"""Free space on the host: checked before a cell (will its payload and images fit?) and named after a failure
(which filesystem filled up), so that a full disk is one line saying where, never a hang or a traceback."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from guestbench.util.errors import Unavailable
from guestbench.host.paths import cache_path, temp_root
from guestbench.util.units import approx_size, format_size

# Room kept free beyond what a cell needs: libguestfs's overlays and sockets, logs, the filesystem's own slack.
MARGIN = 64 * 2**20
# A filesystem with less than this free is "full" when a write failed on it: a guest's large write fails while a
# few MiB are still free (by hand: UML's writes failed on a tmpfs with 4 MiB left), and nobody runs on less.
FULL_BELOW = 8 * 2**20
# errno values that mean "the filesystem cannot take more": what a user fixes by freeing space.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def existing(path: Path) -> Path:
    """`path` or its nearest existing ancestor (a directory about to be made is on its parent's filesystem)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still put on the filesystem that holds `path`."""
    st = os.statvfs(existing(path))
    return st.f_bavail * st.f_frsize


def mount_point(path: Path) -> Path:
    """The mount point of the filesystem that holds `path` (where a user looks with df)."""
    p = existing(path)
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def shortfall(path: Path, need: int, what: str) -> str | None:
    """None when `need` bytes plus MARGIN fit at `path`, else the one line that says what does not fit where."""
    free = free_bytes(path)
    if need + MARGIN <= free:
        return None
    detail = f"{approx_size(need)} + {format_size(MARGIN)} margin" if need else "the margin kept free"
    return (f"needs {approx_size(need + MARGIN)} free in {path} for {what} ({detail}), {approx_size(free)} free on "
            f"{mount_point(path)}")


def require(path: Path, need: int, what: str) -> None:
    """Raise Unavailable (the cell is reported, the run goes on) when `need` bytes do not fit at `path`."""
    if (short := shortfall(path, need, what)) is not None:
        raise Unavailable(short)


def full_reason(path: Path) -> str | None:
    """"host filesystem full at MOUNT (N free)" when the filesystem holding `path` is full now, else None."""
    try:
        free = free_bytes(path)
    except OSError:
        return None
    if free >= FULL_BELOW:
        return None
    return f"host filesystem full at {mount_point(path)} ({approx_size(free)} free)"


def full_among(paths: list[Path]) -> str | None:
    """The first of `paths` whose filesystem is full (full_reason), else None."""
    for p in paths:
        if (why := full_reason(p)) is not None:
            return why
    return None


def os_error_line(e: OSError) -> str:
    """An OSError a user can act on, as one line: what failed, on which file, and for a full disk, where it is
    mounted and what to do."""
    where = e.filename if e.filename is not None else None
    what = e.strerror or str(e)
    if e.errno in NO_SPACE and where is None:  # a write or close says no file: name the full one of guestbench's
        named = {"the cache (GUESTBENCH_CACHE)": cache_path(), "the temp root (GUESTBENCH_TMPDIR)": temp_root()}
        for role, path in named.items():
            if (full := full_reason(path)) is not None:
                return f"{what}: {full}, which holds {role} {path}: free space there, or point it elsewhere"
    if e.errno in NO_SPACE and where is not None:
        p = Path(str(where))
        return (f"{what}: {where} (the filesystem at {mount_point(p)} has {approx_size(free_bytes(p))} free; free "
                "space there, or point GUESTBENCH_CACHE / GUESTBENCH_TMPDIR elsewhere)")
    return f"{what}: {where}" if where is not None else what
