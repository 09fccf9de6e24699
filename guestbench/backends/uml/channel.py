"""Names the UML backend and its hypervisor program share.

Kept apart from hv.py so that the package never imports the program it runs with `python -m`: runpy warns
(into the console log users read) when the module it is about to run is already in sys.modules.
"""

from __future__ import annotations

import mmap
from pathlib import Path

CHANNEL_ENV = "GUESTBENCH_UML_CHANNEL"  # "virtio" (default) or "serial"
PORT_NAME = "org.libguestfs.channel.0"
# in the work dir: why the hypervisor program refused a launch (or ended one), a line each: "refused a launch: WHY"
REFUSALS_FILE = "hypervisor-refusals.txt"
# in the work dir: the path each of the last launch's drives took (ubd or vhost-user-blk), as a JSON list
DRIVE_PATHS_FILE = "drive-paths.json"
VIRTIO_BLK_ARG = "guestbench.virtio_blk"  # on UML's command line when a disk is virtio: the init loads virtio_blk

# The guest's devices, kept to what libguestfs's qemu appliance has. Debian's UML kernel registers 256 legacy BSD pty
# pairs (CONFIG_LEGACY_PTYS; its x86 kernel has none) and, on con=/ssl=null, 7 consoles besides con0 and 64 serial
# lines (libguestfs gives qemu one serial port: 8250.nr_uarts=1). udev's coldplug at boot handled each of those ~580
# tty devices through ptrace: 2.8 s of a 5.8 s start-up here, against 0.6 s of 3.2 s without them (docs/backends.md).
# With "none" UML's kernel logs one "setup_one_line failed" line per line not set up: that is all it does.
DEVICES = ("con=none", "ssl=none", "pty.legacy_count=0")


def refusals(workdir: Path) -> list[str]:
    """Why the hypervisor program refused launches in `workdir`: libguestfs shows a hypervisor's stderr only in
    verbose mode, so `guestbench exec` and the `command` measurement read it from here."""
    try:
        return (workdir / REFUSALS_FILE).read_text().splitlines()
    except OSError:
        return []

# UML's userspace mode (UML 6.16 and later: seccomp=on|off|auto on its command line; before, ptrace only): the mode
# a launch asks for, set by the backend's handle configuration (guestbench.backends.uml.modes)
MODE_ENV = "GUESTBENCH_UML_MODE"
SECCOMP, PTRACE = "seccomp", "ptrace"
MODES = (SECCOMP, PTRACE)
SECCOMP_OPTION = b"seccomp=<on/auto/off>"  # in the help text of a UML that has seccomp mode


def offered_modes(kernel: Path) -> tuple[str, ...]:
    """The userspace modes a UML kernel offers, the fastest first: seccomp and ptrace where its command line takes
    `seccomp=` (UML 6.16 and later), else ptrace alone. Read from its help text in its binary, never by running it
    (a dry run starts no hypervisor)."""
    try:
        with open(kernel, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            offered = m.find(SECCOMP_OPTION) >= 0
    except (OSError, ValueError):
        return (PTRACE,)
    return (SECCOMP, PTRACE) if offered else (PTRACE,)
