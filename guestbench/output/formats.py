"""The formats a command prints in, chosen by one lookup (as hyperfine's exporters are): the terminal's tables,
Markdown, JSON and CSV. A command hands over a `Printable`, what it has to say, built only as far as the chosen
format needs it. Adding a format is one module with an `emit(Printable)` and one line in FORMATS; the command
line gets its flag from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from guestbench.util.lazy import on_first_use

if TYPE_CHECKING:
    from guestbench.output.document import Document


@dataclass(frozen=True)
class Printable:
    """What one command prints: its document (the terminal and Markdown), its JSON summary and its CSV."""

    document: Callable[[], Document]
    summary: Callable[[], dict[str, Any]]
    csv: Callable[[], str] | None = None
    brief: Callable[[], Document] | None = None  # the terminal's shorter document, where there is one
    no_csv: str = ""  # why there is no CSV (csv is None)


@dataclass(frozen=True)
class Format:
    flag: str  # the command line's flag ("" for the default)
    help: str  # {csv_header}: the header of the command's CSV
    module: str  # the module whose emit(Printable) prints it: imported when the format is asked for (rich, ...)
    whole: bool = False  # a machine's format: stdout holds this one document and nothing else


FORMATS: dict[str, Format] = {
    "table": Format("", "", "guestbench.output.render.terminal"),
    "json": Format("--json", "print a summary as JSON", "guestbench.output.export.json", whole=True),
    "markdown": Format("--markdown", "print Markdown", "guestbench.output.render.markdown"),
    "csv": Format("--csv", "print CSV with the header {csv_header}", "guestbench.output.export.csv", whole=True),
}
DEFAULT = "table"


def emit(p: Printable, fmt: str) -> None:
    on_first_use(FORMATS[fmt].module).emit(p)
