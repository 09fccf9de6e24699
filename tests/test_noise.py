"""The busy-host check and the noise fingerprint (issue 15): what else the machine did during each sample."""

from __future__ import annotations

import os
import subprocess
import time
import sys
from pathlib import Path

import pytest

from guestbench.analysis.findings import analyze
from guestbench.output.tables import timing as timing_table
from guestbench.instruments import load as noise
from guestbench.instruments import usage
from guestbench.host import tuning

from helpers.cli import run_scenario_text
from helpers.results import run_of

HOG = [sys.executable, "-c", "while True: pass"]


def reading(at: float, busy: int, steal: int, ours: int) -> noise._Reading:
    return noise._Reading(at, busy, steal, ours)


def test_other_processes_above_half_a_core_make_a_sample_busy() -> None:
    ticks = round(1 / noise.TICK_S)  # ticks in one second of one CPU
    quiet = noise.judge(reading(0, 0, 0, 0), reading(2, 2 * ticks, 0, 2 * ticks), 0.5, 2)  # all the work was ours
    assert quiet["busy"] is False and quiet["other_cores"] == 0
    hogged = noise.judge(reading(0, 0, 0, 0), reading(2, 4 * ticks, 0, ticks), 2.0, 2)  # 1.5 cores not ours
    assert hogged["busy"] is True and hogged["other_cores"] == pytest.approx(1.5)
    stolen = noise.judge(reading(0, 0, 0, 0), reading(1, 0, ticks // 2, 0), 0.1, 2)  # a quarter of 2 CPUs stolen
    assert stolen["busy"] is True and stolen["steal"] == pytest.approx(0.25)
    short = noise.judge(reading(0, 0, 0, 0), reading(0.2, ticks, 0, 0), 0.1, 2)
    assert "busy" not in short  # too few clock ticks to judge


def test_our_tree_counts_the_cpu_of_children_alive_and_reaped() -> None:
    before = usage.ticks(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.process_time()\n"
                              "while time.process_time() - t < 0.6: pass"])
    child.wait(30)  # reaped by us: its time moves to our cutime
    after = usage.ticks(os.getpid())
    assert (after - before) * noise.TICK_S >= 0.4


def test_the_fingerprint_says_what_makes_figures_move() -> None:
    s = tuning.settings()
    assert isinstance(s.get("other_guestbench_runs"), int)
    if Path("/sys/kernel/mm/transparent_hugepage/enabled").exists():
        assert s["transparent_hugepages"] in ("always", "madvise", "never")
    if Path("/sys/devices/system/cpu/vulnerabilities").is_dir():
        assert sum(s["mitigations"].values()) == len(list(Path("/sys/devices/system/cpu/vulnerabilities").iterdir()))


def test_the_report_marks_busy_cells_and_says_quiet_ones_were_judged() -> None:
    def cell(backend: str, busy: list[bool]) -> dict:
        return {"backend": backend, "label": "startup", "measurement": "startup", "placement": "host",
                "status": "done", "failures": [],
                "samples": [{"rep": i + 1, "seconds": 5.0 + i / 10, "load": {"other_cores": 1.2 if b else 0.01,
                                                                            "steal": 0.0, "busy": b}}
                            for i, b in enumerate(busy)]}
    doc = {"cells": [cell("uml", [False, True, True]), cell("tcg", [False, False, False])]}
    rows = analyze(run_of(doc)).rows
    assert "Host BUSY during 2 of 6 judged timed steps: uml (host) 2 of 3, other processes up to 1.2 cores" \
        in timing_table.caption(rows)
    assert any("uml: the host was busy during 2 of 3 samples" in w for w in analyze(run_of(doc)).warnings)
    quiet = run_of({"cells": [cell("tcg", [False, False])]})
    assert "Host quiet during all 2 judged timed steps" in timing_table.caption(analyze(quiet).rows)
    assert not any("busy" in w for w in analyze(quiet).warnings)
    # a sample may say it was busy without how busy (the model allows it): "?" cores, not a traceback
    for s in doc["cells"][0]["samples"]:
        s["load"].pop("other_cores")
    unsaid = analyze(run_of(doc))
    assert "uml (host) 2 of 3, other processes up to ? cores" in timing_table.caption(unsaid.rows)
    assert any("(other processes up to ? cores)" in w for w in unsaid.warnings)


# One launch, and a sample long enough to be judged (MIN_JUDGED_S; 1.2 s on a quiet day): the busy check is the
# same for every measurement's timed step, and both tests run alone, where every second is the suite's wall time
BUSY = """name: busy
backends: [uml]
repetitions: 1
warmup: 0
timeout: 240
measurements: [{measurement: upload-no-write, size: 64MiB}]
"""


@pytest.mark.alone  # its two hogs take both cores: another worker's deadlines are not theirs to test
@pytest.mark.launch
@pytest.mark.timeout(600)
def test_a_run_next_to_cpu_hogs_is_flagged_busy(tmp_path: Path, no_leftovers) -> None:
    """Holds on any machine: two hogs on two cores leave the sample well under a core whatever else runs."""
    hogs = [subprocess.Popen(HOG) for _ in range(2)]
    try:
        proc_b, hogged = run_scenario_text(tmp_path, BUSY)
    finally:
        for h in hogs:
            h.kill()
            h.wait(10)
    assert proc_b.returncode == 0, proc_b.stderr[-3000:]
    loads = [s["load"] for s in hogged["cells"][0]["samples"]]
    # two hogs on two cores share them with the launch: other processes get well over the half-core rule
    assert all(ld["busy"] is True and ld["other_cores"] > noise.BUSY_OTHER_CORES for ld in loads), loads
    printed = " ".join((proc_b.stdout + proc_b.stderr).split())  # rich wraps long lines
    assert "the host was busy during 1 of 1 samples" in printed and "Host BUSY during 1 of 1" in printed


@pytest.mark.alone  # it needs the machine to itself: make test runs it before the workers start
@pytest.mark.launch
@pytest.mark.timeout(600)
def test_the_same_run_alone_is_not_flagged(tmp_path: Path, no_leftovers) -> None:
    """Needs a quiet machine: the test measures the rest of the machine around its run itself (everything outside
    this test's process tree) and skips, saying so, when others used too much CPU to judge it."""
    around = noise.LoadMeter()
    around.start()
    proc, quiet = run_scenario_text(tmp_path, BUSY)
    others = around.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    if others is None:
        pytest.skip("the machine's CPU counters could not be read: a quiet run cannot be judged")
    if others["other_cores"] > noise.BUSY_OTHER_CORES / 2:
        pytest.skip(f"the machine is too busy to judge a quiet run: other processes used {others['other_cores']:.2f} "
                    "cores beside it")
    loads = [s["load"] for s in quiet["cells"][0]["samples"]]
    assert all(ld["busy"] is False for ld in loads), loads
    printed = " ".join((proc.stdout + proc.stderr).split())
    assert "was busy" not in printed and "Host quiet during all 1 judged timed steps" in printed


def test_a_process_naming_the_cells_work_dir_counts_as_ours_though_not_our_child(tmp_path: Path) -> None:
    """A libvirt domain's qemu or a disk's NBD server is not the worker's child; it names the cell's work dir."""
    marker = str(tmp_path / "cell-workdir")
    code = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.8: pass"
    # started through a shell that exits at once: the busy process is reparented, no longer in our tree
    subprocess.run(["sh", "-c", f'{sys.executable} -c "{code}" {marker} >/dev/null 2>&1 &'], check=True)
    mine_before, ours_before = usage.ticks(os.getpid()), usage.ticks(os.getpid(), marker)
    deadline = time.monotonic() + 10
    while usage.ticks(os.getpid(), marker) - ours_before < 0.4 / noise.TICK_S:
        assert time.monotonic() < deadline, "the marked process never ran"
    assert usage.ticks(os.getpid()) - mine_before < 0.3 / noise.TICK_S  # not in our tree
