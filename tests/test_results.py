"""Results files: written at once, rewritten atomically, never overwritten, never half-written."""

from __future__ import annotations

import calendar
import json
import os
from pathlib import Path
from typing import Any

import pytest

from guestbench.util.errors import UserError
from guestbench.results import (SCHEMA, SCHEMA_VERSION, ResultsFile, atomic_write_json, load_results,
                                results_path)

WHEN = calendar.timegm((2026, 11, 21, 19, 40, 5, 0, 0, 0))
STAMP = "20261121T194005Z"


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp") or p.name.startswith("."))


def make(path: Path) -> ResultsFile:
    return ResultsFile.create(path, scenario={"name": "demo", "repetitions": 3}, host={"cpu_model": "Test CPU"},
                              command=["guestbench", "scenario", "demo.yaml"],
                              guestbench={"version": "0.1.0", "git_commit": None})


# ---------------------------------------------------------------- ResultsFile


def test_create_writes_a_valid_running_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "results" / "run.json"  # the directory is made too
    rf = make(path)
    assert rf.path == path
    doc = read(path)
    assert doc["schema"] == SCHEMA == "guestbench-results"
    assert doc["schema_version"] == SCHEMA_VERSION == 3  # 2 since the typed model (issue 13), 3 since fleet hosts
    assert doc["status"] == "running"
    assert doc["finished_utc"] is None
    assert doc["started_utc"].endswith("Z") and doc["started_utc"][:2] == "20"
    assert doc["command"] == ["guestbench", "scenario", "demo.yaml"]
    assert doc["scenario"] == {"name": "demo", "repetitions": 3}
    assert doc["host"] == {"cpu_model": "Test CPU"}
    assert doc["guestbench"] == {"version": "0.1.0", "git_commit": None}
    assert doc["backends"] == {}
    assert doc["cells"] == []
    assert doc == rf.doc
    # readable by `guestbench show` while the run is still going
    assert load_results(path).status == "running"
    assert leftovers(path.parent) == []


def test_add_cell_rewrites_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    rf = make(path)
    cell = rf.add_cell({"backend": "tcg", "placement": "host", "measurement": "startup", "label": "startup",
                        "params": {"disk_size": 64 * 2**20}})
    doc = read(path)
    assert len(doc["cells"]) == 1
    on_disk = doc["cells"][0]
    assert on_disk["backend"] == "tcg"
    assert on_disk["samples"] == [] and on_disk["warmups"] == [] and on_disk["failures"] == []
    assert on_disk["verification"] is None and on_disk["cold_s"] is None
    assert on_disk["status"] == "pending"
    assert on_disk["skip_reason"] is None
    assert on_disk == cell

    # a sample added to the returned cell reaches the file on the next save
    cell["samples"].append({"rep": 1, "seconds": 3.5, "utc": "2026-11-21T19:40:00Z"})
    cell["status"] = "running"
    rf.save()
    assert read(path)["cells"][0]["samples"] == [{"rep": 1, "seconds": 3.5, "utc": "2026-11-21T19:40:00Z"}]

    rf.add_cell({"backend": "kvm", "measurement": "startup", "label": "startup", "status": "skipped",
                 "skip_reason": "no /dev/kvm"})
    cells = read(path)["cells"]
    assert [c["backend"] for c in cells] == ["tcg", "kvm"]
    assert cells[1]["status"] == "skipped"  # given values are kept
    assert cells[1]["skip_reason"] == "no /dev/kvm"
    assert leftovers(tmp_path) == []


