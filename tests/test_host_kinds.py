"""The host storage kind registry and the pieces merged into one place (sizes, Unavailable, one_line),
without loop devices or servers: only the file kind and a kind made up here.

test_storage_host.py exercises every real kind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from guestbench.util import errors
from guestbench.measurements import base as measurements_base
from guestbench.host.paths import RUN_PREFIX
from guestbench.storage import backing
from guestbench.storage.backing_build import Builder
from guestbench.storage.backing_kinds import KINDS, HostKind, Image

MIB = 2**20


def test_the_registry_is_what_host_exports() -> None:
    assert backing.HOST_KINDS == tuple(KINDS) == ("file", "loop", "qemu-nbd", "nbdkit", "lvm")
    assert backing.NBD_KINDS == ("qemu-nbd", "nbdkit")
    assert all(kind.name == name and kind.label and "qemu-img" in kind.programs for name, kind in KINDS.items())
    assert {name for name, kind in KINDS.items() if kind.formats == ("raw",)} == {"loop", "lvm", "nbdkit"}
    assert [name for name, kind in KINDS.items() if kind.delay] == ["nbdkit"]


def test_format_problems_name_the_kinds_that_take_the_format() -> None:
    assert backing.format_problem("nbdkit", "raw") is None and backing.format_problem("qemu-nbd", "qcow2") is None
    assert backing.format_problem("nbdkit", "qcow2") == ("nbdkit serves raw images here; allowed with qcow2: file, "
                                                         "qemu-nbd")
    assert backing.format_problem("loop", "qcow2") == "loop serves raw images here; allowed with qcow2: file, qemu-nbd"


def test_one_unavailable() -> None:
    assert backing.Unavailable is errors.Unavailable and not hasattr(measurements_base, "Unavailable")
    assert issubclass(errors.Unavailable, RuntimeError)


def test_host_image_sizes_are_units_sizes_in_whole_numbers() -> None:
    assert backing.parse_size("64MiB") == 64 * MIB and backing.parse_size("64MB") == 64 * 10**6
    with pytest.raises(ValueError, match=r"bad image size '1.5G'; a whole number"):
        backing.parse_size("1.5G")
    with pytest.raises(ValueError, match="bad image size 'lots'"):
        backing.parse_size("lots")


def test_one_line_escapes_or_squeezes() -> None:
    assert errors.one_line("bad\nkey\r") == "bad\\nkey\\r"
    assert errors.one_line(RuntimeError("mdadm:\n  busy\t now "), squeeze=True) == "mdadm: busy now"


class Copy(HostKind):
    """A made-up kind: the image file itself, under another name."""

    name = "copy"
    label = "a copy"

    def problem(self, delay: bool) -> str | None:
        return "copies are off today" if delay else None

    def present(self, b: Builder, image: Image, as_file: bool, delay_ms: int | None) -> backing.Drive:
        return backing.Drive(filename=str(image.path), format=image.format, kind=self.name, name=image.name,
                          describe=f"{image.describe}, copied")


def test_a_new_kind_is_one_class_and_one_registry_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(KINDS, "copy", Copy())
    assert backing.availability("copy") is None
    with backing.Backings(tmp_path / "w") as hs:
        drive = hs.add("copy", "c", "1M", fmt="qcow2")
        assert drive.kind == "copy" and drive.describe.startswith("qcow2 image (preallocation=off) on the host's ")
        assert Path(drive.filename) == hs.image_path(drive) and Path(drive.filename).exists()
        with pytest.raises(ValueError, match=r"as_file is for the NBD kinds \(qemu-nbd, nbdkit\); copy is"):
            hs.add("copy", "d", "1M", as_file=True)
        with pytest.raises(ValueError, match="delay_ms needs nbdkit's delay filter; copy has none"):
            hs.add("copy", "d", "1M", delay_ms=3)
    assert not Path(drive.filename).exists() and sorted((tmp_path / "w").iterdir()) == []


def test_a_failing_kind_leaves_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class Broken(Copy):
        def present(self, b: Builder, image: Image, as_file: bool, delay_ms: int | None) -> backing.Drive:
            b.path(image.name, ".extra").write_text("x")
            raise RuntimeError("broken")

    monkeypatch.setitem(KINDS, "copy", Broken())
    with backing.Backings(tmp_path) as hs:
        with pytest.raises(RuntimeError, match="broken"):
            hs.add("copy", "c", "1M")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["host-storage.json"]
        monkeypatch.setitem(KINDS, "copy", Copy())
        hs.add("copy", "c", "1M")  # the name is free again


def test_the_sweep_removes_a_half_written_state_file(tmp_path: Path) -> None:
    workdir = tmp_path / f"{RUN_PREFIX}dead"
    workdir.mkdir()
    state: dict[str, Any] = {"owner": {"pid": 2**22 + 1, "start": 1}, "resources": []}
    (workdir / "host-storage.json").write_text(json.dumps(state))
    (workdir / ".host-storage.json.k3x9.tmp").write_text("{")
    log = backing.sweep_stale(tmp_path)
    assert not workdir.exists() and log == [f"removed empty {workdir}"]
