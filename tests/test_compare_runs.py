"""`guestbench compare` on two real runs: a baseline, then the same start-ups through a hypervisor program that
waits as long as a baseline start-up before it starts UML (as a slower update of the hypervisor would; issue 34
makes its series the same way; a wait, not CPU hogs, so the test does not take the cores of the tests beside
it). The comparison must print the ratio and exit 1 past --fail-above, and 0 when the threshold holds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import guestbench, write_scenario

pytestmark = pytest.mark.launch

SCENARIO = """
name: startup-uml
backends: [uml]
repetitions: 1
warmup: 0
cold: false
timeout: 240
measurements: [{{measurement: startup, label: startup{env}}}]
"""


def slower_uml(tmp: Path, delay: float) -> Path:
    """guestbench's UML hypervisor program (backends/uml write_hv_wrapper), `delay` s later when it boots
    (-kernel): every launch of these runs is a sample (cold: false); libguestfs's queries of the program (-help,
    -version, QMP) are answered at once."""
    path = tmp / "slower-uml"
    path.write_text(f'#!/bin/sh\ncase " $* " in *" -kernel "*) sleep {delay:.1f};; esac\n'
                    f'exec {sys.executable} -m guestbench.backends.uml.hv "$@"\n')
    path.chmod(0o755)
    return path


def run(tmp: Path, scenario: Path, name: str) -> Path:
    out = tmp / name
    proc = guestbench("scenario", str(scenario), "--results", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = out.glob("*.json")
    return path


def test_compare_two_real_runs_exits_1_past_the_threshold(tmp_path: Path, no_leftovers) -> None:
    base = run(tmp_path, write_scenario(tmp_path / "base.yaml", SCENARIO.format(env="")), "base")
    # as long again as the baseline's start-up took (5 s on a quiet day, 20 s beside a busy worker): about twice
    # as slow whatever the day; a wait, so it burns no CPU
    hv = slower_uml(tmp_path, max(3.0, float(np.median([s["seconds"] for s in
                                                       json.loads(base.read_text())["cells"][0]["samples"]]))))
    slow = run(tmp_path, write_scenario(tmp_path / "slow.yaml", SCENARIO.format(env=f", env: {{LIBGUESTFS_HV: {hv}}}")),
               "slow")

    proc = guestbench("compare", str(base), str(slow), "--fail-above", "10%", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)
    # seconds, and beside them what the launches used (CPU s, peak MiB), compared like seconds
    [row] = [r for c in summary["comparisons"] for r in c["rows"] if r["figure"] == "seconds"]
    assert {r["figure"] for c in summary["comparisons"] for r in c["rows"]} == {"seconds", "CPU s", "peak MiB"}
    assert row["backend"] == "uml" and row["measurement"] == "startup"
    assert row["ratio"] > 1.1 and row["regression"] is True
    medians = [float(np.median([s["seconds"] for s in json.loads(p.read_text())["cells"][0]["samples"]]))
               for p in (base, slow)]
    assert row["ratio"] == pytest.approx(medians[1] / medians[0], rel=1e-9)

    text = guestbench("compare", str(base), str(slow), "--fail-above", "10%")
    assert text.returncode == 1 and f"{row['ratio']:.2f}" in text.stdout, text.stdout
    # the same pair under a threshold it does not exceed, and the other way round (an improvement)
    assert guestbench("compare", str(base), str(slow), "--fail-above", f"{(row['ratio'] - 1) * 100 + 50:.0f}%"
                      ).returncode == 0
    # CPU s and peak MiB are compared but gate only on request (the wait burns no CPU: either run may use more);
    # the exit status follows the gated rows exactly
    back = guestbench("compare", str(slow), str(base), "--fail-above", "10%", "--json")
    assert back.returncode == 0, back.stdout + back.stderr
    rows = {r["figure"]: r for c in json.loads(back.stdout)["comparisons"] for r in c["rows"]}
    assert rows["seconds"]["verdict"] != "slower" and rows["seconds"]["regression"] is False
    assert not rows["CPU s"]["gated"] and not rows["peak MiB"]["gated"]
    gated = guestbench("compare", str(slow), str(base), "--fail-above", "10%", "--gate-resources", "--json")
    worse = [k for k in ("CPU s", "peak MiB") if rows[k]["median_other_s"] > 1.1 * rows[k]["median_base_s"]]
    assert gated.returncode == (1 if worse else 0), gated.stdout + gated.stderr
    assert [r["figure"] for c in json.loads(gated.stdout)["comparisons"] for r in c["rows"] if r["regression"]] == worse

