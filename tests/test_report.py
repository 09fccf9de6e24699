"""Report outputs built from small, hand-written results documents."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import pytest
from rich.console import Console

from guestbench import report
from guestbench.report import CSV_HEADER, fmt_seconds, rows, to_csv, to_markdown, to_summary_json, warnings

MB500 = 500 * 10**6
STARTUP_TIMED = "guestfs launch() until the appliance daemon answered"
UPLOAD_TIMED = "upload of a 500 MB file into the mounted ext2 filesystem"


def cell(backend: str, label: str, seconds: list[float], *, placement: str = "host",
         nbytes: int | None = None, timed: str | None = None, failures: list[str] | None = None,
         status: str = "done", skip_reason: str | None = None, cache_mode: str | None = "writeback",
         verification: dict[str, Any] | None = None) -> dict[str, Any]:
    """A results-document cell as `ResultsFile.add_cell` would store it."""
    return {
        "backend": backend, "placement": placement, "measurement": label, "label": label,
        "params": {}, "timed": timed or (UPLOAD_TIMED if nbytes else STARTUP_TIMED),
        "cache_mode": cache_mode, "bytes": nbytes, "cold_s": 13.1,
        "samples": [{"rep": i + 1, "seconds": s, "utc": "2026-11-21T19:40:00Z"} for i, s in enumerate(seconds)],
        "warmups": [{"rep": 1, "seconds": 99.0, "utc": "2026-11-21T19:39:00Z"}],
        "failures": [{"rep": i + 1, "reason": r, "utc": "2026-11-21T19:40:00Z"}
                     for i, r in enumerate(failures or [])],
        "verification": verification, "status": status, "skip_reason": skip_reason,
    }


def document(cells: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    """A complete results document around `cells`, with one unusable backend."""
    doc = {
        "schema": "guestbench-results", "schema_version": 1,
        "guestbench": {"version": "0.1.0", "git_commit": None},
        "status": "complete", "started_utc": "2026-11-21T19:40:00Z", "finished_utc": "2026-11-21T19:50:00Z",
        "command": ["guestbench", "scenario", "demo.yaml"],
        "scenario": {"name": "demo-scenario"},
        "host": {"cpu_model": "Test CPU 9000", "virtualization": {"summary": "VT-x, /dev/kvm usable"}},
        "backends": {
            "tcg": {"usable": True, "reason": "qemu found"},
            "libvirt-tcg": {"usable": True, "reason": "libvirtd answered"},
            "uml": {"usable": False, "reason": "no UML kernel in /usr/lib/uml"},
        },
        "cells": cells,
        "_path": "results/20261121T194000Z-demo-scenario.json",
    }
    doc.update(overrides)
    return doc


def standard() -> dict[str, Any]:
    return document([
        cell("tcg", "startup", [11.9, 12.1, 12.0, 11.8, 12.2]),
        cell("libvirt-tcg", "startup", [14.0, 14.2, 14.1, 13.9, 14.3]),
        cell("tcg", "upload", [10.0, 10.2, 9.8, 10.1, 9.9], nbytes=MB500),
        cell("libvirt-tcg", "upload", [20.0, 20.4, 19.6, 20.2, 19.8], nbytes=MB500),
    ])


def parse_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def render_text(doc: dict[str, Any]) -> str:
    console = Console(record=True, width=200)
    report.render(doc, console)
    return console.export_text()


def squash(text: str) -> str:
    """Collapse whitespace so wrapped captions still match."""
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------- rows


def test_rows_in_cell_order_with_ratios_and_throughput() -> None:
    rs = rows(standard())
    assert [(r.backend, r.label) for r in rs] == [
        ("tcg", "startup"), ("libvirt-tcg", "startup"), ("tcg", "upload"), ("libvirt-tcg", "upload")]
    tcg_up, lv_up = rs[2], rs[3]
    assert tcg_up.mb_per_s == pytest.approx(MB500 / 10.0 / 1e6)
    assert lv_up.ratio == pytest.approx(2.0)
    assert tcg_up.ratio == 1.0
    assert rs[0].mb_per_s is None
    assert rs[1].ratio == pytest.approx(14.1 / 12.0)
    assert rs[0].cold_s == 13.1 and rs[0].cache_mode == "writeback"


def test_ratio_is_per_placement() -> None:
    rs = rows(document([
        cell("tcg", "startup", [10.0, 10.0]),
        cell("tcg", "startup", [30.0, 30.0], placement="appliance"),
        cell("libvirt-tcg", "startup", [60.0, 60.0], placement="appliance"),
    ]))
    assert [r.ratio for r in rs] == [1.0, 1.0, 2.0]


def test_failed_only_cell_has_no_summary() -> None:
    (r,) = rows(document([cell("tcg", "startup", [], failures=["qemu exited: no memory", "timeout"])]))
    assert (r.n, r.failures, r.summary, r.ratio, r.mb_per_s) == (0, 2, None, None, None)
    assert r.first_failure == "qemu exited: no memory"


# ---------------------------------------------------------------------------------------------- CSV


def test_csv_header_is_the_contract() -> None:
    assert CSV_HEADER == ("backend,placement,measurement,n,failures,median_s,mean_s,stdev_s,"
                          "ci_low_s,ci_high_s,mb_per_s")
    assert to_csv(standard()).splitlines()[0] == CSV_HEADER


def test_csv_one_row_per_cell_with_figures() -> None:
    records = parse_csv(to_csv(standard()))
    assert len(records) == 4
    up = records[2]
    assert (up["backend"], up["placement"], up["measurement"], up["n"], up["failures"]) == (
        "tcg", "host", "upload", "5", "0")
    assert up["median_s"] == "10.000000"
    assert float(up["mb_per_s"]) == pytest.approx(MB500 / 10.0 / 1e6)
    assert records[0]["mb_per_s"] == ""
    assert float(records[0]["ci_low_s"]) < float(records[0]["mean_s"]) < float(records[0]["ci_high_s"])


def test_csv_empty_fields_for_missing_figures() -> None:
    records = parse_csv(to_csv(document([
        cell("tcg", "startup", [], failures=["boom"]),
        cell("kvm", "startup", [5.0]),
    ])))
    failed, single = records
    assert failed["n"] == "0" and failed["failures"] == "1"
    assert all(failed[k] == "" for k in ("median_s", "mean_s", "stdev_s", "ci_low_s", "ci_high_s", "mb_per_s"))
    assert single["median_s"] == "5.000000"
    assert single["stdev_s"] == single["ci_low_s"] == single["ci_high_s"] == ""


# ---------------------------------------------------------------------------------------------- Markdown


def test_markdown_has_every_median_timed_text_and_context() -> None:
    doc = standard()
    md = to_markdown(doc)
    assert "demo-scenario" in md
    assert "Test CPU 9000" in md and "VT-x, /dev/kvm usable" in md
    for r in rows(doc):
        assert f"| {fmt_seconds(r.summary.median)} |" in md
    assert STARTUP_TIMED in md and UPLOAD_TIMED in md
    assert "95% CI of the mean (Student t)" in md
    assert "1.00 (fastest)" in md and "2.00×" in md
    assert "## Backends not measured" in md and "uml: no UML kernel in /usr/lib/uml" in md
    assert "## startup" in md and "## upload" in md


def test_markdown_lists_warnings() -> None:
    md = to_markdown(document([cell("tcg", "startup", [1.0, 1.1, 1.2], failures=["guest kernel panic"])]))
    warning_section = md.split("## Warnings", 1)[1]
    assert "startup: tcg: 1 of 4 samples failed: guest kernel panic" in warning_section


def test_markdown_escapes_pipes_in_user_text() -> None:
    md = to_markdown(document([cell("tcg", "startup", [], failures=["a | b"])]))
    assert "a \\| b" in md


# ---------------------------------------------------------------------------------------------- warnings


def test_warnings_cover_spread_failures_skips_and_interruptions() -> None:
    doc = document([
        cell("tcg", "startup", [10.0, 10.1, 10.2, 9.9]),
        cell("libvirt-tcg", "startup", [10.05, 10.1, 10.0, 9.95]),
        cell("kvm", "startup", [], status="skipped", skip_reason="no /dev/kvm"),
        cell("libvirt-kvm", "startup", [3.0], status="interrupted"),
        cell("tcg", "upload", [10.0, 12.0, 10.5], nbytes=MB500, failures=["disk full"],
             verification={"what": "sha256", "host": "aa", "guest": "bb", "ok": False}),
    ])
    out = warnings(doc)
    assert "startup: cannot rank libvirt-tcg vs tcg: their 95% CIs overlap" in out
    assert "startup: libvirt-kvm has n=1: no spread, cannot rank" in out
    assert "startup: kvm: skipped: no /dev/kvm" in out
    assert "startup: libvirt-kvm: interrupted after 1 sample(s)" in out
    assert "upload: tcg: 1 of 4 samples failed: disk full" in out
    assert any(w.startswith("upload: tcg: data verification failed") for w in out)


def test_clean_run_has_no_warnings() -> None:
    assert warnings(standard()) == []


# ---------------------------------------------------------------------------------------------- JSON


def test_summary_json_is_strict_json() -> None:
    doc = standard()
    doc["cells"].append(cell("kvm", "startup", [2.0]))
    doc["cells"].append(cell("libvirt-kvm", "startup", [], failures=["no"]))
    summary = to_summary_json(doc)
    text = json.dumps(summary, allow_nan=False)
    back = json.loads(text)
    assert back["scenario"] == "demo-scenario"
    assert back["results_file"] == doc["_path"]
    assert back["unusable_backends"] == {"uml": "no UML kernel in /usr/lib/uml"}
    assert back["host"]["cpu_model"] == "Test CPU 9000"
    assert len(back["rows"]) == 6
    single = back["rows"][4]
    assert single["median_s"] == 2.0 and single["stdev_s"] is None and single["cv"] is None
    assert back["rows"][5]["median_s"] is None and back["rows"][5]["failures"] == 1
    assert back["rows"][2]["mb_per_s"] == pytest.approx(50.0)
    assert back["rows"][4]["ratio"] == 1.0 and back["rows"][0]["ratio"] == pytest.approx(6.0)
    assert back["rows"][0]["timed"] == STARTUP_TIMED
    assert any("n=1" in w for w in back["warnings"])


# ---------------------------------------------------------------------------------------------- terminal


def test_render_contains_context() -> None:
    text = render_text(standard())
    flat = squash(text)
    for name in ("tcg", "libvirt-tcg", "demo-scenario", "Test CPU 9000", "VT-x, /dev/kvm usable"):
        assert name in text
    assert STARTUP_TIMED in flat and UPLOAD_TIMED in flat
    assert "95% CI of the mean (Student t)" in flat
    assert "no UML kernel in /usr/lib/uml" in flat
    assert "1.00 (fastest)" in text and "2.00×" in text
    assert "12.0" in text and "50.0" in text


def test_render_failed_only_cell_shows_reason() -> None:
    doc = document([
        cell("tcg", "startup", [5.0, 5.1]),
        cell("libvirt-tcg", "startup", [], failures=["libvirt: permission denied on /dev/kvm"]),
    ])
    flat = squash(render_text(doc))
    assert "permission denied on /dev/kvm" in flat
    assert "warning: startup: libvirt-tcg: 1 of 1 samples failed" in flat


def test_render_does_not_interpret_markup_in_user_text() -> None:
    doc = document([cell("tcg", "startup", [], failures=["[bold]oops[/bold] [red]"])])
    assert "[bold]oops[/bold] [red]" in squash(render_text(doc))


def test_interrupted_partial_document_renders() -> None:
    doc = document([], status="interrupted")
    del doc["finished_utc"]
    del doc["backends"]
    del doc["_path"]
    doc["host"] = {}
    text = render_text(doc)
    assert "interrupted" in text and "not finished" in text
    assert "No measurements recorded" in text
    assert to_csv(doc) == CSV_HEADER + "\n"
    assert "No measurements recorded" in to_markdown(doc)
    json.dumps(to_summary_json(doc), allow_nan=False)


def test_interrupted_with_half_written_cells_renders() -> None:
    doc = document([
        cell("tcg", "startup", [4.0, 4.2], status="interrupted"),
        {"backend": "kvm", "label": "startup", "status": "running"},
        {"backend": "kvm", "measurement": "upload", "samples": [{"rep": 1, "seconds": None}], "failures": None},
    ], status="interrupted", finished_utc=None)
    text = squash(render_text(doc))
    assert "interrupted after 2 sample(s)" in text
    assert "running" in text
    assert len(parse_csv(to_csv(doc))) == 3
    json.dumps(to_summary_json(doc), allow_nan=False)


@pytest.mark.parametrize("value, expected", [
    (11.94, "11.9"), (0.4123, "0.412"), (147.2, "147"), (2.0, "2.00"), (1234.5, "1234"),
    (math.nan, "–"), (None, "–"),
])
def test_fmt_seconds(value: float | None, expected: str) -> None:
    assert fmt_seconds(value) == expected
