"""`guestbench report`: results files as one self-contained HTML page, its Markdown twin, and chart files.

One section per results file, never merged, even when two files ran the same scenario: absolute seconds
compare only within one run (two TCG runs 50 minutes apart on the same machine differed by 15%), so bars
of different runs side by side would invite the comparison that `guestbench compare` makes with a test.

Every figure in a table comes from `report`: the terminal report's own rows, cell texts and boot-phase
tables, recomputed by `stats` and `phases` from the raw samples; the charts use the same (see `charts`).
The page and the Markdown are rendered from one list of parts, so they hold the same figures.

`index.html` embeds its charts as base64 PNGs and its CSS inline: the single file works when mailed or
attached to an issue (no external files, no script, no SVG ids colliding between charts). Each chart is
also written as `<results file stem>-<label>.png` and `.svg`; `report.md` refers to the PNGs by relative
path, for pasting into an issue next to the uploaded images. Files are written atomically (temp + rename).
"""

from __future__ import annotations

import base64
import html
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from guestbench import __version__, charts, density_report, report
from guestbench.charts import Chart
from guestbench.errors import UserError
from guestbench.report import NONE
from guestbench.results import atomic_write_bytes

INDEX = "index.html"
MARKDOWN = "report.md"
FILE_MODE = 0o644  # a report is for sharing, unlike results files
CSS_PX_PER_INCH = 96

INTRO = ("One section per results file. Absolute seconds compare only within one run (same machine, same "
         "time); across runs use guestbench compare, which tests the difference.")


@dataclass(frozen=True)
class Heading:
    text: str
    level: int
    anchor: str = ""


@dataclass(frozen=True)
class Para:
    text: str
    kind: str = ""  # CSS class: "meta", "caption", "warning"


@dataclass(frozen=True)
class Table:
    """`kind` says which figures it holds: measurement, placements (host vs nested), phases, unusable
    (backends), host or nested-host (the level-1 guest's fingerprint)."""

    kind: str
    headers: list[str]
    rows: list[list[str]]
    label: str = ""
    numeric_from: int = 99  # columns from this index on are right-aligned


@dataclass(frozen=True)
class Figure:
    chart: Chart
    stem: str  # file name without extension
    caption: str

    @property
    def png_name(self) -> str:
        return f"{self.stem}.png"


@dataclass(frozen=True)
class Bullets:
    items: list[str]


Part = Union[Heading, Para, Table, Bullets, Figure]


@dataclass
class Section:
    title: str
    anchor: str
    parts: list[Part] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- building


def host_rows(value: Any, key: str = "") -> list[list[str]]:
    """The host fingerprint as (dotted key, value) rows, every leaf as recorded; bytes also in GiB."""
    if isinstance(value, dict) and value:
        return [row for k, v in value.items() for row in host_rows(v, f"{key}.{k}" if key else str(k))]
    return [[key, _host_value(key, value)]]


def _host_value(key: str, value: Any) -> str:
    if value is None or value == [] or value == {}:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if key.endswith("_bytes") and isinstance(value, int):
        return f"{value} bytes ({value / 2**30:.1f} GiB)"
    return str(value)


def _unique_stem(path: str, taken: set[str]) -> str:
    base = charts.slug(Path(path).stem)
    stem, n = base, 1
    while stem in taken:
        n += 1
        stem = f"{base}-{n}"
    taken.add(stem)
    return stem


