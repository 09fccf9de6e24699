"""What every command shares: exit statuses, the host problems said like bad input, writing JSON, the checks
of flags that several commands take."""

from __future__ import annotations

import argparse
import errno
import json
import math
import sys
from pathlib import Path
from typing import Any

from guestbench.host import space
from guestbench.util.errors import UserError


EXIT_USAGE = 2
EXIT_INTERNAL = 70
# OSErrors that are the host's state, not guestbench's bug: a full or read-only filesystem, a denied permission
# OSErrors the user can act on (and a path given that no system call takes: too long, a loop of links)
HOST_PROBLEMS = (*space.NO_SPACE, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ELOOP)
OUTPUT_HELP = ("write here instead of stdout (- is stdout): a new file, or a regular file of your own, replaced "
               "atomically; a device, FIFO, symbolic link or another user's file is refused")


def write_json(doc: dict[str, Any], output: str | None) -> None:
    """To stdout, or atomically to a file (a failed write is bad input: one line, exit 2)."""
    if output is None or output == "-":
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return
    from guestbench.results import atomic_write_json

    try:
        atomic_write_json(Path(output), doc)
    except OSError as e:
        raise UserError(f"cannot write: {e.strerror or e}", source=output) from None
    sys.stderr.write(f"guestbench: wrote {output}\n")


def check_probe_timeout(args: argparse.Namespace) -> None:
    if args.probe_timeout is not None:
        from guestbench.scenario import Checker

        args.probe_timeout = Checker("command line").seconds("--probe-timeout", args.probe_timeout)


def percent(text: str, flag: str = "--fail-above") -> float:
    """`10%` and `10` both mean 10 percent: one reading only, so `0.1` is 0.1 percent, never 10."""
    raw = text.strip()
    number = raw[:-1].strip() if raw.endswith("%") else raw
    try:
        pct = float(number)
    except ValueError:
        pct = math.nan
    if not math.isfinite(pct) or pct <= 0:
        raise UserError(f"{text!r} is not a positive percentage; allowed: a number > 0 of percent, e.g. 10 or 10%",
                        source="command line", key=flag)
    return pct
