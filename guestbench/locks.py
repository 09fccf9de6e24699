"""Locks on the shared cache: two guestbench runs on one host (or the cells of one run) that need the same appliance,
payload, probe verdict or level-1 image build it once; the second waits for the first and then reuses its work.

A lock is an flock(2) on a file beside what it guards (the filelock library): the kernel drops it when its holder
dies, so a run killed with SIGKILL never leaves a lock that others wait on forever.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout


class LockTimeout(RuntimeError):
    """Another process held a cache lock past the wait's deadline."""


@contextlib.contextmanager
def exclusive(path: Path, what: str, timeout_s: float) -> Iterator[None]:
    """Hold `path` (made if missing) exclusively while the block runs; wait at most `timeout_s` for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # kept on release: a lock file removed while another process waits on it would let two in at once
    lock = FileLock(str(path), mode=0o666, thread_local=False, preserve_lock_file=True)
    try:
        lock.acquire(timeout=timeout_s, poll_interval=0.2)
    except Timeout:
        raise LockTimeout(f"another guestbench process has held {path} for over {timeout_s:g} s while making "
                          f"{what}; wait for it, or end it") from None
    try:
        yield
    finally:
        lock.release()
