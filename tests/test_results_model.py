"""The typed results model (schema_version 3): lossless v1 → model → v3, refusal of doctored files, the JSON Schema.

See docs/results-format.md. Every real results file kept with the tests (never the user's results/) must read, upgrade
to version 3 without losing or inventing a key, and match schema-v3.json; a file with values no run can have
written (negative or non-finite seconds, a sample without its fields, an unknown status) is refused with one
line naming the file and the field, and `guestbench show` exits 2 on it.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any
from collections.abc import Callable

import jsonschema
import pytest

from guestbench.util.errors import UserError
from guestbench.results import (CELL_STATUSES, SCHEMA, SCHEMA_VERSION, BackendVerdict, Cell, Failure, Placement,
                                ResultsFile, Run, Sample, SchemaViolation, load_results, utc_now)
from guestbench.results import validate
from guestbench.results.model import ModelError
from helpers.paths import ROOT

# the files the tests ship, never the user's results/ (an interrupted or hand-edited run there is theirs)
SHIPPED = sorted((ROOT / "tests" / "data" / "results").glob("*.json"))
assert SHIPPED, "no results files in tests/data/results"
NESTED = next(p for p in SHIPPED if "nested" in p.name)
GUESTBENCH = Path(sys.executable).with_name("guestbench")
SECONDS = "allowed: a finite number of seconds >= 0"


def schema_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(resources.files("guestbench.results").joinpath("schema-v3.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(doc: dict[str, Any]) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in schema_validator().iter_errors(doc)]


# ---------------------------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_v1_file_round_trips_to_v2_without_losing_or_inventing_a_key(path: Path) -> None:
    raw = json.loads(path.read_text())
    doc = load_results(path).to_dict()
    assert doc["schema_version"] == SCHEMA_VERSION == 3
    expected = dict(raw, schema_version=3)
    assert doc == expected
    # byte for byte the same JSON but for the version: key order and null-versus-absent kept at every level
    assert json.dumps(doc) == json.dumps(expected)
    assert schema_errors(doc) == []
    # v2 → model → v2 is the identity
    assert Run.from_dict(doc).to_dict() == doc
    assert json.dumps(Run.from_dict(doc).to_dict()) == json.dumps(doc)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_model_gives_typed_objects(path: Path) -> None:
    run = Run.from_dict(json.loads(path.read_text()))
    assert run.schema == SCHEMA and run.schema_version == 3 and run.status == "complete"
    assert run.cells and all(isinstance(c, Cell) for c in run.cells)
    for cell in run.cells:
        verdicts = run.placements[cell.placement].backends if cell.placement in run.placements else run.backends
        assert cell.status in CELL_STATUSES and cell.backend in verdicts  # a nested cell's verdict is the guest's
        assert all(isinstance(s, Sample) and s.seconds > 0 and s.rep >= 1 for s in cell.samples + cell.warmups)
        assert all(isinstance(f, Failure) for f in cell.failures)
    assert all(isinstance(v, BackendVerdict) and isinstance(v.usable, bool) for v in run.backends.values())


def test_nested_placement_is_a_placement_with_its_level1_record() -> None:
    run = Run.from_dict(json.loads(NESTED.read_text()))
    nested = run.placements["nested"]
    assert isinstance(nested, Placement) and nested.status == "complete"
    assert nested.backends["uml"].usable is True and nested.level1 is not None
    assert nested.level1["hypervisor"] == "tcg"
    assert {c.placement for c in run.cells} == {"host", "nested"}


def _everywhere(doc: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """`doc` with `key` added to the run, its first cell, sample, failure, backend verdict and placement."""
    doc = copy.deepcopy(doc)
    cell = doc["cells"][0]
    cell["failures"].append({"kind": "rep", "rep": 9, "reason": "r", "utc": "u"})
    for obj in (doc, cell, cell["samples"][0], cell["failures"][0], next(iter(doc["backends"].values())),
                doc["placements"]["nested"]):
        obj[key] = value
    return doc


def test_unknown_keys_survive_at_every_level(tmp_path: Path) -> None:
    """A newer guestbench's fields go to `extra` and come back, so reading never drops them."""
    doc = _everywhere(json.loads(NESTED.read_text()), "from_the_future", {"x": [1, None]})
    run = Run.from_dict(doc)
    assert run.extra == {"from_the_future": {"x": [1, None]}}
    assert run.cells[0].samples[0].extra == {"from_the_future": {"x": [1, None]}}
    assert run.cells[0].failures[0].extra and run.placements["nested"].extra
    path = tmp_path / "future.json"
    path.write_text(json.dumps(doc))
    assert load_results(path).to_dict() == dict(doc, schema_version=3)
    assert schema_errors(load_results(path).to_dict()) == []  # unknown keys are allowed by the schema too


