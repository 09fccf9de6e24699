"""Render a document on the terminal with rich.

A table's title and caption go into the rich table; its notes join the caption; remarks are one line each,
led by what they are ("warning: …"). User text is never read as rich markup, and reaches the terminal only
through `_text`, which removes control characters (a label from a results file cannot send ESC sequences).
Figures are not drawn here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from guestbench.util.errors import inert, printable
from guestbench.output.document import Bullets, Document, ChartPart, Heading, Para, Part, Table

if TYPE_CHECKING:
    from guestbench.output.formats import Printable

STYLES = {"good": "green", "bad": "red", "best": "bold green", "warn": "yellow", "regression": "bold red"}


def render(document: Document, console: Console) -> None:
    """The document, section by section; the title once, in bold cyan after its "guestbench:" lead."""
    lead, _, name = document.title.partition(": ")
    console.print(Text.assemble((f"{printable(lead)}: ", "bold"), (printable(name), "bold cyan")) if name else
                  _text(document.title, style="bold"))
    for para in document.intro:
        _part(para, console)
    for s in document.sections:
        if s.title:
            console.print()
            console.print(_text(s.title, style="bold underline"))
        for p in s.parts:
            _part(p, console)


def _part(p: Part, console: Console) -> None:
    if isinstance(p, Table):
        _table(p, console)
    elif isinstance(p, Bullets):
        if p.items:
            console.print()
        if p.items and p.title and not p.lead:
            console.print(_text(p.title, style="bold"))
        for item in p.items:
            console.print(_text(f"{p.lead}: {item}" if p.lead else f"- {item}", style=STYLES.get(p.style, "")))
    elif isinstance(p, Heading):
        console.print()
        console.print(_text(p.text, style="bold"))
    elif isinstance(p, Para):
        _para(p, console)
    elif isinstance(p, ChartPart):
        pass  # charts are files of `guestbench report`


def _para(p: Para, console: Console) -> None:
    if p.kind == "warning":
        console.print(_text(f"warning: {p.text}", style="yellow"))
    elif p.kind == "meta":
        console.print(_text(p.text))
    else:
        if p.kind != "caption":
            console.print()
        console.print(_text(p.text, style=STYLES.get(p.kind, "")))


def _table(t: Table, console: Console) -> None:
    if not t.rows:
        if not t.quiet_when_empty:
            console.print()
            console.print(_text(f"{t.title}: {t.empty}{' ' + t.caption if t.caption else ''}"))
        return
    caption = " ".join([t.caption, *t.notes]).strip()
    table = RichTable(title=_text(t.title, style="bold"), caption=_text(caption) if caption else None,
                      caption_justify="left")
    for i, name in enumerate(t.headers):
        table.add_column(_text(name), justify="right" if i >= t.numeric_from else "left", overflow="fold")
    for i, row in enumerate(t.rows):
        cells = [_text(c) for c in row]
        for j, cell in enumerate(cells):
            style = t.styles.get((i, j))
            if style:
                cell.stylize(STYLES.get(style, ""))
        table.add_row(*cells)
    console.print()
    console.print(table)


def _text(text: str, style: str = "") -> Text:
    """The one way model text becomes terminal output: plain (no markup), control characters escaped."""
    return inert(text, style)


def wide_console() -> Console:
    """The terminal's width, but at least 160 columns: the timing tables are wide."""
    return Console(width=max(Console().width, 160))


def emit(p: Printable) -> None:
    render(p.brief() if p.brief else p.document(), wide_console())
