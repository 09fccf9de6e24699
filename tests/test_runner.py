"""The runner keeps going when a hypervisor hangs or dies: failures are recorded with their reasons."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from guestbench.appliance import APPLIANCES_DIR
from guestbench.backends import BACKENDS
from guestbench.runner import RunOptions, exit_status, run_scenario
from guestbench.scenario import parse_scenario

from conftest import ROOT, hypervisor_processes, processes_mentioning, write_scenario
from test_supervisor import HV, ScriptBackend

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
    assert exit_status(doc) == 0
    assert took < 6 + 30


def _hypervisor_pid(backend: str) -> int | None:
    """The hypervisor process of the run under way: qemu for tcg, the UML kernel's main process for uml."""
    if backend == "tcg":
        found = [p for p in hypervisor_processes() if "qemu-system" in p]
    else:
        found = processes_mentioning(f"{APPLIANCES_DIR}/uml-")  # the UML kernel, from its appliance
    pids = sorted(int(p.split(":")[0]) for p in found)
    return pids[0] if pids else None


@pytest.mark.parametrize("backend", ["tcg", "uml"])
def test_a_hypervisor_killed_mid_sample_is_a_failed_sample_and_the_run_goes_on(backend: str, tmp_path: Path,
                                                                                no_leftovers) -> None:
    sc = write_scenario(tmp_path / "kill.yaml", """
name: kill-mid-run
repetitions: 3
warmup: 0
timeout: 240
measurements:
  - {measurement: upload, size: 48MiB, disk_size: 128MiB}
""")
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "guestbench", "scenario", str(sc), "--backend", backend,
                             "--results", str(results), "--json"], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]
    doc = json.loads(next(results.glob("*.json")).read_text())
    cell = doc["cells"][0]
    assert doc["status"] == "complete"
    assert len(cell["failures"]) == 1, cell["failures"]
    failure = cell["failures"][0]
    assert failure["kind"] == "rep" and failure["rep"] == 1
    assert failure["reason"], "the failure says why"
    assert [s["rep"] for s in cell["samples"]] == [2, 3], "later samples relaunch and succeed"
    assert cell["verification"]["ok"] is True
    summary = json.loads(out)
    assert summary["rows"][0]["failures"] == 1 and summary["rows"][0]["n"] == 2
