"""The machine's Debian suite, from /etc/os-release: which of its apt sources are its own (a stack of another suite
is built from them, and a cell on the machine's own software names that suite)."""

from __future__ import annotations

import re
from pathlib import Path

from guestbench.util.errors import UserError

OS_RELEASE = Path("/etc/os-release")


def codename(os_release: str | None = None) -> str:
    """VERSION_CODENAME (`bookworm`); a machine whose os-release names none is refused in one line."""
    try:
        text = os_release if os_release is not None else OS_RELEASE.read_text()
    except OSError as e:
        raise UserError(f"cannot read it ({e.strerror})", source=str(OS_RELEASE), key="VERSION_CODENAME") from None
    found = re.search(r"^VERSION_CODENAME=\"?([a-z]+)\"?$", text, re.M)
    if not found:
        raise UserError("/etc/os-release names no VERSION_CODENAME: cannot tell which suite the machine's apt "
                        "sources are for", source=str(OS_RELEASE), key="VERSION_CODENAME")
    return found.group(1)
