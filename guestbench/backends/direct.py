"""libguestfs's direct backend: libguestfs runs qemu itself, with TCG or KVM forced."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from guestbench.host import fingerprint
from guestbench.backends.base import (Availability, Backend, HandleConfig, common_preconditions, hv_path,
                                      install_script, qemu_path)

# qemu aborts on PVM hosts when it sets IA32_ARCH_CAPABILITIES (MSR 0x10a) for `-cpu max`.
MSR_QUIRK_FEATURE = "-arch-capabilities"


class Tcg(Backend):
    name = "tcg"
    summary = "libguestfs direct backend, qemu with TCG software emulation forced (no hardware virtualization)"
    colour = "#4c72b0"

    def preconditions(self) -> Availability:
        if (missing := common_preconditions()) is not None:
            return missing
        return Availability(True, "qemu with TCG", {"qemu": qemu_path()})

    def handle_config(self, cache_dir: Path, workload: bool = False) -> HandleConfig:
        qemu = qemu_path()
        assert qemu is not None
        return HandleConfig("direct", ["force_tcg"], hv=str(write_qemu_wrapper(cache_dir, qemu)),
                            env=self.workload_env(workload))

    def probe_key(self) -> dict[str, Any]:
        v = fingerprint.versions()
        return {"libguestfs": v.get("libguestfs"), "qemu": v.get("qemu"), "kernel": v.get("kernel")}


class Kvm(Backend):
    name = "kvm"
    summary = "libguestfs direct backend, qemu with KVM forced (hardware or nested virtualization)"
    colour = "#dd8452"
    probe_timeout_s = 60.0

    def probe_timeout(self) -> float:
        return kvm_probe_timeout(self.probe_timeout_s)

    def probe_attempts(self) -> int:
        return kvm_probe_attempts()

    def preconditions(self) -> Availability:
        if (missing := common_preconditions()) is not None:
            return missing
        qemu = qemu_path()
        assert qemu is not None
        dev = fingerprint.kvm_device()
        details: dict[str, Any] = {"qemu": qemu, "kvm": dev}
        if not dev["present"]:
            virt = fingerprint.virtualization()
            hint = ("this is a VM whose hypervisor offers no nested virtualization"
                    if virt.get("nested_level") else "load kvm_intel or kvm_amd, and enable VT-x/AMD-V in firmware")
            return Availability(False, f"/dev/kvm does not exist: {hint}", details)
        if not dev["accessible"]:
            return Availability(False, "/dev/kvm is not readable and writable by this user (add it to group kvm)",
                                details)
        quirk = msr_quirk_needed(qemu)
        details["msr_quirk"] = quirk
        if quirk == "unfixable":
            return Availability(False, "qemu with KVM aborts at start-up even with -cpu ...,-arch-capabilities",
                                details)
        return Availability(True, f"/dev/kvm served by {dev['flavour']}", details)

    def handle_config(self, cache_dir: Path, workload: bool = False) -> HandleConfig:
        qemu = qemu_path()
        assert qemu is not None
        hv = write_qemu_wrapper(cache_dir, qemu, msr_quirk=msr_quirk_needed(qemu) == "needed")
        return HandleConfig("direct", ["force_kvm"], hv=str(hv), env=self.workload_env(workload))

    def probe_key(self) -> dict[str, Any]:
        v = fingerprint.versions()
        return {"libguestfs": v.get("libguestfs"), "qemu": v.get("qemu"), "kernel": v.get("kernel"),
                "kvm": fingerprint.kvm_device().get("flavour")}

    def explain(self, reason: str, timed_out: bool) -> str:
        return explain_kvm_failure(reason, timed_out)


# KVM whose AMD-V is itself emulated (a level-1 guest on qemu TCG): launches of the stock appliance took 27-44 s
# there (2026-11-24), against a few seconds on hardware; the probe keeps the same 5x margin over them as tcg's
EMULATED_KVM_PROBE_TIMEOUT_S = 240.0
EMULATED_KVM_PROBE_ATTEMPTS = 3


def kvm_probe_timeout(hardware_s: float) -> float:
    """A KVM backend's probe limit: short on hardware (a PVM host's hang is found in a minute), long where the
    CPU that offers KVM is emulated."""
    return EMULATED_KVM_PROBE_TIMEOUT_S if fingerprint.cpu_is_emulated() else hardware_s


def kvm_probe_attempts() -> int:
    """Three where the CPU offering KVM is emulated: in a level-1 guest on TCG most launches boot in 25-36 s
    (12 of 12 by hand), but CI runs saw one launch never finish, another fail at once with no console output,
    and once every attempt of one level-1 boot stall; one bad launch there says little about the backend. On
    hardware a hang is the host's nature (PVM), and the first attempt decides."""
    return EMULATED_KVM_PROBE_ATTEMPTS if fingerprint.cpu_is_emulated() else 1


