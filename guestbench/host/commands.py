"""Short host commands under a deadline: the one place guestbench runs a tool and reads what it printed.

Two ways, by what a failure means. `output` is for facts that may be missing (a version, a detection tool):
any failure is None, never an exception, and a timeout kills the command's whole session (UML forks helpers).
`checked` is for steps that must succeed (making an image, a disk's layout): a failure is the caller's error
class with one line saying which step, why, and what the tool said.
"""

from __future__ import annotations

import os
import signal
import subprocess

from guestbench.host import procs

FACT_TIMEOUT_S = 10.0
"""Upper bound for a command that reads a fact; a hung tool must not hang the fingerprint."""

DETAIL_CHARS = 300  # of a failed tool's last words, squashed onto one line (its warnings come first)


def output(argv: list[str], timeout: float = FACT_TIMEOUT_S,
           cwd: str | os.PathLike[str] | None = None) -> tuple[int, str] | None:
    """(exit status, stdout) of a command, or None if it cannot run or times out."""
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    except (OSError, ValueError):
        return None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        procs.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        try:
            proc.communicate(timeout=2)
        except (subprocess.TimeoutExpired, OSError, ValueError):
            pass
        return None
    return proc.returncode, out


def checked(argv: list[str], what: str, timeout: float, *, env: dict[str, str] | None = None,
            error: type[Exception] = RuntimeError, missing: str = "") -> str:
    """The stdout of a command that must succeed. Not installed, past its deadline or a non-zero exit raises
    `error` with one line: `what` and why, `missing` saying what the absent tool is needed for."""
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=timeout, env=env)
    except FileNotFoundError:
        raise error(f"{argv[0]} is not installed{f' (needed {missing})' if missing else ''}") from None
    except subprocess.TimeoutExpired:
        raise error(f"{what} did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        said = " ".join((proc.stderr or proc.stdout).split())[-DETAIL_CHARS:] or "no output"  # the end: the error
        raise error(f"{what} failed (exit {proc.returncode}): {said}")
    return proc.stdout
