"""Render a document as Markdown: for issues, pull requests and report.md.

An untitled single section sits under the document's `#` title and its tables get `##` headings; a
document of titled sections (a report of several files, a comparison) puts each section under `##` and its
tables under `###`. Header lines end in two spaces (a line break, not a new paragraph). Cells styled `bad`
or `best` are bold; user text goes through `md_text`, so it cannot break a table, add HTML (report.md is rendered
as HTML where it is shown) or send control characters to a terminal that prints it.
"""

from __future__ import annotations

import html
import re
import sys
from typing import TYPE_CHECKING

from guestbench.util.errors import printable
from guestbench.output.document import Bullets, Document, ChartPart, Heading, Para, Part, Table

if TYPE_CHECKING:
    from guestbench.output.formats import Printable

BOLD = ("bad", "best", "regression")


TAG = re.compile(r"<[A-Za-z/!?][^<>]*>?")
"""What a Markdown renderer would pass on as HTML or an autolink: a tag, a comment, a declaration, <http://...>
(p<0.05 is none of these)."""
ENTITY = re.compile(r"&(?=#[0-9]+;|#[xX][0-9A-Fa-f]+;|[A-Za-z][A-Za-z0-9]*;)")
"""The & of a character reference: &#x202e; in a label would be a right-to-left override once rendered."""
MARKUP = re.compile(r"[\\`*\[\]|]|(?<![^\W_])_|_(?![^\W_])")
"""What makes Markdown of plain text: code spans, emphasis, links and images (no [ or ], no link: a ( or ) alone
makes nothing, so guestbench's own parentheses stay as they are), a table's cell border, the backslash; and an _
but one inside a word (kvm_pvm: there it emphasises nothing)."""


def md_text(text: str) -> str:
    """Text (a label, a host's name, guestbench's own words) as Markdown that shows it as it is, in a table cell
    or a list item: no control characters or bidi overrides (`printable`), no HTML tags or autolinks (escaped:
    <script> shows as text), no character references, and a backslash before each of `MARKUP`'s characters,
    so that a label can neither make a link nor break a table."""
    text = MARKUP.sub(lambda m: "\\" + m.group(), printable(text))
    text = ENTITY.sub("&amp;", text)
    return TAG.sub(lambda m: html.escape(m.group(), quote=False), text)


def to_markdown(document: Document) -> str:
    lines = [f"# {md_text(document.title)}", ""]
    for para in document.intro:
        lines += [*_part(para, 2), ""]
    for s in document.sections:
        level = 2
        if s.title:
            lines += [f"## {md_text(s.title)}", ""]
            level = 3
        meta = [p for p in s.parts if isinstance(p, Para) and p.kind in ("meta", "warning")]
        # the header lines of a section form one paragraph: no blank line between them
        for m in meta:
            lines += _part(m, level)
        if meta:
            lines.append("")
        for p in s.parts:
            if p not in meta:
                lines += [*_part(p, level), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _part(p: Part, level: int) -> list[str]:
    if isinstance(p, Table):
        return _table(p, level)
    if isinstance(p, Bullets):
        head = [f"{'#' * level} {md_text(p.title)}", ""] if p.title else []
        lead = f"**{md_text(p.lead)}** " if p.lead and p.style in BOLD else ""
        items = [f"- {lead}{md_text(i)}" for i in p.items]
        return head + (items or ([md_text(p.empty)] if p.title else []))
    if isinstance(p, Heading):
        return [f"{'#' * (level + p.level - 1)} {md_text(p.text)}"]
    if isinstance(p, Para):
        if p.kind == "warning":
            return [f"**Warning:** {md_text(p.text)}  "]
        if p.kind == "meta":
            return [f"{md_text(p.text)}  "]
        return [f"**{md_text(p.text)}**" if p.kind == "bad" else md_text(p.text)]
    if isinstance(p, ChartPart):
        return [f"![{md_text(p.chart.title)}]({p.png_name})", "",
                f"Chart: {md_text(p.caption)} (also {md_text(p.stem)}.svg)"]
    raise TypeError(f"not a document part: {p!r}")


def _table(t: Table, level: int) -> list[str]:
    lines = [f"{'#' * level} {md_text(t.title)}", ""]
    if not t.rows:
        return lines + [md_text(t.empty)] + (["", md_text(t.caption)] if t.caption else [])
    lines += ["| " + " | ".join(md_text(h) for h in t.headers) + " |", "|" + "---|" * len(t.headers)]
    for i, row in enumerate(t.rows):
        cells = [f"**{md_text(c)}**" if t.styles.get((i, j)) in BOLD else md_text(c) for j, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    if t.caption:
        lines += ["", md_text(t.caption)]
    if t.notes:
        lines += ["", *(f"- {md_text(n)}" for n in t.notes)]
    return lines


def emit(p: Printable) -> None:
    sys.stdout.write(to_markdown(p.document()))
