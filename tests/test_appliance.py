"""guestbench's appliances for real: the workload variant built by supermin for both flavours, and booted
on tcg, libvirt-tcg and uml through the backends' handle configurations, with fio, bonnie++, dbench and the
extra mkfs programs answering inside. The UML standard appliance stays what it was.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from guestbench.backends import appliance
from guestbench.backends import BACKENDS
from guestbench.host.paths import WORKDIR_ENV, cache_dir

from helpers.cli import guestbench
from helpers.leaks import processes_mentioning, wait_no_leftovers
from helpers.session import session_tmp_path

LAUNCH_TIMEOUT_S = 600
# Applies a HandleConfig the way guestbench/execute/worker.py does (environment, backend, settings, hypervisor),
# launches with a scratch disk, runs one shell command in the appliance and prints its output as JSON.
LAUNCH = r"""
import json, os, sys
import guestfs

req = json.loads(sys.argv[1])
cfg = req["backend"]
os.environ.update(cfg["env"])
g = guestfs.GuestFS(python_return_dict=True, close_on_exit=False)
try:
    g.set_backend(cfg["libguestfs_backend"])
    g.set_backend_settings(cfg["settings"])
    if cfg["hv"]:
        g.set_hv(cfg["hv"])
    g.set_tmpdir(req["workdir"])
    g.add_drive_scratch(64 * 2**20)
    g.launch()
    out = g.debug("sh", [req["command"]])
    g.shutdown()
finally:
    g.close()
print(json.dumps({"out": out}))
"""
TOOLS = ("fio --version; bonnie++ -h 2>&1 | grep Version; dbench --help 2>&1 | head -1; mkfs.jfs -V | head -1; "
         "mkfs.reiserfs -V 2>&1 | head -1; mkfs.xfs -V; true")


def launch_and_run(backend_name: str, command: str) -> tuple[str, dict[str, Any]]:
    """Boot one workload appliance of `backend_name` in a subprocess with a deadline; (its output, the config used).

    Whatever the outcome, nothing is left: the process group is killed on a timeout, libvirt domains with
    files in the work dir are destroyed, the work dir goes.
    """
    backend = BACKENDS[backend_name]
    av = backend.preconditions()
    if not av.usable:
        pytest.fail(f"{backend_name} is part of the set-up and must work here: {av.reason}")
    cfg = backend.handle_config(cache_dir(), workload=True).to_dict()
    workdir = Path(tempfile.mkdtemp(prefix="guestbench-run-", dir=session_tmp_path() / "tmp"))
    os.chmod(workdir, 0o755)  # libvirt's qemu reaches the overlay in it
    env = dict(os.environ, **{WORKDIR_ENV: str(workdir)})
    req = {"backend": cfg, "workdir": str(workdir), "command": command}
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, json.dumps(req)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{backend_name}: the launch did not finish within {LAUNCH_TIMEOUT_S} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        backend.cleanup(workdir)
        subprocess.run(["rm", "-rf", str(workdir)], timeout=60)
    assert proc.returncode == 0, f"{backend_name}: {stderr[-3000:]}"
    # no run dir or process of this session left (not socket dirs: other sessions' come and go in /tmp)
    wait_no_leftovers()
    assert processes_mentioning(str(appliance.appliances_root())) == []
    return json.loads(stdout)["out"], cfg


def assert_tools_answer(out: str) -> None:
    assert "fio-3." in out, out
    assert "Version: 2.00" in out, out  # bonnie++
    assert "dbench version 4." in out, out
    assert "mkfs.jfs version" in out, out
    assert "mkfs.reiserfs 3." in out, out
    assert "mkfs.xfs version" in out, out


def test_inputs_key_changes_with_the_package_set_and_versions() -> None:
    ins = {"recipe": 1, "flavour": "qemu", "variant": "workload", "packages": {"fio": "3.33-3", "dbench": "4.0"}}
    key = appliance.inputs_key(ins)
    assert appliance.inputs_key(json.loads(json.dumps(ins))) == key  # a pure function of the inputs
    assert appliance.inputs_key({**ins, "packages": {"fio": "3.33-3"}}) != key
    assert appliance.inputs_key({**ins, "packages": {"fio": "3.33-4", "dbench": "4.0"}}) != key
    assert appliance.inputs_key({**ins, "flavour": "uml"}) != key
    assert appliance.included_packages(ins) == ["fio", "dbench"]
    assert appliance.missing_packages(ins) == ["bonnie++", "jfsutils", "reiserfsprogs", "xfsprogs"]
    assert appliance.missing_packages({**ins, "variant": "standard"}) == []


def test_inputs_name_the_flavour_kernel_and_the_installed_workload_packages() -> None:
    qemu, uml = appliance.inputs("qemu", "workload"), appliance.inputs("uml", "workload")
    assert qemu["kernel"]["candidates"], "supermin has no host kernel to pick"
    assert uml["kernel"]["version"] == appliance.uml_kernel_version() and uml["init"] == appliance.INIT_SCRIPT
    host = appliance.installed_versions(appliance.WORKLOAD_PACKAGES)
    assert qemu["packages"] == uml["packages"] == host
    assert "packages" not in appliance.inputs("qemu", "standard")
    assert len({appliance.inputs_key(appliance.inputs(f, v)) for f in appliance.FLAVOURS
                for v in appliance.VARIANTS}) == 4
    with pytest.raises(ValueError):
        appliance.inputs("kvm", "standard")


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("flavour", appliance.FLAVOURS)
def test_workload_appliance_is_built_once_with_the_installed_packages(flavour: str) -> None:
    before = appliance.state(flavour, "workload")
    path = appliance.appliance_dir(flavour, "workload")
    assert path.parent == appliance.appliances_root() / f"{flavour}-workload"
    for name in ("kernel", "initrd", "root", "README.fixed"):
        assert (path / name).exists(), name
    assert appliance.appliance_dir(flavour, "workload", build=False) == path  # cached: no rebuild
    st = appliance.state(flavour, "workload")
    assert st["built"] and st["path"] == str(path) and st["key"] == path.name == before["key"]
    installed = appliance.installed_versions(appliance.WORKLOAD_PACKAGES)
    assert st["included"] == [p for p in appliance.WORKLOAD_PACKAGES if p in installed]
    assert st["missing"] == [p for p in appliance.WORKLOAD_PACKAGES if p not in installed]
    assert set(st["included"]) >= {"fio", "bonnie++", "dbench", "jfsutils"}, "tools/setup.sh installs these"
    assert 0 < st["root_bytes_allocated"] < st["root_bytes_apparent"]  # sparse
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # one build, no temp dirs left


def test_older_builds_are_replaced(tmp_path: Path) -> None:
    base = appliance.variant_dir("uml", "standard")
    base.mkdir(parents=True, exist_ok=True)
    stale = base / "0123456789abcdef"
    stale.mkdir(exist_ok=True)
    (stale / "README.fixed").write_text("an appliance from older inputs\n")
    current = base / appliance.inputs_key(appliance.inputs("uml"))
    if current.exists():  # built earlier in this session: rebuild, as after a package update
        subprocess.run(["rm", "-rf", str(current)], timeout=60, check=True)
    assert appliance.appliance_dir("uml") == current
    assert sorted(p.name for p in base.iterdir()) == [current.name]


def test_standard_uml_appliance_and_handle_config_are_as_before(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    uml = BACKENDS["uml"]
    assert uml.appliance_flavour == "uml" and BACKENDS["tcg"].appliance_flavour == "qemu"
    cfg = uml.handle_config(cache_dir())
    path = appliance.appliance_dir("uml")
    assert path.parent == appliance.appliances_root() / "uml-standard"
    assert cfg.env["LIBGUESTFS_PATH"] == str(path) and cfg.libguestfs_backend == "direct" and cfg.hv
    info = json.loads((path / appliance.INFO_FILE).read_text())
    assert info["included"] == [] and info["inputs"]["init"] == appliance.INIT_SCRIPT
    assert uml.handle_config(cache_dir(), workload=True).env["LIBGUESTFS_PATH"] == \
        str(appliance.appliance_dir("uml", "workload"))
    # standard qemu backends keep libguestfs's own appliance: nothing in their environment changes
    assert BACKENDS["tcg"].handle_config(cache_dir()).to_dict() == {
        "libguestfs_backend": "direct", "settings": ["force_tcg"], "hv": str(cache_dir() / "hv" / "qemu"), "env": {}}
    assert BACKENDS["libvirt-tcg"].handle_config(cache_dir()).env == {"LIBGUESTFS_BACKEND": "libvirt:qemu:///system"}
    # $GUESTBENCH_UML_APPLIANCE (set in the level-1 guest) wins, and must be a fixed appliance
    monkeypatch.setenv(appliance.PREBUILT_ENV[("uml", "standard")], str(path))
    assert uml.handle_config(cache_dir()).env["LIBGUESTFS_PATH"] == str(path)
    assert appliance.state("uml")["prebuilt_from"] == "GUESTBENCH_UML_APPLIANCE"
    monkeypatch.setenv(appliance.PREBUILT_ENV[("uml", "standard")], str(tmp_path))
    with pytest.raises(appliance.ApplianceError, match="not a fixed appliance"):
        appliance.appliance_dir("uml")


@pytest.mark.launch
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("backend", ["libvirt-tcg"])  # tcg and uml run every tool in test_workload_run
def test_workload_tools_answer_inside_the_appliance(backend: str) -> None:
    out, cfg = launch_and_run(backend, TOOLS)
    flavour = BACKENDS[backend].appliance_flavour
    assert cfg["env"]["LIBGUESTFS_PATH"] == str(appliance.appliance_dir(flavour, "workload"))
    assert_tools_answer(out)


@pytest.mark.launch
@pytest.mark.timeout(1200)
def test_doctor_reports_the_appliances() -> None:
    proc = guestbench("doctor", "--backend", "uml", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)["appliances"]
    assert sorted(found) == ["qemu-workload", "uml-standard", "uml-workload"]
    uml = found["uml-standard"]  # the uml backend's preconditions build it
    assert uml["built"] and uml["path"] == str(appliance.appliance_dir("uml")) and uml["error"] is None
    for name in ("qemu-workload", "uml-workload"):
        assert found[name]["included"] == appliance.state(*name.split("-"))["included"]
    text = guestbench("doctor", "--backend", "uml")
    assert text.returncode == 0 and "uml-standard: built" in text.stdout, text.stdout
