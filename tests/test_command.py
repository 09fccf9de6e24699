"""The `command` measurement: libguestfs's own programs timed per backend by `guestbench scenario`, for real on
uml (the same program on tcg through `guestbench exec`: tests/test_exec.py, whose environment is the same
HandleConfig.process_environment); a command that hangs is killed at the sample deadline with everything it started."""

from __future__ import annotations

from pathlib import Path

import pytest

from guestbench.measurements import MEASUREMENTS

from helpers.cli import guestbench, run_scenario_text, write_scenario
from helpers.leaks import socket_dirs, wait_no_leftovers

VIRT_LS = """name: command-e2e
backends: [uml]
repetitions: 1
warmup: 0
measurements:
  - {measurement: command, label: ls, argv: "virt-ls -a {image} -l /srv/data", readonly: true,
     expect: file00002.txt, files: 3, disk_size: 32MiB}
"""
HANG = """name: command-hang
backends: [uml]
repetitions: 1
warmup: 0
sample_timeout: 12
measurements:
  - measurement: command
    label: hang
    guestfish: |
      run
      debug sh "sleep 900"
"""


@pytest.mark.launch
@pytest.mark.timeout(900)
def test_virt_ls_is_timed_on_uml_and_reported_like_any_measurement(tmp_path: Path) -> None:
    proc, doc = run_scenario_text(tmp_path, VIRT_LS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {c["backend"]: c for c in doc["cells"]}
    assert set(cells) == {"uml"}
    for backend, c in cells.items():
        assert c["status"] == "done" and len(c["samples"]) == 1 and not c["failures"], (backend, c)
        assert c["samples"][0]["seconds"] > 1.0  # a launch, an inspection and a listing: never instant
        assert c["verification"]["ok"] is True  # the read-only image kept every byte
        assert "Debian 12 tree" in c["stack"]["description"]
        assert c["timed"] == MEASUREMENTS["command"].timed
    assert "ls" in proc.stdout and "uml" in proc.stdout  # the table
    assert "wall time of the command" in proc.stdout


@pytest.mark.launch
@pytest.mark.timeout(600)
def test_a_command_that_hangs_is_killed_at_the_deadline_and_leaves_nothing(tmp_path: Path) -> None:
    """With --defer-probe, too: a command's failures are no verdict, so the backend is probed before it runs."""
    before = socket_dirs()
    proc, doc = run_scenario_text(tmp_path, HANG, "--defer-probe", "--reprobe", timeout=600)
    (c,) = doc["cells"]
    assert c["samples"] == [] and len(c["failures"]) == 1, c  # that a run goes on after one: test_runner
    assert all("12" in f["reason"] and "sample" in f["reason"] for f in c["failures"]), c["failures"]
    assert proc.returncode != 0
    verdict = doc["backends"]["uml"]
    assert verdict["usable"] is True and "probe_timeout_s" in verdict["details"], verdict  # a probe launch's
    assert "deferred" not in verdict["details"] and "first launch" not in verdict["reason"], verdict
    wait_no_leftovers(before)


@pytest.mark.parametrize("item, problem", [
    ("{measurement: command, argv: [virt-ls], guestfish: run}", "give exactly one of argv and guestfish"),
    ("{measurement: command}", "give exactly one of argv and guestfish"),
    ("{measurement: command, argv: [no-such-program-here, x]}", "no-such-program-here is not on this host's PATH"),
    ("{measurement: command, argv: []}", "allowed: a non-empty list"),
    ("{measurement: command, argv: 'virt-ls \"unclosed'}", "cannot be split into words"),
    ("{measurement: command, guestfish: [run]}", "allowed: a string"),
    ("{measurement: command, argv: [virt-ls], filesystem: xfs}", "allowed: ext2, ext3, ext4"),
])
def test_a_bad_command_item_is_one_line_and_exit_2(tmp_path: Path, item: str, problem: str) -> None:
    sc = write_scenario(tmp_path / "bad.yaml", f"name: bad\nbackends: [uml]\nmeasurements:\n  - {item}\n")
    proc = guestbench("scenario", str(sc), "--results", str(tmp_path / "r"), timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert problem in proc.stderr and "measurements[0]" in proc.stderr, proc.stderr
