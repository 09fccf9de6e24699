"""Reading JSON that nobody vouches for: results files and pytest-benchmark JSON (docs/safety.md).

These files are passed around, mailed, attached to issues; guestbench reads them as root. A FIFO would block
the reader for ever, a device (/dev/zero, /dev/urandom) never ends, an oversized file exhausts memory, and
a 5000-digit number makes Python's int() raise. So the file must be a regular file of at most MAX_BYTES, and
each number at most MAX_NUMBER_CHARS characters long; anything else is one line naming the file.

The file is first opened with O_PATH (which opens nothing: no FIFO wait, no device's open side effect, e.g. a
watchdog armed) and checked with fstat; only a regular file is then opened for reading, through
/proc/self/fd, so it is the very file that was checked.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from guestbench.errors import UserError

MAX_BYTES = 64 * 1024 * 1024
"""A results file holds 0.4 to 3 KB a sample (the shipped ones in tests/data), so 64 MiB is 20,000 samples of
the largest kind, days of back-to-back launches, and over 1,000 times the largest shipped file. Reading costs
grow with it (measured: 17 MB of 200,000 short samples, `show` 6 s and 210 MB), so this cap bounds them to
tens of seconds and about a GiB; more is not a file a run wrote."""

MAX_NUMBER_CHARS = 100
"""A seed is at most 20 digits, a float's repr at most 24 characters; int() refuses more than 4300 digits."""

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class _LongNumber(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _open_checked(p: Path, what: str, cap: int) -> int:
    """A file descriptor open for reading on `p`, once it is known to be a regular file within `cap` bytes."""
    try:
        handle = os.open(p, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserError(f"no such {what}", source=str(p)) from None
    except OSError as e:
        raise UserError(f"cannot read {what}: {e.strerror}", source=str(p)) from None
    try:
        st = os.fstat(handle)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"is {_kind(st.st_mode)}; a {what} must be a regular file", source=str(p))
        if st.st_size > cap:
            raise UserError(f"is {st.st_size:,} bytes; a {what} may be at most {cap:,} bytes", source=str(p))
        try:
            return os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise UserError(f"cannot read {what}: {e.strerror}", source=str(p)) from None
    finally:
        os.close(handle)


def read_capped(path: str | Path, what: str, cap: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most `cap` bytes, or a one-line UserError saying what it is instead."""
    p = Path(path)
    fd = _open_checked(p, what, cap)
    try:
        chunks, size = [], 0
        while size <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise UserError(f"cannot read {what}: {e.strerror or e}", source=str(p)) from None
    finally:
        os.close(fd)
    if size > cap:  # it grew after the check
        raise UserError(f"is more than {cap:,} bytes; a {what} may be at most {cap:,} bytes", source=str(p))
    return b"".join(chunks)


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _LongNumber(text)
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _LongNumber(text)
    return float(text)


def loads(data: bytes, source: str, expected: str) -> Any:
    """JSON from untrusted bytes with every number bounded; any problem is a one-line UserError."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"not valid JSON (not UTF-8 text); expected {expected}", source=source) from None
    try:
        return json.loads(text, parse_int=_int, parse_float=_float)
    except json.JSONDecodeError as e:
        raise UserError(f"not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}; expected {expected}",
                        source=source) from None
    except RecursionError:
        raise UserError(f"JSON nested too deeply; expected {expected}", source=source) from None
    except _LongNumber as e:
        line = text.count("\n", 0, max(text.find(e.text), 0)) + 1
        raise UserError(f"line {line}: a number of {len(e.text):,} characters ({e.text[:20]}...); allowed: at "
                        f"most {MAX_NUMBER_CHARS}", source=source) from None
