"""api-suite (E1's fifth row) for real on uml: several hundred API calls of ten kinds in one launch, each kind
timed, the calls counted; and the seed scenario's keys are valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from guestbench.measurements.api_suite import KINDS
from guestbench.scenario import load_scenario

from helpers.cli import run_scenario_text
from helpers.leaks import socket_dirs, wait_no_leftovers
from helpers.paths import ROOT

SMALL = """name: api-suite-small
backends: [uml]
repetitions: 1
warmup: 0
measurements:
  - {measurement: api-suite, files: 10}
"""


@pytest.mark.launch
@pytest.mark.timeout(900)
def test_api_suite_on_uml_times_every_kind_and_counts_its_calls(tmp_path: Path) -> None:
    before = socket_dirs()
    proc, doc = run_scenario_text(tmp_path, SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (cell,) = doc["cells"]
    assert cell["status"] == "done" and len(cell["samples"]) == 1 and not cell["failures"], cell
    assert cell["cache_mode"] == "unsafe"
    (sample,) = cell["samples"]
    got = sample["metrics"]
    kinds = [got[f"{kind}_s"] for kind in KINDS]
    assert all(k > 0 for k in kinds), got
    # the kinds are the sample: their sum is the timed wall time, less only the loop around them
    assert 0.9 * sample["seconds"] <= sum(kinds) <= sample["seconds"], (sum(kinds), sample["seconds"])
    assert got["calls"] >= 300, got  # several hundred calls, counted as they were made
    assert "seconds in the partitions calls" in proc.stdout and "unsafe" in proc.stdout
    wait_no_leftovers(before)


def test_the_seed_scenario_loads_with_host_and_nested_placements() -> None:
    sc = load_scenario(str(ROOT / "scenarios" / "seeds" / "api-suite.yaml"))
    assert sc.placements == ("host", "nested") and [m.measurement for m in sc.measurements] == ["api-suite"]
