"""One way to merge a run that ran elsewhere (guestbench.run.remote): the level-1 guest of a nested placement and
a fleet host's share merge their snapshots and count their progress alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from guestbench.results import SCHEMA, SCHEMA_VERSION, ResultsFile
from guestbench.run.remote import Remote
from guestbench.scenario import parse_scenario

SC = parse_scenario({"name": "s", "repetitions": 3, "warmup": 1, "measurements": ["startup", "upload"]}, "s.yaml")


def _remote_doc(samples: int) -> dict[str, Any]:
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "status": "running", "host": {"cpu_model": "elsewhere"}, "backends": {"uml": {"usable": True}},
            "cells": [{"backend": "uml", "placement": "host", "measurement": "startup", "label": "startup",
                       "cold_s": 9.0, "samples": [{"rep": i + 1, "seconds": 5.0} for i in range(samples)],
                       "warmups": [{"rep": 1, "seconds": 5.5}], "failures": [], "status": "running"},
                      {"backend": "tcg", "placement": "host", "measurement": "upload", "label": "upload",
                       "samples": [], "warmups": [], "failures": [], "status": "unavailable"}]}


def _file(tmp_path: Path, name: str) -> ResultsFile:
    rf = ResultsFile.create(tmp_path / name, scenario={}, host={"cpu_model": "here"}, command=[], guestbench={})
    rf.add_cell({"backend": "uml", "placement": "host", "measurement": "startup", "label": "startup",
                 "samples": [{"rep": 1, "seconds": 6.0}]})
    return rf


def test_nested_and_fleet_merge_a_snapshot_and_count_its_progress_alike(tmp_path: Path) -> None:
    nested_rf, fleet_rf = _file(tmp_path, "n.json"), _file(tmp_path, "f.json")
    nested = Remote(nested_rf, {}, ("placement", "nested"), ("host", "status"))
    fleet = Remote(fleet_rf, {}, ("host", "beta"), ("host", "status"))
    for samples in (1, 2):  # a newer snapshot replaces the last one, never adds to it
        assert nested.take(_remote_doc(samples)) and fleet.take(_remote_doc(samples))
    assert not nested.take_bytes(b'{"cells": [half a file')
    # startup: cold + warm-up + 2 of 3 samples = 4 of 5; upload unavailable: its 4 iterations count as ended
    assert nested.progress(SC) == fleet.progress(SC) == (8, 9)
    saved = json.loads(nested_rf.path.read_text())
    assert [(c.get("placement"), len(c["samples"])) for c in saved["cells"]] == [("host", 1), ("nested", 2),
                                                                                  ("nested", 0)]
    assert nested.info == fleet.info == {"host": {"cpu_model": "elsewhere"}, "status": "running"}
    assert [c.get("host") for c in json.loads(fleet_rf.path.read_text())["cells"]] == [None, "beta", "beta"]


def test_a_written_off_run_takes_no_late_snapshot(tmp_path: Path) -> None:
    rf = _file(tmp_path, "f.json")
    info = {"status": "lost"}
    assert not Remote(rf, info, ("host", "beta"), ("status",)).take(_remote_doc(3))
    assert len(json.loads(rf.path.read_text())["cells"]) == 1 and info == {"status": "lost"}
