"""Backend properties live on the backend: every registered one sets them, and shared code reads them there.

No launch: these check the registry (guestbench.backends, guestbench.backends.appliance.FLAVOURS) and the places that
read it (charts, the storage workloads' host drives).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from guestbench.instruments import markers
from guestbench.backends import appliance
from guestbench.output import charts
from guestbench.analysis.findings import analyze
from guestbench.backends import BACKENDS, Backend
from guestbench.measurements import get as get_measurement
from guestbench.storage import backing
from guestbench.results import Run

RESULTS = Path(__file__).parent / "data" / "results" / "20261121T211449Z-startup.json"
# What was true before the properties moved onto the backends (the old per-name tables and string tests).
BEFORE = {  # name: (colour, probe time-out, opens NBD, volatile disk as a file, phase markers, appliance flavour)
    "tcg": ("#4c72b0", 240.0, True, True, "qemu", "qemu"),
    "kvm": ("#dd8452", 60.0, True, True, "qemu", "qemu"),
    "libvirt-tcg": ("#55a868", 240.0, True, False, "qemu", "qemu"),
    "libvirt-kvm": ("#c44e52", 60.0, True, False, "qemu", "qemu"),
    "uml": ("#8172b3", 240.0, False, True, "uml", "uml"),
}


@pytest.mark.parametrize("name", list(BACKENDS))
def test_every_backend_sets_its_properties_with_sane_types(name: str) -> None:
    b = BACKENDS[name]
    assert isinstance(b, Backend) and b.name == name and b.summary
    assert isinstance(b.colour, str) and re.fullmatch(r"#[0-9a-f]{6}", b.colour), b.colour
    assert isinstance(b.probe_timeout_s, float) and math.isfinite(b.probe_timeout_s) and b.probe_timeout_s > 0
    assert isinstance(b.opens_nbd, bool) and isinstance(b.volatile_disk_as_file, bool)
    assert b.opens_nbd or b.volatile_disk_as_file, "the volatile disk must reach it one way or the other"
    assert b.phase_markers in markers.MARKERS and b.appliance_flavour in appliance.FLAVOURS


def test_properties_are_what_the_old_tables_said() -> None:
    now = {n: (b.colour, b.probe_timeout_s, b.opens_nbd, b.volatile_disk_as_file, b.phase_markers, b.appliance_flavour)
           for n, b in BACKENDS.items()}
    assert now == BEFORE


def test_each_backend_has_its_own_colour_and_none_is_the_fallback() -> None:
    colours = [b.colour for b in BACKENDS.values()]
    assert len(set(colours)) == len(colours) and charts.OTHER_COLOUR not in colours


def test_charts_take_the_colour_from_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BACKENDS["uml"], "colour", "#0a0b0c")
    assert charts.backend_colour("uml") == "#0a0b0c"
    assert charts.backend_colour("no-such-backend") == charts.OTHER_COLOUR  # an old file's retired backend
    doc = json.loads(RESULTS.read_text())
    doc["cells"][0]["backend"] = "no-such-backend"
    measured = charts.document_charts(analyze(Run.from_dict(doc))).measured
    svg = b"".join(c.svg for c in measured.values()).decode()
    assert "#0a0b0c" in svg and charts.OTHER_COLOUR in svg and BEFORE["uml"][0] not in svg


class _Storage:
    """Records how host_drives asks for each disk, instead of making it."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def add(self, kind: str, name: str, size: int, **kw: Any) -> backing.Drive:
        self.asked.append({"kind": kind, **kw})
        return backing.Drive(filename=f"/nowhere/{name}", format="raw", describe=name)


@pytest.mark.parametrize("name", list(BACKENDS))
@pytest.mark.parametrize("kind", backing.HOST_KINDS)
def test_host_drives_hand_nbd_as_a_file_only_to_a_backend_that_cannot_open_nbd(
        monkeypatch: pytest.MonkeyPatch, name: str, kind: str) -> None:
    monkeypatch.setattr(backing, "availability", lambda *args, **kw: None)  # not this host's tools
    m = get_measurement("fio")
    params = {p.name: p.default for p in m.params} | {"host": kind}
    storage = _Storage()
    drives = m.host_drives(storage, params, opens_nbd=BACKENDS[name].opens_nbd)
    old_rule = kind in backing.NBD_KINDS and BACKENDS[name].appliance_flavour == "uml"  # before: a name test
    assert drives and [a["as_file"] for a in storage.asked] == [old_rule] * len(drives)


def test_appliance_flavours_are_a_registry_with_the_same_prebuilt_variables() -> None:
    assert list(appliance.FLAVOURS) == ["qemu", "uml"]
    assert all(f.name == n for n, f in appliance.FLAVOURS.items())
    assert appliance.PREBUILT_ENV == {("uml", "standard"): "GUESTBENCH_UML_APPLIANCE",
                                      ("qemu", "workload"): "GUESTBENCH_WORKLOAD_APPLIANCE_QEMU",
                                      ("uml", "workload"): "GUESTBENCH_WORKLOAD_APPLIANCE_UML"}
    with pytest.raises(ValueError, match=r"flavours \('qemu', 'uml'\)"):
        appliance.inputs("kvm")


def test_uml_flavour_adds_its_init_and_points_supermin_at_its_kernel(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    appliance.FLAVOURS["uml"].prepare(tmp_path, {"kernel": {"version": "6.1.0-9-uml"}}, env)
    assert (tmp_path / "guestbench-uml.tar.gz").stat().st_size > 0
    assert env == {"SUPERMIN_KERNEL": str(appliance.UML_KERNEL), "SUPERMIN_KERNEL_VERSION": "6.1.0-9-uml",
                   "SUPERMIN_MODULES": str(appliance.UML_MODULES_ROOT / "6.1.0-9-uml")}
    env = {}
    appliance.FLAVOURS["qemu"].prepare(tmp_path / "q", {}, env)
    assert env == {} and not (tmp_path / "q").exists()
