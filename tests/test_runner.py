"""The runner keeps going when a hypervisor hangs or dies: failures are recorded with their reasons."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from rich.console import Console

from guestbench.backends.appliance import APPLIANCES_DIR
from guestbench.backends import BACKENDS
from guestbench.run.runner import RunOptions, exit_status, run_scenario
from guestbench.scenario import parse_scenario

from helpers.cli import start_guestbench, stop_run, write_scenario
from helpers.leaks import hypervisor_processes, processes_mentioning
from helpers.session import session_tmp_path
from helpers.hv import HV, ScriptBackend
from guestbench.results import Run

pytestmark = pytest.mark.launch


@pytest.fixture
def hang_backend(monkeypatch: pytest.MonkeyPatch):
    """A backend whose hypervisor hangs at launch, registered like a real one for this test."""
    backend = ScriptBackend(HV / "hang.sh")
    monkeypatch.setitem(BACKENDS, backend.name, backend)
    return backend


def test_a_hung_launch_skips_the_cell_with_its_reason(hang_backend, tmp_path: Path, no_leftovers) -> None:
    # The probe is a launch too: give it the same short deadline.
    sc = parse_scenario({"name": "hang", "backends": ["hang"], "repetitions": 3, "warmup": 0, "timeout": 6,
                         "measurements": ["startup"]}, "test")
    t0 = time.monotonic()
    rf = run_scenario(sc, RunOptions(results_dir=tmp_path, probe_timeout=6), Console(stderr=True))
    took = time.monotonic() - t0
    doc = json.loads(rf.path.read_text())
    assert doc["status"] == "complete"
    assert doc["backends"]["hang"]["usable"] is False
    assert "did not finish within 6 s" in doc["backends"]["hang"]["reason"]
    assert doc["cells"] == []  # unusable: reported, not measured
    assert exit_status(Run.from_dict(doc)) == 0
    assert took < 6 + 30


def test_a_deferred_probe_that_fails_makes_the_backend_unusable_and_skips_its_other_cells(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_leftovers) -> None:
    """--defer-probe: no probe launch; the first cell's launch fails, so the verdict is that failure and the
    backend's next cell is skipped with it, not launched again."""
    backend = ScriptBackend(HV / "crash.sh")
    monkeypatch.setitem(BACKENDS, backend.name, backend)
    sc = parse_scenario({"name": "deferred", "backends": ["crash"], "repetitions": 1, "warmup": 0, "timeout": 60,
                         "measurements": ["startup", {"measurement": "upload", "size": "1MiB"}]}, "test")
    rf = run_scenario(sc, RunOptions(results_dir=tmp_path, reprobe=True, defer_probe=True), Console(stderr=True))
    doc = json.loads(rf.path.read_text())
    verdict = doc["backends"]["crash"]
    assert verdict["usable"] is False and verdict["details"]["probe"] == "first launch of the run"
    assert "first launch failed" in verdict["reason"] and "simulated hypervisor crash" in verdict["reason"], verdict
    first, second = doc["cells"]
    assert first["failures"] and not first["samples"]
    assert second["status"] == "skipped" and "crash is not usable here" in second["skip_reason"]
    assert not second["failures"] and not second["samples"]  # never launched
    assert doc["status"] == "complete" and exit_status(Run.from_dict(doc)) == 0  # an unusable backend, as with a probe


def _hypervisor_pid(backend: str) -> int | None:
    """The hypervisor process of the run under way: qemu for tcg, the UML kernel's main process for uml."""
    if backend == "tcg":
        found = [p for p in hypervisor_processes() if "qemu-system" in p]
    else:
        # the UML kernel, from this session's appliance (not another session's or a user's UML)
        found = processes_mentioning(f"{session_tmp_path() / 'tmp' / APPLIANCES_DIR}/uml-")
    pids = {int(p.split(":")[0]) for p in found}
    # the root of the tree: pids wrap (pid_max is 32768 here), so the lowest may be one of UML's children
    roots = [pid for pid in pids if _parent(pid) not in pids]
    return min(roots, key=_started) if roots else None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _started(pid: int) -> int:
    """Start time in clock ticks since boot (field 22 of /proc/PID/stat); a process gone sorts last."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 2**63


# tcg (qemu's exit seen by libguestfs, as uml's is) runs in make test-long: a minute of TCG launches
@pytest.mark.parametrize("backend", [pytest.param("tcg", marks=pytest.mark.long), "uml"])
def test_a_hypervisor_killed_mid_sample_is_a_failed_sample_and_the_run_goes_on(backend: str, tmp_path: Path,
                                                                                no_leftovers) -> None:
    sc = write_scenario(tmp_path / "kill.yaml", """
name: kill-mid-run
repetitions: 2
warmup: 0
timeout: 240
measurements:
  - {measurement: upload, size: 48MiB, disk_size: 128MiB}
""")
    results = tmp_path / "results"
    proc = start_guestbench("scenario", str(sc), "--backend", backend, "--results", str(results), "--json")
    killed = None
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and killed is None:
            files = list(results.glob("*.json")) if results.exists() else []
            doc = json.loads(files[0].read_text()) if files else {"cells": []}
            if doc["cells"] and doc["cells"][0]["cold_s"]:  # launched: the samples are under way
                killed = _hypervisor_pid(backend)
                assert killed, "no hypervisor process found"
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.2)
        assert killed, "the appliance never launched"
        out, err = proc.communicate(timeout=600)
    finally:
        stop_run(proc)
    assert proc.returncode == 0, err[-2000:]
    doc = json.loads(next(results.glob("*.json")).read_text())
    cell = doc["cells"][0]
    assert doc["status"] == "complete"
    assert len(cell["failures"]) == 1, cell["failures"]
    failure = cell["failures"][0]
    assert failure["kind"] == "rep" and failure["rep"] == 1
    assert failure["reason"], "the failure says why"
    assert [s["rep"] for s in cell["samples"]] == [2], "the next sample relaunches and succeeds"
    assert cell["verification"]["ok"] is True
    summary = json.loads(out)
    assert summary["rows"][0]["failures"] == 1 and summary["rows"][0]["n"] == 1
