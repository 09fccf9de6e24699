"""The level-1 guest, for real: build the image from this host's packages, boot it through libvirt, run a
job that uses guestbench and libguestfs inside, bring its output back; a job that overruns is destroyed.
Nothing may be left: no level-1 domain, no run directory, no overlay.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guestbench.nested import guest, image

from conftest import ROOT, guestbench, run_dirs

pytestmark = pytest.mark.launch


@pytest.fixture(scope="module")
def built() -> image.Image:
    proc = guestbench("nested", "build", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    img = image.cached()
    assert img is not None and Path(proc.stdout.strip()) == img.path
    assert img.kernel.exists() and img.initrd.exists() and img.root.exists() and img.data.exists()
    # built once: a second build with the same inputs reuses it
    again = guestbench("nested", "build")
    assert again.returncode == 0 and "up to date" in again.stderr
    return img


def _job(script: str) -> dict[str, bytes | Path]:
    return {"job.sh": script.encode()}


def test_job_runs_guestbench_inside_and_its_output_comes_back(built: image.Image, tmp_path: Path) -> None:
    venv = image.venv_prefix()
    script = f"""
mkdir -p {ROOT} && tar -xf /guestbench-l1/in/src.tar -C {ROOT}
python3 -c 'import guestfs; print(guestfs.GuestFS().version()["minor"])' > /guestbench-l1/out/libguestfs-minor
{venv}/bin/python -m guestbench --version > /guestbench-l1/out/version
cp /proc/cpuinfo /guestbench-l1/out/cpuinfo
exit 3
"""
    import subprocess

    src = subprocess.run(["tar", "-cf", "-", "-C", str(ROOT), "guestbench"], capture_output=True, check=True).stdout
    lines: list[str] = []
    result = guest.run_job(built, {**_job(script), "src.tar": src}, tmp_path / "out", memory_mib=1024, vcpus=1,
                           kvm=False, timeout_s=600, on_console=lines.append)
    assert result.exit_status == 3
    assert (result.output / "libguestfs-minor").read_text().strip() == "48"
    assert (result.output / "version").read_text().startswith("guestbench "), \
        "\n".join([ln for ln in lines if not ln.startswith("[")][-12:])
    assert "QEMU" in (result.output / "cpuinfo").read_text()  # it really ran in the guest
    assert any("guestbench-l1: booted" in ln for ln in lines), lines[-5:]
    assert guest.leftover_domains() == []
    assert run_dirs() == []


def test_a_job_that_overruns_is_destroyed(built: image.Image, tmp_path: Path) -> None:
    with pytest.raises(guest.GuestError, match="did not finish within 45 s and was destroyed"):
        guest.run_job(built, _job("echo about to hang; sleep 3600"), tmp_path / "out", memory_mib=512, vcpus=1,
                      kvm=False, timeout_s=45)
    assert guest.leftover_domains() == []
    assert run_dirs() == []


def test_doctor_says_whether_nested_runs_are_possible(built: image.Image) -> None:
    proc = guestbench("doctor", "--json", "--backend", "uml")
    nested = json.loads(proc.stdout)["nested"]
    assert nested["possible"] is True and nested["image"] == str(built.path)