def test_set_backend_rewrites(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    rf = make(path)
    rf.set_backend("kvm", {"usable": False, "reason": "no /dev/kvm", "details": {}})
    assert read(path)["backends"] == {"kvm": {"usable": False, "reason": "no /dev/kvm", "details": {}}}


def test_finish_complete(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    rf = make(path)
    done = rf.add_cell({"backend": "tcg", "label": "a", "status": "done"})
    assert done["status"] == "done"
    rf.finish("complete")
    doc = read(path)
    assert doc["status"] == "complete"
    assert doc["finished_utc"] is not None and doc["finished_utc"].endswith("Z")
    assert doc["finished_utc"] >= doc["started_utc"]
    assert doc["cells"][0]["status"] == "done"


def test_finish_interrupted_marks_unfinished_cells(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    rf = make(path)
    rf.add_cell({"backend": "tcg", "label": "a", "status": "done"})
    rf.add_cell({"backend": "tcg", "label": "b", "status": "running",
                 "samples": [{"rep": 1, "seconds": 1.0, "utc": "x"}]})
    rf.add_cell({"backend": "kvm", "label": "a"})  # pending
    rf.add_cell({"backend": "kvm", "label": "b", "status": "skipped", "skip_reason": "unusable"})
    rf.finish("interrupted")
    run = load_results(path)
    assert run.status == "interrupted"
    assert [c.status for c in run.cells] == ["done", "interrupted", "interrupted", "skipped"]
    # samples taken before the interruption are kept
    assert [s.to_dict() for s in run.cells[1].samples] == [{"rep": 1, "seconds": 1.0, "utc": "x"}]


def test_the_writer_keeps_its_json_apart_from_the_typed_records(tmp_path: Path) -> None:
    """A cell's lists change only through add_sample and add_failure; a field set to an empty list is not the typed
    record's own (a sample appended later would be an object json cannot write, and no save would succeed after
    it); a merged remote cell without status or failures still ends and takes a failure (review of issue 49)."""
    from guestbench.results import Cell, Failure, Run, Sample

    rf = make(tmp_path / "run.json")
    cell = rf.add(Cell.from_dict({"backend": "tcg", "label": "a", "measurement": "startup", "placement": "host"}))
    with pytest.raises(TypeError, match="add_sample and add_failure"):
        rf.update_cell(cell, samples=[])
    rf.update_cell(cell, drive_paths=[])
    cell.drive_paths.append("ubd")
    rf.add_sample(cell, "rep", Sample.checked(rep=1, seconds=1.0, utc="x", seq=1))
    rf.add_failure(cell, Failure.from_dict({"rep": 2, "reason": "r"}, "failure"))
    rf.finish("interrupted")
    kept = read(tmp_path / "run.json")["cells"][0]
    assert kept["drive_paths"] == [] and kept["samples"] == [{"rep": 1, "seconds": 1.0, "utc": "x", "seq": 1}]
    assert kept["failures"] == [{"rep": 2, "reason": "r"}] and kept["status"] == "interrupted"

    remote = make(tmp_path / "remote.json")
    remote.add_cell({"backend": "uml", "label": "b"})
    sent = read(tmp_path / "remote.json")
    for name in ("status", "failures"):
        del sent["cells"][0][name]
    rf = make(tmp_path / "merged.json")
    rf.merge_remote("placement", "nested", Run.from_dict(sent), ())
    (theirs,) = rf.cells_where("placement", "nested")
    rf.add_failure(theirs, Failure.from_dict({"rep": 1, "reason": "lost"}, "failure"))
    rf.finish("failed")
    assert read(tmp_path / "merged.json")["cells"][0]["failures"] == [{"rep": 1, "reason": "lost"}]


# ---------------------------------------------------------------- atomic_write_json


def test_atomic_write_json_replaces_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    atomic_write_json(path, {"n": 1})
    atomic_write_json(path, {"n": 2, "list": [1, 2, 3]})
    assert read(path) == {"n": 2, "list": [1, 2, 3]}
    assert path.read_text().endswith("}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]


def test_atomic_write_json_keeps_old_content_when_serialisation_fails(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    good = {"schema": SCHEMA, "cells": [{"label": "x" * 1000, "n": i} for i in range(200)]}
    atomic_write_json(path, good)
    before = path.read_bytes()
    # json.dump has already written part of the document when it reaches the bad value
    bad = {"cells": [{"label": "y" * 1000, "n": i} for i in range(200)], "oops": object()}
    with pytest.raises(TypeError):
        atomic_write_json(path, bad)
    assert path.read_bytes() == before
    assert read(path) == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]


def test_results_file_survives_a_failed_save(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    rf = make(path)
    rf.add_cell({"backend": "tcg", "label": "a", "samples": [{"rep": 1, "seconds": 2.0, "utc": "u"}]})
    with pytest.raises(TypeError):
        rf.add_cell({"backend": "tcg", "label": "b", "params": {"bad": {1, 2}}})  # a set: not JSON
    run = load_results(path)
    assert [c.label for c in run.cells] == ["a"]
    assert run.cells[0].samples[0].seconds == 2.0
    assert leftovers(tmp_path) == []


def test_atomic_write_json_keeps_old_content_on_interrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "doc.json"
    atomic_write_json(path, {"n": 1})

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_json(path, {"n": 2})
    monkeypatch.undo()
    assert read(path) == {"n": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]


# ---------------------------------------------------------------- results_path


def test_results_path_name(tmp_path: Path) -> None:
    p = results_path(tmp_path, "uml-vs-kvm", when=WHEN)
    assert p == tmp_path / f"{STAMP}-uml-vs-kvm.json"
    assert p.is_file() and p.stat().st_size == 0  # reserved: the run's first save fills it


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("my scenario", "my-scenario"),
        ("a/b\\c", "a-b-c"),
        ("../../etc/passwd", "..-..-etc-passwd"),
        ("  spaced  out  ", "spaced-out"),
        ("E1: upload (500 MB)", "E1-upload-500-MB"),
        ("v1.2_final", "v1.2_final"),
        ("äöü", "scenario"),
        ("///", "scenario"),
        ("", "scenario"),
    ],
)
def test_results_path_slugifies(tmp_path: Path, name: str, slug: str) -> None:
    p = results_path(tmp_path, name, when=WHEN)
    assert p.name == f"{STAMP}-{slug}.json"
    assert p.parent == tmp_path


def test_results_path_never_overwrites(tmp_path: Path) -> None:
    first = results_path(tmp_path, "demo", when=WHEN)
    first.write_text("{}")
    second = results_path(tmp_path, "demo", when=WHEN)
    assert second.name == f"{STAMP}-demo-2.json"
    third = results_path(tmp_path, "demo", when=WHEN)  # -2 is taken once reserved, before anything is written
    assert third.name == f"{STAMP}-demo-3.json"
    assert first.read_text() == "{}"


# ---------------------------------------------------------------- load_results


def test_load_results_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    rf = make(path)
    rf.set_backend("tcg", {"usable": True, "reason": "ok", "details": {"qemu": "7.2"}})
    rf.add_cell({"backend": "tcg", "label": "startup", "measurement": "startup", "params": {"disk_size": 1},
                 "samples": [{"rep": i, "seconds": 1.0 + i / 10, "utc": "u"} for i in (1, 2, 3)]})
    rf.finish("complete")
    run = load_results(path)
    assert run.to_dict() == rf.doc and run == rf.run()
    assert run.cells[0].samples[2].seconds == 1.3


def load_error(path: Path) -> str:
    with pytest.raises(UserError) as exc:
        load_results(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: "), msg
    assert "\n" not in msg
    assert exc.value.exit_status == 2
    return msg


def test_load_results_missing(tmp_path: Path) -> None:
    assert "no such results file" in load_error(tmp_path / "nope.json")


def test_load_results_directory(tmp_path: Path) -> None:
    assert "is a directory; give the path of a results file" in load_error(tmp_path)


def test_load_results_not_json(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text("name: not json\n")
    msg = load_error(p)
    assert "not valid JSON (line 1, column 1)" in msg
    assert "expected a guestbench results file" in msg


def test_load_results_truncated(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    make(p)
    p.write_text(p.read_text()[:50])
    assert "not valid JSON" in load_error(p)


def test_load_results_binary(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_bytes(bytes(range(256)) * 4)
    msg = load_error(p)
    assert "not valid JSON" in msg and "UTF-8" in msg


def test_load_results_deeply_nested(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text("[" * 100000 + "]" * 100000)
    assert "nested more than 64 levels deep" in load_error(p)


@pytest.mark.parametrize("doc", [[1, 2], {"schema": "other"}, {"cells": []}, "guestbench-results", None])
def test_load_results_not_a_results_file(tmp_path: Path, doc: object) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps(doc))
    msg = load_error(p)
    assert "not a guestbench results file" in msg
    assert "'guestbench-results'" in msg


@pytest.mark.parametrize("version", [4, 99, 0, None, "1", "2", True, 1.5])  # 2 is read since issue 13, 3 since 19
def test_load_results_unsupported_schema_version(tmp_path: Path, version: object) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": SCHEMA, "schema_version": version, "cells": []}))
    msg = load_error(p)
    assert f"schema_version {version!r} is not supported" in msg
    assert "reads version 1" in msg


def test_load_results_cells_not_a_list(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": SCHEMA, "schema_version": 1, "cells": {}}))
    assert "'cells' is missing or not a list" in load_error(p)
