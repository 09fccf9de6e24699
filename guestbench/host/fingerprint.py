"""Describe the host a result was measured on.

The ranking of hypervisor backends depends on the host (bare metal or a VM, which KVM module
serves /dev/kvm, which qemu/libguestfs/libvirt/UML versions), so every result carries a
fingerprint of it. Everything here degrades to None/"unknown" instead of raising: a missing tool
must never stop a benchmark from being recorded.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import guestbench
from guestbench.host import checkout, commands, tuning

UML_TIMEOUT_S = 5.0
"""UML's `--version` returns at once; anything longer means it tried to boot."""

FLAGS_OF_INTEREST = ("vmx", "svm", "hypervisor", "avx2", "avx512f", "aes")
HW_VIRT_FLAGS = ("vmx", "svm")

SYS_MODULE = Path("/sys/module")
DEV_KVM = Path("/dev/kvm")
DMI_DIR = Path("/sys/class/dmi/id")
PROC_CPUINFO = Path("/proc/cpuinfo")
PROC_MEMINFO = Path("/proc/meminfo")
OS_RELEASE = Path("/etc/os-release")

_VM_NAMES = {
    "kvm": "KVM", "qemu": "QEMU", "vmware": "VMware", "microsoft": "Hyper-V",
    "oracle": "VirtualBox", "xen": "Xen", "amazon": "Amazon", "bochs": "Bochs",
    "parallels": "Parallels", "bhyve": "bhyve", "zvm": "z/VM", "uml": "User-Mode Linux",
}
_VERSION_RE = re.compile(r"(\d+\.\d+(?:\.\d+)?)")


# --- small helpers ---------------------------------------------------------------------------

def _read_text(path: Path) -> str | None:
    """Read a small text file; None when it is absent or unreadable (e.g. no DMI in containers)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _cpuinfo_field(name: str) -> str | None:
    """The first value of `name` in /proc/cpuinfo (all CPUs agree on the fields we read)."""
    text = _read_text(PROC_CPUINFO) or ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == name:
            return value.strip()
    return None


def _cpu_flags() -> set[str]:
    """The CPU flags as the kernel reports them ("Features" on non-x86)."""
    flags = _cpuinfo_field("flags") or _cpuinfo_field("Features") or ""
    return set(flags.split())


def _first_version(text: str | None) -> str | None:
    """The first dotted version number in a tool's output."""
    if not text:
        return None
    m = _VERSION_RE.search(text)
    return m.group(1) if m else None


# --- KVM and virtualization ------------------------------------------------------------------

def _kvm_modules() -> list[str]:
    """Loaded kvm* modules: they tell which implementation serves /dev/kvm."""
    try:
        return sorted(p.name for p in SYS_MODULE.iterdir() if p.name.startswith("kvm"))
    except OSError:
        return []


def _kvm_flavour(present: bool, modules: list[str]) -> str | None:
    """kvm_pvm wins: under PVM the guest kernel must be built for it, whatever else is loaded."""
    for name in ("kvm_pvm", "kvm_intel", "kvm_amd"):
        if name in modules or (SYS_MODULE / name).exists():
            return name
    return "unknown" if present or modules else None


def kvm_device() -> dict[str, Any]:
    """Whether /dev/kvm is there, usable by us, and which module serves it."""
    present = DEV_KVM.exists()
    modules = _kvm_modules()
    return {
        "present": present,
        "accessible": present and os.access(DEV_KVM, os.R_OK | os.W_OK),
        "flavour": _kvm_flavour(present, modules),
        "modules": modules,
    }


def _detect_virt(option: str) -> str | None:
    """`systemd-detect-virt <option>`: its answer, "none", or None when it cannot tell."""
    result = commands.output(["systemd-detect-virt", option])
    if result is None:
        return None
    status, out = result
    answer = out.strip()
    if answer == "none" or (status == 1 and not answer):
        return "none"
    return answer if status == 0 and answer else None


def _container_fallback() -> str | None:
    """Container marker files, for when systemd-detect-virt is missing."""
    if Path("/.dockerenv").exists():
        return "docker"
    if Path("/run/.containerenv").exists():
        return "podman"
    return None


