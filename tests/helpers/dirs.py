"""Directories the tests make on the host: one shared with another user as /tmp is, and small file systems to fill.
Under the session's root (helpers.session), not pytest's tmp_path: that is under a 0700 directory no other user
can reach, and the session's root is removed with the session even when a test is killed."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from collections.abc import Iterator

import pytest

from helpers.session import session_tmp_path


@contextlib.contextmanager
def sticky_dir(prefix: str = "shared-", parent: Path | None = None) -> Iterator[Path]:
    """A directory of root's that anyone may write in, sticky (mode 1777, as /tmp): where the user nobody plants
    files for a test, on the session's file system (so that a test can move them where guestbench keeps its own).
    Removed after, whatever is in it."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir=parent or session_tmp_path()))
    os.chmod(d, 0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def small_tmpfs(size: str) -> Iterator[Path]:
    """A tmpfs of `size` under the session's root, traversable (libvirt's qemu reaches images in it); root only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root (CI runs as root)")
    mnt = Path(tempfile.mkdtemp(prefix="small-", dir=session_tmp_path()))
    os.chmod(mnt, 0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        mnt.rmdir()


def tree(path: Path) -> dict[str, tuple[int, int, int, bytes | str | None]]:
    """What is at and below `path` (never following links): {relative name: (uid, mode, mtime_ns, content)}; two
    equal trees say that nothing there was touched (a test's "left alone")."""
    out: dict[str, tuple[int, int, int, bytes | str | None]] = {}
    for p in [path, *sorted(path.rglob("*"))] if path.is_dir() and not path.is_symlink() else [path]:
        st = os.lstat(p)
        content: bytes | str | None = None
        if stat.S_ISREG(st.st_mode):
            content = p.read_bytes()
        elif stat.S_ISLNK(st.st_mode):
            content = os.readlink(p)
        out[str(p.relative_to(path))] = (st.st_uid, st.st_mode, st.st_mtime_ns, content)
    return out
