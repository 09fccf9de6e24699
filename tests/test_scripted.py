"""The run's pipeline through the scripted executor (helpers.scripted): the gate and deferred probes,
blocks and their turns, precision stops, power-cut trials and a signal mid-block — the real runner, recorder,
turnstile and results file, with a script in place of the workers, so nothing is launched (make check).

Each path also has an end-to-end test with real appliances: the gate (test_runner, test_faults), turns and
precision (test_order), power cuts (test_durability in test_workload_run's tcg cells), signals (test_signals).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from guestbench.measurements import durability
from guestbench.results import load_results
from guestbench.execute.protocol import Request
from guestbench.run.runner import RunOptions, run_scenario
from helpers.scripted import ScriptedExecutor, Cue
from guestbench.scenario import parse_scenario
from guestbench.util.errors import Interrupted


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scripted probes' verdicts stay in this test's cache: a real run must never read them."""
    monkeypatch.setenv("GUESTBENCH_CACHE", str(tmp_path / "cache"))


def _run(tmp_path: Path, scenario: dict[str, Any], script: Any, **opts: Any) -> tuple[dict[str, Any], ScriptedExecutor]:
    ex = ScriptedExecutor(script)
    sc = parse_scenario({"name": "s", "backends": ["tcg"], "warmup": 0, **scenario}, "s.yaml")
    rf = run_scenario(sc, RunOptions(results_dir=tmp_path / "results", reprobe=True, **opts),
                      Console(stderr=True, quiet=True), executor=ex)
    return load_results(str(rf.path)).to_dict(), ex


def _probe_or(seconds: Any) -> Any:
    """A script whose probes launch in 1 s, whose cold launches take 5 s and whose cells' n-th samples come from
    `seconds(cache, n)`."""
    counts: Counter[tuple[str, str]] = Counter()

    def script(backend: str, req: Request, i: int) -> Cue:
        if "probe-" in req.workdir:
            return Cue(seconds=1.0)
        if req.iterations[i] == "cold":  # a start-up's first launch: reported, never sampled
            return Cue(seconds=5.0)
        cache = str(req.params.get("cache"))
        counts[(backend, cache)] += 1
        return seconds(cache, counts[(backend, cache)])
    return script


def test_cells_of_a_block_take_turns_and_each_stops_at_its_target_or_its_cap(tmp_path: Path) -> None:
    steady = [2.0, 2.01, 1.99, 2.0, 2.0, 2.01]
    noisy = [1.0, 3.0, 0.5, 4.0, 1.5, 3.5, 0.7, 2.9]
    doc, ex = _run(tmp_path, {"repetitions": 3, "precision": "2%", "max_repetitions": 8,
                              "measurements": [{"measurement": "startup",
                                                "matrix": {"cache": ["writeback", "unsafe"]}}]},
                   _probe_or(lambda cache, n: Cue(seconds=(steady if cache == "writeback" else noisy)[n - 1])))
    assert doc["status"] == "complete"
    cells = {c["params"]["cache"]: c for c in doc["cells"]}
    assert [s["seconds"] for s in cells["writeback"]["samples"]] == steady[:3]
    assert cells["writeback"]["precision"]["stopped"] == "target"
    assert [s["seconds"] for s in cells["unsafe"]["samples"]] == noisy
    assert cells["unsafe"]["precision"]["stopped"] == "cap"
    seqs = sorted((s["seq"], c) for c, cell in cells.items() for s in cell["samples"])
    assert [c for _, c in seqs[:6]] == ["writeback", "unsafe"] * 3, "round by round, in the block's order"
    assert [c for _, c in seqs[6:]] == ["unsafe"] * 5, "the stopped cell leaves the rounds"
    cold = [r for b, r in ex.requests if "probe-" not in r.workdir]
    assert len(cold) == 2 and all(r.turn for r in cold), "one worker per cell, kept between turns"


