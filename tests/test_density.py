"""density (issue 16): levels of N appliances launched at once on uml (and tcg in make test-long), where they
stopped and why, and nothing left running, also after SIGINT in the middle of a level."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from helpers.cli import run_scenario_text, start_guestbench, stop_run, write_scenario
from helpers.leaks import hypervisor_processes, wait_no_leftovers

pytestmark = pytest.mark.launch

# cold: false: an appliance's one launch is its sample (each appliance's cold launch before its samples: the SIGINT
# test below, whose levels count them)
TWO_LEVELS = """name: density
backends: [BACKEND]
repetitions: 1
warmup: 0
cold: false
measurements:
  - {measurement: density, max_appliances: 2}
"""


@pytest.mark.timeout(900)
# tcg (two TCG guests at once on two cores: minutes) goes through the same qemu-process accounting as the other
# qemu backends; it runs in make test-long
@pytest.mark.parametrize("backend", ["uml", pytest.param("tcg", marks=pytest.mark.long)])
def test_density_reports_its_levels_where_it_stopped_and_why(backend: str, tmp_path: Path) -> None:
    proc, doc = run_scenario_text(tmp_path, TWO_LEVELS.replace("BACKEND", backend))
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {r["backend"]: r for r in doc["density"]}
    assert set(records) == {backend}
    for backend, rec in records.items():
        levels = [lv["appliances"] for lv in rec["levels"]]
        assert levels in ([1, 2], [1]), rec
        assert rec["stopped"] in ("cap", "slowdown", "memory") and rec["why"], rec
        assert rec["fits"] >= 1 and "fit here at once" in rec["verdict"], rec
        for lv in rec["levels"]:
            # every launch of the level: a sample per appliance (no cold one: cold: false)
            assert lv["launches"] == lv["appliances"] and lv["failures"] == 0, lv
            assert lv["startup_s"]["n"] == lv["appliances"] and lv["cpu_s_per_launch"]["median"] > 0.5, lv
            assert lv["peak_mib_per_appliance"]["median"] > 50 and lv["launches_per_min"] > 0, lv
            assert lv["host_used_peak_mib"] >= lv["host_used_before_mib"], lv
        cells = [c for c in doc["cells"] if c["backend"] == backend]
        assert len(cells) == sum(levels) and all(len(c["samples"]) == 1 for c in cells)
        if len(levels) == 2:  # the two appliances of a level launched together
            assert all(c["samples"][0]["in_step"] is True for c in cells if c["concurrency"] == 2)
    assert f"density: density on {backend}" in proc.stdout and "Verdict:" in proc.stdout
    wait_no_leftovers()


@pytest.mark.timeout(900)
def test_density_with_a_chosen_job_times_the_job_on_every_appliance_of_a_level(tmp_path: Path) -> None:
    """job: upload-no-write: each appliance launches once, then the level's appliances upload 4 MiB together,
    sample by sample; the levels are in the job's seconds and jobs per minute, its cells upload cells."""
    proc, doc = run_scenario_text(tmp_path, """name: djob
backends: [uml]
repetitions: 2
warmup: 0
measurements:
  - {measurement: density, max_appliances: 2, slowdown_pct: 1000, job: upload-no-write, job_size: 4MiB}
""")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = doc["density"]
    assert rec["job"] == "upload-no-write" and rec["timed"].startswith("upload()")
    assert [lv["appliances"] for lv in rec["levels"]] == [1, 2] and rec["stopped"] == "cap", rec
    for lv in rec["levels"]:
        assert "startup_s" not in lv and lv["job_s"]["n"] == 2 * lv["appliances"] and lv["failures"] == 0, lv
        assert lv["jobs"] == 2 * lv["appliances"] and lv["jobs_per_min"] > 0, lv
        assert lv["cpu_s_per_launch"]["median"] > 0 and lv["peak_mib_per_appliance"]["median"] > 50, lv
    cells = doc["cells"]
    assert len(cells) == 3 and all(c["measurement"] == "upload-no-write" and c["params"]["size"] == 4 * 2**20
                                   and c["density_level"] == c["concurrency"] for c in cells), cells
    for c in cells:
        assert c["cold_s"] > 0 and len(c["samples"]) == 2 and all(s["resources"]["cpu_s"] > 0 for s in c["samples"])
    assert all(s["in_step"] is True for c in cells if c["concurrency"] == 2 for s in c["samples"])
    assert "do the upload-no-write job together" in " ".join(proc.stdout.split()) and "jobs/min" in proc.stdout
    assert "density.x2.guest1" not in proc.stdout  # the appliances are in the density table, not listed as cells
    wait_no_leftovers()


@pytest.mark.timeout(600)
def test_sigint_in_the_middle_of_a_level_keeps_the_levels_and_leaves_nothing(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "s.yaml", "name: dsig\nbackends: [uml]\nrepetitions: 1\nwarmup: 0\n"
                        "measurements:\n  - {measurement: density, max_appliances: 4, slowdown_pct: 1000}\n")
    results = tmp_path / "results"
    proc = start_guestbench("scenario", str(sc), "--results", str(results))
    try:
        deadline = time.monotonic() + 400
        while True:  # the 2-appliance level is under way: its cells exist and two hypervisors run
            assert time.monotonic() < deadline and proc.poll() is None, "level 2 never started"
            files = list(results.glob("*.json")) if results.exists() else []
            try:
                doc = json.loads(files[0].read_text()) if files else {}
            except ValueError:
                doc = {}
            if any(c["label"] == "density.x2.guest2" for c in doc.get("cells", [])) \
                    and len(hypervisor_processes()) >= 2:
                break
            time.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
        assert time.monotonic() - t0 < 60
    finally:
        stop_run(proc)
    assert rc != 0
    doc = json.loads(files[0].read_text())
    assert doc["status"] == "interrupted"
    (rec,) = doc["density"]
    assert rec["levels"][0]["appliances"] == 1 and rec["levels"][0]["startup_s"]["n"] == 1  # level 1 kept whole
    assert rec["levels"][0]["launches"] == 2  # its appliance's cold launch and its sample (cold: true, the default)
    assert rec["stopped"] == "interrupted"
    assert len(next(c for c in doc["cells"] if c["label"] == "density.x1.guest1")["samples"]) == 1
    wait_no_leftovers()
