"""Error types shared across guestbench, and the one-line form every error is reported in: the CLI turns
them into one line and an exit status, never a traceback."""

from __future__ import annotations

import re
import reprlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.text import Text

CLIP = 60  # characters of a value quoted in a message: enough to recognise it, never a whole hostile file
# What untrusted text must not carry to a terminal or a report: every character of Unicode's categories Cc, Cf, Cs,
# Zl and Zp (as Python 3.11's unicodedata lists them): C0 (ESC starts terminal sequences), DEL, C1, the line and
# paragraph separators, the bidi marks, embeddings, overrides and isolates (U+202E shows the rest of a line
# backwards: a name can pose as another), the invisible format characters (a zero-width space or joiner, a soft
# hyphen, tag characters: "beta" and "beta\u200b" would look alike) and lone surrogates (no terminal can encode them).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e"
                     "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb"
                     "\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
                     "\U000e0001\U000e0020-\U000e007f]")


class UserError(Exception):
    """Bad input from the user (scenario file, command line, results file): exit status 2.

    The message is a single line naming the file, the key path, what is wrong and what is allowed.
    """

    exit_status = 2

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        parts = [clip_text(p, 200) for p in (source, key) if p]  # a hostile key or path is quoted, not copied
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


def one_line(message: object, *, squeeze: bool = False, limit: int | None = None) -> str:
    """A message as one line, so an error report stays one line on stderr or in a results cell.

    By default line breaks are escaped (a user's key or file name that holds one is still shown exactly);
    `squeeze` folds every run of white space to one space instead (a tool's multi-line output). Other control
    characters (ESC of a terminal sequence, a hostile key's BEL) are escaped too, so a message never drives the
    terminal; `limit` cuts what is longer, saying how much was left out.
    """
    text = str(message)
    text = " ".join(text.split()) if squeeze else text.replace("\r", "\\r").replace("\n", "\\n")
    text = _UNSAFE.sub(_escape, text)
    return clip_text(text, limit) if limit is not None else text


def _escape(m: re.Match[str]) -> str:
    """A character `_UNSAFE` matched, as Python writes it in a string: \\x1b, \\u202e."""
    return m.group().encode("unicode_escape").decode("ascii")


def clip_text(text: str, n: int) -> str:
    """`text` if it has at most n characters, else its first n and how many more there were."""
    return text if len(text) <= n else f"{text[:n]}... ({len(text) - n} more characters)"


class _Clipped(reprlib.Repr):
    """reprlib's bounded repr, but a string shows its prefix (not its two ends), a mapping keeps its order, and an
    integer too long to print (Python refuses past 4300 digits) says how long it is."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict, self.maxset = 3, 6, 6, 4, 6
        self.maxstring = self.maxlong = self.maxother = n

    def repr_str(self, x: str, level: int) -> str:
        return repr(x) if len(x) <= self.maxstring else repr(x[:self.maxstring]) + "..."

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > self.maxlong * 3.33:  # more than maxlong digits
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return repr(x)

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}" for k, v in list(x.items())[:self.maxdict]]
        return "{" + ", ".join(items) + (", ...}" if len(x) > self.maxdict else "}")


def clip(value: object, n: int = CLIP) -> str:
    """A value as a message quotes it: its repr, of at most about n characters (a string's prefix, a container's
    first items), computed without ever building the whole repr of a huge or deeply shared structure."""
    text = _Clipped(n).repr(value)
    return text if len(text) <= n + 10 else text[:n] + "..."


def printable(text: object) -> str:
    """The one sanitiser of text from outside (a results file's names and labels, a level-1 guest's console, a
    fleet host's status and errors) on its way to a terminal or a report: every character `_UNSAFE` matches
    shown as its escape (\\x1b, \\u202e: visibly there, never obeyed), line breaks as spaces, tabs and plain
    text kept."""
    return _UNSAFE.sub(lambda m: " " if m.group() in "\n\r" else "\t" if m.group() == "\t" else _escape(m),
                       str(text))


def inert(text: object, style: str = "") -> Text:
    """Untrusted text for a rich console: `printable`, and a Text, so that rich never reads it as markup (a
    status of "[/]" would raise MarkupError and end the run; "[link=...]" would make a link)."""
    from rich.text import Text  # rich only where a console is printed to

    return Text(printable(text), style=style)
