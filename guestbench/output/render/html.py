"""Render a document as one self-contained HTML page, and write `guestbench report`'s files.

`index.html` embeds its charts as base64 PNGs and its CSS inline: the single file works when mailed or
attached to an issue (no external files, no script, no SVG ids colliding between charts). Each chart is also
written as `<results file stem>-<label>.png` and `.svg`; `report.md` (the same document in Markdown) refers
to the PNGs by relative path, for pasting into an issue next to the uploaded images. Files are written
atomically (temp + rename), and only over files of the user's own in a directory only they or root can change
(guestbench.host.safe_write).

One section per results file, never merged, even when two files ran the same scenario: absolute seconds
compare only within one run (two TCG runs 50 minutes apart on the same machine differed by 15%), so bars of
different runs side by side would invite the comparison that `guestbench compare` makes with a test.
"""

from __future__ import annotations

import base64
import html
import struct
from pathlib import Path

from guestbench.host import safe_write
from guestbench.util.errors import UserError, printable
from guestbench.output.document import Bullets, Document, ChartPart, Heading, Para, Part, Table, slug
from guestbench.output.render.markdown import to_markdown
from guestbench.output.results_doc import report_document
from guestbench.results import Run, atomic_write_bytes

INDEX = "index.html"
MARKDOWN = "report.md"
FILE_MODE = 0o644  # a report is for sharing, unlike results files
CSS_PX_PER_INCH = 96
CHART_DPI = 150  # charts.DPI, repeated so that rendering a page does not import matplotlib

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 72em;
       padding: 0 1em; color: #222; line-height: 1.4; }