def _dmi() -> dict[str, str | None] | None:
    """Vendor/product from DMI; None when DMI is not readable at all (common in containers)."""
    fields = {}
    for name in ("sys_vendor", "product_name"):
        text = _read_text(DMI_DIR / name)
        fields[name] = text.strip() if text is not None else None
    return fields if any(v is not None for v in fields.values()) else None


def _summary(vm: str | None, container: str | None, nested: int, kvm: dict[str, Any]) -> str:
    """One line a human can read in a report header."""
    if nested:
        name = _VM_NAMES.get(vm or "", vm) if vm and vm != "none" else "unidentified hypervisor"
        parts = [f"{name} guest (nested level ≥1)"]
    elif vm is None:
        parts = ["virtualization unknown"]
    else:
        parts = ["bare metal"]
    if container and container != "none":
        parts[0] += f", in a {container} container"
    parts.append(_kvm_summary(kvm))
    return "; ".join(parts)


def _kvm_summary(kvm: dict[str, Any]) -> str:
    """How /dev/kvm looks, including the PVM caveat that breaks stock guest kernels."""
    if not kvm["present"]:
        return "no /dev/kvm"
    flavour = kvm["flavour"]
    text = "/dev/kvm served by kvm_pvm (PVM)" if flavour == "kvm_pvm" else f"/dev/kvm: {flavour}"
    if not kvm["accessible"]:
        text += " (not accessible to this user)"
    return text


def virtualization() -> dict[str, Any]:
    """What this host is (VM, container, bare metal) and what KVM it offers.

    A guest cannot see how deep it is nested, so nested_level is 0 or "at least 1".
    """
    flags = _cpu_flags()
    vm = _detect_virt("--vm")
    container = _detect_virt("--container")
    if container is None:
        container = _container_fallback()
    hypervisor_flag = "hypervisor" in flags
    nested = 1 if hypervisor_flag or (vm not in (None, "none")) else 0
    kvm = kvm_device()
    info: dict[str, Any] = {
        "vm": vm,
        "container": container,
        "hypervisor_flag": hypervisor_flag,
        "hw_virt_flags": sorted(f for f in HW_VIRT_FLAGS if f in flags),
        "dmi": _dmi(),
        "nested_level": nested,
    }
    if nested:
        info["nested_level_note"] = "at least 1: guests cannot see deeper levels"
    info["kvm"] = kvm
    info["summary"] = _summary(vm, container, nested, kvm)
    return info


# --- versions --------------------------------------------------------------------------------

def _libguestfs_version() -> str | None:
    """libguestfs's version from the Python bindings (creating a handle launches nothing)."""
    try:
        import guestfs
        g = guestfs.GuestFS(python_return_dict=True)
    except Exception:
        return None
    try:
        v = g.version()
        return f"{v['major']}.{v['minor']}.{v['release']}"
    except Exception:
        return None
    finally:
        try:
            g.close()
        except Exception:
            pass


def _libvirt_version() -> str | None:
    """libvirt's library version: getVersion() encodes it as major*1e6 + minor*1e3 + release."""
    try:
        import libvirt
        n = int(libvirt.getVersion())
    except Exception:
        return None
    return f"{n // 1_000_000}.{n // 1000 % 1000}.{n % 1000}"


def _qemu() -> tuple[str | None, str | None]:
    """(version, path) of qemu-system-x86_64 on PATH, the default hypervisor libguestfs runs."""
    path = shutil.which("qemu-system-x86_64")
    if path is None:
        return None, None
    result = commands.output([path, "--version"])
    if result is None or result[0] != 0:
        return None, path
    first = result[1].splitlines()[0] if result[1] else ""
    m = re.search(r"version\s+(\d+\.\d+(?:\.\d+)?)", first)
    return (m.group(1) if m else _first_version(first)), path


def _tool_version(argv: list[str], timeout: float = commands.FACT_TIMEOUT_S) -> str | None:
    """The version number a tool prints for `--version`, or None."""
    result = commands.output(argv, timeout=timeout)
    if result is None or result[0] != 0:
        return None
    return _first_version(result[1])


