"""User-Mode Linux backend: libguestfs's direct backend with a UML-running hypervisor program."""

from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from guestbench.host import fingerprint
from guestbench.backends.appliance import UML_KERNEL, ApplianceError, appliance_dir, prebuilt, uml_kernel_version
from guestbench.backends.base import (Availability, Backend, HandleConfig, hv_path, install_script,
                                      libguestfs_available)
from guestbench.backends.uml.channel import CHANNEL_ENV, DEVICES, MODE_ENV, offered_modes

PTRACE_TRACEME = 0


def ptrace_allowed() -> str | None:
    """None when a child may be traced (UML runs its processes under ptrace), else why not."""
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    if scope.exists() and scope.read_text().strip() == "3":
        return "ptrace is disabled (kernel.yama.ptrace_scope = 3); UML needs it"
    libc = ctypes.CDLL(None, use_errno=True)
    pid = os.fork()
    if pid == 0:  # child: ask to be traced, report the result through the exit status
        rc = libc.ptrace(PTRACE_TRACEME, 0, None, None)
        os._exit(0 if rc == 0 else 1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return "ptrace is denied here (seccomp or a security module); UML needs it"
    return None


def shm_problem() -> str | None:
    """UML maps guest RAM from a file in $TMPDIR (/dev/shm or /tmp): it must allow exec."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "/dev/shm" and "noexec" in parts[3].split(","):
            tmp_noexec = any(p.split()[1] == "/tmp" and "noexec" in p.split()[3].split(",") for p in mounts
                             if len(p.split()) >= 4)
            if tmp_noexec:
                return "/dev/shm and /tmp are both mounted noexec; UML needs an executable TMPDIR for its RAM"
    return None


class Uml(Backend):
    name = "uml"
    phase_markers = "uml"
    summary = ("User-Mode Linux: the appliance kernel runs as a host process (no hardware virtualization), "
               "via a guestbench hypervisor program behind libguestfs's direct backend")
    channel = "virtio"
    appliance_flavour = "uml"
    colour = "#8172b3"
    opens_nbd = False  # UML's block driver opens only files: NBD exports reach it through nbdfuse

    def preconditions(self) -> Availability:
        if (why := libguestfs_available()) is not None:
            return Availability(False, why)
        if not UML_KERNEL.exists() or not os.access(UML_KERNEL, os.X_OK):
            return Availability(False, f"{UML_KERNEL} is missing (apt-get install user-mode-linux)")
        version = uml_kernel_version()
        if version is None:
            return Availability(False, "UML's kernel modules are missing under /usr/lib/uml/modules")
        for problem in (ptrace_allowed(), shm_problem()):
            if problem:
                return Availability(False, problem)
        try:
            appliance = appliance_dir(self.appliance_flavour)
        except ApplianceError as e:
            return Availability(False, f"cannot build the UML appliance: {e}")
        offered = modes()
        return Availability(True, f"UML {version} ({', '.join(offered)})",
                            {"uml": version, "appliance": str(appliance), "channel": self.channel,
                             "devices": " ".join(DEVICES), "modes": list(offered)})

    def handle_config(self, cache_dir: Path, workload: bool = False) -> HandleConfig:
        # always a fixed appliance: the stock one cannot boot on UML
        appliance = appliance_dir(self.appliance_flavour, "workload" if workload else "standard")
        offered = modes()  # the fastest first: a scenario's uml_mode (the cell's env) goes over it
        return HandleConfig("direct", [], hv=str(write_hv_wrapper(cache_dir)),
                            env={"LIBGUESTFS_PATH": str(appliance), CHANNEL_ENV: self.channel,
                                 **({MODE_ENV: offered[0]} if len(offered) > 1 else {})})

    def software(self) -> dict[str, Any]:
        return {**super().software(), "uml_modes": list(modes())}

    def probe_key(self) -> dict[str, Any]:
        v = fingerprint.versions()
        return {"libguestfs": v.get("libguestfs"), "uml": uml_kernel_version(), "kernel": v.get("kernel"),
                "appliance": _built(self.appliance_flavour), "channel": self.channel, "modes": list(modes())}


@lru_cache(maxsize=1)
def modes() -> tuple[str, ...]:
    """The userspace modes this UML kernel offers, the fastest first: seccomp and ptrace where its command line takes
    `seccomp=` (UML 6.16 and later; 3.7x faster fork+exec here, docs/stacks.md), else ptrace alone. Read from the
    kernel's own help text in its binary, never by running it (a dry run starts no hypervisor)."""
    return offered_modes(UML_KERNEL)


def _built(flavour: str) -> str | None:
    """Which standard appliance of `flavour` is built (its variant and the hash of what it is made from), else None
    (never builds: a probe key is cheap). Not its path: the same build under another temp root (a fleet worker's
    home, each of make test's workers) boots the same, and a path in the key had each one probe UML again."""
    try:
        path = appliance_dir(flavour, build=False)
        given = prebuilt(flavour, "standard")
    except ApplianceError:
        return None
    # UML runs the appliance's copy of its kernel: where that cannot run (a noexec temp root), a verdict from
    # elsewhere does not hold
    runs = "" if os.access(path / "kernel", os.X_OK) else " (its kernel cannot run there)"
    return (str(given) if given is not None else f"{path.parent.name}/{path.name}") + runs  # a user's own: its path


def write_hv_wrapper(cache_dir: Path) -> Path:
    """The program libguestfs runs as its hypervisor: guestbench's UML translator, in this interpreter."""
    path = hv_path(cache_dir, "uml")
    text = f'#!/bin/sh\nexec {sys.executable} -m guestbench.backends.uml.hv "$@"\n'
    return install_script(path, text)


__all__ = ["Uml"]
