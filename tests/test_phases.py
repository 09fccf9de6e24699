"""Boot phases: replayed real launch logs (chunk by chunk, as libguestfs delivered them), damaged logs, and
real start-up runs with --phases on tcg and uml whose phases must sum to the start-up within 1%.

The logs in tests/data/phases were captured on this machine from real verbose launches (libguestfs 1.48,
qemu 7.2 TCG through the direct and the libvirt backend, qemu 7.2 KVM inside the level-1 guest
(tools/capture_launch_log.py, run there), and UML 6.1), one event callback per line: arrival time, source, repr of the
chunk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guestbench.analysis import phases
from guestbench.instruments import markers

from helpers.cli import guestbench, write_scenario
from helpers.phases import LOGS, check_printed_phase_tables, replay
from guestbench.results import Cell, Sample


def names(cut: list[dict]) -> list[str]:
    return [p["name"] for p in cut]


def every_phase(name: str, family: str) -> dict[str, float]:
    """Split a captured launch: every phase of its family, none negative, summing to the start-up."""
    lines, total = replay(name)
    cut = markers.split(lines, total, family)
    assert names(cut) == [p.name for p in markers.MARKERS[family]]
    assert sum(p["s"] for p in cut) == pytest.approx(total, rel=1e-12)
    assert all(p["s"] >= 0 for p in cut)
    return {p["name"]: p["s"] for p in cut}


def test_qemu_launch_has_every_phase_and_they_sum_to_the_start_up() -> None:
    by = every_phase("tcg-verbose-launch.log", "qemu")
    # SeaBIOS cleared the screen without a newline and the kernel's first line came 3 s later on the same
    # line: the kernel phase must start when that text arrived, not when the line began.
    assert by["kernel load, early boot"] > 2.0 and by["kernel init"] > 0.5
    assert by["firmware"] < 0.5


def test_libvirt_launch_has_every_qemu_phase() -> None:
    by = every_phase("libvirt-tcg-verbose-launch.log", "qemu")
    assert by["hypervisor start"] > 0.1  # libvirt creates the domain


def test_kvm_launch_has_every_qemu_phase() -> None:
    """A real KVM launch: the kvm backend inside the level-1 guest (KVM on the guest's emulated AMD-V)."""
    raw = (LOGS / "kvm-verbose-launch.log").read_text()
    assert "-machine accel=kvm" in raw and "accel=tcg" not in raw  # qemu really ran with KVM
    by = every_phase("kvm-verbose-launch.log", "qemu")
    # the guest kernel's own work dominates there, as every guest instruction's exits go through an emulated CPU
    assert by["kernel init"] > by["hypervisor start"] and by["kernel init"] > by["firmware"]


def test_uml_launch_has_its_own_markers() -> None:
    assert "firmware" not in every_phase("uml-verbose-launch.log", "uml")


def test_missing_markers_merge_into_the_phase_before() -> None:
    lines, total = replay("tcg-verbose-launch.log", keep=lambda t: "aBIOS" not in t and "udevadm trigger" not in t)
    cut = markers.split(lines, total, "qemu")
    assert "firmware" not in names(cut) and "udev" not in names(cut)
    assert "kernel init" in names(cut) and "LVM/MD probing" in names(cut)
    assert sum(p["s"] for p in cut) == pytest.approx(total, rel=1e-12)


def test_wrong_family_or_no_markers_never_crash_and_still_sum() -> None:
    lines, total = replay("uml-verbose-launch.log")
    cut = markers.split(lines, total, "qemu")  # qemu's firmware and loader markers are absent in a UML boot
    assert sum(p["s"] for p in cut) == pytest.approx(total, rel=1e-12)
    assert markers.split([], 3.5, "uml") == [{"name": "library set-up", "s": 3.5}]


def test_markers_after_the_end_or_out_of_order_are_ignored() -> None:
    lines = [markers.Line(2.0, "appliance", "Starting /init script ..."),
             markers.Line(1.0, "appliance", "+ udevadm trigger"),  # earlier than the boundary before it
             markers.Line(9.0, "libguestfs", "recv_from_daemon: received GUESTFS_LAUNCH_FLAG")]  # after the end
    cut = markers.split(lines, 5.0, "qemu")
    assert cut == [{"name": "library set-up", "s": 2.0}, {"name": "/init set-up", "s": 3.0}]


def test_line_clock_times_each_part_of_a_line() -> None:
    clock = markers.LineClock()
    assert clock.feed(1.0, "appliance", "Booting from ") == []
    assert clock.feed(1.5, "appliance", "ROM..\x1bc") == []
    [line] = clock.feed(4.0, "appliance", "Linux version 6\r\nnext")
    assert line.text == "Booting from ROM..\x1bcLinux version 6"
    assert line.t == 1.0
    assert line.time_at(line.text.index("ROM")) == 1.5
    assert line.time_at(line.text.index("Linux")) == 4.0
    [rest] = clock.flush()
    assert rest.text == "next" and rest.t == 4.0
    # sources are assembled apart: a library message does not end a console line
    clock.feed(5.0, "appliance", "half ")
    assert [ln.text for ln in clock.feed(5.1, "libguestfs", "msg\n")] == ["msg"]
    assert [ln.text for ln in clock.feed(5.2, "appliance", "line\n")] == ["half line"]


def test_summary_of_a_cell() -> None:
    cell = Cell.from_dict({"backend": "tcg", "label": "startup", "placement": "host", "cache_mode": "writeback",
                           "samples": [
        {"rep": 1, "seconds": 10.0, "phases": [{"name": "library set-up", "s": 1.0}, {"name": "udev", "s": 9.0}]},
        {"rep": 2, "seconds": 12.0, "phases": [{"name": "library set-up", "s": 2.0}, {"name": "kernel init", "s": 4.0},
                                               {"name": "udev", "s": 6.0}]},
        {"rep": 3, "seconds": 11.0}]})  # a sample without phases (e.g. an older file) is left out
    bp = phases.cell_phases(cell, cell.samples)
    assert bp is not None and bp.n == 2 and bp.median_total == 11.0
    assert bp.phases["kernel init"].median == 2.0 and bp.phases["kernel init"].seen == 1
    assert bp.phases["udev"].low == 6.0 and bp.phases["udev"].high == 9.0
    assert sum(p.share for p in bp.phases.values()) == pytest.approx(1.0)
    assert bp.host_side_share == pytest.approx(1.5 / bp.sum_of_medians)
    assert bp.max_sum_error == 0.0
    assert phases.cell_phases(cell, [Sample(rep=1, seconds=1.0)]) is None


def test_phase_order_merges_the_families() -> None:
    qemu = phases.BackendPhases("tcg", "host", 1, {n: None for n in ("firmware", "kernel init", "udev")}, 1, 0)  # type: ignore[misc]
    uml = phases.BackendPhases("uml", "host", 1, {n: None for n in ("kernel early boot", "udev")}, 1, 0)  # type: ignore[misc]
    order = phases.phase_order([qemu, uml])
    assert order.index("kernel early boot") < order.index("kernel init") < order.index("udev")


@pytest.mark.launch
def test_startup_with_phases_on_uml_sums_within_one_percent(tmp_path: Path, no_leftovers) -> None:
    """UML's boot markers; qemu's, on a real TCG boot: tests/test_run_tcg.py (one launch serves both there)."""
    sc = write_scenario(tmp_path / "phases.yaml", """
name: phases
repetitions: 1
warmup: 0
cold: false
timeout: 240
measurements: [startup]
""")
    proc = guestbench("scenario", str(sc), "--backend", "uml", "--phases", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(next(tmp_path.glob("*-phases.json")).read_text())
    assert [c["backend"] for c in doc["cells"]] == ["uml"]
    for cell in doc["cells"]:
        assert cell["phases"] is True and cell["phase_markers"] == "uml"
        assert len(cell["samples"]) == 1
        for s in cell["samples"]:
            assert abs(sum(p["s"] for p in s["phases"]) - s["seconds"]) <= 0.01 * s["seconds"]
            # every marker of the family was found: a real boot prints them all
            assert names(s["phases"]) == [p.name for p in markers.MARKERS[cell["phase_markers"]]], s["phases"]
    check_printed_phase_tables(doc, proc.stdout)


@pytest.mark.parametrize("ps4", ["+ ", "/init: "])  # bash's default; libguestfs 1.60's appliance (sid) sets PS4
def test_the_appliances_trace_lines_are_markers_whatever_its_ps4(ps4: str) -> None:
    lines = [markers.Line(1.0, "appliance", "Checking that seccomp filters can be installed...OK"),  # UML 7.2
             markers.Line(2.0, "appliance", "Starting /init script ..."),
             markers.Line(3.0, "appliance", f"{ps4}udevadm trigger"),
             markers.Line(4.0, "appliance", f"{ps4}cmd=guestfsd"),  # not the daemon's start
             markers.Line(5.0, "appliance", f"{ps4}mdadm -As --auto=yes --no-degraded"),
             markers.Line(6.0, "appliance", f"{ps4}guestfsd --channel /dev/virtio-ports/x --verbose"),
             markers.Line(7.0, "libguestfs", "recv_from_daemon: received GUESTFS_LAUNCH_FLAG")]
    cut = {p["name"]: p["s"] for p in markers.split(lines, 8.0, "uml")}
    assert cut["library set-up"] == 1.0 and "kernel early boot" in cut  # UML's seccomp-mode check starts it
    assert cut["udev"] == 2.0 and cut["LVM/MD probing"] == 1.0
    assert cut["daemon start"] == 1.0 and cut["first request"] == 1.0
