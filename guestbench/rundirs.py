"""Directories one guestbench process owns for its life (a run's `guestbench-run-*`, a fleet worker's `gbw-*`),
and how a later process tells that their owner is dead, so that what a SIGKILL left is swept at the next start.

Each such directory holds an owner record (OWNER_FILE: the owner's pid and start time, so a reused pid is never
taken for the owner). It is written while the maker holds the root's creation lock shared; a sweep decides which
directories are dead while holding it exclusively, so it never sees a directory between its making and its
record. A dead directory is claimed by rewriting its record with the sweeper's own pid and start time: another
sweep at the same time then sees a live owner and leaves it alone (a killed sweeper's claim is dead in turn).

Only the effective user's own directories count: the directory and its record are lstat'ed (no symbolic
link, owned by the effective user, writable by nobody else); anything else is left alone, and said.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from guestbench.owned import UnsafePath, check_dir, check_dir_shared
from guestbench.storage import host_sys as hs

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


@contextlib.contextmanager
def creation_lock(root: Path, exclusive: bool) -> Iterator[None]:
    """The root's lock on making owned directories (shared: making one; exclusive: deciding which are dead).
    The lock file is the effective user's, per user (a shared sticky root may hold others')."""
    path = root / f".guestbench-dirs-{os.geteuid()}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise UnsafePath(f"the lock {path}: {e.strerror} (another user's file, or a link?)") from None
    try:
        if why := lstat_problem(path, want_dir=False):
            raise UnsafePath(f"the lock {path} {why}; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # drops the lock


def _write_owner(d: Path) -> None:
    """The record naming this process as `d`'s owner, replaced whole (never seen half written)."""
    pid = os.getpid()
    tmp = d / f".owner-{pid}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, json.dumps({"pid": pid, "start": hs.proc_start(pid)}).encode())
    finally:
        os.close(fd)
    os.replace(tmp, d / OWNER_FILE)


def make(root: Path, prefix: str) -> Path:
    """A new directory `<root>/<prefix>XXXXXXXX` owned by this process (0755: libvirt's qemu user reaches disk
    images below it), its owner record written under the root's creation lock."""
    with creation_lock(root, exclusive=False):
        d = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        _write_owner(d)
    os.chmod(d, 0o755)
    return d


def owner(d: Path) -> dict[str, int] | None:
    """The owner record of `d` when it is the effective user's own and well formed; None otherwise."""
    path = d / OWNER_FILE
    if lstat_problem(path, want_dir=False):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            data = json.loads(os.read(fd, 4096))
        finally:
            os.close(fd)
        return {"pid": int(data["pid"]), "start": int(data["start"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def alive(d: Path) -> bool:
    """Whether `d` is the effective user's and its recorded owner still runs."""
    rec = None if lstat_problem(d, want_dir=True) else owner(d)
    return rec is not None and hs.same_process(rec["pid"], rec["start"])


@dataclass
class Found:
    """The `prefix` directories of a root, as a sweep found them under the creation lock."""

    claimed: list[Path] = field(default_factory=list)  # owner dead: now the sweeper's to remove
    unrecorded: list[Path] = field(default_factory=list)  # the user's, with no owner record (older guestbench)
    log: list[str] = field(default_factory=list)  # what was left alone, and why


def claim_dead(root: Path, prefix: str) -> Found:
    """Claim the effective user's `prefix` directories in `root` whose owner process is gone. Directories with
    a live owner are left alone, silently; those that are not the user's own are left alone and said."""
    found = Found()
    with creation_lock(root, exclusive=True):
        try:
            names = sorted(n for n in os.listdir(root) if n.startswith(prefix))
        except OSError:
            return found
        for name in names:
            d = root / name
            if why := lstat_problem(d, want_dir=True):
                found.log.append(f"left alone: {d} {why}")
                continue
            if not os.path.lexists(d / OWNER_FILE):
                found.unrecorded.append(d)
                continue
            if alive(d):
                continue
            try:
                _write_owner(d)
            except OSError as e:
                found.log.append(f"left alone: {d}: its owner record cannot be replaced: {e.strerror}")
                continue
            found.claimed.append(d)
    return found