def build_section(path: str, doc: dict[str, Any], stem: str) -> Section:
    """Everything one results file says: tables, charts, unmeasured backends, warnings, host."""
    doc = dict(doc, _path=path)
    measured, phased = charts.document_charts(doc)
    section = Section(title=f"{report.scenario_name(doc)} — {Path(path).name}", anchor=stem)
    parts = section.parts
    parts += [Para(report.run_line(doc), "meta"), Para(f"Host: {report.host_line(doc)}", "meta")]
    nested, error = report.nested_line(doc), report.nested_error(doc)
    parts += [Para(f"Nested: {nested}", "meta")] if nested else []
    parts += [Para(f"Warning: {error}", "warning")] if error else []
    groups = report.by_label(r for r in report.rows(doc) if not r.density)
    if not groups and not doc.get("density"):
        parts.append(Para("No measurements recorded."))
    for label, group in groups.items():
        parts += [Heading(label, 3),
                  Table("measurement", list(report.COLUMNS), [report.table_cells(r) for r in group], label=label,
                        numeric_from=3),
                  Para(report.caption(group), "caption"),
                  Figure(measured[label], f"{stem}-{measured[label].name}", measured[label].encoding)]
    for pl in report.placement_tables(doc):  # the same cells as the Markdown and terminal reports
        parts += [Heading(pl.title, 3),
                  Table("placements", pl.header, pl.rows, label=pl.title, numeric_from=3) if pl.rows
                  else Para(report.NO_PAIRS), Para(pl.caption, "caption")]
        parts += [Bullets([g.text for g in pl.gaps])] if pl.gaps else []
    for dt, rec in zip(density_report.tables(doc), density_report.to_dicts(doc)):
        chart = charts.density_chart(report.scenario_name(doc), rec)
        parts += [Heading(dt.title, 3), Table("density", dt.header, dt.rows, label=dt.title, numeric_from=0),
                  Para(dt.caption, "caption"), Figure(chart, f"{stem}-{chart.name}", chart.encoding)]
    for pt, chart in phased:
        parts += [Heading(pt.title, 3), Table("phases", pt.header, pt.rows, label=pt.title, numeric_from=1),
                  Para(pt.caption, "caption"), Figure(chart, f"{stem}-{chart.name}", chart.encoding)]
    unusable = report.unusable_backends(doc)
    parts.append(Heading("Backends not measured", 3))
    parts.append(Table("unusable", ["backend", "reason"], [[k, v] for k, v in unusable.items()])
                 if unusable else Para("None."))
    notes = report.warnings(doc)
    parts += [Heading("Warnings", 3), Bullets(notes) if notes else Para("None.")]
    host = doc.get("host")
    parts += [Heading("Host fingerprint", 3),
              Table("host", ["key", "value"], host_rows(host)) if isinstance(host, dict) and host
              else Para("Not recorded.")]
    nested_host = report.nested_host(doc)
    if nested_host is not None:
        parts += [Heading("Level-1 guest fingerprint (placement nested)", 3),
                  Table("nested-host", ["key", "value"], host_rows(nested_host)) if nested_host
                  else Para("Not recorded.")]
    return section


def build(inputs: list[tuple[str, dict[str, Any]]]) -> list[Section]:
    taken: set[str] = set()
    return [build_section(path, doc, _unique_stem(path, taken)) for path, doc in inputs]


def figures(sections: list[Section]) -> list[Figure]:
    return [p for s in sections for p in s.parts if isinstance(p, Figure)]


# ---------------------------------------------------------------------------------------------- HTML

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 72em;
       padding: 0 1em; color: #222; line-height: 1.4; }