def test_a_failed_probe_leaves_the_backend_unusable_and_its_cells_unmeasured(tmp_path: Path) -> None:
    def script(backend: str, req: Request, i: int) -> Cue:
        return Cue(fail="could not create appliance: qemu exited (scripted)")
    doc, ex = _run(tmp_path, {"repetitions": 2, "measurements": ["startup"]}, script)
    assert doc["backends"]["tcg"]["usable"] is False
    assert "qemu exited (scripted)" in doc["backends"]["tcg"]["reason"]
    assert [c["status"] for c in doc["cells"]] in ([], ["unavailable"], ["skipped"])
    assert len(ex.requests) == 1, "the probe only"


def test_a_deferred_probe_decided_by_the_first_launch_skips_the_backends_other_cells(tmp_path: Path) -> None:
    def script(backend: str, req: Request, i: int) -> Cue:
        return Cue(hang="launch")
    doc, _ = _run(tmp_path, {"repetitions": 2, "measurements": ["startup", {"measurement": "upload", "size": "1MiB"}]},
                  script, defer_probe=True)
    assert doc["backends"]["tcg"]["usable"] is False
    statuses = [c["status"] for c in doc["cells"]]
    assert statuses[0] == "skipped" and all(s == "skipped" for s in statuses)
    assert "did not finish within" in doc["cells"][0]["failures"][0]["reason"]


def test_a_density_item_on_a_backend_its_first_launch_refused_is_passed_over_and_the_run_ends(tmp_path: Path) -> None:
    """A density item's planned cell is only its levels' template: refused, it is not recorded (review of issue 49's
    writer: recording its skip once stopped the run with a KeyError)."""
    def script(backend: str, req: Request, i: int) -> Cue:
        return Cue(hang="launch")
    doc, _ = _run(tmp_path, {"repetitions": 1, "measurements": ["startup", {"measurement": "density",
                                                                             "max_appliances": 2}]},
                  script, defer_probe=True)
    assert doc["status"] == "complete" and doc["backends"]["tcg"]["usable"] is False
    assert [c["measurement"] for c in doc["cells"]] == ["startup"] and not doc.get("density")


def test_a_worker_that_dies_mid_cell_is_replaced_and_the_iteration_fails(tmp_path: Path) -> None:
    calls = Counter()

    def script(backend: str, req: Request, i: int) -> Cue:
        if "probe-" in req.workdir:
            return Cue(seconds=1.0)
        calls["n"] += 1
        return Cue(crash="segfault (scripted)") if calls["n"] == 2 else Cue(seconds=0.5)
    doc, ex = _run(tmp_path, {"repetitions": 3, "measurements": [{"measurement": "upload", "size": "1MiB"}]}, script)
    cell = doc["cells"][0]
    assert len(cell["samples"]) == 2 and len(cell["failures"]) == 1
    assert "segfault (scripted)" in cell["failures"][0]["reason"]
    assert len([r for _, r in ex.requests if "probe-" not in r.workdir]) == 2, "a new worker for the rest"


def test_power_cut_trials_are_cut_on_the_workers_word_and_judged_from_the_image(tmp_path: Path) -> None:
    def script(backend: str, req: Request, i: int) -> Cue:
        if "probe-" in req.workdir:
            return Cue(seconds=1.0)
        return Cue(seconds=0.2, metrics={"write_s": 0.1}, powercut=True)  # nothing written: the data is lost
    doc, ex = _run(tmp_path, {"repetitions": 2, "measurements": [{"measurement": "durability", "cache": "unsafe"}]},
                   script)
    cell = doc["cells"][0]
    assert cell["status"] == "done", cell
    assert [s["metrics"]["verdict"] for s in cell["samples"]] == ["lost", "lost"]
    assert len([r for _, r in ex.requests if "probe-" not in r.workdir]) == 2, "one worker per trial"


