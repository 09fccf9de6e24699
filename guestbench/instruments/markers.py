"""Boot-phase breakdown: a start-up sample cut into phases by markers in libguestfs's event stream.

Why from events: the library, the hypervisor and the appliance all print to libguestfs's event stream
(library log, hypervisor/appliance console, trace); the worker stamps every line on arrival with the
same monotonic clock that times the launch. A phase starts at the arrival of its marker line and ends
where the next phase found starts; the last one ends when the daemon answered. So the phases of a sample
always sum to that sample's start-up, whatever markers were missing: a missing marker only merges its
phase into the one before it, and lines that arrive out of order are ignored (boundaries only move
forward).

Markers differ by hypervisor family. qemu prints its firmware banner and the kernel's first line as
they happen. UML has no firmware, and buffers the kernel's early console until its console channel is
up, so its kernel phase starts at UML's own host-side checks instead. Everything from the appliance's
``/init`` on is the same libguestfs appliance on both and is recognised by the shell trace
(``set -x``) that its /init prints in verbose mode.

Recording phases needs libguestfs's verbose mode (kernel and /init print what the markers match) plus
``guestfs_boot_analysis=1`` on the kernel command line (the appliance's /init then skips its verbose
diagnostics dump, as libguestfs's own boot-analysis tool does). The extra console output costs time,
most on TCG, where the serial port is emulated: a run with phases is a different run from one without,
and its cells say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple
from collections.abc import Iterable, Sequence


# Kernel command line words added to a launch that records phases.
APPEND = "guestfs_boot_analysis=1"


@dataclass(frozen=True)
class Phase:
    """A phase starts at the first line, from `source`, that matches `marker` (after earlier phases)."""

    name: str
    marker: str  # regular expression, searched in one console/log line
    source: str  # "libguestfs" | "appliance"
    what: str  # what happens during the phase, for tables and README
    host_side: bool  # True: spent on the host (library, hypervisor start, firmware) — not the appliance

    def search(self, source: str, line: str, pos: int = 0) -> re.Match[str] | None:
        return re.compile(self.marker).search(line, pos) if source == self.source else None


LIBRARY = Phase("library set-up", r"", "libguestfs",
                "libguestfs: appliance cache check, hypervisor feature probes (cached), handle set-up", True)
# direct backend: qemu's features are tested (cached) just before its command line is built; libvirt
# backend: the domain is created right after this line.
HYPERVISOR = Phase("hypervisor start", r"finished testing qemu features|launch libvirt guest", "libguestfs",
                   "hypervisor started: command line (direct) or domain created through libvirt", True)
FIRMWARE = Phase("firmware", r"SeaBIOS \(version", "appliance", "firmware (SeaBIOS) until it boots the Linux loader",
                 True)
LOADER = Phase("kernel load, early boot", r"Booting from ROM", "appliance",
               "loading kernel and initrd, decompression, early kernel boot until the kernel console is up", False)
UML_EARLY = Phase("kernel early boot", r"Checking that (ptrace can change system call numbers|seccomp filters can be "
                  r"installed)", "appliance",
                  "UML's host checks and early kernel boot until the kernel console is up (UML holds back "
                  "the kernel's first messages until then)", False)
KERNEL = Phase("kernel init", r"Linux version \d", "appliance",
               "kernel initialisation, from its console coming up until it runs the first user-space program",
               False)
INITRD = Phase("initrd", r"Run /\S+ as init process", "appliance",
               "supermin's mini initrd: kernel modules, mounting the appliance root", False)
INIT = Phase("/init set-up", r"Starting /init script", "appliance",
             "the appliance's /init: mounts, tmpfiles, starting udevd", False)
# /init's trace lines: "+ cmd" (bash's default PS4; trixie's libguestfs 1.54), "/init: cmd" (sid's 1.60 sets PS4)
TRACE = r"^(?:\+|/init:) "
UDEV = Phase("udev", TRACE + r"udevadm trigger", "appliance",
             "udev: trigger and settle (device nodes, module loading)", False)
PROBE = Phase("LVM/MD probing", TRACE + r"mdadm -As", "appliance",
              "scanning for MD arrays, LVM volume groups and Windows dynamic disks", False)
DAEMON = Phase("daemon start", TRACE + r"guestfsd\b", "appliance",
               "guestfsd starts, opens its channel and says it is ready", False)
ANSWER = Phase("first request", r"received GUESTFS_LAUNCH_FLAG", "libguestfs",
               "launch returns and one ping round trip to the daemon", False)

# The same appliance runs on every backend; only the stretch before /init differs. Keyed by console family (a
# backend's `phase_markers`), not by backend: a new backend names an existing family or adds one entry here.
MARKERS: dict[str, tuple[Phase, ...]] = {
    "qemu": (LIBRARY, HYPERVISOR, FIRMWARE, LOADER, KERNEL, INITRD, INIT, UDEV, PROBE, DAEMON, ANSWER),
    # UML boots the appliance root directly (no initrd): "Run /... as init process" starts /init.
    "uml": (LIBRARY, HYPERVISOR, UML_EARLY, KERNEL, Phase("/init set-up", INITRD.marker, "appliance", INIT.what, False),
            UDEV, PROBE, DAEMON, ANSWER),
}


class Line(NamedTuple):
    """A whole console/log line with the arrival time of each chunk it was made of."""

    t: float  # arrival of its first byte
    source: str
    text: str
    stamps: tuple[tuple[int, float], ...] = ()  # (offset in text, arrival time) of each chunk after the first

    def time_at(self, pos: int) -> float:
        """When the byte at `pos` arrived: a marker can follow other output on the same line (SeaBIOS
        clears the screen without a newline, then the kernel's first line follows seconds later)."""
        t = self.t
        for offset, when in self.stamps:
            if offset > pos:
                break
            t = when
        return t


class LineClock:
    """Reassembles console chunks into whole lines, remembering when each part arrived.

    libguestfs delivers console output in chunks that split lines anywhere; a marker must be matched on
    a whole line, and timed by the arrival of the chunk that carried it.
    """

    def __init__(self) -> None:
        self.partial: dict[str, tuple[str, list[tuple[int, float]]]] = {}

    def feed(self, t: float, source: str, chunk: str) -> list[Line]:
        text, stamps = self.partial.pop(source, ("", []))
        stamps.append((len(text), t))
        text += chunk.replace("\r", "")
        out = []
        start = 0
        while (end := text.find("\n", start)) >= 0:
            out.append(_line(source, text[start:end], stamps, start))
            start = end + 1
        if start < len(text):
            self.partial[source] = (text[start:], [(max(0, o - start), w) for o, w in stamps
                                                   if o >= start or o == _last_before(stamps, start)])
        return out

    def flush(self) -> list[Line]:
        out = [_line(src, text, stamps, 0) for src, (text, stamps) in self.partial.items()]
        self.partial.clear()
        return out


def _last_before(stamps: list[tuple[int, float]], pos: int) -> int:
    return max((o for o, _ in stamps if o <= pos), default=0)


def _line(source: str, text: str, stamps: list[tuple[int, float]], start: int) -> Line:
    """The line text[start:start+len(text)] with its chunk stamps made relative to the line."""
    first = _last_before(stamps, start)
    mine = [(o, w) for o, w in stamps if o >= first]
    t0 = mine[0][1]
    rest = tuple((o - start, w) for o, w in mine[1:] if start < o < start + len(text))
    return Line(t0, source, text, rest)




def split(lines: Iterable[Line], total: float, family: str, origin: float = 0.0) -> list[dict[str, Any]]:
    """Cut one launch into phases.

    `lines` in arrival order, stamped on the clock that timed the launch; the launch started at `origin`
    and took `total` seconds. Returns [{"name", "s"}] in boot order; durations sum to `total` (the first
    phase starts at the launch and the last ends when the daemon answered).
    """
    markers = MARKERS[family]
    starts: list[tuple[str, float]] = [(markers[0].name, 0.0)]
    k = 1
    for line in lines:
        pos = 0  # one line can hold several markers (output that did not end its line, then the next)
        while k < len(markers):
            found = _next_marker(markers, k, line, pos)
            if found is None:
                break
            j, m = found
            t = line.time_at(m.start()) - origin
            if not starts[-1][1] <= t <= total:  # boundaries only move forward, and stay inside the launch
                break
            starts.append((markers[j].name, t))
            k, pos = j + 1, m.end()
        if k >= len(markers):
            break
    out = []
    for i, (name, start) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else total
        out.append({"name": name, "s": end - start})
    return out


def _next_marker(markers: Sequence[Phase], k: int, line: Line, pos: int) -> tuple[int, re.Match[str]] | None:
    """The first of markers[k:] found in the line after `pos`; a later one found means the ones between
    are missing from this boot."""
    for j in range(k, len(markers)):
        m = markers[j].search(line.source, line.text, pos)
        if m is not None:
            return j, m
    return None




def host_side_names() -> set[str]:
    return {p.name for ps in MARKERS.values() for p in ps if p.host_side}
