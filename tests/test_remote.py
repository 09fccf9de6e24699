"""One way to merge a run that ran elsewhere (guestbench.execute.remote): the level-1 guest of a nested placement and
a fleet host's share merge their snapshots and count their progress alike."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guestbench.nested import job
from guestbench.results import SCHEMA, SCHEMA_VERSION, FleetHost, Placement, ResultsFile, limits, load_results
from guestbench.run.fleet.coordinator import HOST_FIELDS
from guestbench.run.nested import Merger
from guestbench.execute.remote import KEPT_BELOW, Remote
from guestbench.scenario import parse_scenario

SC = parse_scenario({"name": "s", "repetitions": 3, "warmup": 1, "measurements": ["startup", "upload"]}, "s.yaml")


def _remote_doc(samples: int) -> dict[str, Any]:
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "status": "running", "host": {"cpu_model": "elsewhere"},
            "backends": {"uml": {"usable": True}},
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
    nested_rf.set_placement("nested", Placement())  # each remote run's record, where its fields go
    fleet_rf.add_hosts({"beta": FleetHost()})
    nested = Remote(nested_rf, ("placement", "nested"), ("host", "status"))
    fleet = Remote(fleet_rf, ("host", "beta"), ("host", "status"))
    for samples in (1, 2):  # a newer snapshot replaces the last one, never adds to it
        assert nested.take(_remote_doc(samples)) and fleet.take(_remote_doc(samples))
    assert not nested.take_bytes(b'{"cells": [half a file')
    # startup: cold + warm-up + 2 of 3 samples = 4 of 5; upload unavailable: its 4 iterations count as ended
    assert nested.progress(SC) == fleet.progress(SC) == (8, 9)
    saved = json.loads(nested_rf.path.read_text())
    assert [(c.get("placement"), len(c["samples"])) for c in saved["cells"]] == [("host", 1), ("nested", 2),
                                                                                  ("nested", 0)]
    kept = {"host": {"cpu_model": "elsewhere"}, "status": "running"}
    assert json.loads(nested_rf.path.read_text())["placements"]["nested"] == kept
    assert json.loads(fleet_rf.path.read_text())["hosts"]["beta"] == kept
    assert [c.get("host") for c in json.loads(fleet_rf.path.read_text())["cells"]] == [None, "beta", "beta"]


def test_a_written_off_run_takes_no_late_snapshot(tmp_path: Path) -> None:
    rf = _file(tmp_path, "f.json")
    rf.add_hosts({"beta": FleetHost.laid_out(status="lost")})
    assert not Remote(rf, ("host", "beta"), ("status",)).take(_remote_doc(3))
    saved = json.loads(rf.path.read_text())
    assert len(saved["cells"]) == 1 and saved["hosts"]["beta"] == {"status": "lost"}


# ---- issue 46: a document nested ~988 deep crashed the run (nested) or every later save (fleet)


def _deep(levels: int) -> dict[str, Any]:
    """A results document that nests `levels` deep (itself counted): its host fingerprint holds the depth, as a
    hostile guest or host would send it. Built without recursion; a JSON text of it by _text."""
    value: Any = []
    for _ in range(levels - 3):  # document, host, "deep", then the lists
        value = [value]
    doc = _remote_doc(2)
    doc["host"] = {"cpu_model": "deep", "deep": value}
    return doc


def _text(levels: int) -> bytes:
    doc = _remote_doc(2)
    doc["host"] = {"cpu_model": "deep", "deep": 12345}
    return json.dumps(doc).replace("12345", "[" * (levels - 2) + "]" * (levels - 2)).encode()


def _remotes(tmp_path: Path) -> dict[str, Remote]:
    """The nested placement's Merger and a fleet host's share, each over its own results file."""
    fleet_rf = _file(tmp_path, "f.json")
    fleet_rf.doc["hosts"] = {"beta": {"address": None, "resources": {}, "status": "starting"}}  # as the coordinator
    return {"nested": Merger(_file(tmp_path, "n.json"), job.plan(SC, False, None), "image"),
            "fleet": Remote(fleet_rf, ("host", "beta"), HOST_FIELDS)}


def _on_a_fresh_stack(call: Callable[[], Any]) -> Any:
    """`call` in a thread of its own: its stack as shallow as a run's own loop (pytest's is a hundred frames deep),
    so that what a run would parse is parsed here too."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = call()
        except BaseException as e:  # handed to the test, RecursionError included
            out["error"] = e

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("kind", ["nested", "fleet"])
def test_a_snapshot_nested_988_deep_is_refused_and_every_later_save_works(tmp_path: Path, kind: str) -> None:
    """Old code parsed it, merged it two levels further down, and the save's encoder raised RecursionError."""
    remote = _remotes(tmp_path)[kind]
    assert remote.take(_remote_doc(1))
    assert _on_a_fresh_stack(lambda: remote.take_bytes(_text(988))) is False
    assert _on_a_fresh_stack(lambda: remote.take(_deep(988))) is False  # a final document, handed over parsed
    assert remote.refused == f"arrays and objects nested more than {limits.MAX_DEPTH - KEPT_BELOW} levels deep; " \
                             f"allowed: at most {limits.MAX_DEPTH - KEPT_BELOW}"
    remote.results.finish("failed")  # what a run does next: saved, and readable
    run = load_results(remote.results.path)
    assert run.status == "failed" and [len(c.samples) for c in run.cells] == [1, 1, 0]  # the last good snapshot
    assert remote.take(_remote_doc(3))  # and a later snapshot is merged as ever