def test_each_power_cut_is_judged_from_what_reached_the_disk_honoured_lost_or_partial(tmp_path: Path) -> None:
    # The script writes the trial's pattern to its volatile drive (the nbdfuse file over nbdkit's writeback cache)
    # as the guest's dd would: all of it fsynced (honoured), none (lost: the cache dies with the power), half
    # (partial). Like a hypervisor, it holds the file open through the power cut: a close would flush it.
    plans = iter([1.0, 0.0, 0.5])  # the share of the pattern fsynced before the rest is written
    held: list[int] = []

    def script(backend: str, req: Request, i: int) -> Cue:
        if "probe-" in req.workdir:
            return Cue(seconds=1.0)
        while held:
            with contextlib.suppress(OSError):  # the last trial's file: its server killed, its mount gone
                os.close(held.pop())
        want = durability.pattern(req.params["token"], req.params["size"])
        synced = int(len(want) * next(plans))
        held.append(fd := os.open(req.drives[0]["filename"], os.O_WRONLY))
        if synced:
            assert os.pwrite(fd, want[:synced], durability.OFFSET) == synced
            os.fsync(fd)
        assert os.pwrite(fd, want[synced:], durability.OFFSET + synced) == len(want) - synced
        return Cue(seconds=0.2, metrics={"write_s": 0.1}, powercut=True)
    try:
        doc, _ = _run(tmp_path, {"repetitions": 3,
                                 "measurements": [{"measurement": "durability", "cache": "writeback"}]}, script)
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)
    (cell,) = doc["cells"]
    assert [s["metrics"]["verdict"] for s in cell["samples"]] == ["honoured", "lost", "partial"], cell
    flushes = [s["metrics"]["host_flushes"] for s in cell["samples"]]
    assert flushes[0] >= 1 and flushes[1] == 0 and flushes[2] >= 1, flushes  # counted by nbdkit's log filter
    assert cell["disk"] == "file" and cell["status"] == "done"


def test_a_signal_mid_block_stops_every_cell_and_keeps_what_was_sampled(tmp_path: Path) -> None:
    sent = threading.Event()

    def interrupt() -> None:
        if not sent.is_set():
            sent.set()
            os.kill(os.getpid(), signal.SIGINT)

    def seconds(cache: str, n: int) -> Cue:
        return Cue(seconds=1.0, then=interrupt if (cache, n) == ("unsafe", 2) else None)
    with pytest.raises(Interrupted):
        _run(tmp_path, {"repetitions": 5, "measurements": [{"measurement": "startup",
                                                            "matrix": {"cache": ["writeback", "unsafe"]}}]},
             _probe_or(seconds))
    doc = json.loads(next((tmp_path / "results").glob("*.json")).read_text())
    assert doc["status"] == "interrupted"
    kept = {c["params"]["cache"]: len(c["samples"]) for c in doc["cells"]}
    assert kept["unsafe"] == 2 and kept["writeback"] in (2, 3), kept
    assert all(c["status"] in ("interrupted", "done") for c in doc["cells"])
    assert not list(Path(os.environ["GUESTBENCH_TMPDIR"]).glob("guestbench-run-*")), "the run directory is removed"


def test_figures_no_sample_can_hold_are_recorded_as_a_failure_and_the_file_stays_readable(tmp_path: Path) -> None:
    """A worker's figure the results model would refuse (a NaN from a tool's output) never enters the file: that
    iteration is a failure saying why, and every reader still accepts the file."""
    doc, _ = _run(tmp_path, {"repetitions": 3, "measurements": ["startup"]},
                  _probe_or(lambda cache, n: Cue(seconds=2.0, metrics={"x": float("nan")} if n == 2 else None)))
    (cell,) = doc["cells"]
    assert [s["rep"] for s in cell["samples"]] == [1, 3]
    (failure,) = cell["failures"]
    assert failure["rep"] == 2 and failure["reason"] == (
        "its figures cannot be recorded as a sample: metrics.x: NaN is not finite; allowed: a finite number or a "
        "string")
    assert sorted([*(s["seq"] for s in cell["samples"]), failure["seq"]]) == [1, 2, 3]  # its place kept
