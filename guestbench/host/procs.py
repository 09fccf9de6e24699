"""Processes, read from /proc: a pid told from a later reuse by its start time, its name, user and command line,
who names a directory, and signals that tolerate a process already gone."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable


@dataclass(frozen=True)
class Stat:
    """What /proc/PID/stat says of a process that guestbench reads."""

    state: str  # R, S, D, Z ...
    ppid: int
    ticks: int  # user + system CPU of the process and of the children it reaped (clock ticks)
    start: int  # start time in clock ticks since boot: tells a pid from a later reuse
    rss_pages: int
    session: int  # the session's leader: a process started with setsid(2) leads its own


def stat(pid: int) -> Stat | None:
    """The process's /proc/PID/stat, None when it is gone (or the file is not whole)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # the command name may hold spaces, parentheses and bytes of no encoding (cut at 15): fields after the last ")"
    # rest[k] is field k+3 of proc(5): state 3, ppid 4, session 6, utime stime cutime cstime 14-17, starttime 22,
    # rss 24
    rest = raw.rsplit(b")", 1)[-1].split()
    if len(rest) < 22:  # not a whole stat line
        return None
    return Stat(rest[0].decode("ascii", "replace"), int(rest[1]), sum(int(v) for v in rest[11:15]), int(rest[19]),
                int(rest[21]), int(rest[3]))


def pids() -> list[int]:
    """Every process now."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def children() -> dict[int, list[int]]:
    """Every process's children now, by parent pid."""
    kids: dict[int, list[int]] = {}
    for pid in pids():
        if (st := stat(pid)) is not None:
            kids.setdefault(st.ppid, []).append(pid)
    return kids


def argv(pid: int) -> list[str]:
    """The process's command line, word by word ([] when it is gone, or a kernel thread)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def proc_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (tells a pid from a later reuse); None if gone."""
    st = stat(pid)
    return None if st is None or st.state == "Z" else st.start


def proc_comm(pid: int) -> str:
    """A process's name; any user may give theirs bytes of no encoding (prctl PR_SET_NAME)."""
    try:
        return Path(f"/proc/{pid}/comm").read_bytes().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def proc_uid(pid: int) -> int | None:
    """The uid a process runs as (real, effective, saved and filesystem uids alike; else -1); None if gone.
    From /proc/PID/status, not the owner of /proc/PID, which is root for any process that makes itself
    non-dumpable."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("Uid:"):
            uids = set(line.split()[1:])
            return int(uids.pop()) if len(uids) == 1 else -1
    return None


def proc_euid(pid: int) -> int | None:
    """The effective uid a process runs as (whose files it may open); None if gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("Uid:") and len(line.split()) > 2:
            return int(line.split()[2])
    return None


def proc_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def same_process(pid: int, start: int | None) -> bool:
    now = proc_start(pid)
    return now is not None and (start is None or now == start)


def wait_gone(pid: int, start: int | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while same_process(pid, start):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def kill(pid: int, sig: int) -> None:
    """Signal a process and, when it leads a process group (our servers lead their own session), its group."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def killpg(pgid: int, sig: int) -> None:
    """Signal a whole process group, if any process is left in it."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def names(pid: int, directory: Path) -> bool:
    """Whether a process of the effective user's has something inside `directory` on its command line."""
    return proc_uid(pid) == os.geteuid() and str(directory).rstrip("/") + "/" in proc_cmdline(pid)


def users(directory: Path) -> list[int]:
    """Pids of processes, whoever runs them, whose command line names something inside `directory` (a hypervisor
    names its drives). Any user's: libvirt runs qemu as its own user, and a directory still in use is only ever
    kept for it, never acted on."""
    inside = str(directory).rstrip("/") + "/"
    return [pid for pid in pids() if inside in proc_cmdline(pid)]


PR_SET_PDEATHSIG = 1


def die_with(parent: int, sig: int = 9) -> Callable[[], None]:
    """A preexec_fn for a child that must end with its parent (`parent`: the parent's pid, read before the fork):
    `sig` (SIGKILL by default) when the parent dies, and an exit at once if it died before the child asked for that
    (the kernel sends that signal only for a death that comes after the asking: CI C8's and A9's builds)."""
    def preexec() -> None:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return preexec
