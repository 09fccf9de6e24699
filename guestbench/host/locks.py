"""Locks on the shared cache: two guestbench runs on one host (or the cells of one run) that need the same appliance,
payload, probe verdict or level-1 image build it once; the second waits for the first and then reuses its work.

A lock is an flock(2) on a file beside what it guards (the filelock library): the kernel drops it when its holder
dies, so a run killed with SIGKILL never leaves a lock that others wait on forever. flock needs only a descriptor
that may read, so a lock that another user could ever open is a lock that user can hold: lock files are 0600 in a
directory only the effective user can write (owned.ensure_dir), and a lock guestbench waits on is one no other
user can have opened. An own lock file that others could open (0644, made by guestbench before 2026-11-28) is
not made 0600 by chmod, which takes back nothing already open, but replaced by a new 0600 file (renamed over it,
under a guard so that two runs never both replace it); so is one that a process of another user is seen to hold
(holders(), from /proc/locks). An existing one that is not the user's own regular file (another user's, a
symlink) is refused: root opening it could truncate what it names. A wait that lasts NOTICE_S says once who holds
the lock (pid, user, command), then goes on to its deadline. A brief lock (held for milliseconds, polled every
5 ms) is a 0600 file, opened without following a link and checked after opening: the descriptor's own file is
the user's regular file, or it is not used.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator

from filelock import FileLock, Timeout

from guestbench.host import owned
from guestbench.host import procs
from guestbench.util.errors import one_line

NOTICE_S = 3.0  # a wait on a lock longer than this says who holds it
PROC_LOCKS = Path("/proc/locks")
GUARD_WAIT_S = NOTICE_S  # a replacement under the guard takes microseconds; longer, its maker is stopped
PRIVATE = 0o077  # mode bits that let another user open a file (and so hold an flock on it)


class LockTimeout(RuntimeError):
    """Another process held a cache lock past the wait's deadline."""


@dataclass(frozen=True)
class Holder:
    """A process holding an flock, as /proc/locks and /proc/PID say."""

    pid: int  # 0 when the holder is in a PID namespace this process cannot see
    uid: int | None  # its effective uid (whose files it can open); None when it is gone
    command: str

    def ours(self) -> bool:
        return self.uid == os.geteuid()

    def foreign(self) -> bool:
        """A live process seen to run as another user (not one gone, or out of sight, or of the user's)."""
        return self.uid is not None and self.uid != os.geteuid()

    def __str__(self) -> str:
        if not self.pid:
            return "a process in another PID namespace"
        if self.uid is None:  # it took the lock and ended; a process it started (or sent the descriptor) keeps it
            return f"pid {self.pid} (ended: a process it left holds the lock)"
        who = owned.owner_name(self.uid)
        what = one_line(self.command, squeeze=True, limit=120) if self.command else "its command unknown"
        return f"pid {self.pid} of {who} ({what})"


def holders(st: os.stat_result) -> list[Holder]:
    """The processes holding an flock on the file that `st` describes (waiters, listed with "->", are not), from
    /proc/locks; [] when none is listed or it cannot be read. /proc/locks names the superblock's device, which is
    not stat's on btrfs or an overlay of several file systems, and the pid that took the lock, which may have ended
    and been reused by another user's process: so a line is matched by inode, and its pid counted only when that
    process has the very file open (/proc/PID/fd); where its descriptors cannot be read (another user's process,
    to a user who is not root), only when the device matches too."""
    exact = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        text = PROC_LOCKS.read_text()
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        f = line.split()  # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5391238 0 EOF"
        if len(f) < 6 or f[1] != "FLOCK" or f[5].rpartition(":")[2] != str(st.st_ino) or not f[4].isdigit():
            continue
        pid = int(f[4])
        holds = _has_open(pid, st) if pid else None
        if holds is False or (holds is None and f[5] != exact):
            continue  # a reused pid, or the same inode on another file system
        found.append(Holder(pid, procs.proc_euid(pid) if pid else None, procs.proc_cmdline(pid) if pid else ""))
    return found


