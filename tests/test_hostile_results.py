"""Results files and pytest-benchmark JSON are untrusted input (issue 31, docs/safety.md): a FIFO, a device, an
oversized file or a 5000-digit number is refused at once with one line (exit 2), compare stays in bounded memory
on a big file, and names from a file reach a terminal or a report inert (no ESC, no HTML, no mathtext).

Every case runs the real CLI (`python -m guestbench ...`) in its own process, on files planted by the real
unprivileged user nobody where the file's origin matters, built from the results files shipped in tests/data.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from helpers.cli import guestbench, run_measured
from helpers.paths import ROOT
from helpers.users import as_nobody

SHIPPED = ROOT / "tests" / "data" / "results" / "20261121T211449Z-startup.json"
HOSTILE_LABEL = "evil\x1b]0;pwned\x07\x1b[31mred\x9b<script>alert(1)</script>"
DIGITS = "9" * 5000


_guestbench = functools.partial(guestbench, timeout=30)  # a refusal takes well under a second: a hang fails


def _refused(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Exit 2 with one short line on stderr, no traceback; the line."""
    line = done.stderr.rstrip("\n")
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "\n" not in line and len(line) <= 300 and "Traceback" not in done.stderr, line
    for text in expected:
        assert text in line, line
    return line


def _shipped() -> dict[str, Any]:
    return json.loads(SHIPPED.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("command", ["show", "compare", "report", "import", "export"])
def test_a_fifo_planted_by_another_user_is_refused_at_once(shared: Path, tmp_path: Path, command: str) -> None:
    fifo = shared / "results.json"
    as_nobody("mkfifo", "-m", "0666", str(fifo))
    args = {"show": ["show", str(fifo)], "compare": ["compare", str(SHIPPED), str(fifo)],
            "report": ["report", "-o", str(tmp_path / "report"), str(fifo)],
            "import": ["import", str(fifo), "-o", str(tmp_path / "out.json")],
            "export": ["export", str(fifo), "-o", str(tmp_path / "out.json")]}[command]
    _refused(_guestbench(*args), str(fifo), "is a FIFO", "not a regular file")


@pytest.mark.parametrize("device", ["/dev/urandom", "/dev/zero"])
@pytest.mark.parametrize("command", ["show", "import"])
def test_a_device_is_refused_at_once(device: str, command: str, tmp_path: Path) -> None:
    args = [command, device] + (["-o", str(tmp_path / "out.json")] if command == "import" else [])
    _refused(_guestbench(*args), device, "is a character device")


def test_an_oversized_file_is_refused_without_reading_it(shared: Path) -> None:
    big = shared / "big.json"
    as_nobody("truncate", "-s", "100G", str(big))  # sparse: costs no disk
    _refused(_guestbench("show", str(big)), "more than a results file may be; allowed: at most 64MiB")


def test_a_5000_digit_number_in_a_results_file_is_one_line(tmp_path: Path) -> None:
    doc = _shipped()
    doc["cells"][0]["samples"][0]["seconds"] = 12345
    path = tmp_path / "digits.json"
    path.write_text(json.dumps(doc).replace("12345", DIGITS, 1))
    line = _refused(_guestbench("show", str(path)), "a number of 5,000 characters", "at most 100")
    assert DIGITS[:100] not in line  # quotes a short prefix only


def test_a_5000_digit_number_in_a_pytest_benchmark_import_is_one_line(tmp_path: Path) -> None:
    bench = {"machine_info": {}, "commit_info": {}, "version": "4.0.0", "datetime": "2026-11-21T21:15:00",
             "benchmarks": [{"name": "test_x[tcg]", "group": "x", "param": "tcg",
                             "stats": {"data": [1.5, 12345], "iterations": 1}}]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench).replace("12345", DIGITS))
    _refused(_guestbench("import", str(path), "-o", str(tmp_path / "out.json")), "a number of 5,000 characters")
    assert not (tmp_path / "out.json").exists()