h2 { border-bottom: 2px solid #ccc; margin-top: 2.5em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; white-space: nowrap; }
table.host td:first-child,
table.nested-host td:first-child { font-family: ui-monospace, monospace; white-space: nowrap; }
p.meta { color: #555; margin: 0.2em 0; }
p.warning { color: #8a4b00; font-weight: bold; margin: 0.2em 0; }
p.caption, figcaption { color: #444; font-size: 0.85em; }
figure { margin: 1em 0 2em 0; }
figure img { max-width: 100%; height: auto; }
""".strip()


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _png_width(png: bytes) -> int:
    """Pixel width from the PNG header, to show charts at the size they were drawn (DPI → CSS pixels)."""
    return int(struct.unpack(">I", png[16:20])[0] * CSS_PX_PER_INCH / charts.DPI)


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.headers)
    body = []
    for row in t.rows:
        tds = "".join(f'<td class="num">{_e(c)}</td>' if i >= t.numeric_from else f"<td>{_e(c)}</td>"
                      for i, c in enumerate(row))
        body.append(f"<tr>{tds}</tr>")
    label = f' data-label="{_e(t.label)}"' if t.label else ""
    return (f'<table class="{t.kind}" data-kind="{t.kind}"{label}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n'
            + "\n".join(body) + "\n</tbody>\n</table>")


def _html_part(p: Part) -> str:
    if isinstance(p, Heading):
        anchor = f' id="{_e(p.anchor)}"' if p.anchor else ""
        return f"<h{p.level}{anchor}>{_e(p.text)}</h{p.level}>"
    if isinstance(p, Para):
        cls = f' class="{p.kind}"' if p.kind else ""
        return f"<p{cls}>{_e(p.text)}</p>"
    if isinstance(p, Table):
        return _html_table(p)
    if isinstance(p, Bullets):
        return "<ul>\n" + "\n".join(f"<li>{_e(i)}</li>" for i in p.items) + "\n</ul>"
    data = base64.b64encode(p.chart.png).decode("ascii")
    return (f'<figure>\n<img src="data:image/png;base64,{data}" width="{_png_width(p.chart.png)}" '
            f'alt="{_e(p.chart.title)}">\n<figcaption>{_e(p.caption)} Files: {_e(p.stem)}.png, '
            f"{_e(p.stem)}.svg.</figcaption>\n</figure>")


def to_html(sections: list[Section]) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>guestbench report</title>", f"<style>\n{CSS}\n</style>", "</head>", "<body>",
           "<h1>guestbench report</h1>",
           f'<p class="meta">guestbench {_e(__version__)}, {len(sections)} results file(s). {_e(INTRO)}</p>']
    if len(sections) > 1:
        out.append("<ul>" + "".join(f'<li><a href="#{_e(s.anchor)}">{_e(s.title)}</a></li>' for s in sections)
                   + "</ul>")
    for s in sections:
        out.append(f'<section>\n<h2 id="{_e(s.anchor)}">{_e(s.title)}</h2>')
        out += [_html_part(p) for p in s.parts]
        out.append("</section>")
    out += ["</body>", "</html>", ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- Markdown


def _md_table(t: Table) -> list[str]:
    md = report.md_text
    return ["| " + " | ".join(md(h) for h in t.headers) + " |", "|" + "---|" * len(t.headers),
            *("| " + " | ".join(md(c) for c in row) + " |" for row in t.rows)]


def _md_part(p: Part) -> list[str]:
    if isinstance(p, Heading):
        return ["#" * p.level + " " + p.text]
    if isinstance(p, Para):
        if p.kind == "warning":
            return [f"**{p.text}**"]
        return [p.text + "  " if p.kind == "meta" else p.text]  # meta lines: a line break, not a paragraph
    if isinstance(p, Table):
        return _md_table(p)
    if isinstance(p, Bullets):
        return [f"- {report.md_text(i)}" for i in p.items]
    return [f"![{p.chart.title}]({p.png_name})", "", f"Chart: {p.caption} (also {p.stem}.svg)"]


def to_markdown(sections: list[Section]) -> str:
    lines = ["# guestbench report", "", f"guestbench {__version__}, {len(sections)} results file(s). {INTRO}", ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        for p in s.parts:
            lines += [*_md_part(p), ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- writing


def write(inputs: list[tuple[str, dict[str, Any]]], out_dir: Path) -> list[Path]:
    """Write index.html, report.md and every chart as PNG and SVG into `out_dir`; return the paths written."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError("is not a directory; allowed: a directory (made if missing) for the report",
                        source="command line", key=f"--output {out_dir}")
    sections = build(inputs)
    files: list[tuple[str, bytes]] = []
    for fig in figures(sections):
        files += [(fig.png_name, fig.chart.png), (f"{fig.stem}.svg", fig.chart.svg)]
    files += [(INDEX, to_html(sections).encode()), (MARKDOWN, to_markdown(sections).encode())]
    written = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, data in files:
            atomic_write_bytes(out_dir / name, data, mode=FILE_MODE)
            written.append(out_dir / name)
    except OSError as e:
        raise UserError(f"cannot write the report: {e.strerror or e}", source="command line",
                        key=f"--output {out_dir}") from None
    return written
