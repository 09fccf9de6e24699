"""Paths only their owner can touch: where guestbench keeps state on the host, and the check made on every reuse.

guestbench runs as root on machines other users share (docs/safety.md). A directory it reuses — a cache, a run
directory, the registry of active runs, a lock — must be one that no other user could have made or can change:
another user's directory could hold a planted kernel that UML would run, or a state file whose "resources" a
sweep would delete. So every directory guestbench keeps things in is checked, at each use, to be a real
directory (not a symlink), owned by the effective user, writable by nobody else, and reached only through
directories that nobody else could rename (owned by root or the effective user, or sticky). A failed check
is one line naming the path, its owner and mode, and what to do; nothing in it is touched.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from guestbench.util.errors import UserError

STATE_ENV = "GUESTBENCH_TMPDIR"
ROOT_HOME = Path("/var/lib/guestbench")  # root's: only root can make it (/var/lib is root's, 0755)


class UnsafePath(UserError):
    """A path guestbench would reuse is not safely its own (exit status 2, one line)."""


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _problem(st: os.stat_result, euid: int, *, sticky_ok: bool) -> str | None:
    """Why a directory with this lstat is not safely the effective user's, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in ({euid} if not sticky_ok else {euid, 0}):
        return f"is owned by {_owner(st.st_uid)}, not {_owner(euid)}"
    if st.st_mode & 0o022 and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def dir_problem(st: os.stat_result, *, sticky_ok: bool) -> str | None:
    """Why a directory with this lstat is not safely the effective user's (`sticky_ok`: or root's, or sticky), or
    None; for guestbench.host.safe_write, which checks each directory on the way to an output."""
    return _problem(st, os.geteuid(), sticky_ok=sticky_ok)


def owner_name(uid: int) -> str:
    """A user's name for messages (`uid N` when it has none)."""
    return _owner(uid)


def check_dir(path: Path, what: str, *, env: str = STATE_ENV) -> Path:
    """`path` itself, once it is a directory of the effective user's that nobody else can change, reached through
    directories nobody else can rename; UnsafePath otherwise (`env`: the variable that moves it). Nothing is created
    or changed."""
    euid = os.geteuid()
    path = Path(os.path.abspath(path))
    try:
        st = os.lstat(path)
    except OSError as e:
        raise UnsafePath(f"{what} {path}: {e.strerror}") from None
    why = _problem(st, euid, sticky_ok=False)
    if why:
        raise UnsafePath(f"{what} {path} {why}; guestbench reuses only its own private directories "
                         f"(remove or fix it, or point {env} elsewhere)")
    for parent in path.parents:
        try:
            pst = os.lstat(parent)
        except OSError as e:
            raise UnsafePath(f"{what} {path}: {parent}: {e.strerror}") from None
        why = _problem(pst, euid, sticky_ok=True)
        if why:
            raise UnsafePath(f"{what} {path}: its parent {parent} {why}, so another user could replace it")
    return path


def ensure_dir(path: Path, what: str, mode: int = 0o755, *, env: str = STATE_ENV) -> Path:
    """`path` as a checked directory of the effective user's, made (with its missing parents, each checked) if
    missing. 0755 by default: libvirt's qemu user must reach disk images and appliances below it, never write."""
    path = Path(os.path.abspath(path))
    missing = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    euid = os.geteuid()
    for parent in (p for p in path.parents if p not in missing):  # before making anything in them
        why = _problem(os.lstat(parent), euid, sticky_ok=True)
        if why:
            raise UnsafePath(f"{what} {path}: its parent {parent} {why}, so another user could replace it")
    for p in reversed(missing):
        try:
            os.mkdir(p, mode)
        except FileExistsError:  # made meanwhile: checked below like any other
            continue
        except OSError as e:
            raise UnsafePath(f"{what} {p}: cannot make it: {e.strerror}") from None
        try:  # the umask may have taken bits away; never through a link put in its place meanwhile
            fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as e:
            raise UnsafePath(f"{what} {p}: changed while being made ({e.strerror})") from None
        try:
            if os.fstat(fd).st_uid == euid:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return check_dir(path, what, env=env)


