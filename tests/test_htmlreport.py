"""`guestbench report`: the page, Markdown and chart files written from real results, checked figure by figure.

Inputs are real: the results files in tests/data/results were written by `guestbench scenario` on the
project's machine (copied from results/, which git ignores), and the boot-phase document is written with the
real `ResultsFile` from the two real verbose launches in tests/data/phases, cut by `markers.split` (one launch
per backend, so n = 1 there). Host vs nested: a real nested run (uml start-up on the host and inside the level-1
guest, n=1 each) is among the stored files; a second document is the real E1 run (uml, tcg) with placement-nested
cells added as a nested run merges them, their samples the host's scaled by fixed factors (so every measurement and a
backend unusable inside are covered), tcg skipped for one measurement. Nothing launches an appliance.

The must-hold: every number in every table of index.html is recomputed here from the results JSON, with
numpy/scipy rather than guestbench.analysis.stats, and must agree to the digits shown.
"""

from __future__ import annotations

import base64
import json
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats

from guestbench import cli
from guestbench.instruments import markers
from guestbench.analysis import stats
from guestbench.output import results_doc
from guestbench.output.render import html
from guestbench.output.render import markdown
from guestbench.results import ResultsFile

from guestbench.results import Run
from helpers.cli import guestbench, main_status
from helpers.phases import replay