def test_compare_on_a_14_mb_results_file_stays_in_bounded_memory(tmp_path: Path) -> None:
    doc = _shipped()
    cell = doc["cells"][0]
    first = cell["samples"][0]
    cell["samples"] = [dict(first, rep=i + 1, seconds=first["seconds"] * (1 + (i % 97) / 1000))
                       for i in range(165_000)]
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc))
    assert 13_000_000 < big.stat().st_size < 16_000_000
    status, err, peak_kib = run_measured(["compare", "--json", str(SHIPPED), str(big)], timeout=90)
    assert status in (0, 1) and "Traceback" not in err and "internal error" not in err, err[-2000:]
    assert peak_kib < 1024 * 1024, f"peak RSS {peak_kib} KiB"


def _hostile(tmp_path: Path, label: str = HOSTILE_LABEL) -> Path:
    doc = _shipped()
    cell = doc["cells"][0]
    cell["label"] = label
    cell["backend"] = cell["backend"] + "\x1b[2J"
    doc["scenario"]["name"] = "sc\x1b[5m<b>x</b>"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("fmt", ["table", "--markdown", "--csv"])
def test_show_prints_no_escape_sequence_from_a_name(tmp_path: Path, fmt: str) -> None:
    done = _guestbench("show", *([] if fmt == "table" else [fmt]), str(_hostile(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr and "\x9b" not in done.stdout and "\x07" not in done.stdout
    shown = r"evil\\x1b\]0;pwned\\x07" if fmt == "--markdown" else r"evil\x1b]0;pwned\x07"
    assert shown in done.stdout  # the text stays, its control characters shown as escapes (issue 46)


def test_compare_prints_no_escape_sequence_from_a_name(tmp_path: Path) -> None:
    done = _guestbench("compare", str(SHIPPED), str(_hostile(tmp_path)))
    assert done.returncode in (0, 1), done.stderr
    assert "\x1b" not in done.stdout + done.stderr


def test_an_error_line_escapes_control_characters_of_a_file_name(tmp_path: Path) -> None:
    line = _refused(_guestbench("show", str(tmp_path / "a\x1b]0;x\x07.json")), "no such results file")
    assert "\x1b" not in line and "\\x1b]0;x\\x07.json" in line


def test_report_md_escapes_html_and_every_output_is_inert(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = _guestbench("report", "-o", str(out), str(_hostile(tmp_path)), timeout=90)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr  # matplotlib's missing-glyph warnings printed them
    md, page = (out / "report.md").read_text(), (out / "index.html").read_text()
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md and "<b>" not in md
    assert "<script>" not in page and "&lt;script&gt;" in page
    for text in (md, page, *(p.read_text() for p in out.glob("*.svg"))):
        assert "\x1b" not in text and "\x07" not in text


def test_a_label_that_looks_like_mathtext_is_drawn_as_text(tmp_path: Path) -> None:
    done = _guestbench("report", "-o", str(tmp_path / "report"), str(_hostile(tmp_path, r"x$\frac$")), timeout=90)
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr
    assert r"x$\\frac$" in (tmp_path / "report" / "report.md").read_text()  # its backslash escaped for Markdown


def test_a_dry_run_passes_over_a_fifo_among_the_results_it_reads(shared: Path) -> None:
    """--dry-run reads every results file of the results directory for its time estimates."""
    as_nobody("mkfifo", "-m", "0666", str(shared / "20261121T000000Z-upload.json"))
    shutil.copy(SHIPPED, shared / SHIPPED.name)
    done = _guestbench("scenario", "scenarios/startup.yaml", "--dry-run", "--backend", "tcg", "--results",
                       str(shared))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Nothing was launched" in done.stdout and SHIPPED.name in done.stdout


def test_a_300_character_label_gets_a_chart_whose_file_name_fits(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = _guestbench("report", "-o", str(out), str(_hostile(tmp_path, "L" * 300)), timeout=90)
    assert done.returncode == 0, done.stderr  # was: "cannot write the report: File name too long", exit 2
    names = [p.name for p in out.glob("*.svg")]
    assert len(names) == 2 and all(len(n) < 200 for n in names)


@pytest.mark.parametrize("case", ["metrics-null", "seconds-1e308"])
def test_values_the_model_allows_are_shown_not_an_internal_error(tmp_path: Path, case: str) -> None:
    """Found by replacing each field of the shipped files with hostile values: both were exit 70."""
    if case == "metrics-null":  # a workload sample's metrics may be null
        doc = json.loads((ROOT / "tests/data/workloads/20261124T221938Z-workloads.json").read_text())
        for s in doc["cells"][0]["samples"]:
            s["metrics"] = None
    else:  # finite, but their mean overflows to infinity, which is not JSON
        doc = _shipped()
        for s in doc["cells"][0]["samples"]:
            s["seconds"] = 1e308
    path = tmp_path / "doctored.json"
    path.write_text(json.dumps(doc))
    done = _guestbench("show", *(["--json"] if case == "seconds-1e308" else []), str(path))
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["show", "compare", "report"])
def test_a_lone_surrogate_in_a_results_file_is_one_line(tmp_path: Path, command: str) -> None:
    doc = _shipped()
    doc["scenario"]["name"] = "x\ud800"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))  # ensure_ascii: the surrogate as a \ud800 escape, as a hostile file has it
    args = {"show": ["show", str(bad)], "compare": ["compare", str(SHIPPED), str(bad)],
            "report": ["report", str(bad), "-o", str(tmp_path / "out")]}[command]
    _refused(_guestbench(*args), "lone surrogate")


def _nested(levels: int) -> str:
    """`levels` arrays, one inside the next, as JSON text (json.dumps itself recurses a level at a time)."""
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("command", ["show", "compare", "history", "import", "export"])
def test_a_results_file_nested_past_the_depth_limit_is_one_line(tmp_path: Path, command: str) -> None:
    """Issue 46: the parser had no depth limit of its own, only Python's recursion limit (how deep depended on the
    stack it was called from: a snapshot 988 deep passed it in a run, then every save raised RecursionError).
    100 deep was read and carried along; now it is refused where it is read, in words, naming the limit."""
    doc = _shipped()
    doc["scenario"]["note"] = 12345  # a key no reader looks at: old code read the file without a word
    if command == "import":  # a pytest-benchmark file, nested as deep where nothing reads it either
        doc = {"machine_info": {"note": 12345}, "benchmarks": [{"name": "test_x[tcg]", "param": "tcg",
                                                                "stats": {"data": [1.5, 2.5], "iterations": 1}}]}
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps(doc).replace("12345", _nested(100), 1))
    args = {"show": ["show", str(deep)], "compare": ["compare", str(SHIPPED), str(deep)],
            "history": ["history", str(SHIPPED), str(deep)], "import": ["import", str(deep), "-o", str(tmp_path / "o")],
            "export": ["export", str(deep)]}[command]
    line = _refused(_guestbench(*args), str(deep), "arrays and objects nested more than 64 levels deep",
                    "allowed: at most 64")
    assert "Traceback" not in line


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
@pytest.mark.parametrize("command", ["show", "history"])
def test_nan_and_infinity_are_refused_before_any_json_output(tmp_path: Path, command: str, token: str) -> None:
    """Issue 46: NaN and Infinity (which Python's json reads, and JSON has not) passed the parser and reached
    `show --json` and `history --json`, whose writer refuses them: exit 70. 1e999 is read as infinity."""
    doc = _shipped()
    doc["host"]["cores"] = 12345  # printed in both commands' JSON
    paths = []
    for name in ("a.json", "b.json"):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(doc).replace("12345", token, 1))
    args = ["show", "--json", str(paths[0])] if command == "show" else ["history", "--json", *map(str, paths)]
    done = _guestbench(*args)
    _refused(done, str(paths[0]), f"{token} is not a finite number", "allowed: finite numbers")
    assert done.stdout == ""
