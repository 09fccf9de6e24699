"""Directories one guestbench process owns for its life (a run's `guestbench-run-*`, a fleet worker's `gbw-*`),
and how a later process tells that their owner is dead, so that what a SIGKILL left is swept at the next start.

Each such directory holds an owner record (OWNER_FILE, 0600: the owner's pid and start time, so that a reused
pid is never taken for the owner), written whole before the directory is used. A directory without one is
either being made this instant or an older guestbench's: the sweep removes none of it but what a dead
owner's state file lists. A sweep claims a dead directory by rewriting its record, under an flock of it, with
its own pid and start time: another sweep at the same time then finds the record locked or naming a live
owner and leaves the directory alone (a killed sweeper's claim is dead in its turn). A directory the sweep
keeps (something still uses it) gets its dead owner's record back, for the next sweep.

Only the effective user's own directories count: the directory and its record are lstat'ed (no symbolic
link, owned by the effective user, writable by nobody else); anything else is left alone, and said.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from guestbench.host.owned import UnsafePath, check_dir, check_dir_shared
from guestbench.host import procs

OWNER_FILE = ".owner.json"


def lstat_problem(path: Path, want_dir: bool) -> str | None:
    """Why `path` (not followed) is not a directory / regular file of the effective user's that only they can
    change; None when it is."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return e.strerror or "cannot be read"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)):
        return "is not a directory" if want_dir else "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def safe_root(root: Path) -> Path:
    """`root` as a real path once it is a directory whose entries nobody else can replace: the effective user's
    private one, or a shared sticky one (in which only the user's own entries are ever used); UnsafePath
    otherwise."""
    real = Path(os.path.realpath(root))
    try:
        return check_dir(real, "the directory to sweep")
    except UnsafePath:
        check_dir_shared(real, "the directory to sweep")
        return real


def _me() -> bytes:
    pid = os.getpid()
    return json.dumps({"pid": pid, "start": procs.proc_start(pid)}).encode()


def make(root: Path, prefix: str) -> Path:
    """A new directory `<root>/<prefix>XXXXXXXX` owned by this process (0755: libvirt's qemu user reaches disk
    images below it), its owner record in place (written beside, then renamed) before anyone is given it."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    tmp = d / f".owner-{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, _me())
    finally:
        os.close(fd)
    os.replace(tmp, d / OWNER_FILE)
    os.chmod(d, 0o755)
    return d


def _open_record(d: Path, flags: int) -> int | None:
    """An fd of `d`'s owner record when `d` and it are the effective user's own; None otherwise."""
    path = d / OWNER_FILE
    if lstat_problem(d, want_dir=True) or lstat_problem(path, want_dir=False):
        return None
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None


def _owner_lives(fd: int) -> bool:
    try:
        data = json.loads(os.pread(fd, 4096, 0))
        return procs.same_process(int(data["pid"]), int(data["start"]))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def alive(d: Path) -> bool:
    """Whether `d` is the effective user's and its recorded owner still runs (or a sweep is claiming it)."""
    fd = _open_record(d, os.O_RDONLY)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return True
    try:
        return _owner_lives(fd)
    finally:
        os.close(fd)


@dataclass
class Found:
    """The `prefix` directories of a root, as a sweep found them."""

    claimed: list[Path] = field(default_factory=list)  # owner dead: now the sweeper's to remove
    unrecorded: list[Path] = field(default_factory=list)  # the user's, no owner record: an older guestbench's, or
    # one being made this instant
    log: list[str] = field(default_factory=list)  # what was left alone, and why
    records: dict[Path, bytes] = field(default_factory=dict)  # a claimed directory's record before its claim

    def release(self, d: Path) -> None:
        """Give a claimed directory that the sweep keeps back to the next sweep: its dead owner's record again."""
        fd = _open_record(d, os.O_RDWR)
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.records[d], 0)
        finally:
            os.close(fd)


def claim_dead(root: Path, prefix: str) -> Found:
    """Claim the effective user's `prefix` directories in `root` whose owner process is gone. Directories with
    a live owner are left alone, silently; those that are not the user's own are left alone and said."""
    found = Found()
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith(prefix))
    except OSError:
        return found
    for name in names:
        d = root / name
        if why := lstat_problem(d, want_dir=True):  # maybe another user's, named to upset a terminal
            shown = name if name.isprintable() and len(name) <= 80 else repr(name[:60])
            found.log.append(f"left alone: {root}/{shown} {why}")
            continue
        if not os.path.lexists(d / OWNER_FILE):
            found.unrecorded.append(d)
            continue
        fd = _open_record(d, os.O_RDWR)
        if fd is None:
            found.log.append(f"left alone: {d}: its owner record is not a file of the user's own")
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another sweep is claiming it
                continue
            if _owner_lives(fd):
                continue
            found.records[d] = os.pread(fd, 4096, 0)
            os.ftruncate(fd, 0)
            os.pwrite(fd, _me(), 0)
            found.claimed.append(d)
        finally:
            os.close(fd)
    return found