def home() -> Path:
    """Where guestbench keeps what it makes on this host (run directories, appliances, level-1 images), made and
    checked: $GUESTBENCH_TMPDIR if it is a private directory of the effective user's, else a directory of the
    user's own inside it (`guestbench-<uid>`, as libguestfs keeps /var/tmp/.guestfs-<uid>); without it,
    /var/lib/guestbench for root (only root can make that) and /var/tmp/guestbench-<uid> for anyone else."""
    euid = os.geteuid()
    given = os.environ.get(STATE_ENV)
    if given:
        base = Path(os.path.abspath(given))
        try:
            st = os.lstat(base)
        except FileNotFoundError:
            return ensure_dir(base, f"the temp root ({STATE_ENV})")
        except OSError as e:
            raise UnsafePath(f"the temp root ({STATE_ENV}) {base}: {e.strerror}") from None
        if _problem(st, euid, sticky_ok=False) is None:
            return check_dir(base, f"the temp root ({STATE_ENV})")
        check_dir_shared(base, f"the temp root ({STATE_ENV})")
        return ensure_dir(base / f"guestbench-{euid}", "guestbench's own directory")
    if euid == 0:
        return ensure_dir(ROOT_HOME, "guestbench's state directory")
    return ensure_dir(Path("/var/tmp") / f"guestbench-{euid}", "guestbench's own directory")


def check_dir_shared(path: Path, what: str) -> None:
    """A directory others may write to is only usable to make one's own directory in when it is sticky (as /tmp
    is): otherwise another user could rename that directory away and put theirs in its place."""
    st = os.lstat(path)
    why = _problem(st, os.geteuid(), sticky_ok=True)
    if why:
        raise UnsafePath(f"{what} {path} {why}; use a directory of your own or a sticky one such as /tmp")


def runtime_dir() -> Path:
    """Where the registry of active runs lives: /run/guestbench for root (a tmpfs: nothing survives a reboot,
    as no run does), else guestbench's home."""
    if os.geteuid() == 0 and Path("/run").is_dir():
        return ensure_dir(Path("/run/guestbench"), "guestbench's runtime directory")
    return home()


def own_path(base: Path) -> Path:
    """Where to keep one's own things when told `base` (nothing made): `base` itself when it is missing or not a
    directory others share; `base/guestbench-<euid>` when it is one others may write to and that is safe to make
    one's own directory in (sticky and root's or one's own: /tmp, or a tmpfs's root). Anything else is `base`,
    which ensure_dir then refuses in one line."""
    base = Path(os.path.abspath(base))
    try:
        st = os.lstat(base)
    except OSError:
        return base
    euid = os.geteuid()
    shared = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_mode & 0o002
    if shared and _problem(st, euid, sticky_ok=True) is None:
        return base / f"guestbench-{euid}"
    return base


def qemu_uids() -> set[int]:
    """The users libvirt runs qemu as (Debian's libvirt-qemu, Fedora's qemu): libvirt gives them the disks of a
    domain it starts and does not always give them back (a read-only backing file stays theirs)."""
    uids = set()
    for name in ("libvirt-qemu", "qemu"):
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            pass
    return uids


def own_file(path: Path, what: str, *, booted: bool = False) -> bool:
    """Whether `path` exists; an existing one must be a regular file of the effective user's that nobody else can
    write (it is run or trusted: an appliance's kernel, a level-1 image), else UnsafePath. `booted`: a file only
    ever booted by qemu, never run on the host, may also be libvirt's qemu user's (qemu_uids). Call it on a file in
    a directory check_dir passed, so that the answer cannot change behind it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise UnsafePath(f"{what} {path}: {e.strerror}") from None
    euid = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        why = "is a symbolic link"
    elif not stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif st.st_uid != euid and not (booted and euid == 0 and st.st_uid in qemu_uids()):
        why = f"is owned by {_owner(st.st_uid)}, not {_owner(euid)}"
    elif st.st_mode & 0o022:
        why = f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    else:
        return True
    raise UnsafePath(f"{what} {path} {why}; guestbench uses only files it made itself (remove it to have it made "
                     "again)")
