"""Report outputs built from small, hand-written results documents."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from guestbench.output.tables import placements as placement_table
from guestbench.output.tables import timing as timing_table
from guestbench.analysis import stats
from guestbench.output import results_doc
from guestbench.output.render import markdown
from guestbench.output.render import terminal
from guestbench.output.export import csv as csv_export
from guestbench.output.export import json as json_export
from guestbench.output.export.csv import CSV_HEADER
from guestbench.analysis.fleet import analyze_results
from guestbench.analysis.cells import Row
from guestbench.analysis.findings import analyze
from guestbench.results import ModelError, ResultsFile, Run, load_results
from guestbench.util.units import fmt_seconds

MB500 = 500 * 10**6
STARTUP_TIMED = "guestfs launch() until the appliance daemon answered"
UPLOAD_TIMED = "upload of a 500 MB file into the mounted ext2 filesystem"


# the summary every output reads (guestbench.analysis.findings), then the table or export under test
def typed(doc: dict[str, Any]) -> tuple[Run, str | None]:
    """A hand-written document as `show` reads it: the typed model, and the file it names as its own (`_path`)."""
    return Run.from_dict({k: v for k, v in doc.items() if k != "_path"}), doc.get("_path")


def findings(doc: dict[str, Any]) -> Any:
    """The findings of a document as `show` computes them."""
    return analyze(*typed(doc))


def rows(doc: dict[str, Any]) -> list[Row]:
    return findings(doc).rows


def warnings(doc: dict[str, Any]) -> list[str]:
    return findings(doc).warnings


def to_csv(doc: dict[str, Any]) -> str:
    return csv_export.to_csv(analyze_results(*typed(doc)))


def to_summary_json(doc: dict[str, Any]) -> dict[str, Any]:
    return json_export.results_summary(analyze_results(*typed(doc)))


def placement_tables(doc: dict[str, Any]) -> list[placement_table.PlacementTable]:
    return placement_table.placement_tables(findings(doc).placements)


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
    terminal.render(results_doc.show_document(typed(doc)[0], brief=True), console)
    return console.export_text()


def to_markdown(doc: dict[str, Any]) -> str:
    return markdown.to_markdown(results_doc.show_document(typed(doc)[0]))


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
    # the first eleven columns are the old contract; new ones only ever come after them
    assert CSV_HEADER == ("backend,placement,measurement,n,failures,median_s,mean_s,stdev_s,"
                          "ci_low_s,ci_high_s,mb_per_s,median_cpu_s,median_peak_mib")
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
    assert "## Backends not measured" in md and "| uml | no UML kernel in /usr/lib/uml |" in md
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
        {"backend": "kvm", "label": "upload", "measurement": "upload", "samples": []},
    ], status="interrupted", finished_utc=None)
    text = squash(render_text(doc))
    assert "interrupted after 2 sample(s)" in text
    assert "running" in text
    assert len(parse_csv(to_csv(doc))) == 3
    json.dumps(to_summary_json(doc), allow_nan=False)
    # what no run writes (a sample without its seconds, failures that are not a list) is refused, naming the field
    for bad, key in (({"samples": [{"rep": 1, "seconds": None}]}, "cells[2].samples[0].seconds"),
                     ({"failures": None}, "cells[2].failures")):
        doc["cells"][2] = {"backend": "kvm", "label": "upload", **bad}
        with pytest.raises(ModelError) as refused:
            typed(doc)
        assert refused.value.key == key


@pytest.mark.parametrize("value, expected", [
    (11.94, "11.9"), (0.4123, "0.412"), (147.2, "147"), (2.0, "2.00"), (1234.5, "1234"),
    (math.nan, "–"), (None, "–"),
])
def test_fmt_seconds(value: float | None, expected: str) -> None:
    assert fmt_seconds(value) == expected


# ---------------------------------------------------------------------------------------------- host vs nested

HOST_UML = [6.33, 6.71, 6.02, 6.20]
HOST_TCG = [12.9, 13.0, 16.6, 12.7]
NESTED_UML = [9.1, 8.7, 9.6, 9.0]
NESTED_TCG = [31.0, 29.5, 33.2]
HOST_UML_UP = [8.04, 8.00, 8.34]
NESTED_UML_UP = [19.5]  # one sample: a ratio, but no CI
HOST_TCG_UP = [13.1, 11.8, 10.9]
TCG_NESTED_REASON = "probe launch did not finish within 6000 s and was killed"
LEVEL1 = {"hypervisor": "tcg", "memory_mib": 4096, "vcpus": 2, "timeout_scale": 25.0, "image": "ea2cc8d5cc89fa92",
          "seconds": 812.3, "error": None}
NESTED_HOST = {"cpu_model": "QEMU TCG CPU version 2.5+", "cores": 2, "memory_bytes": 4 * 2**30,
               "kernel": "6.1.0-guest", "virtualization": {"summary": "QEMU guest (TCG), no /dev/kvm"},
               "versions": {"libguestfs": "1.48.6", "qemu": "7.2.0"}}


def nested_results(tmp_path: Path, **level1: Any) -> dict[str, Any]:
    """A results file as a run with placements host and nested writes it: the real ResultsFile, then loaded."""
    rf = ResultsFile.create(tmp_path / "nested.json", scenario={"name": "uml-vs-kvm", "placements": ["host", "nested"]},
                            host={"cpu_model": "AMD EPYC", "virtualization": {"summary": "KVM guest"}},
                            command=["guestbench", "scenario", "uml-vs-kvm.yaml", "--placement", "host,nested"],
                            guestbench={"version": "0.1.0", "git_commit": None})
    rf.set_backend("uml", {"usable": True, "reason": "launched in 6.3 s (probe)"})
    rf.set_backend("tcg", {"usable": True, "reason": "launched in 11.9 s (probe)"})
    for placement, backend, label, seconds, nbytes in (
            ("host", "uml", "startup", HOST_UML, None), ("host", "tcg", "startup", HOST_TCG, None),
            ("host", "uml", "upload", HOST_UML_UP, MB500), ("host", "tcg", "upload", HOST_TCG_UP, MB500),
            ("nested", "uml", "startup", NESTED_UML, None), ("nested", "tcg", "startup", NESTED_TCG, None),
            ("nested", "uml", "upload", NESTED_UML_UP, MB500)):
        rf.add_cell({**cell(backend, label, seconds, placement=placement, nbytes=nbytes)})
    rf.add_cell(cell("tcg", "upload", [], placement="nested", nbytes=MB500, status="skipped",
                     skip_reason="backend not usable"))
    rf.doc["placements"] = {"nested": {"host": NESTED_HOST, "status": "complete", "level1": {**LEVEL1, **level1},
                                       "backends": {"uml": {"usable": True, "reason": "launched in 40 s (probe)"},
                                                    "tcg": {"usable": False, "reason": TCG_NESTED_REASON}}}}
    rf.finish("complete")
    return load_results(rf.path).to_dict()


def expected_comparisons() -> list[tuple[str, str, list[float], list[float]]]:
    return [("startup", "uml", HOST_UML, NESTED_UML), ("startup", "tcg", HOST_TCG, NESTED_TCG),
            ("upload", "uml", HOST_UML_UP, NESTED_UML_UP)]


def test_placement_table_ratios_and_cis_are_recomputed(tmp_path: Path) -> None:
    (table,) = placement_tables(nested_results(tmp_path))
    assert table.header[:3] == ["measurement", "backend", "cache"]
    assert [(r.label, r.backend) for r in table.comparisons] == [(lab, b) for lab, b, _, _ in expected_comparisons()]
    for r, text, (label, backend, host, nested) in zip(table.comparisons, table.rows, expected_comparisons()):
        host_median, nested_median = float(np.median(host)), float(np.median(nested))
        assert r.host.median == pytest.approx(host_median) and r.nested.median == pytest.approx(nested_median)
        assert (r.host.n, r.nested.n) == (len(host), len(nested))
        assert r.ratio == pytest.approx(nested_median / host_median)
        low, high = stats.ratio_ci(host, nested)
        assert text[0:3] == [label, backend, "writeback"]
        assert text[3] == (f"{fmt_seconds(host_median)} (n={len(host)}, "
                           f"{fmt_seconds(min(host))}–{fmt_seconds(max(host))})")
        assert text[4] == (f"{fmt_seconds(nested_median)} (n={len(nested)}, "
                           f"{fmt_seconds(min(nested))}–{fmt_seconds(max(nested))})")
        assert text[5] == f"{nested_median / host_median:.2f}×"
        if len(nested) < 2:
            assert math.isnan(r.ci_low) and math.isnan(r.ci_high) and text[6] == "–"
        else:
            assert (r.ci_low, r.ci_high) == pytest.approx((low, high))
            assert low <= nested_median / host_median <= high
            assert text[6] == f"{low:.2f}–{high:.2f}"
    caption = table.caption
    assert STARTUP_TIMED in caption and UPLOAD_TIMED in caption and "writeback" in caption
    assert timing_table.SAMPLES_NOTE in caption and stats.RATIO_CI_METHOD in caption
    assert "level-1 guest on tcg with 2 vCPUs / 4096 MiB" in caption


def test_backend_with_host_samples_only_says_what_is_missing_and_why(tmp_path: Path) -> None:
    doc = nested_results(tmp_path)
    (table,) = placement_tables(doc)
    (gap,) = table.gaps
    assert (gap.label, gap.backend, gap.present, gap.missing) == ("upload", "tcg", "host", "nested")
    assert "skipped: backend not usable" in gap.reason and TCG_NESTED_REASON in gap.reason
    line = f"upload: tcg: host only, no nested samples: skipped: backend not usable; tcg not usable in the " \
           f"level-1 guest: {TCG_NESTED_REASON}"
    assert placement_table.gap_text(gap) == line
    assert f"- {line}" in to_markdown(doc)
    assert line in squash(render_text(doc))
    assert to_summary_json(doc)["placements_missing"] == [
        {"label": "upload", "backend": "tcg", "cache_mode": "writeback", "present": "host", "missing": "nested",
         "reason": gap.reason, "unusable": True,
         "host": {"median_s": gap.summary.median, "n": 3, "min_s": gap.summary.min, "max_s": gap.summary.max}}]
    # its row in the table: the host's figures, the nested side says in brief why it has none
    assert table.rows[-1][:5] == ["upload", "tcg", "writeback", placement_table.side_text(gap.summary),
                                  "not usable here (see below)"]


def test_backend_sampled_nested_only_names_the_host_reason(tmp_path: Path) -> None:
    doc = nested_results(tmp_path)
    doc["backends"]["uml"] = {"usable": False, "reason": "no UML kernel on the host"}
    for c in doc["cells"]:
        if c["placement"] == "host" and c["backend"] == "uml":
            c.update(samples=[], status="skipped", skip_reason="backend not usable")
    (table,) = placement_tables(doc)
    assert [(r.label, r.backend) for r in table.comparisons] == [("startup", "tcg")]
    assert [placement_table.gap_text(g) for g in table.gaps if g.backend == "uml"] == [
        f"{label}: uml: nested only, no host samples: skipped: backend not usable; uml not usable on the host: "
        "no UML kernel on the host" for label in ("startup", "upload")]


def test_missing_nested_cell_of_an_interrupted_nested_run(tmp_path: Path) -> None:
    doc = nested_results(tmp_path)
    doc["cells"] = [c for c in doc["cells"] if not (c["placement"] == "nested" and c["label"] == "upload")]
    doc["placements"]["nested"]["status"] = "interrupted"
    (table,) = placement_tables(doc)
    reasons = {(g.label, g.backend): g.reason for g in table.gaps}
    assert reasons[("upload", "uml")] == "no cell recorded; nested run interrupted"
    assert reasons[("upload", "tcg")].startswith("no cell recorded; nested run interrupted; tcg not usable in")
    assert "(nested run interrupted)" in timing_table.nested_line(findings(doc).nested)


def test_header_lines_and_unusable_backends_of_the_level1_guest(tmp_path: Path) -> None:
    doc = nested_results(tmp_path)
    line = "QEMU TCG CPU version 2.5+ · QEMU guest (TCG), no /dev/kvm · level-1 on tcg, 2 vCPUs, 4096 MiB"
    assert timing_table.nested_line(findings(doc).nested) == line
    text = render_text(doc)
    assert f"Nested: {line}" in text.splitlines()
    assert text.splitlines().index(f"Nested: {line}") == text.splitlines().index("Host: AMD EPYC · KVM guest") + 1
    assert f"Host: AMD EPYC · KVM guest  \nNested: {line}  \n" in to_markdown(doc)
    assert findings(doc).unusable == {"tcg (nested)": TCG_NESTED_REASON}
    assert "| tcg (nested) | " + TCG_NESTED_REASON + " |" in to_markdown(doc)
    assert "level-1 run failed" not in text
    failed = nested_results(tmp_path, error="level-1 guest did not boot within 900 s")
    assert "warning: level-1 run failed: level-1 guest did not boot within 900 s" in render_text(failed)
    assert "**Warning:** level-1 run failed: level-1 guest did not boot within 900 s" in to_markdown(failed)


def test_markdown_terminal_and_json_agree_on_the_placement_table(tmp_path: Path) -> None:
    doc = nested_results(tmp_path)
    (table,) = placement_tables(doc)
    md = to_markdown(doc)
    section = md.split("## host vs nested", 1)[1]
    assert "| " + " | ".join(table.header) + " |" in section
    for row in table.rows:
        assert "| " + " | ".join(row) + " |" in section
    assert table.caption in section
    text = squash(render_text(doc))
    for row in table.rows:
        assert all(c in text for c in row)
    summary = json.loads(json.dumps(to_summary_json(doc), allow_nan=False))
    # a row per backend: those measured at both placements, then those at one (the other side says why, in brief)
    assert len(summary["placements"]) + len(summary["placements_missing"]) == len(table.rows)
    for got, row in zip(summary["placements_missing"], table.rows[len(summary["placements"]):]):
        assert [got["label"], got["backend"], got["cache_mode"]] == row[:3] and row[5:] == ["–", "–"]
        s = got[got["present"]]
        assert row[3 if got["present"] == "host" else 4] == f"{fmt_seconds(s['median_s'])} (n={s['n']}, " \
                                                            f"{fmt_seconds(s['min_s'])}–{fmt_seconds(s['max_s'])})"
        assert row[4 if got["present"] == "host" else 3] == ("not usable here (see below)" if got["unusable"]
                                                             else "no samples (see below)")
    for got, row in zip(summary["placements"], table.rows):
        assert [got["label"], got["backend"], got["cache_mode"]] == row[:3]
        for side, column in (("host", 3), ("nested", 4)):
            s = got[side]
            assert set(s) == {"median_s", "n", "min_s", "max_s"}
            assert row[column] == f"{fmt_seconds(s['median_s'])} (n={s['n']}, {fmt_seconds(s['min_s'])}–" \
                                  f"{fmt_seconds(s['max_s'])})"
        assert row[5] == f"{got['ratio']:.2f}×"
        assert got["ratio"] == pytest.approx(got["nested"]["median_s"] / got["host"]["median_s"])
        ci = got["ratio_ci_low"], got["ratio_ci_high"]
        assert row[6] == ("–" if ci == (None, None) else f"{ci[0]:.2f}–{ci[1]:.2f}")
    assert summary["placements_method"] == stats.RATIO_CI_METHOD
    assert summary["level1"] == {**LEVEL1, "status": "complete",
                                 "host": {"cpu_model": NESTED_HOST["cpu_model"],
                                          "virtualization": "QEMU guest (TCG), no /dev/kvm", "cores": 2,
                                          "memory_bytes": 4 * 2**30, "kernel": "6.1.0-guest",
                                          "versions": NESTED_HOST["versions"]}}


def test_documents_without_nested_cells_have_no_placement_table(tmp_path: Path) -> None:
    doc = standard()
    keys = {"scenario", "status", "results_file", "host", "methods", "rows", "phases", "unusable_backends",
            "warnings"}
    assert placement_tables(doc) == []
    assert set(to_summary_json(doc)) == keys  # the summary of a host-only run is unchanged
    assert "nested" not in render_text(doc).lower() and "nested" not in to_markdown(doc).lower()
    # host and another placement (not nested): no comparison either
    assert placement_tables(document([cell("tcg", "startup", [1.0, 1.1]),
                                             cell("tcg", "startup", [2.0, 2.1], placement="appliance")])) == []
    # a nested run that failed before its first cell: header and level-1 record, no table
    host_only = nested_results(tmp_path, error="level-1 guest did not boot")
    host_only["cells"] = [c for c in host_only["cells"] if c["placement"] == "host"]
    assert placement_tables(host_only) == []
    assert "## host vs nested" not in to_markdown(host_only)
    summary = to_summary_json(host_only)
    assert summary["placements"] == [] and summary["level1"]["error"] == "level-1 guest did not boot"
    assert "warning: level-1 run failed: level-1 guest did not boot" in render_text(host_only)


@pytest.mark.parametrize("placements", [
    {}, {"nested": {}}, {"nested": {"host": None, "status": None, "level1": None}},
    {"nested": {"host": {"virtualization": None}, "backends": {"uml": {"usable": False}},
                "level1": {"hypervisor": None, "vcpus": "two", "memory_mib": math.nan, "timeout_scale": True,
                           "seconds": None, "error": ""}}},
])
def test_partial_nested_documents_render(tmp_path: Path, placements: Any) -> None:
    """What a nested run cut short may have written renders; the level-1 guest's record is its own JSON, read
    for what it holds."""
    doc = nested_results(tmp_path)
    doc["placements"] = placements
    doc["cells"].append({"backend": "uml", "placement": "nested", "label": "upload-no-write", "status": "running"})
    doc["cells"].append({"backend": "kvm", "placement": "nested", "measurement": "startup", "label": "startup",
                         "samples": [{"rep": 1, "seconds": 4.0}]})
    doc["cells"].append({"backend": "kvm", "placement": "host", "measurement": "startup", "label": "startup"})
    (table,) = placement_tables(doc)
    assert [(r.label, r.backend) for r in table.comparisons] == [(lab, b) for lab, b, _, _ in expected_comparisons()]
    assert ("startup", "kvm", "nested", "host") in [(g.label, g.backend, g.present, g.missing) for g in table.gaps]
    render_text(doc)
    to_markdown(doc)
    to_csv(doc)
    json.dumps(to_summary_json(doc), allow_nan=False)
    _ = findings(doc).unusable


@pytest.mark.parametrize("placements, key", [
    (None, "placements"), ([], "placements"), ({"nested": None}, "placements.nested"),
    ({"nested": {"backends": None}}, "placements.nested.backends"),
    ({"nested": {"backends": {"tcg": None}}}, "placements.nested.backends.tcg"),
])
def test_a_nested_record_no_run_writes_is_refused_naming_the_field(tmp_path: Path, placements: Any,
                                                                    key: str) -> None:
    doc = nested_results(tmp_path)
    doc["placements"] = placements
    with pytest.raises(ModelError) as refused:
        typed(doc)
    assert refused.value.key == key


def test_a_nested_record_with_nothing_in_it_is_no_nested_run(tmp_path: Path) -> None:
    doc = nested_results(tmp_path)
    doc["placements"] = {"nested": {}}
    doc["cells"] = [c for c in doc["cells"] if c["placement"] == "host"]
    assert findings(doc).nested is None and "Nested:" not in render_text(doc)
    assert "level1" not in to_summary_json(doc)
