"""Host fingerprint, checked against independent readings of this machine (no mocks)."""

from __future__ import annotations

import copy
import json
import os
import platform
import resource
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from guestbench.host import checkout, commands, fingerprint

VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")


def _cpuinfo_flags() -> set[str]:
    """Flags of the first CPU, read independently of guestbench.host.fingerprint."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.fixture(scope="module")
def fp() -> dict:
    return fingerprint.fingerprint()


def test_fingerprint_is_json_and_matches_basics(fp: dict) -> None:
    assert json.loads(json.dumps(fp)) == fp
    assert fp["cores"] == os.cpu_count()
    assert isinstance(fp["memory_bytes"], int) and fp["memory_bytes"] > 0
    assert fp["kernel"] == platform.release()
    assert fp["arch"] == platform.machine()
    assert fp["guestbench"]["version"] == fingerprint.guestbench.__version__


def test_fingerprint_is_cheap() -> None:
    """Every run takes one: its CPU (its own and its probes' processes), which a busy machine does not inflate
    as it does wall time."""
    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    start = cpu()
    fingerprint.fingerprint()
    assert cpu() - start < 2.0


def test_virtualization_agrees_with_cpuinfo_and_sysfs() -> None:
    v = fingerprint.virtualization()
    flags = _cpuinfo_flags()
    assert v["hypervisor_flag"] == ("hypervisor" in flags)
    assert v["hw_virt_flags"] == sorted({"vmx", "svm"} & flags)
    in_vm = v["hypervisor_flag"] or v["vm"] not in (None, "none")
    assert v["nested_level"] == (1 if in_vm else 0)
    if v["vm"] in (None, "none") or v["hypervisor_flag"]:
        assert (v["nested_level"] == 1) == v["hypervisor_flag"]
    assert ("nested_level_note" in v) == (v["nested_level"] == 1)
    if Path("/sys/module/kvm_pvm").exists():
        assert v["kvm"]["flavour"] == "kvm_pvm"
        assert "PVM" in v["summary"]
    assert isinstance(v["summary"], str) and v["summary"]


def test_virtualization_matches_systemd_detect_virt() -> None:
    tool = shutil.which("systemd-detect-virt")
    if tool is None:
        pytest.skip("systemd-detect-virt not installed")
    v = fingerprint.virtualization()
    for option, key in (("--vm", "vm"), ("--container", "container")):
        out = subprocess.run([tool, option], capture_output=True, text=True, timeout=10).stdout.strip()
        assert v[key] == out


def test_kvm_device_agrees_with_dev_and_sys() -> None:
    k = fingerprint.kvm_device()
    assert k["present"] == os.path.exists("/dev/kvm")
    assert k["accessible"] == (k["present"] and os.access("/dev/kvm", os.R_OK | os.W_OK))
    assert k["modules"] == sorted(n for n in os.listdir("/sys/module") if n.startswith("kvm"))
    assert k["flavour"] in ("kvm_intel", "kvm_amd", "kvm_pvm", "unknown", None)


def test_versions_libguestfs_and_qemu() -> None:
    v = fingerprint.versions()
    guestfs = pytest.importorskip("guestfs")
    assert v["libguestfs"] is not None and VERSION_RE.match(v["libguestfs"])
    g = guestfs.GuestFS(python_return_dict=True)
    try:
        raw = g.version()
    finally:
        g.close()
    assert v["libguestfs"] == f"{raw['major']}.{raw['minor']}.{raw['release']}"

    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        pytest.skip("qemu-system-x86_64 not installed")
    assert v["qemu_path"] == qemu
    first = subprocess.run([qemu, "--version"], capture_output=True, text=True,
                           timeout=10).stdout.splitlines()[0]
    said = first.split("version", 1)[1].split()[0]
    assert v["qemu"] is not None and VERSION_RE.match(v["qemu"])
    assert v["qemu"] == said
    assert v["kernel"] == platform.release()
    assert v["python"] == platform.python_version()


def test_git_commit_in_this_checkout() -> None:
    commit = checkout.git_commit()
    assert commit is not None and re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", commit)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(fingerprint.__file__).parent,
                          capture_output=True, text=True, timeout=10).stdout.strip()
    assert commit.split("+")[0] == head


def test_cpu_and_memory() -> None:
    c = fingerprint.cpu()
    assert c["cores"] == os.cpu_count()
    assert set(c["flags_of_interest"]) == set(fingerprint.FLAGS_OF_INTEREST) & _cpuinfo_flags()
    mem = fingerprint.memory_bytes()
    assert mem is not None and mem > 0


def test_fingerprint_key_stable_and_sensitive(fp: dict) -> None:
    assert fingerprint.fingerprint_key(fp) == fingerprint.fingerprint_key(copy.deepcopy(fp))
    assert fingerprint.fingerprint_key(fp) == fingerprint.fingerprint_key(fingerprint.fingerprint())
    other = copy.deepcopy(fp)
    other["kernel"] = fp["kernel"] + "-other"
    assert fingerprint.fingerprint_key(other) != fingerprint.fingerprint_key(fp)


def test_run_degrades_instead_of_raising() -> None:
    assert commands.output(["/nonexistent/guestbench-no-such-tool"]) is None
    start = time.monotonic()
    assert commands.output(["sleep", "30"], timeout=0.3) is None
    assert time.monotonic() - start < 5