def _has_open(pid: int, st: os.stat_result) -> bool | None:
    """Whether process `pid` has the file `st` describes open; None when that cannot be seen (its descriptors are
    another user's, or it is gone: the lock then held by a process it left, sent or forked the descriptor to)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.path.samestat(os.stat(f"/proc/{pid}/fd/{fd}"), st):
                return True
        except OSError:
            continue
    return False


def _own_regular(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def _prepare(path: Path, what: str) -> None:
    """Leave at `path` nothing another user could have opened: an own file others could open is replaced (but
    while a process of the user's holds it); what is not the user's own regular file is refused (owned.own_file
    says why, in one line); nothing is opened."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not _own_regular(st):
        owned.own_file(path, f"the lock file for {what}")  # a symlink, not a file, another user's: raises
        raise owned.UnsafePath(f"the lock file for {what} {path} is not the user's own regular file")
    # held by the user's (an older guestbench's run): waited on as it was, never a second run let in beside it.
    # An older guestbench (no guard) locking it between this look and the rename would be: once, microseconds.
    if st.st_mode & PRIVATE and not any(h.ours() for h in holders(st)):
        _replace(path, st, what)


def _replace(path: Path, bad: os.stat_result, what: str) -> None:
    """Put a new, empty 0600 file where `bad` is (renamed over it: never a moment without one, which a waiter
    could create and lock beside the new one). Under a guard file, and only while `path` is still `bad`: two runs
    that both saw it never replace each other's new file, which one of them may already hold."""
    guard_path = path.with_name(f".{path.name}.replacing")
    guard = brief(guard_path, GUARD_WAIT_S)
    if guard is None:
        raise LockTimeout(f"the lock file for {what} {path} must be replaced (another user could hold it) but "
                          f"{guard_path} could not be had within {GUARD_WAIT_S:g} s or is not the user's own 0600 "
                          "file; remove both")
    try:
        try:
            now = os.lstat(path)
        except FileNotFoundError:
            return
        if not os.path.samestat(now, bad):  # replaced meanwhile (by a run that saw it too)
            return
        fd, fresh = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # 0600, O_EXCL|O_NOFOLLOW
        os.close(fd)
        os.replace(fresh, path)
    finally:
        os.close(guard)


def _foreign(path: Path) -> tuple[os.stat_result, list[Holder]] | None:
    """The lock file's stat and its holders when a process of another user holds it (and none of the user's)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    held = holders(st)
    return (st, held) if held and all(h.foreign() for h in held) else None


@contextlib.contextmanager
def exclusive(path: Path, what: str, timeout_s: float) -> Iterator[None]:
    """Hold `path` (made if missing) exclusively while the block runs; wait at most `timeout_s` for it, saying
    after NOTICE_S who holds it. owned.UnsafePath when its directory or an existing lock file is not safely the
    effective user's."""
    owned.ensure_dir(path.parent, f"the lock directory for {what}")
    _prepare(path, what)
    # kept on release: a lock file removed while another process waits on it would let two in at once; filelock
    # opens it with O_NOFOLLOW (since 3.20.1; setup.cfg asks 3.30.0, the first with preserve_lock_file), so a
    # symlink put there meanwhile is not followed either, and takes a lock only on a file still linked (a file
    # _replace renamed over is not: the waiter tries again, on the new one)
    lock = FileLock(str(path), mode=0o600, thread_local=False, preserve_lock_file=True)
    _acquire(lock, path, what, timeout_s)
    try:
        yield
    finally:
        lock.release()


def _acquire(lock: FileLock, path: Path, what: str, timeout_s: float) -> None:
    """lock.acquire within `timeout_s`, in slices of NOTICE_S: after the first, who holds it is said (once); a
    lock another user holds is not waited on but replaced."""
    deadline = time.monotonic() + timeout_s
    told = replaced = False
    while True:
        left = deadline - time.monotonic()
        try:
            lock.acquire(timeout=max(min(NOTICE_S, left), 0), poll_interval=0.2)
            return
        except Timeout:
            pass
        if not replaced and (foreign := _foreign(path)) is not None:
            st, held = foreign
            replaced = True
            sys.stderr.write(f"guestbench: the lock on {what} ({path}) is held by {', '.join(map(str, held))}, "
                             "not by this user: replaced by a new lock file\n")
            _replace(path, st, what)
            continue
        if time.monotonic() >= deadline:
            raise LockTimeout(f"another guestbench process has held {path} for over {timeout_s:g} s while making "
                              f"{what}; wait for it, or end it") from None
        if not told:
            told = True
            try:
                held = holders(os.lstat(path))
            except OSError:
                held = []
            who = ", ".join(map(str, held)) or "a process /proc/locks does not list"
            sys.stderr.write(f"guestbench: waiting for the lock on {what} ({path}), held by {who}; up to "
                             f"{timeout_s:g} s in all\n")


def brief(path: Path, wait_s: float) -> int | None:
    """A descriptor holding an flock on `path` (a 0600 file of the effective user's, made if missing, never through
    a link, in a directory only the user can change), for a hold of milliseconds that must not slow what it guards
    (polled every 5 ms, not filelock's 0.2 s); None when it cannot be had within `wait_s` or safely: the caller
    goes on without it. Closing it lets go."""
    try:
        owned.check_dir(path.parent, "a lock's directory")
        if os.path.lexists(path) and not _own_regular(os.lstat(path)):  # never opened: another user's, a FIFO
            return None
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except (OSError, owned.UnsafePath):
        return None
    st = os.fstat(fd)
    if not _own_regular(st) or st.st_mode & PRIVATE:
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
