"""The suite's small soak: 8 UML launches and 7 verified uploads under the leak watch
(guestbench.leaks). The guestbench process and its workers gain no fd or thread, and the host keeps no temp entry,
loop device, libvirt domain or hypervisor process. `make soak` is the long one (scenarios/soak.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guestbench.leaks import soak

from conftest import write_scenario

pytestmark = pytest.mark.launch


def test_a_small_soak_leaks_nothing_and_fails_nothing(tmp_path: Path) -> None:
    sc = write_scenario(tmp_path / "soak.yaml", """
name: small-soak
backends: [uml]
repetitions: 7
warmup: 0
timeout: 300
measurements:
  - startup
  - {measurement: upload, size: 16MiB, disk_size: 128MiB, filesystem: ext2, verify: every}
""")
    g = soak(sc, tmp_path / "results", warmup=1, window=3)  # 7 readings a cell: 1 + 3 + 3
    log = (tmp_path / "results" / "soak.log").read_text()
    assert g.exit_status == 0 and g.failures == 0, log[-3000:]
    assert g.launches == 8 and g.samples == 14, g
    assert g.runner and g.worker, f"too few readings to judge growth: {g}"
    assert g.problems() == [], (g.problems(), g)
