"""`guestbench history` on a real series (issue 34, must-hold 1): six runs of a tcg scenario (start-up and
upload-no-write), runs 4 to 6 through a hypervisor program that waits a fixed delay before it execs the backend's
qemu when it boots an appliance (a wait, as tests/test_compare_runs.py's, so it takes no core from the tests
beside it). History must name run 4 as the start of a start-up step of about the delay, with a CI; raise nothing
for upload-no-write (its launch is not timed); exit 1 with --fail-on-regression; and 0 on runs 1 to 3 alone.
Marked long (make test-long): six tcg runs take 7 minutes alone here, more beside the suite's other tests.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from helpers.cli import guestbench, write_scenario
from guestbench.backends import BACKENDS
from guestbench.host.paths import cache_dir

pytestmark = [pytest.mark.launch, pytest.mark.long]  # 7 minutes alone here: make test-long

SCENARIO = """
name: history-real
backends: [tcg]
repetitions: 1
warmup: 0
timeout: 300
measurements:
  - {{measurement: startup, label: startup{env}}}
  - {{measurement: upload-no-write, label: upload-no-write, size: 16MiB{env}}}
"""


def slower_tcg(tmp: Path, delay: float) -> Path:
    """The tcg backend's qemu program, `delay` s later when it boots an appliance (-kernel); libguestfs's queries
    of qemu (-help, -version, QMP) are answered at once."""
    qemu = BACKENDS["tcg"].handle_config(cache_dir()).hv
    path = tmp / "slower-qemu"
    path.write_text(f'#!/bin/sh\ncase " $* " in *" -kernel "*) sleep {delay:.1f};; esac\nexec {qemu} "$@"\n')
    path.chmod(0o755)
    return path


def run(scenario: Path, results: Path) -> Path:
    before = set(results.glob("*.json")) if results.is_dir() else set()
    proc = guestbench("scenario", str(scenario), "--results", str(results))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (made,) = set(results.glob("*.json")) - before
    return made


def test_history_names_the_run_where_a_slower_hypervisor_came_in(tmp_path: Path, no_leftovers) -> None:
    results = tmp_path / "results"
    plain = write_scenario(tmp_path / "plain.yaml", SCENARIO.format(env=""))
    first = [run(plain, results) for _ in range(3)]
    startup = statistics.median(json.loads(p.read_text())["cells"][0]["samples"][0]["seconds"] for p in first)
    delay = max(10.0, round(startup))  # about twice as slow whatever the day
    env = f", env: {{LIBGUESTFS_HV: {slower_tcg(tmp_path, delay)}}}"
    slow = write_scenario(tmp_path / "slow.yaml", SCENARIO.format(env=env))
    for _ in range(3):
        run(slow, results)

    proc = guestbench("history", str(results), "--json", "--fail-on-regression")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    series = {s["key"]: s for s in doc["series"]}
    startup_series = series["tcg/host/startup"]
    assert [p["run"] for p in startup_series["points"]] == list(range(6))
    (step,) = startup_series["steps"]
    assert step["run"] == 3 and step["change"] == "regression", step  # the fourth run
    low, high = step["diff_ci"]
    assert 0 < low < high and 0.5 * delay < step["diff"] < 1.5 * delay, (step, delay)
    assert startup_series["newest"] == "regression"
    quiet = series["tcg/host/upload-no-write"]
    assert quiet["steps"] == [] and quiet["drift"] is None and quiet["newest"] is None, quiet
    assert len(doc["regressions"]) == 1 and "since run 4" in doc["regressions"][0]
    text = guestbench("history", str(results))
    assert text.returncode == 0 and "regression at run 4" in " ".join(text.stdout.split()), text.stdout

    alone = guestbench("history", *map(str, first), "--fail-on-regression")
    assert alone.returncode == 0, alone.stdout + alone.stderr
