"""The one output model: a document of parts that every format renders the same way.

`show`, `report`, `compare` and a scenario's final print build a `Document` once (guestbench.output.results_doc,
guestbench.output.compare_doc) and hand it to a renderer: the terminal (rich), Markdown or HTML. A renderer
decides only how a part looks, never which figures it holds, so a figure printed in one format is in all of
them. CSV and the summary JSON stay their own stable contracts (output/export/csv.py, json.py).

Styles are names, not colours: `good`, `bad`, `best`, `warn`. The terminal colours them, HTML gives them a
CSS class, Markdown makes `bad` and `best` bold.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace

NONE_TEXT = "None."


@dataclass(frozen=True)
class Heading:
    """A heading inside a section (level 1 = the section's own sub-headings)."""

    text: str
    level: int = 1


@dataclass(frozen=True)
class Para:
    """`kind`: "" (body text), "meta" (a line of the header), "caption", "warning" (rendered with a
    "Warning:" lead), "good", "bad"."""

    text: str
    kind: str = ""


@dataclass(frozen=True)
class Table:
    """A titled table with its caption. `kind` says which figures it holds (measurement, metrics, durability,
    placements, phases, density, cost, unusable, comparison, host, nested-host); `label` names the measurement.
    Columns from `numeric_from` on are right-aligned. `styles` marks cells: (row, column) → style name.
    With no rows, Markdown and HTML print `empty` under the title; the terminal prints nothing if
    `quiet_when_empty`, else the title and `empty` on one line."""

    kind: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""
    notes: list[str] = field(default_factory=list)
    label: str = ""
    numeric_from: int = 99
    styles: dict[tuple[int, int], str] = field(default_factory=dict)
    empty: str = NONE_TEXT
    quiet_when_empty: bool = False


@dataclass(frozen=True)
class Bullets:
    """A list of remarks. `lead` is how the terminal starts each line ("warning", "note", a table's title);
    with a `title`, Markdown and HTML put it under that heading and print `empty` when there are none."""

    items: list[str]
    title: str = ""
    lead: str = ""
    style: str = ""
    empty: str = NONE_TEXT


@dataclass(frozen=True)
class Chart:
    """One rendered chart (output/charts.py draws it): `name` is unique within a results file and becomes part of
    the file names."""

    name: str
    title: str
    encoding: str  # what the marks mean (bar, whiskers, dots, hatching)
    context: str  # what was timed, cache mode, methods: repeated by a report when no table above says it
    png: bytes
    svg: bytes

    @property
    def caption(self) -> str:
        return f"{self.encoding} {self.context}"


@dataclass(frozen=True)
class ChartPart:
    """A chart in a document, with its file stem and caption (only `guestbench report` draws them: matplotlib is
    slow to import). Not a results figure (guestbench.results.figures): a figure is a measured quantity."""

    chart: Chart
    stem: str  # file name without extension
    caption: str

    @property
    def png_name(self) -> str:
        return f"{self.stem}.png"


Part = Heading | Para | Table | Bullets | ChartPart


@dataclass
class Section:
    """What one results file (or one comparison) says. An untitled section is the document's only one."""

    title: str
    anchor: str = ""
    parts: list[Part] = field(default_factory=list)


@dataclass
class Document:
    title: str
    intro: list[Para] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    def tables(self) -> list[Table]:
        return [p for s in self.sections for p in s.parts if isinstance(p, Table)]

    def chart_parts(self) -> list[ChartPart]:
        return [p for s in self.sections for p in s.parts if isinstance(p, ChartPart)]

    def distinct_stems(self) -> None:
        """Give each chart part a file stem no other one of the document has: `slug` maps labels that differ only
        in punctuation ("a b", "a/b") to one stem, and one chart's files would silently replace the other's. The
        first keeps its stem; a later one adds a hash of its chart's title (the whole label), then a number."""
        taken: set[str] = set()
        for s in self.sections:
            for i, p in enumerate(s.parts):
                if not isinstance(p, ChartPart):
                    continue
                stem = p.stem
                if stem in taken:
                    stem = f"{p.stem}-{hashlib.sha256(p.chart.title.encode()).hexdigest()[:8]}"
                n = 1
                while stem in taken:
                    n += 1
                    stem = f"{p.stem}-{n}"
                taken.add(stem)
                if stem != p.stem:
                    s.parts[i] = replace(p, stem=stem)


SLUG_MAX = 80


def slug(text: str) -> str:
    """A file-name and anchor-safe form of a label or file stem; a long one is cut to SLUG_MAX characters and
    ends in a hash of the whole text, so two long labels stay apart and a chart's file name (stem-chart.svg)
    stays well under the 255 bytes a file name may have."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "chart"
    if len(out) <= SLUG_MAX:
        return out
    return f"{out[:SLUG_MAX - 9]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