def test_null_and_absent_optional_fields_come_back_as_they_were() -> None:
    cells = [{"backend": "tcg", "label": "a", "bytes": None, "cache_mode": None,
              "samples": [{"rep": 1, "seconds": 2, "in_step": False, "waited_s": None}]},
             {"backend": "uml", "label": "b"}]
    doc = {"schema": SCHEMA, "schema_version": 1, "status": "complete", "cells": cells}
    out = Run.from_dict(doc).to_dict()
    assert out == dict(doc, schema_version=3)
    assert out["cells"][1] == {"backend": "uml", "label": "b"}  # no defaults invented
    assert out["cells"][0]["samples"][0]["seconds"] == 2 and isinstance(out["cells"][0]["samples"][0]["seconds"], int)


# ---------------------------------------------------------------------------------------------- constructors


def test_sample_and_failure_constructors_leave_out_none_optionals() -> None:
    assert Sample(1, 2.5, "2026-11-21T19:40:00Z").to_dict() == {"rep": 1, "seconds": 2.5,
                                                                 "utc": "2026-11-21T19:40:00Z"}
    full = Sample(2, 3.0, "u", phases=[{"name": "kernel init", "s": 1.5}], metrics={"throughput": 9.5, "v": "ok"},
                  in_step=True, waited_s=0.25).to_dict()
    assert full == {"rep": 2, "seconds": 3.0, "utc": "u", "phases": [{"name": "kernel init", "s": 1.5}],
                    "metrics": {"throughput": 9.5, "v": "ok"}, "in_step": True, "waited_s": 0.25}
    assert Sample(3, 1.0, "u", in_step=False, waited_s=None).to_dict() == {"rep": 3, "seconds": 1.0, "utc": "u",
                                                                            "in_step": False}
    assert Failure("warmup", 1, "the worker died", "u").to_dict() == {"kind": "warmup", "rep": 1,
                                                                       "reason": "the worker died", "utc": "u"}
    for d in (full, Failure("rep", 1, "x", "u").to_dict()):  # what the constructors make reads back the same
        cls = Sample if "seconds" in d else Failure
        assert cls.from_dict(d).to_dict() == d


def test_add_cell_takes_a_model_cell(tmp_path: Path) -> None:
    rf = ResultsFile.create(tmp_path / "r.json", scenario={"name": "s"}, host={}, command=["guestbench"],
                            guestbench={"version": "0.1.0", "git_commit": None})
    stored = rf.add_cell(Cell("tcg", "startup", measurement="startup", placement="host", params={"disk_size": 1}))
    assert stored["samples"] == [] and stored["status"] == "pending" and stored["cold_s"] is None
    stored["samples"].append(Sample(1, 4.0, utc_now()).to_dict())
    rf.save()
    assert load_results(rf.path).cells[0].samples[0].seconds == 4.0


# ---------------------------------------------------------------------------------------------- refusals