REAL = sorted((Path(__file__).parent / "data" / "results").glob("*.json"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


# ---------------------------------------------------------------------------------------------- inputs


def phases_results(directory: Path) -> Path:
    """A results document as the worker writes one for a start-up run with phases, from real captures."""
    real = json.loads(REAL[-1].read_text())
    startup = next(c for c in real["cells"] if c["measurement"] == "startup")
    rf = ResultsFile.create(directory / "20261121T220000Z-startup-phases.json",
                            scenario={"name": "startup-phases", "measurements": [{"measurement": "startup"}]},
                            host=real["host"], command=["guestbench", "scenario", "scenarios/startup.yaml", "--phases"],
                            guestbench=real["guestbench"])
    for backend, log, family in (("tcg", "tcg-verbose-launch.log", "qemu"), ("uml", "uml-verbose-launch.log", "uml")):
        rf.set_backend(backend, {"usable": True, "reason": "captured launch"})
        lines, total = replay(log)
        rf.add_cell({"backend": backend, "placement": "host", "measurement": "startup", "label": "startup",
                     "params": startup["params"], "timed": startup["timed"], "cache_mode": "writeback", "bytes": None,
                     "phases": True, "phase_markers": family, "status": "done",
                     "samples": [{"rep": 1, "seconds": total, "utc": "2026-11-21T22:00:00Z",
                                  "phases": markers.split(lines, total, family)}]})
    rf.finish("complete")
    return rf.path


NESTED_FACTORS = {"uml": 1.45, "tcg": 2.6}  # nested sample = host sample × factor × (1 + rep / 100)
NESTED_UNUSABLE = "probe launch did not finish within 6000 s and was killed"
SCALED_LEVEL1_SECONDS = 812.3  # marks the document whose nested samples were made with NESTED_FACTORS


def nested_results(directory: Path) -> Path:
    """The real E1 run plus nested cells, a placements.nested record, and tcg unusable inside for one label."""
    real = json.loads(REAL[0].read_text())
    rf = ResultsFile.create(directory / "20261121T230000Z-uml-vs-kvm-nested.json", scenario=real["scenario"],
                            host=real["host"], command=[*real["command"], "--placement", "host,nested"],
                            guestbench=real["guestbench"])
    for name, info in real["backends"].items():
        rf.set_backend(name, info)
    for c in real["cells"]:
        rf.add_cell(json.loads(json.dumps(c)))
    for c in real["cells"]:
        nested = dict(json.loads(json.dumps(c)), placement="nested")
        if c["backend"] == "tcg" and c["measurement"] == "upload-no-write":
            nested.update(samples=[], warmups=[], status="skipped", skip_reason="backend not usable")
        else:
            nested["samples"] = [dict(s, seconds=s["seconds"] * NESTED_FACTORS[c["backend"]] * (1 + i / 100))
                                 for i, s in enumerate(c["samples"])]
        rf.add_cell(nested)
    guest = dict(real["host"], hostname="level1", cpu_model="QEMU TCG CPU version 2.5+", cores=2,
                 memory_bytes=4 * 2**30, virtualization={"summary": "QEMU guest (TCG), no /dev/kvm"})
    rf.doc["placements"] = {"nested": {
        "host": guest, "status": "complete",
        "backends": {"uml": {"usable": True, "reason": "launched in 9.1 s (probe)", "details": {}},
                     "tcg": {"usable": False, "reason": NESTED_UNUSABLE}},
        "level1": {"hypervisor": "tcg", "memory_mib": 4096, "vcpus": 2, "timeout_scale": 25.0,
                   "image": "ea2cc8d5cc89fa92", "seconds": SCALED_LEVEL1_SECONDS, "error": None}}}
    rf.finish("complete")
    return rf.path


@dataclass
class Written:
    inputs: list[Path]
    docs: list[dict[str, Any]]
    out: Path
    html: str
    markdown: str
    page: Page


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    d = tmp_path_factory.mktemp("report")
    inputs = [*REAL, nested_results(d), phases_results(d)]
    out = d / "out"
    assert cli.main(["report", *map(str, inputs), "--output", str(out)]) == 0
    html_text = (out / "index.html").read_text()
    page = Page()
    page.feed(html_text)
    return Written(inputs, [json.loads(p.read_text()) for p in inputs], out, html_text,
                   (out / "report.md").read_text(), page)


# ---------------------------------------------------------------------------------------------- parsing


@dataclass
class ParsedTable:
    kind: str
    label: str
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


@dataclass
class ParsedSection:
    anchor: str
    tables: list[ParsedTable] = field(default_factory=list)
    text: str = ""


class Page(HTMLParser):
    """Sections (h2), their tables (kind, label, header, rows), every img src, and the page's tags."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[ParsedSection] = []
        self.images: list[str] = []
        self.figcaptions: list[str] = []
        self.tags: set[str] = set()
        self._table: ParsedTable | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._caption: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        if tag == "h2":
            self.sections.append(ParsedSection(a.get("id") or ""))
        elif tag == "table":
            self._table = ParsedTable(a.get("data-kind") or "", a.get("data-label") or "")
            self.sections[-1].tables.append(self._table)
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(a.get("src") or "")
        elif tag == "figcaption":
            self._caption = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._table is not None and self._row is not None:
            if not self._table.header:
                self._table.header = self._row
            else:
                self._table.rows.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "figcaption" and self._caption is not None:
            self.figcaptions.append("".join(self._caption))
            self._caption = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._caption is not None:
            self._caption.append(data)
        if self.sections:
            self.sections[-1].text += data


def md_tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of cells (header first, the --- line dropped), backslash escapes undone (a
    pipe, a bracket: md_text escapes them), bold (a best or a bad figure: a style, not text) removed."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in text.splitlines():
        if line.startswith("|"):
            if current is None:
                current = []
                tables.append(current)
            if not re.fullmatch(r"\|(---\|)+", line):
                cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
                current.append([re.sub(r"\\([\\`*_\[\]|])", r"\1", re.sub(r"^\*\*(.*)\*\*$", r"\1", c.strip()))
                                for c in cells])
        else:
            current = None
    return tables


# ---------------------------------------------------------------------------------------------- figures


def shown(text: str) -> list[tuple[float, float]]:
    """The numbers printed in a cell, each with half a unit of its last digit: how exact it claims to be."""
    out = []
    for token in NUMBER.findall(text):
        decimals = len(token.split(".")[1]) if "." in token else 0
        out.append((float(token), 0.5 * 10 ** -decimals + 1e-12))
    return out


def agrees(text: str, expected: list[float]) -> bool:
    got = shown(text)
    return len(got) == len(expected) and all(abs(v - e) <= tol for (v, tol), e in zip(got, expected))


def sample_seconds(cell: dict[str, Any]) -> list[float]:
    return [s["seconds"] for s in cell["samples"]]


def expected_figures(cell: dict[str, Any], fastest_median: float) -> dict[str, list[float] | None]:
    """Per numeric column, the figures recomputed from the raw samples; None where the table shows "–"."""
    x = np.array(sample_seconds(cell))
    n = len(x)
    median, mean = float(np.median(x)), float(np.mean(x))
    sd = float(np.std(x, ddof=1)) if n > 1 else None
    half = float(scipy_stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) if sd is not None else None
    return {
        "median s": [median],
        "mean ± stdev s": [mean, sd] if sd is not None else [mean],  # "14.2 ± –" when n = 1
        "95% CI s": [mean - half, mean + half] if half is not None else None,
        "min–max s": [float(x.min()), float(x.max())],
        "MB/s": [cell["bytes"] / 1e6 / median] if cell["bytes"] else None,
        "× fastest": [median / fastest_median],
    }


def sections_with_docs(w: Written) -> list[tuple[ParsedSection, dict[str, Any]]]:
    assert len(w.page.sections) == len(w.docs), "one section per results file"
    return list(zip(w.page.sections, w.docs))


# ---------------------------------------------------------------------------------------------- tests


def test_every_figure_in_the_measurement_tables_is_recomputed_from_the_results(written: Written) -> None:
    checked = 0
    for section, doc in sections_with_docs(written):
        tables = [t for t in section.tables if t.kind == "measurement"]
        assert [t.label for t in tables] == list(dict.fromkeys(c["label"] for c in doc["cells"]))
        for table in tables:
            cells = [c for c in doc["cells"] if c["label"] == table.label]
            assert len(table.rows) == len(cells)
            for cell, row in zip(cells, table.rows):
                got = dict(zip(table.header, row))
                assert (got["backend"], got["placement"], got["cache"]) == (
                    cell["backend"], cell["placement"], cell["cache_mode"] or "–")
                assert got["n"] == str(len(cell["samples"])) and got["failures"] == str(len(cell["failures"]))
                if not cell["samples"]:  # the status and why, in place of figures
                    assert got["median s"] == f"{cell['status']}: {cell['skip_reason']}"
                    assert all(v == "–" for v in row[6:])
                    continue
                fastest = min(float(np.median(sample_seconds(c))) for c in cells
                              if c["placement"] == cell["placement"] and c["samples"])
                for column, expected in expected_figures(cell, fastest).items():
                    if expected is None:
                        assert got[column] == "–", (table.label, cell["backend"], column)
                    else:
                        assert agrees(got[column], expected), (table.label, cell["backend"], column, got[column],
                                                               expected)
                    checked += 1
                # what was timed, with the cache mode above: said next to the figures
                assert cell["timed"] in section.text
    assert checked >= 6 * (3 + 8 + 2)


def test_every_figure_in_the_phase_tables_is_recomputed_from_the_samples(written: Written) -> None:
    section, doc = sections_with_docs(written)[-1]
    tables = [t for t in section.tables if t.kind == "phases"]
    assert len(tables) == 1, "the phases document has one start-up measurement"
    table = tables[0]
    cells = [c for c in doc["cells"] if c.get("phases")]
    assert len(table.header) == 1 + len(cells)
    host_side = markers.host_side_names()
    for i, cell in enumerate(cells, start=1):
        assert table.header[i].startswith(cell["backend"])
        samples = cell["samples"]
        names = list(dict.fromkeys(p["name"] for s in samples for p in s["phases"]))
        per = {name: [sum(p["s"] for p in s["phases"] if p["name"] == name) for s in samples] for name in names}
        medians = {name: float(np.median(v)) for name, v in per.items()}
        total = sum(medians.values())
        candidates = [len(samples), total, float(np.median(sample_seconds(cell))),
                      100 * sum(medians[n] for n in names if n in host_side) / total]
        for name in names:
            candidates += [medians[name], min(per[name]), max(per[name]), 100 * medians[name] / total]
        column = [row[i] for row in table.rows]
        assert any(row[0] == name for name in names for row in table.rows)
        for text in column:
            for value, tol in shown(text):
                assert any(abs(value - c) <= tol for c in candidates), (cell["backend"], text, value)
        # every phase the samples recorded has its row, with its median first in the cell
        for name in names:
            row = next(r for r in table.rows if r[0] == name)
            assert abs(shown(row[i])[0][0] - medians[name]) <= shown(row[i])[0][1], (name, row[i])


def test_unmeasured_backends_and_host_fingerprint_are_the_recorded_ones(written: Written) -> None:
    for section, doc in sections_with_docs(written):
        unusable = {name: info["reason"] for name, info in doc["backends"].items() if not info["usable"]}
        nested = doc.get("placements", {}).get("nested")
        if nested:
            unusable.update({f"{name} (nested)": info["reason"] for name, info in nested["backends"].items()
                             if not info["usable"]})
        tables = {t.kind: t for t in section.tables}
        if unusable:
            assert {row[0]: row[1] for row in tables["unusable"].rows} == unusable
        else:
            assert "unusable" not in tables
        leaves = dict(flatten(doc["host"]))
        host = {row[0]: row[1] for row in tables["host"].rows}
        assert host.keys() == leaves.keys()
        for key, value in leaves.items():
            assert host[key] == expected_host_text(key, value), key
        if nested:  # the level-1 guest's own fingerprint, leaf by leaf
            guest = {row[0]: row[1] for row in tables["nested-host"].rows}
            assert guest == {k: expected_host_text(k, v) for k, v in flatten(nested["host"])}
        else:
            assert "nested-host" not in tables


def test_every_figure_in_the_placement_table_is_recomputed_from_the_results(written: Written) -> None:
    compared = 0
    for section, doc in sections_with_docs(written):
        tables = [t for t in section.tables if t.kind == "placements"]
        if not {"host", "nested"} <= {c["placement"] for c in doc["cells"]}:
            assert tables == [] and "host vs nested" not in section.text and "Nested:" not in section.text
            continue
        (table,) = tables
        level1 = doc["placements"]["nested"]["level1"]
        assert table.header == ["measurement", "backend", "cache", "host: median s (n, min–max)",
                                "nested: median s (n, min–max)", "nested / host", "95% CI of nested / host"]
        pairs = [(h, n) for h in doc["cells"] if h["placement"] == "host" for n in doc["cells"]
                 if n["placement"] == "nested" and (n["label"], n["backend"]) == (h["label"], h["backend"])]
        sampled = [(h, n) for h, n in pairs if h["samples"] and n["samples"]]
        # pairs first; then one row per backend sampled at one placement only
        assert [(r[0], r[1]) for r in table.rows[:len(sampled)]] == [(h["label"], h["backend"]) for h, _ in sampled]
        one_side = [c for c in doc["cells"] if c["placement"] in ("host", "nested") and c["samples"]
                    and (c["label"], c["backend"]) not in {(h["label"], h["backend"]) for h, _ in sampled}]
        assert sorted((r[0], r[1]) for r in table.rows[len(sampled):]) == \
            sorted((c["label"], c["backend"]) for c in one_side)
        assert all(r[5] == "–" and ("(see below)" in r[3]) != ("(see below)" in r[4])
                   for r in table.rows[len(sampled):])
        for (host_cell, nested_cell), row in zip(sampled, table.rows):
            host, nested = sample_seconds(host_cell), sample_seconds(nested_cell)
            assert row[2] == (host_cell["cache_mode"] or "–")
            for text, x in ((row[3], host), (row[4], nested)):
                assert agrees(text, [float(np.median(x)), len(x), min(x), max(x)]), (row, text)
            ratio = float(np.median(nested)) / float(np.median(host))
            assert agrees(row[5], [ratio]), row
            if level1["seconds"] == SCALED_LEVEL1_SECONDS:  # the factor the data was made with
                assert abs(ratio / NESTED_FACTORS[host_cell["backend"]] - 1) < 0.03
            low, high = stats.ratio_ci(host, nested)
            if min(len(host), len(nested)) < 2:  # no spread to resample: no interval
                assert row[6] == "–", row
            else:
                assert agrees(row[6], [low, high]) and low <= ratio <= high, row
            # what was timed, and where the nested figures come from, said next to the figures
            assert host_cell["timed"] in section.text
            compared += 1
        vcpus = f"{level1['vcpus']} vCPU{'' if level1['vcpus'] == 1 else 's'}"
        assert f"level-1 guest on {level1['hypervisor']} with {vcpus} / {level1['memory_mib']} MiB" in section.text
        assert stats.RATIO_CI_METHOD in section.text
        guest = doc["placements"]["nested"]["host"]
        assert (f"Nested: {guest['cpu_model']} · {guest['virtualization']['summary']} · level-1 on "
                f"{level1['hypervisor']}, {vcpus}, {level1['memory_mib']} MiB") in section.text
        if level1["seconds"] != SCALED_LEVEL1_SECONDS:
            continue
        # the one backend × measurement sampled on the host only says which side is missing and why
        missing = [(h, n) for h, n in pairs if h["samples"] and not n["samples"]]
        assert len(missing) == 1
        h, n = missing[0]
        assert (f"{h['label']}: {h['backend']}: host only, no nested samples: skipped: {n['skip_reason']}; "
                f"tcg not usable in the level-1 guest: {NESTED_UNUSABLE}") in section.text
    assert compared == 8  # 7 pairs of the scaled E1 document, 1 of the real nested run


def test_level1_failure_is_a_header_warning_and_partial_nested_records_render(tmp_path: Path) -> None:
    doc = json.loads(nested_results(tmp_path).read_text())
    doc["placements"]["nested"]["level1"]["error"] = "level-1 guest did not boot within 900 s"
    document = results_doc.report_document([("nested.json", Run.from_dict(doc))])
    warning = "level-1 run failed: level-1 guest did not boot within 900 s"
    assert f'<p class="warning">Warning: {warning}</p>' in html.to_html(document)
    assert f"**Warning:** {warning}" in markdown.to_markdown(document)
    doc["placements"] = {"nested": {"host": None, "level1": None, "status": None}}
    page = Page()
    page.feed(html.to_html(results_doc.report_document([("partial.json", Run.from_dict(doc))])))
    (section,) = page.sections
    assert [t.kind for t in section.tables].count("placements") == 1
    assert "nested-host" not in [t.kind for t in section.tables] and "Not recorded." in section.text
    assert "level-1 guest on an unrecorded hypervisor with – vCPUs / – MiB" in section.text


def flatten(value: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        return [item for k, v in value.items() for item in flatten(v, f"{key}.{k}" if key else k)]
    return [(key, value)]


def expected_host_text(key: str, value: Any) -> str:
    if value in (None, [], {}):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if key == "memory_bytes":
        return f"{value} bytes ({value / 2**30:.1f} GiB)"
    return str(value)


def test_markdown_holds_the_same_tables_as_the_page(written: Written) -> None:
    page_tables = [[t.header, *t.rows] for s in written.page.sections for t in s.tables]
    assert md_tables(written.markdown) == page_tables
    assert written.markdown.count("\n## ") == len(written.docs)


def test_page_is_self_contained_and_every_chart_file_is_valid(written: Written) -> None:
    assert not {"script", "link", "iframe", "object"} & written.page.tags
    assert "http://" not in written.html and "https://" not in written.html
    labels = sum(len({c["label"] for c in doc["cells"]}) for doc in written.docs)
    assert len(written.page.images) == labels + 1  # one chart per measurement, plus the phase chart
    for src in written.page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)
    referenced = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", written.markdown)
    assert len(referenced) == len(written.page.images)
    for name in referenced:
        png = written.out / name
        assert png.read_bytes().startswith(PNG_MAGIC)
        root = ET.parse(png.with_suffix(".svg")).getroot()
        assert root.tag.endswith("svg")
        assert png.with_suffix(".svg").name in written.markdown
    pngs = sorted(p.name for p in written.out.glob("*.png"))
    assert pngs == sorted(referenced)


def test_chart_captions_say_what_the_marks_mean(written: Written) -> None:
    measurement = [c for c in written.page.figcaptions if "bar = median" in c]
    assert measurement and all("whiskers: min–max" in c for c in measurement)
    phase = [c for c in written.page.figcaptions if "boot phases" in c]
    assert len(phase) == 1
    assert "Hatched" in phase[0] and "on the host (library set-up, hypervisor start, firmware)" in phase[0]


# ---------------------------------------------------------------------------------------------- bad input


@pytest.fixture()
def bad(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "other.json").write_text(json.dumps({"name": "not results"}))
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["{d}/nope.json", "--output", "{d}/out"], "{d}/nope.json: no such results file"),
    (["{d}/other.json", "--output", "{d}/out"], "{d}/other.json: not a guestbench results file"),
    (["{d}/a-file", "--output", "{d}/out"], "{d}/a-file: not valid JSON"),
    (["{d}", "--output", "{d}/out"], "{d}: is a directory; give the path of a results file"),
    (["{real}", "--output", "{d}/a-file"], "report directory {d}/a-file is a regular file; expected a directory"),
    (["{real}", "--output", "{d}/a-file/sub"], "report directory {d}/a-file/sub: {d}/a-file is a regular file; "
                                               "expected a directory"),
    (["{real}"], "command line: the following arguments are required: -o/--output"),
])
def test_bad_input_is_one_line_and_exit_status_2(bad: Path, args: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["report", *(a.format(d=bad, real=REAL[0]) for a in args)]
    status = main_status(argv)  # argparse usage errors exit from the parser
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("guestbench: ")
    assert message.format(d=bad) in err
    assert not (bad / "out").exists(), "nothing written on bad input"


def test_bad_input_from_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    proc = guestbench("report", str(tmp_path / "nope.json"), "--output", str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"guestbench: {tmp_path / 'nope.json'}: no such results file\n"
    assert proc.stdout == ""


DENSITY = sorted((Path(__file__).parent / "data" / "density").glob("*.json"))


def test_density_runs_get_their_tables_and_charts_in_the_job_they_timed(tmp_path: Path) -> None:
    """Two real density runs on uml and tcg of 2026-11-24 (tests/data/density): start-ups, and an upload job. Each
    backend's levels get a table and a chart named for what was timed; the appliances are not listed as cells."""
    out = tmp_path / "report"
    assert cli.main(["report", "-o", str(out), *map(str, DENSITY)]) == 0
    page = (out / "index.html").read_text()
    for path in DENSITY:
        doc = json.loads(path.read_text())
        for rec in doc["density"]:
            job = rec.get("job", "startup")
            name = "start-up" if job == "startup" else job
            assert f"{name} median s (min–max)" in page and ("launches/min" if job == "startup" else "jobs/min") in page
            key = "startup_s" if job == "startup" else "job_s"
            for lv in rec["levels"]:  # each level's median as the table shows it (3 significant digits)
                assert f"{lv[key]['median']:.3g}" in page
    charts = sorted(p.name for p in out.glob("*density*.png"))
    assert len(charts) == sum(len(json.loads(p.read_text())["density"]) for p in DENSITY) == 4, charts
    for png in charts:
        assert (out / png).read_bytes().startswith(PNG_MAGIC)
    assert "density.x4.guest1" not in page
