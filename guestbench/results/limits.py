"""Reading JSON that nobody vouches for: results files and pytest-benchmark JSON (docs/safety.md).

These files are passed around, mailed, attached to issues; guestbench reads them as root. A FIFO would block
the reader for ever, a device (/dev/zero, /dev/urandom) never ends, an oversized file exhausts memory, and
a 5000-digit number makes Python's int() raise. So the file must be a regular file of at most MAX_BYTES, each
number at most MAX_NUMBER_CHARS characters long and finite (JSON has no NaN or Infinity: Python's json reads them,
and every JSON writer then refuses them), and the document nested at most MAX_DEPTH levels deep, counted over the
text before anything parses it (json's parser and its indenting encoder recurse once or more a level: a document
nested ~1,000 deep is a RecursionError wherever it goes next); anything else is one line naming the file.

The file is read by guestbench.util.bounded.read_bytes: checked through an O_PATH descriptor (no FIFO wait, no
device opened) before the very file checked is read.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from pathlib import Path
from typing import Any
from collections.abc import Callable

from guestbench.util import bounded
from guestbench.util.errors import UserError

MAX_BYTES = 64 * 1024 * 1024
"""A results file holds 0.4 to 3 KB a sample (the shipped ones in tests/data), so 64 MiB is 20,000 samples of
the largest kind, days of back-to-back launches, and over 1,000 times the largest shipped file. Reading costs
grow with it (measured: 17 MB of 200,000 short samples, `show` 6 s and 210 MB), so this cap bounds them to
tens of seconds and about a GiB; more is not a file a run wrote."""

MAX_NUMBER_CHARS = 100
"""A seed is at most 20 digits, a float's repr at most 24 characters; int() refuses more than 4300 digits."""

MAX_DEPTH = 64
"""Arrays and objects nested in one another, the document itself counted as one. The deepest file guestbench
writes nests 7 (a nested placement's host fingerprint: placements.nested.host.virtualization.kvm.modules), a fleet
host with a nested placement 9, its pytest-benchmark export 10. A document from a run elsewhere (a level-1 guest,
a fleet host) is kept 2 levels further down (guestbench.execute.remote), and this run's file must stay one every reader
accepts: so such a document may nest MAX_DEPTH - 2. 64 leaves that room six times over, and stays far below the
~1,000 levels at which Python's recursion limit stops json's encoders and decoders."""

_BRACKETS_AND_QUOTES = bytes(b for b in range(256) if b not in b'[]{}"')  # what bytes.translate deletes
_STRING = re.compile(rb'"[^"]*"')
_STEP = [0] * 256  # what each bracket does to the nesting level
for _b in b"[{":
    _STEP[_b] = 1
for _b in b"]}":
    _STEP[_b] = -1
_CHUNK = 1 << 16  # brackets counted at a time: a text of nothing but '[' is refused at its first chunk


