"""Live snapshots (guestbench.nested.live) and the guest-side runner (guestbench.nested.inside).

The snapshot disk is how samples taken inside the level-1 guest survive its destruction; a torn read
must never hand the host half a results file. The guest-side runner is run here on the host for real
(a uml start-up scenario): it is the same program the guest runs, and the snapshots it writes must end
equal to the results file it leaves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from guestbench.nested import live

from helpers.paths import ROOT


def _disk(tmp_path: Path) -> Path:
    path = tmp_path / "live.raw"
    with open(path, "wb") as f:
        f.truncate(live.DISK_SIZE)
    return path


def test_empty_disk_has_no_snapshot(tmp_path: Path) -> None:
    assert live.read(_disk(tmp_path)) is None
    assert live.read(tmp_path / "missing.raw") is None


def test_round_trip_and_rewrite(tmp_path: Path) -> None:
    disk = _disk(tmp_path)
    live.write(disk, 1, b'{"a": 1, "long": "' + b"x" * 100_000 + b'"}')
    first = live.read(disk)
    assert first is not None and first.seq == 1 and json.loads(first.content)["a"] == 1
    live.write(disk, 2, b'{"a": 2}')  # shorter than the first: the length, not the old bytes, decides
    second = live.read(disk)
    assert second == live.Snapshot(2, b'{"a": 2}')


def test_a_torn_write_is_not_read(tmp_path: Path) -> None:
    """Content rewritten but header not yet: the checksum no longer matches, so no snapshot at all."""
    disk = _disk(tmp_path)
    live.write(disk, 1, b'{"samples": [1, 2, 3]}')
    fd = os.open(disk, os.O_WRONLY)
    try:
        os.pwrite(fd, b'{"samples": [1, 2, 9]}', live.HEADER_SIZE)
    finally:
        os.close(fd)
    assert live.read(disk) is None


def test_a_damaged_header_is_not_read(tmp_path: Path) -> None:
    disk = _disk(tmp_path)
    live.write(disk, 1, b"{}")
    fd = os.open(disk, os.O_WRONLY)
    try:
        os.pwrite(fd, b"GBLIVE1 1 999999999999 00\n", 0)
    finally:
        os.close(fd)
    assert live.read(disk) is None


def test_too_big_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        live.write(_disk(tmp_path), 1, b"x" * live.DISK_SIZE)


@pytest.mark.launch
def test_inside_runner_streams_the_results_file(tmp_path: Path) -> None:
    """The guest-side program, run here: a real uml start-up; the last snapshot is the final results file."""
    disk = _disk(tmp_path)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: inside\nbackends: [uml]\nrepetitions: 1\nwarmup: 0\ntimeout: 120\n"
                        "measurements: [startup]\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "guestbench.nested.inside", str(disk), str(out), "--",
                           str(scenario), "--csv"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("backend,placement,measurement")  # the child's report on stdout
    files = list(out.glob("*.json"))
    assert len(files) == 1
    snap = live.read(disk)
    assert snap is not None and snap.content == files[0].read_bytes()
    assert snap.seq >= 3  # several snapshots: it streamed while the run went on, not only at the end
    doc = json.loads(snap.content)
    assert doc["status"] == "complete" and len(doc["cells"][0]["samples"]) == 1


def test_inside_runner_usage() -> None:
    proc = subprocess.run([sys.executable, "-m", "guestbench.nested.inside", "x"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr
