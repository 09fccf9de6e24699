"""Ctrl-C or SIGTERM mid-run: prompt exit, every sample kept, no hypervisor, domain or temp dir left."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guestbench.backends.libvirt import connect_error, guestfs_domains

from conftest import ROOT, hypervisor_processes, run_dirs, socket_dirs, wait_no_leftovers, write_scenario

pytestmark = pytest.mark.launch


def _samples(path: Path) -> int:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    return sum(len(c["samples"]) for c in doc["cells"])


def interrupt_mid_run(tmp_path: Path, backend: str, sig: int) -> tuple[int, float, dict]:
    sc = write_scenario(tmp_path / "s.yaml", "name: sig\nrepetitions: 20\nwarmup: 0\nmeasurements: [startup]\n")
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "guestbench", "scenario", str(sc), "--backend", backend,
                             "--results", str(results)], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 400
        path = None
        while time.monotonic() < deadline:
            files = list(results.glob("*.json")) if results.exists() else []
            if files and _samples(files[0]) >= 1:
                path = files[0]
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        assert path is not None, "no sample within 400 s"
        time.sleep(3)  # now in the middle of the next launch
        assert hypervisor_processes(), "a launch should be under way"
        t0 = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
        return rc, time.monotonic() - t0, json.loads(path.read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def check_interrupted(doc: dict) -> None:
    assert doc["status"] == "interrupted"
    assert doc["finished_utc"]
    cell = doc["cells"][0]
    assert len(cell["samples"]) >= 1, "samples taken before the signal are kept"
    assert cell["status"] == "interrupted"
    assert all(s["seconds"] > 0 for s in cell["samples"])


def test_sigint_direct_tcg(tmp_path: Path) -> None:
    sockdirs = socket_dirs()
    rc, took, doc = interrupt_mid_run(tmp_path, "tcg", signal.SIGINT)
    assert rc == 128 + signal.SIGINT
    assert took < 15, f"took {took:.1f} s to stop"
    check_interrupted(doc)
    wait_no_leftovers(sockdirs)


def test_sigterm_libvirt_tcg(tmp_path: Path) -> None:
    if connect_error() is not None:
        from guestbench.backends.libvirt import ensure_daemons

        if (why := ensure_daemons()) is not None:
            pytest.fail(f"libvirt is part of the set-up and must work here: {why}")
    before = guestfs_domains()
    sockdirs = socket_dirs()
    rc, took, doc = interrupt_mid_run(tmp_path, "libvirt-tcg", signal.SIGTERM)
    assert rc == 128 + signal.SIGTERM
    assert took < 20, f"took {took:.1f} s to stop"
    check_interrupted(doc)
    assert guestfs_domains() - before == set(), "a libvirt domain was left behind"
    wait_no_leftovers(sockdirs)
    assert run_dirs() == []