def _uml_version() -> str | None:
    """The UML kernel's version; `linux` is the UML kernel binary, so keep it on a short leash."""
    linux = Path("/usr/bin/linux")
    if not linux.exists():
        return None
    return _tool_version([str(linux), "--version"], timeout=UML_TIMEOUT_S)


def versions() -> dict[str, str | None]:
    """Versions of what is measured; probed once per process (each probe runs a program)."""
    return dict(_versions())


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str | None]:
    """Versions of every component whose change can move a benchmark result."""
    qemu_version, qemu_path = _qemu()
    return {
        "libguestfs": _libguestfs_version(),
        "qemu": qemu_version,
        "qemu_path": qemu_path,
        "libvirt": _libvirt_version(),
        "uml": _uml_version(),
        "supermin": _tool_version(["supermin", "--version"]),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "guestbench": guestbench.__version__,
    }


# --- CPU, memory, OS -------------------------------------------------------------------------

def cpu_is_emulated() -> bool:
    """This machine's CPU is qemu's TCG (`-cpu max` without KVM names itself so): virtualization it offers, such as
    the AMD-V of a level-1 guest on TCG, is emulated too, and launches on it are an order of magnitude slower."""
    return (_cpuinfo_field("model name") or "").startswith("QEMU TCG CPU")


def cpu() -> dict[str, Any]:
    """CPU model, core count and the flags that matter for virtualization and I/O benchmarks."""
    flags = _cpu_flags()
    return {
        "model": _cpuinfo_field("model name"),
        "cores": os.cpu_count(),
        "flags_of_interest": [f for f in FLAGS_OF_INTEREST if f in flags],
    }


def memory_bytes() -> int | None:
    """Total RAM from /proc/meminfo (reported in kB, i.e. KiB)."""
    text = _read_text(PROC_MEMINFO) or ""
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def _os_pretty_name() -> str | None:
    """PRETTY_NAME from /etc/os-release, unquoted."""
    text = _read_text(OS_RELEASE) or ""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PRETTY_NAME":
            return value.strip().strip("\"'")
    return None


def _hostname() -> str | None:
    """The host name; None if the system cannot say."""
    try:
        return socket.gethostname()
    except OSError:
        return None


# --- fingerprint -----------------------------------------------------------------------------

def fingerprint() -> dict[str, Any]:
    """Everything about this host recorded with each result (JSON-serialisable)."""
    c = cpu()
    return {
        "hostname": _hostname(),
        "cpu_model": c["model"],
        "cores": c["cores"],
        "memory_bytes": memory_bytes(),
        "kernel": platform.release(),
        "os": _os_pretty_name(),
        "arch": platform.machine(),
        "virtualization": virtualization(),
        "versions": versions(),
        "guestbench": checkout.identity(),
        "noise": tuning.settings(),  # what makes figures move: governor, boost, THP, SMT, mitigations, other runs
    }


def machine_key(fp: dict[str, Any]) -> dict[str, Any]:
    """The machine: when it differs, timings are not comparable at all.

    Memory is rounded to GiB because MemTotal shifts by a few MiB between kernels and boots.
    """
    virt = _part(fp.get("virtualization"))
    mem = fp.get("memory_bytes")
    return {
        "cpu_model": fp.get("cpu_model"),
        "cores": fp.get("cores"),
        "memory_gib": round(mem / 2**30) if isinstance(mem, (int, float)) and not isinstance(mem, bool)
        and math.isfinite(mem) else None,
        "vm": virt.get("vm"),
        "kvm_flavour": _part(virt.get("kvm")).get("flavour"),
    }


def _part(value: Any) -> dict[str, Any]:
    """A part of a recorded fingerprint: results files are read as they are, and a part may not be a mapping."""
    return value if isinstance(value, dict) else {}


def software_key(fp: dict[str, Any]) -> dict[str, Any]:
    """The software under test: a difference here is what a regression run is looking for."""
    vers = _part(fp.get("versions"))
    return {"kernel": fp.get("kernel"), **{k: vers.get(k) for k in ("libguestfs", "qemu", "libvirt", "uml")}}


def fingerprint_key(fp: dict[str, Any]) -> dict[str, Any]:
    """Everything that must match for two results to be the same set-up: machine and software."""
    return {**machine_key(fp), **software_key(fp)}
