"""Every figure `guestbench show` prints is also in the HTML report, as a real browser renders it, and in
report.md: one document model feeds the three formats (issue 18).

Inputs are real results files: a start-up run on five backends (two unusable here, with their reasons) and a
workload run on tcg and uml (fio, bonnie++, dbench, tar, durability verdicts, an unavailable cell, two guests
at once). The page is rendered by headless Chromium (Debian's package) and its text read back from the DOM;
a screenshot is kept next to the report for a person to look at.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

from helpers.browser import Text, chromium
from helpers.cli import guestbench
from helpers.paths import ROOT

DATA = ROOT / "tests" / "data"
FILES = [DATA / "results" / "20261121T211449Z-startup.json", DATA / "workloads" / "20261124T221938Z-workloads.json"]
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


def numbers(text: str) -> Counter[str]:
    return Counter(NUMBER.findall(text))


_RENDERED: dict[Path, dict[str, str]] = {}


def render(path: Path, tmp: Path) -> dict[str, str]:
    """`show` (400 columns wide), then `report`, then the page as Chromium renders it; each file once."""
    if path in _RENDERED:
        return _RENDERED[path]
    out = tmp / "report"
    shown = guestbench("show", str(path), env={**os.environ, "COLUMNS": "400"}, timeout=120)
    assert shown.returncode == 0, shown.stderr
    made = guestbench("report", str(path), "--output", str(out))
    assert made.returncode == 0, made.stderr
    profile = str(tmp / "profile")
    dom = chromium(profile, "--dump-dom", (out / "index.html").as_uri())
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    shot = out / "screenshot.png"
    chromium(profile, f"--screenshot={shot}", "--window-size=1400,4000", (out / "index.html").as_uri())
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000  # a page, not a blank
    page = Text()
    page.feed(dom.stdout)
    _RENDERED[path] = {"show": shown.stdout, "page": " ".join(page.parts),
                       "markdown": (out / "report.md").read_text(), "dir": str(out)}
    return _RENDERED[path]


@pytest.fixture(scope="module", params=FILES, ids=lambda p: p.parent.name)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return render(request.param, tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return render(FILES[1], tmp_path_factory.mktemp("browser"))


def test_every_figure_show_prints_is_on_the_rendered_page(rendered: dict[str, str]) -> None:
    shown, page = numbers(rendered["show"]), numbers(rendered["page"])
    missing = shown - page
    assert not missing, f"in show, not on the page: {dict(missing)}"
    assert sum(shown.values()) > 40  # the show output holds the run's tables, not just a header


def test_every_figure_show_prints_is_in_the_markdown(rendered: dict[str, str]) -> None:
    missing = numbers(rendered["show"]) - numbers(rendered["markdown"])
    assert not missing, f"in show, not in report.md: {dict(missing)}"


def test_the_workload_tables_and_durability_verdicts_are_in_every_format(workload: dict[str, str]) -> None:
    for text in (workload["show"], workload["page"], workload["markdown"]):
        for needle in ("fio write I/O operations per second", "sequential block output", "dbench",
                       "fsync durability", "honoured", "lost"):
            assert needle in text, needle


def test_the_json_summary_carries_the_same_workload_tables(workload: dict[str, str]) -> None:
    import json

    got = guestbench("show", str(FILES[1]), "--json")
    assert got.returncode == 0, got.stderr
    summary = json.loads(got.stdout)
    labels = [r["label"] for t in summary["metrics"] for r in t["rows"]]
    assert len(labels) > 20 and all(label in workload["page"] for label in labels)
    assert {d["verdict"].split()[0] for d in summary["durability"]} == {"honoured", "lost"}
    values = [v for t in summary["metrics"] for r in t["rows"] for v in r["values"] if v]
    assert all(v in workload["page"] for v in values)
