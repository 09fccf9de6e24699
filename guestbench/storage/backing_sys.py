"""What the host has and how to ask it: programs, device nodes, processes, mounts and loop devices.

Shared by the host storage kinds (guestbench.storage.backing_kinds), the building and tearing down of their
pieces, and the sweep of what dead runs left. Everything here only looks, or runs one short command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from guestbench.host import commands
from guestbench.host.procs import names, proc_comm
from guestbench.util.errors import Unavailable

SERVER_PROGRAMS = ("qemu-nbd", "nbdkit", "nbdfuse")
VG_PREFIX = "guestbench-"  # volume groups guestbench makes: guestbench-<pid>-<serial> (backing_kinds.lvm)
COMMAND_TIMEOUT_S = 60.0
_SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"


# ------------------------------------------------------------------ programs and device nodes

def which(program: str) -> str | None:
    """Find a program on PATH or in the sbin directories (which a test's PATH may lack)."""
    return shutil.which(program, path=os.environ.get("PATH", "") + ":" + _SBIN_PATH)


def exe(program: str) -> str:
    path = which(program)
    if path is None:
        raise Unavailable(f"{program} is not installed on this host")
    return path


@cache
def nbdkit_config() -> dict[str, str]:
    """`nbdkit --dump-config` as a dict (filterdir, plugindir, version...); empty without nbdkit."""
    path = which("nbdkit")
    if path is None:
        return {}
    try:
        out = subprocess.run([path, "--dump-config"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def nbdkit_has(what: str, name: str) -> bool:
    """Whether nbdkit has a plugin or filter (what = "plugin" or "filter")."""
    d = nbdkit_config().get(f"{what}dir")
    return d is not None and Path(d, f"nbdkit-{name}-{what}.so").exists()


def device_mapper_problem() -> str | None:
    """None when the kernel's device-mapper answers; else what failed. Opening the control node is all
    dmsetup does first, and it creates nothing."""
    try:
        fd = os.open("/dev/mapper/control", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        try:
            listed = "device-mapper" in Path("/proc/misc").read_text()
        except OSError:
            listed = False
        return (f"opening /dev/mapper/control failed: {e.strerror} (errno {e.errno}); /proc/misc "
                f"{'lists' if listed else 'lists no'} device-mapper driver")
    os.close(fd)
    return None


def fuse_problem() -> str | None:
    """None when an NBD export can be shown as a plain file here (nbdfuse); else why not."""
    missing = [p for p in ("nbdfuse", "fusermount3") if which(p) is None]
    if missing:
        return f"presenting NBD as a file needs {' and '.join(missing)} (Debian: libnbd-bin, fuse3)"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC))
    except OSError as e:
        return f"presenting NBD as a file needs FUSE: opening /dev/fuse failed: {e.strerror}"
    return None


def loop_problem() -> str | None:
    """None when this process can attach loop devices; else why not."""
    if os.geteuid() != 0:
        return "loop devices need root"
    if not Path("/dev/loop-control").exists():
        return "the host kernel has no loop driver (/dev/loop-control is missing)"
    return None


# ------------------------------------------------------------------ commands

def run(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run a short command; a timeout becomes a RuntimeError naming it."""
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=timeout, env=dict(os.environ, LVM_SUPPRESS_FD_WARNINGS="1"))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(argv)} did not finish within {timeout:.0f} s") from None


def checked(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run a short command that must succeed; its stdout."""
    return commands.checked(argv, " ".join(argv), timeout, env=dict(os.environ, LVM_SUPPRESS_FD_WARNINGS="1"))


def servers_under(directory: Path) -> list[int]:
    """Pids of the effective user's NBD/FUSE server processes whose command line names something inside
    `directory`."""
    return [int(e) for e in os.listdir("/proc")
            if e.isdigit() and proc_comm(int(e)) in SERVER_PROGRAMS and names(int(e), directory)]


# ------------------------------------------------------------------ mounts and loop devices

def mounts() -> list[str]:
    """Mount points from /proc/self/mounts, with their octal escapes decoded."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), ln.split()[1]) for ln in lines if ln.split()]


def fs_type(path: Path) -> str:
    """The type of the filesystem holding `path` (the longest mount point that contains it)."""
    best, kind = "", "?"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return kind
    p = str(path)
    for ln in lines:
        parts = ln.split()
        inside = len(parts) > 2 and (p == parts[1] or p.startswith(parts[1].rstrip("/") + "/"))
        if inside and len(parts[1]) >= len(best):
            best, kind = parts[1], parts[2]
    return kind


def loop_backing(device: str) -> str | None:
    """The file behind a loop device (without the kernel's " (deleted)" mark); None when unattached."""
    try:
        text = Path(f"/sys/block/{Path(device).name}/loop/backing_file").read_text().strip()
    except OSError:
        return None
    return text.removesuffix(" (deleted)")


def loops_under(directory: Path) -> list[tuple[str, str]]:
    """(device, backing file) of every loop device whose backing file is inside `directory`."""
    found = []
    prefix = str(directory).rstrip("/") + "/"
    for sysdir in sorted(Path("/sys/block").glob("loop*")):
        backing = loop_backing(f"/dev/{sysdir.name}")
        if backing and backing.startswith(prefix):
            found.append((f"/dev/{sysdir.name}", backing))
    return found