h2 { border-bottom: 2px solid #ccc; margin-top: 2.5em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; white-space: nowrap; }
td.best { font-weight: bold; color: #1a7f37; }
td.good { color: #1a7f37; }
td.bad, td.regression { font-weight: bold; color: #b42318; }
td.warn { color: #8a4b00; }
table.host td:first-child,
table.nested-host td:first-child { font-family: ui-monospace, monospace; white-space: nowrap; }
p.meta { color: #555; margin: 0.2em 0; }
p.warning, li.warn { color: #8a4b00; }
p.warning { font-weight: bold; margin: 0.2em 0; }
p.caption, figcaption { color: #444; font-size: 0.85em; }
ul.notes { font-size: 0.85em; color: #444; }
figure { margin: 1em 0 2em 0; }
figure img { max-width: 100%; height: auto; }
""".strip()


def _e(text: str) -> str:
    """The one way model text becomes HTML: escaped, control characters removed."""
    return html.escape(printable(text), quote=True)


def _png_width(png: bytes) -> int:
    """Pixel width from the PNG header, to show charts at the size they were drawn (DPI → CSS pixels)."""
    return int(struct.unpack(">I", png[16:20])[0] * CSS_PX_PER_INCH / CHART_DPI)


def _table(t: Table, level: int) -> str:
    out = [f'<h{level} id="{_e(slug(t.title))}">{_e(t.title)}</h{level}>']
    if not t.rows:
        out.append(f"<p>{_e(t.empty)}</p>")
    else:
        head = "".join(f"<th>{_e(h)}</th>" for h in t.headers)
        body = []
        for i, row in enumerate(t.rows):
            tds = []
            for j, c in enumerate(row):
                classes = " ".join(x for x in ("num" if j >= t.numeric_from else "", t.styles.get((i, j), "")) if x)
                tds.append(f'<td class="{classes}">{_e(c)}</td>' if classes else f"<td>{_e(c)}</td>")
            body.append(f"<tr>{''.join(tds)}</tr>")
        label = f' data-label="{_e(t.label)}"' if t.label else ""
        out.append(f'<table class="{t.kind}" data-kind="{t.kind}"{label}>\n<thead><tr>{head}</tr></thead>\n'
                   "<tbody>\n" + "\n".join(body) + "\n</tbody>\n</table>")
    if t.caption:
        out.append(f'<p class="caption">{_e(t.caption)}</p>')
    if t.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in t.notes) + "</ul>")
    return "\n".join(out)


def _part(p: Part, level: int) -> str:
    if isinstance(p, Table):
        return _table(p, level)
    if isinstance(p, Heading):
        n = level + p.level - 1
        return f"<h{n}>{_e(p.text)}</h{n}>"
    if isinstance(p, Para):
        cls = f' class="{p.kind}"' if p.kind else ""
        return f"<p{cls}>{'Warning: ' if p.kind == 'warning' else ''}{_e(p.text)}</p>"
    if isinstance(p, Bullets):
        head = f"<h{level}>{_e(p.title)}</h{level}>\n" if p.title else ""
        if not p.items:
            return head + f"<p>{_e(p.empty)}</p>" if p.title else ""
        cls = f' class="{p.style}"' if p.style else ""
        return head + "<ul>\n" + "\n".join(f"<li{cls}>{_e(i)}</li>" for i in p.items) + "\n</ul>"
    if isinstance(p, ChartPart):
        data = base64.b64encode(p.chart.png).decode("ascii")
        return (f'<figure>\n<img src="data:image/png;base64,{data}" width="{_png_width(p.chart.png)}" '
                f'alt="{_e(p.chart.title)}">\n<figcaption>{_e(p.caption)} Files: {_e(p.stem)}.png, '
                f"{_e(p.stem)}.svg.</figcaption>\n</figure>")
    raise TypeError(f"not a document part: {p!r}")


def to_html(document: Document) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(document.title)}</title>", f"<style>\n{CSS}\n</style>", "</head>", "<body>",
           f"<h1>{_e(document.title)}</h1>", *(_part(p, 2) for p in document.intro)]
    titled = [s for s in document.sections if s.title]
    if len(titled) > 1:
        out.append("<ul>" + "".join(f'<li><a href="#{_e(s.anchor)}">{_e(s.title)}</a></li>' for s in titled)
                   + "</ul>")
    for s in document.sections:
        level = 2
        out.append("<section>")
        if s.title:
            anchor = f' id="{_e(s.anchor)}"' if s.anchor else ""
            out.append(f"<h2{anchor}>{_e(s.title)}</h2>")
            level = 3
        out += [x for x in (_part(p, level) for p in s.parts) if x]
        out.append("</section>")
    out += ["</body>", "</html>", ""]
    return "\n".join(out)


def write(inputs: list[tuple[str, Run]], out_dir: Path) -> list[Path]:
    """Write index.html, report.md and every chart as PNG and SVG into `out_dir`; return the paths written."""
    safe_write.resolve_dir(out_dir, "report directory", make=True)  # before the work; checked again per file
    return write_document(report_document(inputs), out_dir)


def write_document(document: Document, out_dir: Path, key: str = "--output") -> list[Path]:
    """A document as index.html, report.md and its charts (PNG and SVG) in `out_dir`, each file replacing only
    a regular file of this user's (host.safe_write); the paths written."""
    safe_write.resolve_dir(out_dir, "report directory", make=True)
    document.distinct_stems()  # one file per chart, whatever its label: before the pages name the files
    files: list[tuple[str, bytes]] = []
    for fig in document.chart_parts():
        files += [(fig.png_name, fig.chart.png), (f"{fig.stem}.svg", fig.chart.svg)]
    files += [(INDEX, to_html(document).encode()), (MARKDOWN, to_markdown(document).encode())]
    for name, _ in files:
        safe_write.check_replaceable(out_dir / name, "report file")  # all refused before any is written
    written = []
    try:
        for name, data in files:
            atomic_write_bytes(out_dir / name, data, mode=FILE_MODE, what="report file")
            written.append(out_dir / name)
    except OSError as e:
        raise UserError(f"cannot write the report: {e.strerror or e}", source="command line",
                        key=f"{key} {out_dir}") from None
    return written
