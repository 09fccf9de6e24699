"""Error types that the CLI turns into one line and an exit status, never a traceback."""

from __future__ import annotations


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
