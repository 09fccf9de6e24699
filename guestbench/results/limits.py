"""Reading JSON that nobody vouches for: results files and pytest-benchmark JSON (docs/safety.md).

These files are passed around, mailed, attached to issues; guestbench reads them as root. A FIFO would block
the reader for ever, a device (/dev/zero, /dev/urandom) never ends, an oversized file exhausts memory, and
a 5000-digit number makes Python's int() raise. So the file must be a regular file of at most MAX_BYTES, and
each number at most MAX_NUMBER_CHARS characters long; anything else is one line naming the file.

The file is read by guestbench.util.bounded.read_bytes: checked through an O_PATH descriptor (no FIFO wait, no
device opened) before the very file checked is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from guestbench.util import bounded
from guestbench.util.errors import UserError

MAX_BYTES = 64 * 1024 * 1024
"""A results file holds 0.4 to 3 KB a sample (the shipped ones in tests/data), so 64 MiB is 20,000 samples of
the largest kind, days of back-to-back launches, and over 1,000 times the largest shipped file. Reading costs
grow with it (measured: 17 MB of 200,000 short samples, `show` 6 s and 210 MB), so this cap bounds them to
tens of seconds and about a GiB; more is not a file a run wrote."""

MAX_NUMBER_CHARS = 100
"""A seed is at most 20 digits, a float's repr at most 24 characters; int() refuses more than 4300 digits."""

class _LongNumber(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def read_capped(path: str | Path, what: str, cap: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most `cap` bytes, or a one-line UserError saying what it is instead
    (guestbench.util.bounded, which reads scenario files the same way)."""
    return bounded.read_bytes(path, what, cap)


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
        doc = json.loads(text, parse_int=_int, parse_float=_float)
        json.dumps(doc, ensure_ascii=False).encode("utf-8")  # a \uD800 escape decodes to a lone surrogate: not text
        return doc
    except UnicodeEncodeError:
        raise UserError(f"a string holds a lone surrogate (a \\uD8xx escape), which is not text; expected {expected}",
                        source=source) from None
    except json.JSONDecodeError as e:
        raise UserError(f"not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}; expected {expected}",
                        source=source) from None
    except RecursionError:
        raise UserError(f"JSON nested too deeply; expected {expected}", source=source) from None
    except _LongNumber as e:
        line = text.count("\n", 0, max(text.find(e.text), 0)) + 1
        raise UserError(f"line {line}: a number of {len(e.text):,} characters ({e.text[:20]}...); allowed: at "
                        f"most {MAX_NUMBER_CHARS}", source=source) from None
