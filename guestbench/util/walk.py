"""Reading the files of a directory that someone else may write (docs/safety.md): `history` over a shared results
directory, the dry run's earlier results, pytest-benchmark's `.benchmarks/`.

Checking a name and then opening it again by name is a race another user can win: a file listed as regular is
swapped for a link to a file only root may read, a subdirectory for a link to one. So every name below the path
given is opened relative to its directory's descriptor without following links (O_NOFOLLOW, O_PATH first so that
a FIFO or device swapped in is never opened for reading), and what is opened must still be a regular file (a run
saving into the directory renames a new file over its results file after every sample: another inode, the same
kind) or the very directory listed (the same device and inode); anything else is `Changed`, one line naming it. A
file that may be a link another user made to a file of someone else's (fs.protected_hardlinks=0 allows it) is
`Changed` too. The path given itself is followed, as bounded.read_bytes follows a file named: the user running
guestbench named it.

What is read is bounded as it is read: files listed (counted when a directory is listed, before anything in it is
read), entries looked at, levels walked down, and bytes actually read (each file's size is checked before it is
read only to refuse at once what is already too big). Past a bound: `Capped`, one line.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from guestbench.util import bounded
from guestbench.util.errors import UserError
from guestbench.util.units import approx_size

__all__ = ["Budget", "Capped", "Changed", "Listed", "files"]


class Changed(UserError):
    """A name changed between its directory's listing and its opening: not read, never followed."""


class Capped(UserError):
    """More files, entries or bytes than the budget allows."""


@dataclass
class Budget:
    """What a set of walks may cost in all (shared by every path one command names)."""

    files: int  # regular files read, at most
    bytes: int  # bytes actually read, over all files
    entries: int = 100_000  # directory entries looked at
    depth: int = 0  # directory levels below a path given (0: its own files only)
    what: str = "results"  # for messages: "more than 10,000 results files"
    strict: bool = True  # past `files`: Capped; else the first ones only, the rest counted in `passed_over`
    counted_files: int = 0
    counted_bytes: int = 0
    counted_entries: int = 0
    passed_over: int = 0

    def take_files(self, n: int, source: str) -> int:
        """How many of `n` more files may be read: all of them, or Capped (strict), or those left (not strict)."""
        left = self.files - self.counted_files
        if n > left and self.strict:
            raise Capped(f"more than {self.files:,} {self.what} files; allowed: at most {self.files:,} (name fewer "
                         "files)", source=source)
        self.passed_over += max(0, n - left)
        self.counted_files += min(n, left)
        return min(n, left)

    def check_bytes(self, n: int, source: str) -> None:
        """Capped if `n` more bytes would be past the bound."""
        if self.counted_bytes + n > self.bytes:
            raise Capped(f"more than {approx_size(self.bytes)} of {self.what} in all; allowed: at most "
                         f"{approx_size(self.bytes)} (name fewer files)", source=source)

    def take_bytes(self, n: int, source: str) -> None:
        """Count `n` bytes read; Capped past the bound."""
        self.check_bytes(n, source)
        self.counted_bytes += n

    @property
    def bytes_left(self) -> int:
        return self.bytes - self.counted_bytes


@dataclass
class Listed:
    """A regular file as its directory listed it; `read` opens that very file, relative to the directory's
    descriptor (open only while the walk is at this entry: read it before asking for the next)."""

    path: str  # for messages and for the reader: the path given joined with the names below it
    name: str
    dir_fd: int
    ident: tuple[int, int]  # st_dev, st_ino at listing
    budget: Budget = field(repr=False)

    def read(self, what: str, cap: int) -> bytes:
        """The file's bytes (at most `cap`, and what the budget has left); Changed if it is no longer the file
        listed, Capped past the budget, a UserError if it cannot be read."""
        handle = _open_path(self.name, self.dir_fd, self.path, stat.S_ISREG, None, "a regular file")
        _not_a_planted_link(handle, self.dir_fd, self.path)
        try:
            fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise UserError(f"cannot read {what}: {e.strerror or e}", source=self.path) from None
        finally:
            os.close(handle)
        try:
            size = os.fstat(fd).st_size
            bounded.check_size(size, what, cap, self.path)
            self.budget.check_bytes(size, self.path)  # a size already past the budget: refused before reading
            data = bounded.read_fd(fd, what, cap, self.path, limit=self.budget.bytes_left)
        finally:
            os.close(fd)
        self.budget.take_bytes(len(data), self.path)  # what was actually read
        return data


