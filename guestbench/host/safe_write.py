"""Writing files where a user told guestbench to, as root on a shared machine (docs/safety.md).

An output (`export -o`, `import -o`, `report -o DIR`, the results file of a run) is written to a temp file made
with O_EXCL beside it and renamed into place, so readers never see half a file. Renaming replaces whatever has
the name, so before it guestbench makes sure that the name is safely the user's:

- the directory is reached only through directories that nobody but root or the effective user can change
  (owned by one of them, not writable by others unless sticky, as /tmp is), following only symbolic links of
  theirs: otherwise another user could swap a directory on the way for a link to /etc between the check and
  the write. The directory is then held open and every step inside it is made relative to it;
- the name is new, or a regular file of the effective user's with one link. A device, FIFO or socket (`-o
  /dev/null`) is refused, not replaced and not written through (`-` is standard output where an output may
  go there), as is a symbolic link (never followed, never replaced) and another user's file.

A results file is reserved with O_CREAT|O_EXCL (`reserve`): two runs started in the same second get two names.
A refusal is one line (UnsafeOutput, exit status 2); nothing is written.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from guestbench.host import owned
from guestbench.util.errors import UserError

MAX_LINK_HOPS = 40  # the kernel's own limit (ELOOP)
MAX_RESERVE = 10_000  # names tried by `reserve` before it gives up (a directory full of one second's runs)
SHOWN_NAME = 80  # characters of a name shown in a message or kept in a temp file's name
DIR_MODE = 0o755
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeOutput(UserError):
    """An output guestbench was told to write is not safely the user's to write (exit status 2, one line)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "of an unknown kind"


def _short(path: Path | str) -> str:
    text = str(path)
    return text if len(text) <= 2 * SHOWN_NAME else text[:2 * SHOWN_NAME] + "..."


def resolve_dir(path: Path, what: str, *, make: bool = False, shown: Path | None = None) -> Path:
    """The real path of directory `path`, every directory on the way (itself included) checked to be changeable by
    root or the effective user only and every symbolic link followed to be theirs; missing directories are made
    (0755 less the umask) when `make`. UnsafeOutput otherwise, naming `shown` (the file written there) or `path`."""
    euid = os.geteuid()
    given = shown or path
    todo = list(reversed((Path.cwd() / path).parts[1:]))
    cur, hops = Path("/"), 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            cur = cur.parent
            continue
        nxt = cur / part
        st = _lstat_or_make(nxt, given, what, make)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (euid, 0):
                raise UnsafeOutput(f"{_where(what, given, nxt)} is a symbolic link owned by "
                                   f"{owned.owner_name(st.st_uid)}; guestbench follows only links of root's or yours")
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise UnsafeOutput(f"{what} {_short(given)}: too many levels of symbolic links")
            target = Path(os.readlink(nxt))
            if target.is_absolute():
                cur = Path("/")
            todo.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafeOutput(f"{_where(what, given, nxt)} is {_kind(st.st_mode)}; expected a directory")
        why = owned.dir_problem(st, sticky_ok=True)
        if why:
            raise UnsafeOutput(f"{_where(what, given, nxt)} {why}, so another user could redirect what "
                               "guestbench writes there; write below directories only you or root can change")
        cur = nxt
    return cur


def _where(what: str, given: Path, p: Path) -> str:
    """`what given`, and the path on its way that a message is about when that is another one."""
    return f"{what} {_short(given)}" if Path.cwd() / given == p else f"{what} {_short(given)}: {_short(p)}"


def _lstat_or_make(p: Path, given: Path, what: str, make: bool) -> os.stat_result:
    try:
        return os.lstat(p)
    except FileNotFoundError:
        if not make:
            raise UnsafeOutput(f"{what} {_short(given)}: no such directory {_short(p)}") from None
    except OSError as e:
        raise UnsafeOutput(f"{what} {_short(given)}: {_short(p)}: {e.strerror}") from None
    try:
        os.mkdir(p, DIR_MODE)  # less if the user's umask says so
    except FileExistsError:
        pass  # made meanwhile: checked like any other
    except OSError as e:
        raise UnsafeOutput(f"{what} {_short(given)}: cannot make directory {_short(p)}: {e.strerror}") from None
    return os.lstat(p)


