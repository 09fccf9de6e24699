"""A whole scenario on TCG for real, at small sizes: E1's measurements, start-up in boot phases, results file,
outputs. upload-no-write on tcg (its bytes verified) runs in tests/test_order.py's interleaved run, where its samples
take turns with uml's: one tcg launch fewer here."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import pytest

from guestbench.instruments import markers
from guestbench.output.export.csv import CSV_HEADER

from helpers.cli import guestbench, write_scenario
from helpers.phases import check_printed_phase_tables

pytestmark = pytest.mark.launch
SIZE = 8 * 2**20


@pytest.fixture(scope="module")
def e1_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    tmp = tmp_path_factory.mktemp("e1")
    sc = write_scenario(tmp / "e1.yaml", f"""
name: e1-small
repetitions: 1
warmup: 0
cold: false
timeout: 240
phases: true
appliance: {{memsize: 768}}
measurements:
  - startup
  - {{measurement: upload, size: {SIZE}, disk_size: 128MiB, filesystem: ext2}}
  - {{measurement: write-no-upload, size: {SIZE}, disk_size: 128MiB, filesystem: ext4, cache: unsafe}}
""")
    proc = guestbench("scenario", str(sc), "--backend", "tcg", "--results", str(tmp / "results"), "--csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = list((tmp / "results").glob("*-e1-small.json"))
    assert len(files) == 1
    return files[0], json.loads(files[0].read_text()), proc.stdout


def test_every_measurement_has_its_samples(e1_run, no_leftovers) -> None:
    _, doc, _ = e1_run
    assert doc["status"] == "complete"
    cells = {c["label"]: c for c in doc["cells"]}
    assert set(cells) == {"startup", "upload", "write-no-upload"}
    for label, cell in cells.items():
        assert cell["backend"] == "tcg" and cell["placement"] == "host"
        assert cell["failures"] == [], cell["failures"]
        assert [s["rep"] for s in cell["samples"]] == [1]  # n is not what is proven (warm-ups: tests/test_uml.py)
        assert all(0 < s["seconds"] < 240 for s in cell["samples"])
        assert cell["timed"], "every cell says what was timed"
        # the cell's one launch, reported apart where it is not the sample; start-up's cold launch is not taken
        # (cold: false saves a TCG launch here: a start-up cold launch is in tests/test_faults.py and test_density.py)
        assert (cell["cold_s"] is None) if label == "startup" else (cell["cold_s"] > 0), (label, cell["cold_s"])
    # a start-up sample is a launch: on TCG it takes seconds, far more than a transfer of 8 MiB into RAM
    assert min(s["seconds"] for s in cells["startup"]["samples"]) > 1.0
    assert cells["upload"]["bytes"] == SIZE
    assert cells["write-no-upload"]["cache_mode"] == "unsafe"
    assert cells["startup"]["bytes"] is None
    assert "no cold launch was taken" in cells["startup"]["timed"], cells["startup"]["timed"]  # and said so


def test_bytes_really_arrived(e1_run) -> None:
    _, doc, _ = e1_run
    cells = {c["label"]: c for c in doc["cells"]}
    v = cells["upload"]["verification"]
    assert v["ok"] is True and v["host"] == v["guest"] and len(v["guest"]) == 64
    v = cells["write-no-upload"]["verification"]
    assert v["ok"] is True and v["guest"] == SIZE


def test_results_keep_raw_samples_and_fingerprint(e1_run) -> None:
    _, doc, _ = e1_run
    assert doc["schema"] == "guestbench-results" and doc["schema_version"] == 3
    host = doc["host"]
    for key in ("cpu_model", "cores", "memory_bytes", "kernel", "virtualization", "versions", "guestbench"):
        assert key in host
    assert host["versions"]["libguestfs"] and host["versions"]["qemu"]
    assert doc["backends"]["tcg"]["usable"] is True
    assert doc["scenario"]["name"] == "e1-small"


def test_csv_contract(e1_run) -> None:
    _, doc, out = e1_run
    lines = out.strip().splitlines()
    assert lines[0] == CSV_HEADER
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["measurement"] for r in rows] == ["startup", "upload", "write-no-upload"]
    cells = {c["label"]: c for c in doc["cells"]}
    for r in rows:
        samples = sorted(s["seconds"] for s in cells[r["measurement"]]["samples"])
        median = statistics.median(samples)
        assert float(r["median_s"]) == pytest.approx(median, rel=1e-5)
        assert r["n"] == str(len(samples)) and r["failures"] == "0"
        if r["measurement"] == "startup":
            assert r["mb_per_s"] == ""
        else:
            assert float(r["mb_per_s"]) == pytest.approx(SIZE / median / 1e6, rel=1e-4)


@pytest.mark.parametrize("fmt", ["--json", "--markdown", "--csv", None])
def test_show_reprints_a_saved_run(e1_run, fmt) -> None:
    path, doc, _ = e1_run
    proc = guestbench("show", str(path), *([fmt] if fmt else []))
    assert proc.returncode == 0, proc.stderr
    if fmt == "--json":
        summary = json.loads(proc.stdout)
        assert {r["label"] for r in summary["rows"]} == {c["label"] for c in doc["cells"]}
    else:
        for label in ("startup", "upload", "write-no-upload"):
            assert label in proc.stdout
        assert "tcg" in proc.stdout


def test_startup_phases_on_tcg_sum_within_one_percent_and_show_prints_them(e1_run) -> None:
    """qemu's boot markers (the UML family: tests/test_phases.py), found in a real verbose TCG boot."""
    path, doc, _ = e1_run
    [cell] = [c for c in doc["cells"] if c["label"] == "startup"]
    assert cell["phases"] is True and cell["phase_markers"] == "qemu"
    for s in cell["samples"]:
        assert abs(sum(p["s"] for p in s["phases"]) - s["seconds"]) <= 0.01 * s["seconds"]
        # every marker of the family was found: a real boot prints them all
        assert [p["name"] for p in s["phases"]] == [m.name for m in markers.MARKERS["qemu"]], s["phases"]
    check_printed_phase_tables(doc, guestbench("show", str(path)).stdout)