def explain_kvm_failure(reason: str, timed_out: bool) -> str:
    """Say why KVM failed in terms a user can act on, using what /dev/kvm really is."""
    flavour = fingerprint.kvm_device().get("flavour")
    if "MSR 0x10a" in reason:
        return (f"{reason} (qemu aborts when setting IA32_ARCH_CAPABILITIES, MSR 0x10a, which /dev/kvm here "
                f"({flavour}) rejects; the direct 'kvm' backend drops that CPU feature with a wrapper, "
                "libvirt's domain XML from libguestfs offers no way to)")
    if flavour == "kvm_pvm":
        what = ("/dev/kvm is served by kvm_pvm (PVM, software nested virtualization), which runs only guest "
                "kernels built for PVM; the stock appliance kernel")
        if timed_out:
            return f"{reason}: {what} hangs in early boot"
        return f"{reason} ({what} cannot run here)"
    return reason


@cache
def msr_quirk_needed(qemu: str) -> str:
    """'not-needed', 'needed' or 'unfixable': start qemu paused with KVM and `-cpu max`, then quit by QMP.

    On PVM hosts qemu aborts at once (`failed to set MSR 0x10a`); without the
    IA32_ARCH_CAPABILITIES feature it gets past that. Takes about a second.
    """
    if _qemu_kvm_starts(qemu, "max"):
        return "not-needed"
    if _qemu_kvm_starts(qemu, f"max,{MSR_QUIRK_FEATURE}"):
        return "needed"
    return "unfixable"


def _qemu_kvm_starts(qemu: str, cpu: str) -> bool:
    qmp = '{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n'
    try:
        proc = subprocess.run([qemu, "-machine", "pc,accel=kvm", "-cpu", cpu, "-display", "none", "-nodefaults",
                               "-no-user-config", "-S", "-qmp", "stdio"], input=qmp, capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def write_qemu_wrapper(cache_dir: Path, qemu: str, msr_quirk: bool = False) -> Path:
    """The qemu program libguestfs runs (LIBGUESTFS_HV): qemu itself, plus a QMP socket for the watch.

    In a guestbench worker ($GUESTBENCH_WORKDIR set), an appliance launch (it has -kernel; libguestfs's probes
    do not) runs in the cell's work dir with `-qmp unix:qmp-<pid>`: guestbench.backends.watch asks it whether
    the guest was paused on an I/O error (a full host disk), reaching the socket as /proc/<pid>/cwd/qmp-<pid>,
    which stays short of the unix socket path limit however deep the work dir is. libguestfs gives qemu
    absolute paths only, so the working directory changes nothing else. `msr_quirk`: append
    -arch-capabilities to every -cpu model (PVM hosts reject that MSR). Plain sh: no measurable launch time.
    """
    name = "qemu-kvm-no-arch-capabilities" if msr_quirk else "qemu"
    path = hv_path(cache_dir, name)
    quirk = (f'  if [ "$cpu_next" = 1 ]; then a="$a,{MSR_QUIRK_FEATURE}"; cpu_next=0; fi\n'
             '  [ "$a" = "-cpu" ] && cpu_next=1\n') if msr_quirk else ""
    what = "with KVM, minus the IA32_ARCH_CAPABILITIES MSR that PVM hosts reject" if msr_quirk else "as it is"
    text = (
        "#!/bin/sh\n"
        f"# Written by guestbench: qemu {what}; a QMP socket in the work dir for guestbench's watch.\n"
        "n=$#\n"
        "cpu_next=0\n"
        "appliance=0\n"
        'for a in "$@"; do\n'
        f"{quirk}"
        '  [ "$a" = "-kernel" ] && appliance=1\n'
        '  set -- "$@" "$a"\n'
        "done\n"
        'shift "$n"\n'
        'if [ "$appliance" = 1 ] && [ -n "$GUESTBENCH_WORKDIR" ] && cd "$GUESTBENCH_WORKDIR" 2>/dev/null; then\n'
        '  set -- "$@" -qmp "unix:qmp-$$,server=on,wait=off"\n'
        "fi\n"
        f'exec {qemu} "$@"\n'
    )
    return install_script(path, text)