def test_a_level1_results_file_nested_988_deep_is_no_results_file(tmp_path: Path) -> None:
    """The nested run's final document is the results file on the guest's output disk, read as untrusted JSON."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "20261122T000000Z-n.json").write_bytes(_text(988))
    assert _on_a_fresh_stack(lambda: job.guest_results(tmp_path)) is None


@pytest.mark.parametrize("kind", ["nested", "fleet"])
def test_a_document_is_merged_only_when_the_file_it_joins_stays_readable(tmp_path: Path, kind: str) -> None:
    """MAX_DEPTH leaves room for the levels the merge adds: a document of MAX_DEPTH - KEPT_BELOW levels is merged
    and the file read back; one level more is refused, and the file stays as it was."""
    remote = _remotes(tmp_path)[kind]
    most = limits.MAX_DEPTH - KEPT_BELOW
    assert remote.take_bytes(_text(most)) and remote.take(_deep(most))
    assert limits.deepest(remote.results.doc) == limits.MAX_DEPTH
    assert [len(c.samples) for c in load_results(remote.results.path).cells] == [1, 2, 0]  # read back, bounded
    assert not remote.take_bytes(_text(most + 1)) and not remote.take(_deep(most + 1))
    assert "nested more than 62 levels deep" in str(remote.refused)
    assert limits.deepest(json.loads(remote.results.path.read_text())) == limits.MAX_DEPTH


def test_a_document_a_python_peer_made_cyclic_or_shared_is_measured_at_once() -> None:
    """A fleet host's or guest's document that arrives as Python objects may hold a container twice: a cycle kept
    the depth walk going for ever, 40 levels of [x, x] for 2**40 steps (issue 46). A cycle is endless; a shared
    container is as deep as its JSON would be, found in one visit each."""
    cyclic: dict = {"cells": []}
    cyclic["self"] = {"back": [cyclic]}
    assert limits.deepest(cyclic) == math.inf
    shared: list = []
    for _ in range(40):
        shared = [shared, shared]
    assert limits.deepest({"cells": [], "x": shared}) == 42
    twice = {"a": 1}
    assert limits.deepest({"p": twice, "q": [twice]}) == 3  # a dict shared at two depths: the deeper counts
    assert limits.deepest(json.loads(json.dumps({"cells": [[1], [2]], "a": {"b": [3]}}))) == 3
