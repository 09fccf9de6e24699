"""Other guestbench runs on this host: a host-wide registry of active runs, and a watcher that says, sample by
sample, whether another run was measuring at the same time (the sample was taken on a shared host).

Each run holds an flock on its own file in RUNS_DIR for its whole life. A file whose lock can be taken belongs
to a run that died (even by SIGKILL: the kernel drops the lock) and is removed by whoever finds it. Two runs on
one host both finish and both keep their figures; their samples say that the host was shared, so a reader can
tell a slow figure from a crowded machine (guestbench.report counts them beside the busy samples).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNS_DIR_ENV = "GUESTBENCH_RUNS_DIR"
POLL_S = 1.0


def runs_dir() -> Path:
    """$GUESTBENCH_RUNS_DIR, else /tmp/guestbench-runs: one directory for every user's runs (sticky, like /tmp)."""
    d = Path(os.environ.get(RUNS_DIR_ENV) or "/tmp/guestbench-runs")
    if not d.is_dir():
        d.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(d, 0o1777)
        except OSError:  # another user's directory: usable as it is
            pass
    return d


@dataclass(frozen=True)
class RunEntry:
    """What a run says about itself in the registry."""

    id: str
    pid: int
    started_utc: str
    what: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "pid": self.pid, "started_utc": self.started_utc, "what": self.what}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunEntry:
        return cls(str(d["id"]), int(d["pid"]), str(d["started_utc"]), str(d["what"]))


class Registration:
    """This run's entry, held (locked) from __enter__ to __exit__."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.id = f"{os.getpid()}-{time.time_ns()}"
        self.path = runs_dir() / f"{self.id}.run"
        self._fd: int | None = None

    def __enter__(self) -> Registration:
        # made under another name, locked and written, then renamed: a *.run file is never seen unlocked
        making = self.path.with_suffix(".making")
        fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        entry = RunEntry(self.id, os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), self.what)
        os.write(fd, (json.dumps(entry.to_dict()) + "\n").encode())
        os.rename(making, self.path)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            os.close(self._fd)  # drops the lock
            self._fd = None


def active(exclude: str | None = None) -> list[RunEntry]:
    """The runs active on this host now (locked entries), but `exclude` (an id); dead runs' entries are removed."""
    found = []
    try:
        paths = sorted(runs_dir().glob("*.run"))
    except OSError:
        return []
    for path in paths:
        if path.stem == exclude:
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:  # ended meanwhile
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # held: the run is alive
                try:
                    found.append(RunEntry.from_dict(json.loads(os.read(fd, 4096) or b"{}")))
                except (ValueError, KeyError):  # being written this instant: alive, details unknown
                    found.append(RunEntry(path.stem, 0, "", "?"))
                continue
            try:  # nobody holds it: its run died without removing it
                path.unlink()
            except OSError:
                pass
        finally:
            os.close(fd)
    return found


class Neighbours(threading.Thread):
    """Polls the registry while a run lasts; `during(s)` is how many other runs were active in the last s
    seconds (a sample that just ended and lasted s)."""

    def __init__(self, me: Registration) -> None:
        super().__init__(name="guestbench-neighbours", daemon=True)
        self.me = me
        self._seen: dict[str, tuple[float, float]] = {}  # run id -> (first, last) monotonic time seen
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def __enter__(self) -> Neighbours:
        self.look()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self.join(timeout=5)

    def run(self) -> None:
        while not self._halt.wait(POLL_S):
            self.look()

    def look(self) -> None:
        now = time.monotonic()
        ids = [e.id for e in active(exclude=self.me.id)]
        with self._lock:
            for i in ids:
                first, _ = self._seen.get(i, (now, now))
                self._seen[i] = (first, now)

    def during(self, seconds: float) -> int:
        """Other runs seen between `seconds` (plus one poll) ago and now."""
        self.look()
        now = time.monotonic()
        since = now - seconds - POLL_S
        with self._lock:
            return sum(1 for _first, last in self._seen.values() if last >= since)

    def ever(self) -> list[str]:
        with self._lock:
            return sorted(self._seen)