def _check_name(name: str, path: Path, what: str) -> None:
    if name in ("", ".", "..") or "/" in name:
        raise UnsafeOutput(f"{what} {_short(path)}: not a file name; allowed: a path ending in a file name")


def _check_target(dfd: int, name: str, path: Path, what: str) -> None:
    """A missing name, or a regular file of the effective user's with one link; UnsafeOutput otherwise."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    euid = os.geteuid()
    if not stat.S_ISREG(st.st_mode):
        hint = "; use - for standard output" if what == "output" else ""
        raise UnsafeOutput(f"{what} {_short(path)} is {_kind(st.st_mode)}; guestbench writes only new files or "
                           f"regular files of your own, and never replaces or writes through anything else{hint}")
    if st.st_uid != euid:
        raise UnsafeOutput(f"{what} {_short(path)} is owned by {owned.owner_name(st.st_uid)}, not "
                           f"{owned.owner_name(euid)}; guestbench replaces only files of your own (remove it, or "
                           "choose another name)")
    if st.st_nlink != 1:
        raise UnsafeOutput(f"{what} {_short(path)} has {st.st_nlink} hard links; guestbench replaces only a file "
                           "with one name (remove it, or choose another name)")


def check_replaceable(path: Path, what: str = "output") -> None:
    """What `replace_file` checks, without writing: for a command that writes several files to refuse before the
    first (a report), rather than leave some written."""
    path = Path(path)
    _check_name(path.name, path, what)
    dfd = os.open(resolve_dir(path.parent, what, make=True, shown=path), _DIR_FLAGS)
    try:
        _check_target(dfd, path.name, path, what)
    finally:
        os.close(dfd)


def _temp(dfd: int, name: str, data: bytes, mode: int) -> str:
    """A new file in the directory `dfd` holding `data` (written, `mode`, fsynced): its name."""
    tmp = f".{name[:SHOWN_NAME]}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, _NEW_FLAGS, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp, dir_fd=dfd)
        raise
    return tmp


def replace_file(path: Path, data: bytes, mode: int = 0o600, what: str = "output") -> None:
    """Write `data` to `path` atomically (temp file, fsync, rename, fsync of the directory), its directory made if
    missing, after the checks above; `mode` 0600 for what is the user's alone, 0644 for what is meant to share."""
    path = Path(path)
    _check_name(path.name, path, what)
    dfd = os.open(resolve_dir(path.parent, what, make=True, shown=path), _DIR_FLAGS)
    try:
        _check_target(dfd, path.name, path, what)
        tmp = _temp(dfd, path.name, data, mode)
        try:
            _check_target(dfd, path.name, path, what)  # again, as late as can be: the window is one rename
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
        os.fsync(dfd)
    finally:
        os.close(dfd)


def reserve(directory: Path, stem: str, suffix: str, what: str, mode: int = 0o600, content: bytes = b"") -> Path:
    """`directory/<stem><suffix>`, or `<stem>-2<suffix>`, `-3`, ...: the first name nobody has, made holding
    `content` so that two processes asking at once never get the same one (a check, then a create, would: 96 of
    100 pairs of runs started in the same second did), and no reader ever sees it empty: the content is written
    to a temp file first, which link(2) then gives the name, failing as O_CREAT|O_EXCL does when it is taken.
    The directory is made if missing."""
    _check_name(f"{stem}{suffix}", directory / f"{stem}{suffix}", what)
    dfd = os.open(resolve_dir(directory, what, make=True), _DIR_FLAGS)
    try:
        tmp = _temp(dfd, stem, content, mode)
        try:
            for n in range(1, MAX_RESERVE + 1):
                name = f"{stem}{suffix}" if n == 1 else f"{stem}-{n}{suffix}"
                try:
                    os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                except FileExistsError:
                    continue
                except OSError as e:
                    raise UnsafeOutput(f"{what} {_short(directory / name)}: cannot make it: {e.strerror}") from None
                return directory / name
        finally:
            os.unlink(tmp, dir_fd=dfd)
    finally:
        os.close(dfd)
    raise UnsafeOutput(f"{what}: {MAX_RESERVE} files named {_short(stem)}*{suffix} already exist in "
                       f"{_short(directory)}; move some away")
