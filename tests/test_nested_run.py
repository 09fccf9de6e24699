"""The host side of placement nested without booting anything: limits, the job handed to the guest, merging.

The level-1 guest itself is exercised for real in tests/test_nested.py; here the pieces whose mistakes
would be silent: a time-out not scaled, a scenario changed on its way into the guest, a merge that loses
host cells or duplicates nested ones.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from guestbench.nested import job as nested_run
from guestbench.run.nested import Merger
from guestbench.scenario import Scenario, load_scenario, parse_scenario

from helpers.nested import guest_doc, host_results
from helpers.paths import ROOT
from guestbench.results import Run, load_results

SCENARIO = """name: n
backends: [uml, tcg]
placement: [host, nested]
repetitions: 3
warmup: 1
timeout: 100
sample_timeout: 200
measurements:
  - startup
  - measurement: upload
    size: 16MiB
"""


@pytest.fixture
def sc(tmp_path: Path) -> Scenario:
    p = tmp_path / "n.yaml"
    p.write_text(SCENARIO)
    return load_scenario(p)


def test_plan_scales_every_time_out_and_bounds_the_whole_run(sc: Scenario) -> None:
    tcg = nested_run.plan(sc, kvm=False, probe_timeout=None)
    assert (tcg.hypervisor, tcg.timeout_scale) == ("tcg", nested_run.TCG_SCALE)
    assert tcg.launch_timeout_s == 100 * tcg.timeout_scale and tcg.sample_timeout_s == 200 * tcg.timeout_scale
    assert tcg.probe_timeout_s == tcg.launch_timeout_s  # a probe is a launch
    # worst case: boot, a probe per backend, then per backend: startup (cold + warm-up + 3) launches,
    # upload (warm-up + 3) launch + timed step
    expected = (nested_run.BOOT_ALLOWANCE_S + 2 * tcg.probe_timeout_s + 2 * 5 * tcg.launch_timeout_s
                + 2 * 4 * (tcg.launch_timeout_s + tcg.sample_timeout_s))
    assert tcg.deadline_s == pytest.approx(expected)
    kvm = nested_run.plan(sc, kvm=True, probe_timeout=30)
    assert (kvm.hypervisor, kvm.timeout_scale, kvm.probe_timeout_s) == ("kvm", nested_run.KVM_SCALE,
                                                                       30 * nested_run.KVM_SCALE)
    assert "×25" in tcg.describe() and "TCG" in tcg.describe() and "2 vCPUs" in tcg.describe()


def test_scenario_keys_override_the_plan(tmp_path: Path) -> None:
    p = tmp_path / "n.yaml"
    p.write_text(SCENARIO + "nested: {timeout_scale: 4, timeout: 1h, vcpus: 1, memory: 3GiB}\n")
    level1 = nested_run.plan(load_scenario(p), kvm=False, probe_timeout=None)
    assert (level1.timeout_scale, level1.deadline_s, level1.vcpus, level1.memory_mib) == (4.0, 3600.0, 1, 3072)
    assert "1 vCPU," in level1.describe()


def test_the_guest_gets_the_same_scenario_on_the_host_placement_with_scaled_time_outs(sc: Scenario) -> None:
    level1 = nested_run.plan(sc, kvm=False, probe_timeout=None)
    files = nested_run.job_files(sc, level1)
    inner = parse_scenario(yaml.safe_load(files["scenario.yaml"]), "inner")  # type: ignore[arg-type]
    assert inner.placements == ("host",)
    assert (inner.timeout, inner.sample_timeout) == (level1.launch_timeout_s, level1.sample_timeout_s)
    assert (inner.measurements, inner.backends, inner.repetitions, inner.warmup) == \
        (sc.measurements, sc.backends, sc.repetitions, sc.warmup)
    job = files["job.sh"].decode()  # type: ignore[union-attr]
    assert "-m guestbench.nested.inside /dev/vde" in job and f"--probe-timeout {level1.probe_timeout_s:.0f}" in job
    assert "--defer-probe" in job  # inside, a backend's first launch is its probe: a UML launch there takes minutes
    # the guest cannot build appliances: the data disk's prebuilt ones, workload variants included
    for var, name in (("GUESTBENCH_UML_APPLIANCE", "uml-appliance"),
                      ("GUESTBENCH_WORKLOAD_APPLIANCE_QEMU", "appliance-workload"),
                      ("GUESTBENCH_WORKLOAD_APPLIANCE_UML", "uml-appliance-workload")):
        assert f"{var}=/guestbench-l1/data/{name}" in job, var
    # an editable install: this source tree goes along and is unpacked where the venv expects it
    with tarfile.open(fileobj=io.BytesIO(files["src.tar"]), mode="r:") as tar:  # type: ignore[arg-type]
        names = tar.getnames()
    assert "guestbench/nested/inside.py" in names  # with its byte-code where the host has it (spares the guest)
    assert f"tar -xf /guestbench-l1/in/src.tar -C {ROOT}" in job


def test_merge_replaces_nested_cells_keeps_host_cells_and_saves(sc: Scenario, tmp_path: Path) -> None:
    rf = host_results(tmp_path)
    merger = Merger(rf, nested_run.plan(sc, False, None), "abc")
    assert json.loads(rf.path.read_text())["placements"]["nested"]["status"] == "starting"
    merger.take_bytes(json.dumps(guest_doc(1)).encode())
    merger.take_bytes(json.dumps(guest_doc(2)).encode())  # a newer snapshot replaces, never duplicates
    merger.take_bytes(b"{half a file")  # ignored
    saved = json.loads(rf.path.read_text())
    assert [(c["placement"], len(c["samples"])) for c in saved["cells"]] == [("host", 1), ("nested", 2)]
    nested = saved["placements"]["nested"]
    assert nested["host"] == {"cpu_model": "QEMU TCG CPU"} and nested["status"] == "running"
    assert nested["level1"]["image"] == "abc" and nested["level1"]["hypervisor"] == "tcg"
    # cold + warm-up + 2 of 3 samples of the one startup cell inside
    assert merger.progress(dataclasses.replace(sc, repetitions=3, warmup=1)) == (4, 5)
    assert nested_run.exit_problem(Run.from_dict(saved)) is None
    merger.finish(12.0, "the level-1 guest said nothing for 600 s")
    saved = json.loads(rf.path.read_text())
    assert saved["placements"]["nested"]["status"] == "failed"
    assert nested_run.exit_problem(Run.from_dict(saved)) == "the level-1 guest said nothing for 600 s"


@pytest.mark.parametrize("damage, refusal", [
    (lambda d: d["cells"][0]["samples"][0].update(seconds=-1.0), "cells[0].samples[0].seconds: -1.0 is negative"),
    (lambda d: d["cells"][0].update(status="owned"), "cells[0].status: \"owned\" is not a cell status"),
    (lambda d: d.update(backends={"uml": "yes"}), "backends.uml: \"yes\" is not an object"),
    (lambda d: d.pop("schema"), "schema: missing"),
])
def test_a_snapshot_no_run_writes_is_refused_and_the_file_stays_readable(sc: Scenario, tmp_path: Path,
                                                                         damage: Any, refusal: str) -> None:
    """What the level-1 guest (or a fleet host) sends back is not trusted: a document the model refuses is not
    merged, so this run's file stays one every reader accepts, and the refusal says what was wrong."""
    rf = host_results(tmp_path)
    merger = Merger(rf, nested_run.plan(sc, False, None), "abc")
    assert merger.take(guest_doc(1))
    bad = guest_doc(2)
    damage(bad)
    assert not merger.take(bad)
    assert merger.refused is not None and merger.refused.startswith(refusal), merger.refused
    run = load_results(rf.path)  # still readable, with the last snapshot that was a results document
    assert [(c.placement, len(c.samples)) for c in run.cells] == [("host", 1), ("nested", 1)]
    assert run.placements["nested"].backends["uml"].usable is True


def test_an_interrupted_level1_run_says_so(sc: Scenario, tmp_path: Path) -> None:
    rf = host_results(tmp_path)
    merger = Merger(rf, nested_run.plan(sc, False, None), "abc")
    merger.take(guest_doc(1))
    merger.finish(30.0, "interrupted by a signal", interrupted=True)
    nested = json.loads(rf.path.read_text())["placements"]["nested"]
    assert nested["status"] == "interrupted" and nested["level1"]["seconds"] == 30.0


def test_guest_results_reads_the_output_disk_copy(tmp_path: Path) -> None:
    assert nested_run.guest_results(tmp_path) is None
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "20261122T000000Z-n.json").write_text(json.dumps(guest_doc(3, "complete")))
    doc = nested_run.guest_results(tmp_path)
    assert doc is not None and doc["status"] == "complete"
    # what the guest wrote is not trusted: a newer name that is a FIFO, or a file past the size cap, is passed over
    # (not waited on, not read whole)
    os.mkfifo(tmp_path / "results" / "20261122T000001Z-fifo.json")
    with open(tmp_path / "results" / "20261122T000002Z-big.json", "wb") as f:
        f.truncate(2**40)
    assert nested_run.guest_results(tmp_path) == doc