def _base() -> dict[str, Any]:
    """A small valid document in the v1 shape: one cell with two samples, a warm-up and a failure."""
    return {"schema": SCHEMA, "schema_version": 1, "status": "complete", "started_utc": "2026-11-21T19:40:00Z",
            "backends": {"tcg": {"usable": True, "reason": "ok", "details": {}}},
            "cells": [{"backend": "tcg", "placement": "host", "measurement": "startup", "label": "startup",
                       "samples": [{"rep": 1, "seconds": 1.0, "utc": "u"}, {"rep": 2, "seconds": 1.5, "utc": "u"}],
                       "warmups": [{"rep": 1, "seconds": 2.0, "utc": "u"}],
                       "failures": [{"kind": "rep", "rep": 3, "reason": "died", "utc": "u"}],
                       "verification": None, "cold_s": 3.0, "status": "done", "skip_reason": None}],
            "placements": {"nested": {"status": "complete", "backends": {"uml": {"usable": False, "reason": "no"}}}}}


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change at a dotted path (cells.0.samples.1.seconds); value DELETE removes the key."""
    parts = [int(p) if p.isdigit() else p for p in path.split(".")]

    def change(doc: dict[str, Any]) -> None:
        target: Any = doc
        for p in parts[:-1]:
            target = target[p]
        if value is DELETE:
            del target[parts[-1]]
        else:
            target[parts[-1]] = value
    return change


DELETE = object()
# (change, the field named, what the message says); schema: whether JSON Schema can say it too (not non-finite)
REFUSALS: dict[str, tuple[Callable[[dict[str, Any]], None], str, str, bool]] = {
    "negative-seconds": (_set("cells.0.samples.1.seconds", -1.2), "cells[0].samples[1].seconds",
                         f"-1.2 is negative; {SECONDS}", True),
    "nan-seconds": (_set("cells.0.samples.0.seconds", math.nan), "cells[0].samples[0].seconds",
                    f"NaN is not finite; {SECONDS}", False),
    "infinite-seconds": (_set("cells.0.samples.0.seconds", math.inf), "cells[0].samples[0].seconds",
                         f"Infinity is not finite; {SECONDS}", False),
    "text-seconds": (_set("cells.0.samples.0.seconds", "1.5"), "cells[0].samples[0].seconds",
                     f'"1.5" is not a number; {SECONDS}', True),
    "boolean-seconds": (_set("cells.0.samples.0.seconds", True), "cells[0].samples[0].seconds",
                        f"true is not a number; {SECONDS}", True),
    "null-seconds": (_set("cells.0.samples.0.seconds", None), "cells[0].samples[0].seconds",
                     f"null is not a number; {SECONDS}", True),
    "negative-warmup": (_set("cells.0.warmups.0.seconds", -0.5), "cells[0].warmups[0].seconds",
                        f"-0.5 is negative; {SECONDS}", True),
    "negative-cold": (_set("cells.0.cold_s", -3), "cells[0].cold_s", f"-3 is negative; {SECONDS}", True),
    "text-cold": (_set("cells.0.cold_s", "fast"), "cells[0].cold_s", f'"fast" is not a number; {SECONDS}', True),
    "infinite-cold": (_set("cells.0.cold_s", math.inf), "cells[0].cold_s", "Infinity is not finite", False),
    "sample-not-object": (_set("cells.0.samples.0", 5), "cells[0].samples[0]", "5 is not an object", True),
    "sample-without-seconds": (_set("cells.0.samples.1.seconds", DELETE), "cells[0].samples[1].seconds",
                               f"missing; required: {SECONDS.removeprefix('allowed: ')}", True),
    "sample-without-rep": (_set("cells.0.samples.0.rep", DELETE), "cells[0].samples[0].rep", "missing", True),
    "sample-rep-zero": (_set("cells.0.samples.0.rep", 0), "cells[0].samples[0].rep", "0 is below 1", True),
    "sample-rep-text": (_set("cells.0.samples.0.rep", "1"), "cells[0].samples[0].rep", '"1" is not an integer',
                        True),
    "samples-not-list": (_set("cells.0.samples", {}), "cells[0].samples", "{} is not a list", True),
    "failure-not-object": (_set("cells.0.failures.0", "died"), "cells[0].failures[0]", '"died" is not an object',
                           True),
    "failure-without-reason": (_set("cells.0.failures.0.reason", DELETE), "cells[0].failures[0].reason",
                               "missing", True),
    "failure-without-rep": (_set("cells.0.failures.0.rep", DELETE), "cells[0].failures[0].rep", "missing", True),
    "failure-unknown-kind": (_set("cells.0.failures.0.kind", "later"), "cells[0].failures[0].kind",
                             '"later" is not a kind of iteration; allowed: cold, warmup, rep', True),
    "cell-not-object": (_set("cells.0", ["tcg"]), "cells[0]", '["tcg"] is not an object', True),
    "cell-without-backend": (_set("cells.0.backend", DELETE), "cells[0].backend", "missing", True),
    "cell-without-label": (_set("cells.0.label", DELETE), "cells[0].label", "missing", True),
    "cell-unknown-status": (_set("cells.0.status", "finished"), "cells[0].status",
                            '"finished" is not a cell status; allowed: pending, running, done, skipped, '
                            'unavailable, interrupted', True),
    "cell-status-null": (_set("cells.0.status", None), "cells[0].status", "null is not a cell status", True),
    "run-unknown-status": (_set("status", "done"), "status", '"done" is not a run status; allowed: running, '
                           'complete, interrupted, failed', True),
    "backend-not-object": (_set("backends.tcg", True), "backends.tcg", "true is not an object", True),
    "backend-usable-text": (_set("backends.tcg.usable", "yes"), "backends.tcg.usable", '"yes" is not a boolean',
                            True),
    "placement-unknown-status": (_set("placements.nested.status", "lost"), "placements.nested.status",
                                 '"lost" is not a placement status', True),
    "metric-not-a-figure": (_set("cells.0.samples.0.metrics", {"iops": [1]}), "cells[0].samples[0].metrics.iops",
                            "[1] is not a number or a string", True),
    # a start-up's boot phases and the scenario's prices are read by the report: show once printed a traceback
    "phase-without-seconds": (_set("cells.0.samples.0.phases", [{"name": "kernel"}]),
                              "cells[0].samples[0].phases[0].s", "null is not a number", True),
    "phase-negative": (_set("cells.0.samples.0.phases", [{"name": "kernel", "s": -1}]),
                       "cells[0].samples[0].phases[0].s", "-1 is negative", True),
    "prices-incomplete": (_set("scenario", {"name": "s", "cost": {"currency": "EUR"}}), "scenario.cost",
                          "is not a complete set of prices", False),
    "prices-text": (_set("scenario", {"name": "s", "cost": {"vcpu_hour": "1", "gib_hour": 1}}),
                    "scenario.cost.vcpu_hour", '"1" is not a number', False),
    "figure-without-unit": (_set("cells.0.metrics", [{"key": "bw", "label": "bw", "higher_better": True}]),
                            "cells[0].metrics[0].unit", "null is not a string", True),
    "infinite-figure": (_set("cells.0.samples.0.metrics", {"bw": math.inf}), "cells[0].samples[0].metrics.bw",
                        "Infinity is not finite", False),
}


def _doctored(tmp_path: Path, name: str) -> tuple[Path, dict[str, Any]]:
    doc = _base()
    REFUSALS[name][0](doc)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them
    return path, doc


def test_the_base_document_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(_base()))
    assert load_results(path).to_dict() == dict(_base(), schema_version=3)
    assert schema_errors(load_results(path).to_dict()) == []


@pytest.mark.parametrize("name", list(REFUSALS))
def test_doctored_file_is_refused_in_one_line_naming_file_and_field(tmp_path: Path, name: str) -> None:
    _, key, says, _ = REFUSALS[name]
    path, _ = _doctored(tmp_path, name)
    with pytest.raises(UserError) as exc:
        load_results(path)
    msg = str(exc.value)
    assert "\n" not in msg and exc.value.exit_status == 2
    if "is not finite" in says:  # NaN, Infinity: not JSON, refused as the file is parsed (results.limits)
        assert msg.startswith(f"{path}: line 1: ") and "is not a finite number" in msg, msg
    else:
        assert msg.startswith(f"{path}: {key}: "), msg
        assert says in msg, msg
    with pytest.raises(ModelError) as model_exc:  # the model says the same without a file
        Run.from_dict(json.loads(path.read_text()))
    assert model_exc.value.key == key


@pytest.mark.parametrize("name", [n for n, (*_, schema) in REFUSALS.items() if schema])
def test_the_json_schema_refuses_them_too(tmp_path: Path, name: str) -> None:
    _, doc = _doctored(tmp_path, name)
    doc["schema_version"] = 3
    assert schema_errors(doc), name


def test_guestbench_show_exits_2_on_a_doctored_file(tmp_path: Path) -> None:
    path, _ = _doctored(tmp_path, "negative-seconds")
    proc = subprocess.run([str(GUESTBENCH), "show", str(path)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [f"guestbench: {path}: cells[0].samples[1].seconds: -1.2 is negative; "
                                        f"{SECONDS}"]


def test_versions_other_than_1_to_3_are_refused(tmp_path: Path) -> None:
    for version in (4, 0):
        path = tmp_path / f"v{version}.json"
        path.write_text(json.dumps(dict(_base(), schema_version=version)))
        with pytest.raises(UserError, match=f"schema_version {version} is not supported; this guestbench reads "
                                            "version 1, 2 or 3"):
            load_results(path)


# ---------------------------------------------------------------------------------------------- the JSON Schema


def _full_run(path: Path) -> ResultsFile:
    """A results file with every kind of record the runner and the nested merger write."""
    rf = ResultsFile.create(path, scenario={"name": "all", "repetitions": 2}, host={"cpu_model": "Test CPU"},
                            command=["guestbench", "scenario", "all.yaml"],
                            guestbench={"version": "0.1.0", "git_commit": None})
    rf.set_backend("tcg", {"usable": True, "reason": "launched in 11.9 s (probe)", "details": {"cached": True}})
    rf.set_backend("kvm", {"usable": False, "reason": "no /dev/kvm", "details": {}})
    start = rf.add_cell({"backend": "tcg", "placement": "host", "measurement": "startup", "group": "startup",
                         "label": "startup", "variant": {}, "params": {"disk_size": 67108864}, "timed": "launch",
                         "cache_mode": "writeback", "bytes": None, "what": "startup(disk_size=64MiB)",
                         "phases": True, "phase_markers": "qemu"})
    start["status"] = "running"
    start["cold_s"] = 15.7
    start["warmups"].append(Sample(1, 14.1, utc_now()).to_dict())
    start["samples"].append(Sample(1, 13.0, utc_now(), phases=[{"name": "kernel", "s": 2.0}]).to_dict())
    start["failures"].append(Failure("rep", 2, "the worker died (signal 9)", utc_now()).to_dict())
    start["status"] = "done"
    rf.save()
    fio = rf.add_cell({"backend": "tcg", "placement": "host", "measurement": "workload", "group": "fio",
                       "label": "fio.guest1", "variant": {"guest": 1}, "instance": 1, "concurrency": 2,
                       "params": {}, "timed": "fio", "cache_mode": None, "bytes": None, "what": "fio(...)",
                       "metrics": [{"key": "iops", "label": "IOPS", "unit": "1/s", "higher_better": True}]})
    fio.update({"stack": {"description": "ext4 on raw"}, "verification": {"what": "sha256", "ok": True}})
    fio["samples"].append(Sample(1, 30.0, utc_now(), metrics={"iops": 1234.5}, in_step=True, waited_s=0.1)
                          .to_dict())
    fio["samples"].append(Sample(2, 31.0, utc_now(), metrics={"iops": 1200.0}, in_step=False).to_dict())
    fio["status"] = "done"
    rf.save()
    dur = rf.add_cell({"backend": "tcg", "placement": "host", "measurement": "durability", "label": "durability"})
    dur.update({"disk": "file", "disk_describe": "a plain file", "status": "unavailable",
                "skip_reason": "no FUSE here"})
    rf.add_cell({"backend": "kvm", "placement": "host", "measurement": "startup", "label": "startup",
                 "status": "skipped", "skip_reason": "not run: kvm is not usable here"})
    rf.doc["placements"] = {"nested": {"host": None, "backends": {}, "status": "starting", "started_utc": None,
                                       "finished_utc": None, "guestbench": None,
                                       "level1": {"hypervisor": "tcg", "seconds": None, "error": None}}}
    rf.save()
    rf.finish("complete")
    return rf


def test_a_freshly_written_file_validates_against_the_published_schema(tmp_path: Path) -> None:
    rf = _full_run(tmp_path / "run.json")
    written = json.loads(rf.path.read_text())
    assert written["schema_version"] == 3
    assert schema_errors(written) == []
    assert load_results(rf.path).to_dict() == written  # and the model reads it back unchanged


def test_every_save_is_validated_in_the_tests(tmp_path: Path) -> None:
    """conftest sets GUESTBENCH_VALIDATE_RESULTS=1: a writer that breaks the format fails where it writes."""
    assert os.environ.get(validate.ENV) == "1"
    rf = _full_run(tmp_path / "run.json")
    before = rf.path.read_bytes()
    rf.doc["cells"][0]["samples"].append({"rep": 2, "seconds": -1.0, "utc": "u"})
    with pytest.raises(SchemaViolation, match=r"run\.json: not a valid results document \(schema-v3\.json\): "
                                              r"cells\[0\]\.samples\[1\]\.seconds: -1\.0 is less than the minimum"):
        rf.save()
    assert rf.path.read_bytes() == before  # nothing invalid reached the file
    rf.doc["cells"][0]["samples"][-1]["seconds"] = math.nan  # never written: no reader would take it (issue 46)
    with pytest.raises(ValueError, match=r"Out of range float values are not JSON compliant: nan"):
        rf.save()
    assert rf.path.read_bytes() == before
    rf.doc["cells"][0]["samples"].pop()
    rf.save()


def test_production_saves_do_not_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(validate.ENV)
    rf = _full_run(tmp_path / "run.json")
    rf.doc["cells"][0]["status"] = "whatever"
    rf.save()  # written as the run says; `guestbench show` is where it is refused
    with pytest.raises(UserError, match=r"cells\[0\]\.status: \"whatever\" is not a cell status"):
        load_results(rf.path)


def test_schema_and_model_know_the_same_fields() -> None:
    defs = validate.json_schema()["$defs"]
    pairs = {Cell: defs["cell"], Sample: defs["sample"], Failure: defs["failure"], BackendVerdict: defs["backend"],
             Placement: defs["placement"], Run: validate.json_schema()}
    for cls, schema in pairs.items():
        assert set(cls.FIELDS) == set(schema["properties"]), cls.__name__
        assert set(cls.REQUIRED) == set(schema.get("required", [])), cls.__name__


def test_the_format_document_names_every_field() -> None:
    text = (ROOT / "docs" / "results-format.md").read_text()
    for cls in (Run, Cell, Sample, Failure, BackendVerdict, Placement):
        for name in cls.FIELDS:
            assert f"`{name}`" in text, (cls.__name__, name)
    assert "schema-v3.json" in text and "## History" in text


def test_every_key_the_shipped_and_fresh_runs_wrote_is_in_the_model() -> None:
    """The model and the schema cover what guestbench writes (density, ab, density levels included): no key of a
    results file made by guestbench is left to `extra`."""
    import glob

    seen = 0
    for name in sorted(glob.glob(str(ROOT / "tests/data/**/*.json"), recursive=True)) + \
            sorted(glob.glob(str(ROOT / "results/*.json"))):
        if "hand-edited" in name or "truncated" in name:  # the hostile files: refused elsewhere
            continue
        doc = json.loads(Path(name).read_text())
        if not isinstance(doc, dict) or "cells" not in doc:
            continue
        run = Run.from_dict(doc)
        left = {"run": run.extra, **{f"cell {i}": c.extra for i, c in enumerate(run.cells) if c.extra},
                **{f"density {i}": d.extra for i, d in enumerate(run.density) if d.extra}}
        assert not any(left.values()), f"{name}: keys the model does not know: {left}"
        seen += 1
    assert seen >= 10


@pytest.mark.parametrize("where", ["cells.0.samples.0.seconds", "cells.0.samples.0.metrics.x", "cells.0.bytes",
                                   "cells.0.samples.0.resources.cpu_s"])
def test_an_integer_past_floats_range_is_refused_not_raised(where: str) -> None:
    """A document that did not come through a file's number bound (a snapshot another machine sent) may hold an
    integer no float can hold: refused naming the field, never an OverflowError."""
    doc = _base()
    doc["cells"][0]["samples"][0].setdefault("metrics", {})
    doc["cells"][0]["samples"][0].setdefault("resources", {})
    _set(where, 10**400)(doc)
    with pytest.raises(ModelError) as refused:
        Run.from_dict(doc)
    assert refused.value.key == where.replace(".0.", "[0].").replace(".0", "[0]")
    assert "finite" in refused.value.message or "is not a number >= 0" in refused.value.message
