"""Which guestbench measured: its version and, run from a git checkout, the commit (every result records both)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import guestbench
from guestbench.host import commands


def git_commit() -> str | None:
    """The guestbench checkout's commit, "+dirty" if it has local changes; None if not a checkout."""
    tree = Path(guestbench.__file__).resolve().parent.parent
    head = commands.output(["git", "rev-parse", "HEAD"], cwd=tree)
    if head is None or head[0] != 0:
        return None
    commit = head[1].strip()
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        return None
    status = commands.output(["git", "status", "--porcelain"], cwd=tree)
    if status is not None and status[0] == 0 and status[1].strip():
        commit += "+dirty"
    return commit


def identity() -> dict[str, Any]:
    """The results document's `guestbench` section."""
    return {"version": guestbench.__version__, "git_commit": git_commit()}
