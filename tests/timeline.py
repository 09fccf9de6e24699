"""Which test made it: a timeline of the suite, shared by its workers, so that a leftover names its maker.

Every worker (and the alone run) appends to one file in the suite's root as each test starts and ends, with what
it saw on the host at that moment: libguestfs's /tmp directories, loop devices, running libvirt domains. A
leftover check that finds one of those then says when it first appeared (between which two looks), its birth
time where the filesystem keeps one, and which tests, on which worker, were running then (issue 45: an empty
/tmp/libguestfsXXXXXX was found twice by tests that had not made it, and its maker was never found).
"""

from __future__ import annotations

import glob
import os
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_MAX_LINE = 4000  # one write(2) of an O_APPEND file is not split between writers up to far more than this


# Temporary files of the programs a cell runs, made where TMPDIR says, else here: qemu's overlay of a snapshot=on
# drive (libguestfs's appliance root), supermin's build directory. A cell's programs get its work dir as TMPDIR.
SCRATCH = ("/var/tmp/vl.??????", "/tmp/vl.??????", "/var/tmp/supermin*.tmpdir", "/tmp/supermin*.tmpdir")


def scratch_files() -> set[str]:
    """This user's programs' temporary files outside any work dir, each as scratch:PATH (another user's are not the
    suite's)."""
    def mine(path: str) -> bool:
        try:
            return os.lstat(path).st_uid == os.geteuid()
        except OSError:
            return False

    return {f"scratch:{p}" for pattern in SCRATCH for p in glob.glob(pattern) if mine(p)}


def host_things() -> set[str]:
    """What a test can leave on the host, each as one word: sockdir:PATH, scratch:PATH, loop:NAME=BACKING,
    domain:NAME."""
    found = {f"sockdir:{p}" for p in glob.glob("/tmp/libguestfs??????")} | scratch_files()
    for back in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            found.add(f"loop:{back.split('/')[3]}={Path(back).read_text().strip()}")
        except OSError:
            continue
    found |= {f"domain:{Path(p).stem}" for p in glob.glob("/run/libvirt/qemu/*.xml")}
    return found


class Timeline:
    """This process's side of the shared timeline file."""

    def __init__(self, path: Path, worker: str) -> None:
        self.path, self.worker = path, worker
        self._seen: set[str] = set()
        self.broken: str | None = None  # why it stopped writing: the timeline must never cost a test

    def _write(self, kind: str, text: str) -> None:
        if self.broken is not None:
            return
        line = f"{time.time():.3f} {self.worker} {kind} {text}"[:_MAX_LINE].replace("\n", " ") + "\n"
        try:  # a regular file of this user's, never a link or a FIFO someone put in the way
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    raise OSError(f"{self.path} is not a regular file of this user's")
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as e:
            self.broken = f"the suite's timeline stopped: {e}"

    def look(self) -> None:
        now = host_things()
        for thing in sorted(now - self._seen):
            self._write("+", thing)
        for thing in sorted(self._seen - now):
            self._write("-", thing)
        self._seen = now

    def start(self, nodeid: str) -> None:
        self.look()
        self._write("start", nodeid)

    def end(self, nodeid: str) -> None:
        self._write("end", nodeid)
        self.look()


@dataclass
class _Event:
    at: float
    worker: str
    kind: str
    text: str


def _events(path: Path) -> list[_Event]:
    out = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(" ", 3)
        if len(parts) == 4:
            try:
                out.append(_Event(float(parts[0]), parts[1], parts[2], parts[3]))
            except ValueError:
                continue
    return out


def birth(path: str) -> float | None:
    """The file's birth time (statx, through coreutils' stat), None where the filesystem keeps none."""
    try:
        out = subprocess.run(["stat", "-c", "%.9W", path], capture_output=True, text=True, timeout=5).stdout.strip()
        born = float(out) if out and out != "-" else 0.0
        return born if born > 0 else None  # 0: the filesystem keeps none
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 10) % 10}"


def running_between(events: list[_Event], t0: float, t1: float) -> list[str]:
    """The tests that ran at some moment between t0 and t1, with their worker."""
    started: dict[tuple[str, str], float] = {}
    found: list[str] = []
    for e in events:
        if e.kind == "start":
            started[(e.worker, e.text)] = e.at
        elif e.kind == "end" and (e.worker, e.text) in started:
            if started.pop((e.worker, e.text)) <= t1 and e.at >= t0:
                found.append(f"{e.worker} {e.text}")
    found += [f"{w} {t} (not ended)" for (w, t), at in started.items() if at <= t1]
    return found


def who_made(path: Path, thing: str) -> str:
    """Where `thing` (host_things' word) came from, as far as the timeline tells: for a failure message."""
    events = _events(path)
    if not events:
        return "no suite timeline to say who made it"
    first = next((e for e in events if e.kind == "+" and e.text == thing), None)
    if first is None:
        return f"{thing} never seen by the timeline's looks"
    before = [e.at for e in events if e.kind in ("start", "end") and e.at < first.at]
    t0 = max(before) if before else events[0].at
    born = birth(thing.split(":", 1)[1]) if thing.startswith(("sockdir:", "scratch:")) else None
    if born is not None:
        t0 = t1 = born
    else:
        t1 = first.at
    tests = running_between(events, t0, t1)
    when = f"born {_clock(born)}" if born is not None else f"appeared between {_clock(t0)} and {_clock(t1)}"
    shown = "; ".join(tests[:8]) + (f"; and {len(tests) - 8} more" if len(tests) > 8 else "")
    return f"{thing}: {when}, first seen by {first.worker}; running then: {shown or 'no test'}"
