"""Host daemons guestbench relies on (libvirtd, virtlogd): which processes are this root's, and what they are doing
when they do not answer — read from /proc, never by asking the daemon, which is what did not work.

A daemon in a chroot on the same machine (another Debian's libvirt, without a PID namespace of its own) shows in
/proc too; its processes are not this root's and are neither counted as running nor signalled. A call past its
deadline names what the daemon was doing then: stopped, its threads' kernel waits, a child it waits on (a
capabilities probe of qemu) and for how long, a qemu that does not die (issue 45: a level-1 guest's createXML
went unanswered for 60 s four times in a row, and nothing said why).
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

from guestbench.host import procs

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_STATES = {"T": "stopped", "t": "stopped by a tracer", "D": "in an uninterruptible wait", "Z": "a zombie"}


def same_root(pid: int) -> bool:
    """Whether the process sees the filesystem root this process sees (not a chroot's daemon). A process whose root
    this user may not read (root's, to a user who is not) counts as this root's: as pgrep counted it."""
    try:
        mine = os.stat("/proc/self/root")
        theirs = os.stat(f"/proc/{pid}/root")
    except PermissionError:
        return True
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (mine.st_dev, mine.st_ino)


def pids_of(name: str, uid: int | None = 0) -> list[int]:
    """Live processes named `name` (their comm) under this root, run by `uid` (root's daemons: another user's process
    of that name is not libvirtd; None: anyone's)."""
    return [p for p in procs.pids() if procs.proc_comm(p) == name and procs.proc_start(p) is not None
            and (uid is None or procs.proc_uid(p) == uid) and same_root(p)]


def running(name: str) -> bool:
    return bool(pids_of(name))


def _age_s(start_ticks: int) -> float:
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - start_ticks / _CLOCK_TICKS)


def _waits(pid: int) -> str:
    """Its threads grouped by where each waits in the kernel (wchan), most first: '26 threads: futex_wait ×20, ...'."""
    counts: collections.Counter[str] = collections.Counter()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return "gone"
    for tid in tasks:
        try:
            wchan = Path(f"/proc/{pid}/task/{tid}/wchan").read_text().strip() or "running"
        except OSError:
            continue
        counts["running" if wchan == "0" else wchan] += 1
    top = ", ".join(f"{w} ×{n}" for w, n in counts.most_common(4))
    return f"{len(tasks)} threads: {top}"


def _one(pid: int, kids: dict[int, list[int]]) -> str:
    st = procs.stat(pid)
    if st is None:
        return f"pid {pid} gone"
    state = _STATES.get(st.state, "")
    text = f"pid {pid}{' ' + state if state else ''}, up {_age_s(st.start):.0f} s, {_waits(pid)}"
    children = []
    for child in kids.get(pid, []):
        cst = procs.stat(child)
        if cst is None:
            continue
        # its name, not its command line: reading that takes the child's memory lock, which a qemu stuck in the
        # kernel may hold, and this runs where a deadline has passed and must not wait on anything
        children.append(f"{procs.proc_comm(child)} (pid {child}, {cst.state}, {_age_s(cst.start):.0f} s)")
    if children:
        text += "; waiting on " + "; ".join(children[:3])
    return text


def describe(names: tuple[str, ...] = ("libvirtd", "virtlogd"), uid: int | None = 0) -> str:
    """One line on what the daemons (run by `uid`) are doing now, and any qemu that is not running normally (stopped,
    in an uninterruptible wait, a zombie): for the message of a call that passed its deadline. Reads only files of
    /proc that never wait on the process read."""
    kids = procs.children()
    stuck = []
    for pid in procs.pids():
        st = procs.stat(pid)
        if st is not None and st.state in _STATES and procs.proc_comm(pid).startswith("qemu-system"):
            stuck.append(f"qemu pid {pid} {_STATES[st.state]} for up to {_age_s(st.start):.0f} s")
    parts = []
    for name in names:
        found = pids_of(name, uid)
        parts.append(f"{name}: " + ("; ".join(_one(p, kids) for p in found) if found else "not running"))
    if stuck:
        parts.append("; ".join(stuck[:4]))
    return " | ".join(parts)