class _LongNumber(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class _NotFinite(Exception):
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
    value = float(text)
    if not math.isfinite(value):  # 1e999: past the largest float, read as infinity
        raise _NotFinite(text)
    return value


def _constant(text: str) -> Any:
    raise _NotFinite(text)  # NaN, Infinity, -Infinity: Python's json reads them, JSON has none


def nests_deeper(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON text nests arrays and objects more than `limit` deep, counted over its brackets outside strings
    in a few passes at C speed and a loop over the brackets alone: no recursion, nothing parsed. Escaped
    backslashes and quotes are dropped first, so every quote left opens or closes a string; of the quotes and
    brackets kept, two quotes side by side enclose no bracket outside a string (an empty string, or one string
    ending where the next starts), so dropping them changes nothing, and what remains in quotes is inside a
    string. Text that is not JSON may be counted wrongly, and is refused either way (here or by the parser)."""
    kept = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _BRACKETS_AND_QUOTES)
    brackets = _STRING.sub(b"", kept.replace(b'""', b""))
    level = 0
    for start in range(0, len(brackets), _CHUNK):
        levels = list(accumulate(map(_STEP.__getitem__, brackets[start:start + _CHUNK]), initial=level))
        if max(levels) > limit:
            return True
        level = levels[-1]
    return False


def deepest(value: Any) -> float:
    """How deep a parsed document nests (the document itself is 1; a number or string 0), as its JSON would:
    what a document from elsewhere holds is checked before it is merged (guestbench.execute.remote). Walked without
    recursion, each container once (its height kept by id), so a document a Python peer built, whose containers
    may be shared (40 levels of [x, x] are 2**40 paths), costs its size; a cycle, which no JSON can hold, counts
    as endless (math.inf)."""
    if not isinstance(value, (dict, list, tuple)):
        return 0
    height: dict[int, float] = {}
    todo: list[tuple[Any, bool]] = [(value, False)]
    while todo:
        item, children_done = todo.pop()
        kids = [c for c in (item.values() if isinstance(item, dict) else item) if isinstance(c, (dict, list, tuple))]
        if children_done:
            height[id(item)] = 1 + max((height[id(c)] for c in kids), default=0)
            continue
        if id(item) in height:
            continue  # shared: its height is known (or being found: a cycle, caught below)
        height[id(item)] = math.inf  # in progress: met again below itself, it is a cycle
        todo.append((item, True))
        todo.extend((c, False) for c in kids if id(c) not in height)
        if any(height.get(id(c)) == math.inf for c in kids):
            return math.inf
    return height[id(value)]


def _line(text: str, token: str) -> int:
    """The line where the value `token` (a number, NaN) first stands in `text`, not inside a string: escaped
    backslashes and quotes blanked (same length), a quote count that is even before it says it is outside."""
    plain = text.replace("\\\\", "  ").replace('\\"', "  ")
    quotes = last = 0
    for m in re.finditer(rf"(?<![\w.+-]){re.escape(token)}(?![\w.+-])", plain):
        quotes, last = quotes + plain.count('"', last, m.start()), m.start()
        if quotes % 2 == 0:
            return text.count("\n", 0, m.start()) + 1
    return 1  # unreachable for text the parser read


def loads(data: bytes, source: str, expected: str, nonfinite: list[str] | None = None) -> Any:
    """JSON from untrusted bytes, its nesting and every number bounded, nothing infinite or NaN; any problem is a
    one-line UserError. With a `nonfinite` list, NaN, Infinity and numbers past the largest float are read as their
    text instead (a string: never a float that every writer after would refuse) and listed there as "line N: NaN":
    pytest-benchmark writes a benchmark's params and extra_info with Python's json, which writes them."""
    if nonfinite is not None:
        kept: list[str] = []

        def keep(t: str) -> str:
            kept.append(t)
            return t
        doc = _loads(data, source, expected, keep, lambda t: _float_or(t, kept))
        text = data.decode("utf-8")
        nonfinite += [f"line {_line(text, t)}: {t[:20]}" for t in kept]
        return doc
    return _loads(data, source, expected, _constant, _float)


def _float_or(text: str, kept: list[str]) -> float | str:
    try:
        return _float(text)
    except _NotFinite:
        kept.append(text)
        return text


def _loads(data: bytes, source: str, expected: str, constant: Callable[[str], Any],
           number: Callable[[str], Any]) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"not valid JSON (not UTF-8 text); expected {expected}", source=source) from None
    if nests_deeper(data):
        raise UserError(f"arrays and objects nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH}; "
                        f"expected {expected}", source=source)
    try:
        doc = json.loads(text, parse_int=_int, parse_float=number, parse_constant=constant)
        json.dumps(doc, ensure_ascii=False).encode("utf-8")  # a \uD800 escape decodes to a lone surrogate: not text
        return doc
    except UnicodeEncodeError:
        raise UserError(f"a string holds a lone surrogate (a \\uD8xx escape), which is not text; expected {expected}",
                        source=source) from None
    except json.JSONDecodeError as e:
        raise UserError(f"not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}; expected {expected}",
                        source=source) from None
    except RecursionError:  # within MAX_DEPTH, only when called with the stack already nearly used up
        raise UserError(f"JSON nested too deeply; expected {expected}", source=source) from None
    except _LongNumber as e:
        raise UserError(f"line {_line(text, e.text)}: a number of {len(e.text):,} characters ({e.text[:20]}...); "
                        f"allowed: at most {MAX_NUMBER_CHARS}", source=source) from None
    except _NotFinite as e:
        raise not_finite(f"line {_line(text, e.text)}: {e.text[:20]}", source) from None


def not_finite(where: str, source: str) -> UserError:
    """The refusal of a NaN or Infinity found at `where` ("line N: NaN")."""
    return UserError(f"{where} is not a finite number; allowed: finite numbers (JSON has no NaN or Infinity)",
                     source=source)
