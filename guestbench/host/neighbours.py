"""Other guestbench runs on this host: a registry of the active runs of the effective user (root's, in a directory
only root can write), and a watcher that says, sample by sample, whether another run was measuring at the same
time (the sample was taken on a shared host).

Each run holds an flock on its own file in runs_dir() for its whole life. A file whose lock can be taken belongs
to a run that died (even by SIGKILL: the kernel drops the lock) and is removed by whoever finds it. Entries are
0600, so no other user can open one to hold its lock; an entry others could open (0644, made before 2026-11-28)
counts only while a process of the user's holds it (locks.holders): another user holding a dead run's entry does
not keep that run active. Two runs on
one host both finish and both keep their figures; their samples say that the host was shared, so a reader can
tell a slow figure from a crowded machine (guestbench.output.tables.timing counts them beside the busy samples).
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guestbench.host import locks
from guestbench.host import owned

RUNS_DIR_ENV = "GUESTBENCH_RUNS_DIR"
POLL_S = 1.0
ENTRY_MAX = 4096  # an entry is one short JSON line; more is not read


def runs_dir() -> Path:
    """$GUESTBENCH_RUNS_DIR, else `runs` in owned.runtime_dir() (/run/guestbench/runs for root): the effective
    user's runs only, in a directory nobody else can write, made and checked at each call. A directory every
    user shared (the old sticky /tmp/guestbench-runs) let anyone plant an entry that stopped every run."""
    given = os.environ.get(RUNS_DIR_ENV)
    if given:
        return owned.ensure_dir(Path(given), f"the registry of active runs ({RUNS_DIR_ENV})", env=RUNS_DIR_ENV)
    return owned.ensure_dir(owned.runtime_dir() / "runs", "the registry of active runs", env=RUNS_DIR_ENV)


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
        fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)  # the user's alone: an entry another user could open is one they could hold
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
    """The runs active on this host now (entries locked by the user's processes), but `exclude` (an id); dead
    runs' entries are removed.
    Only the effective user's regular files count: anything else there (a FIFO, a device, a symlink, another
    user's file) is never followed, waited on or removed, just ignored."""
    found = []
    try:
        paths = sorted(runs_dir().glob("*.run"))
    except OSError:
        return []
    for path in paths:
        if path.stem == exclude:
            continue
        fd = _open_entry(path)
        if fd is None:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # held: the run is alive, if the holder could only be the user's
                if _held_by_the_user(fd):
                    found.append(_read_entry(fd, path))
                    continue
            try:  # no process of the user's holds it: its run died without removing it
                path.unlink()
            except OSError:
                pass
        finally:
            os.close(fd)
    return found


def _open_entry(path: Path) -> int | None:
    """A descriptor on `path` when it is one of the effective user's regular files; None otherwise (or gone).
    Another user's file is not even opened (lstat first); O_NONBLOCK: opening a FIFO never waits for a writer;
    O_NOFOLLOW: a symlink is not followed; fstat after: what was opened is what lstat saw, the user's."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # ended meanwhile, a symlink, or not ours to read
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        return None
    return fd


def _held_by_the_user(fd: int) -> bool:
    """Whether the lock on a held entry is a run's: a 0600 entry only the user's processes can have opened; one
    others could open (an older guestbench's) counts while a process of the user's is among its holders."""
    st = os.fstat(fd)
    return not st.st_mode & locks.PRIVATE or any(h.ours() for h in locks.holders(st))


def _read_entry(fd: int, path: Path) -> RunEntry:
    try:
        return RunEntry.from_dict(json.loads(os.pread(fd, ENTRY_MAX, 0) or b"{}"))
    except (ValueError, KeyError, TypeError, AttributeError):  # being written this instant: alive, details unknown
        return RunEntry(path.stem, 0, "", "?")


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


def other_runs() -> int:
    """Other guestbench runs active on this machine now (the host-wide registry; not this process or its parent)."""
    mine = {os.getpid(), os.getppid()}
    return sum(1 for run in active() if run.pid not in mine)
