"""Error types shared across guestbench, and the one-line form every error is reported in: the CLI turns
them into one line and an exit status, never a traceback."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # C0 but tab, DEL, C1: ESC starts terminal sequences


class UserError(Exception):
    """Bad input from the user (scenario file, command line, results file): exit status 2.

    The message is a single line naming the file, the key path, what is wrong and what is allowed.
    """

    exit_status = 2

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        parts = [p for p in (source, key) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.source = source
        self.key = key


class Interrupted(Exception):
    """The run was stopped by SIGINT/SIGTERM; samples taken so far are kept."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum


class Unavailable(RuntimeError):
    """This host or appliance cannot do what a cell asks (a kind of host storage, a filesystem): the cell is
    reported as unavailable with this message, shown to the user as is, and not retried sample after sample."""


def one_line(message: object, *, squeeze: bool = False) -> str:
    """A message as one line, so an error report stays one line on stderr or in a results cell.

    By default line breaks and other control characters are escaped (a user's key or file name that holds one
    is still shown exactly, and an ESC from a hostile file cannot drive the terminal); `squeeze` folds every run
    of white space to one space instead (a tool's multi-line output).
    """
    text = " ".join(str(message).split()) if squeeze else str(message)
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return {"\n": "\\n", "\r": "\\r"}.get(char, f"\\x{ord(char):02x}")


def printable(text: object) -> str:
    """Text from a results file (a name, a label) made inert for a terminal or a report: control characters
    (ESC and so the sequences it starts, C1, DEL) removed, line breaks turned into spaces; plain text kept."""
    return _CONTROL.sub(lambda m: " " if m.group() in "\n\r" else "", str(text))
