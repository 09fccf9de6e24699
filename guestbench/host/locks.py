"""Locks on the shared cache: two guestbench runs on one host (or the cells of one run) that need the same appliance,
payload, probe verdict or level-1 image build it once; the second waits for the first and then reuses its work.

A lock is an flock(2) on a file beside what it guards (the filelock library): the kernel drops it when its holder
dies, so a run killed with SIGKILL never leaves a lock that others wait on forever. Lock files are 0644 in a
directory only the effective user can write (owned.ensure_dir), and an existing one that is not the user's own
regular file is refused: root opening another user's file or symlink there could truncate what it names. A brief
lock (held for milliseconds, polled every 5 ms) is a 0600 file, opened without following a link and checked
after opening: the descriptor's own file is the user's regular file, or it is not used.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

from guestbench.host import owned


class LockTimeout(RuntimeError):
    """Another process held a cache lock past the wait's deadline."""


def _tighten(path: Path) -> None:
    """An own lock file that an older guestbench made 0666 becomes 0644 (in a checked directory nobody else can
    have swapped it in)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o022:
        os.chmod(path, 0o644)


@contextlib.contextmanager
def exclusive(path: Path, what: str, timeout_s: float) -> Iterator[None]:
    """Hold `path` (made if missing) exclusively while the block runs; wait at most `timeout_s` for it.
    owned.UnsafePath when its directory or an existing lock file is not safely the effective user's."""
    owned.ensure_dir(path.parent, f"the lock directory for {what}")
    _tighten(path)
    owned.own_file(path, f"the lock file for {what}")
    # kept on release: a lock file removed while another process waits on it would let two in at once; filelock
    # opens it with O_NOFOLLOW (since 3.20.1; setup.cfg asks 3.30.0, the first with preserve_lock_file), so a
    # symlink put there meanwhile is not followed either
    lock = FileLock(str(path), mode=0o644, thread_local=False, preserve_lock_file=True)
    try:
        lock.acquire(timeout=timeout_s, poll_interval=0.2)
    except Timeout:
        raise LockTimeout(f"another guestbench process has held {path} for over {timeout_s:g} s while making "
                          f"{what}; wait for it, or end it") from None
    try:
        yield
    finally:
        lock.release()


def brief(path: Path, wait_s: float) -> int | None:
    """A descriptor holding an flock on `path` (a 0600 file of the effective user's, made if missing, never through
    a link), for a hold of milliseconds that must not slow what it guards (polled every 5 ms, not filelock's 0.2 s);
    None when it cannot be had within `wait_s` or safely: the caller goes on without it. Closing it lets go."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        return None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.005)
                continue
        except OSError:  # no locks on this filesystem (ENOLCK)
            pass
        os.close(fd)
        return None