def _not_a_planted_link(handle: int, dir_fd: int, path: str) -> None:
    """Changed (and `handle` closed) when the file may be a hard link that another user made to a file they cannot
    read (fs.protected_hardlinks=0 lets anyone link anyone's file into a directory of theirs, and a listing cannot
    tell such a link from a file of their own): a file in a directory of another user's (not root's, not the
    effective user's) that is not that user's own, or a file with other links in a directory others can write."""
    st, where = os.fstat(handle), os.fstat(dir_fd)
    others_dir = where.st_uid not in (0, os.geteuid())
    if (others_dir and st.st_uid != where.st_uid) or (st.st_nlink > 1 and (others_dir or where.st_mode & 0o022)):
        os.close(handle)
        raise Changed(f"a file of uid {st.st_uid} with {st.st_nlink} link(s) in a directory of uid {where.st_uid} "
                      f"(mode {stat.S_IMODE(where.st_mode):o}); not read (it may be a link to a file that is not "
                      "its directory owner's)", source=path)


def _kind(mode: int) -> str:
    return "a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode) else \
        "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def _open_path(name: str, dir_fd: int, path: str, want: Callable[[int], bool], ident: tuple[int, int] | None,
               listed: str) -> int:
    """An O_PATH descriptor on `name` in `dir_fd`, the link itself if it is one, checked to be what was listed: of
    the kind `want` accepts and, when `ident` is given, the very file (device and inode)."""
    try:
        handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        raise Changed(f"changed while being read: listed as {listed}, now gone; not read (a directory is read as "
                      "it stood when listed)", source=path) from None
    except OSError as e:
        raise UserError(f"cannot open: {e.strerror or e}", source=path) from None
    st = os.fstat(handle)
    if not want(st.st_mode) or (ident is not None and (st.st_dev, st.st_ino) != ident):
        os.close(handle)
        now = _kind(st.st_mode) if not want(st.st_mode) else "another file"
        raise Changed(f"changed while being read: listed as {listed}, now {now}; not read and not followed (a "
                      "directory is read as it stood when listed)", source=path)
    return handle


def _open_dir(name: str, dir_fd: int, path: str, ident: tuple[int, int]) -> int:
    """A descriptor to list the subdirectory `name` of `dir_fd`, never through a link, the one listed."""
    handle = _open_path(name, dir_fd, path, stat.S_ISDIR, ident, "a directory")
    try:
        fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise UserError(f"cannot read directory: {e.strerror or e}", source=path) from None
    finally:
        os.close(handle)
    return fd


def _listing(fd: int, path: str, suffix: str, budget: Budget) -> tuple[list[tuple[str, tuple[int, int]]],
                                                                        list[tuple[str, tuple[int, int]]]]:
    """The regular `suffix` files and the subdirectories of the directory open at `fd`, by name, with the device
    and inode each had when listed (links and everything else passed over); entries counted one by one."""
    found: list[tuple[str, tuple[int, int]]] = []
    dirs: list[tuple[str, tuple[int, int]]] = []
    with os.scandir(fd) as entries:
        for e in entries:
            budget.counted_entries += 1
            if budget.counted_entries > budget.entries:
                raise Capped(f"more than {budget.entries:,} directory entries; allowed: a {budget.what} directory",
                             source=path)
            if e.is_dir(follow_symlinks=False) or (e.name.endswith(suffix) and e.is_file(follow_symlinks=False)):
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone already: as if never listed
                (dirs if stat.S_ISDIR(st.st_mode) else found if stat.S_ISREG(st.st_mode) else []).append(
                    (e.name, (st.st_dev, st.st_ino)))
    return found, dirs


def files(top: str | Path, suffix: str, budget: Budget, newest_first: bool = False) -> Generator[Listed, None, None]:
    """The regular `suffix` files below `top` (a directory the user named), each directory's in name order
    (reversed with `newest_first`: results files are named by their start) before its subdirectories', down to
    budget.depth levels. Use it with contextlib.closing: it holds a descriptor per level while it walks."""
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ENOTDIR:
            raise UserError("not a directory", source=str(top)) from None
        raise UserError(f"cannot read directory: {e.strerror or e}", source=str(top)) from None
    yield from _walk(fd, str(top), suffix, budget, 0, newest_first)


def _walk(fd: int, path: str, suffix: str, budget: Budget, depth: int, newest_first: bool) -> Iterator[Listed]:
    """The walk below the directory open at `fd` (closed here)."""
    try:
        found, dirs = _listing(fd, path, suffix, budget)
        found.sort(reverse=newest_first)
        for name, ident in found[:budget.take_files(len(found), path)]:
            yield Listed(os.path.join(path, name), name, fd, ident, budget)
        for name, ident in sorted(dirs, reverse=newest_first) if depth < budget.depth else []:
            sub = os.path.join(path, name)
            yield from _walk(_open_dir(name, fd, sub, ident), sub, suffix, budget, depth + 1, newest_first)
    finally:
        os.close(fd)
