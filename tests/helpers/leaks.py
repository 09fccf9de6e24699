"""What a test may leave on the host — hypervisor processes, libguestfs's socket directories, run directories,
control groups, unreaped children — told apart from what a stranger (another worker, another session, a user)
runs beside it, so that a test can say "nothing of mine is left" on a shared machine."""

from __future__ import annotations

import os
import time
from pathlib import Path
from collections.abc import Callable

from guestbench.execute.supervisor import socket_dirs_of
from guestbench.host import cgroups
from helpers.session import OWN, WORKER, made_by, run_dirs


def processes_mentioning(text: str, *more: str) -> list[str]:
    """Command lines (cut to 200 characters) of live processes that mention `text`, and each of `more`, anywhere in
    the whole line (qemu's mention their drives' paths)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        cmd = raw.replace(b"\0", b" ").decode("utf-8", "replace")
        if text in cmd and all(m in cmd for m in more) and "pytest" not in cmd:
            found.append(f"{entry}: {cmd[:200]}")
    return found


def hypervisor_processes() -> list[str]:
    """Live processes working in the session's temp root: a hypervisor (or helper) of one of its runs."""
    return [p for p in processes_mentioning(str(OWN / "tmp") + "/")]


def socket_dirs() -> set[Path]:
    """libguestfs's socket directories (as root always /tmp/libguestfsXXXXXX)."""
    return set(Path("/tmp").glob("libguestfs??????"))


def _states() -> dict[int, tuple[str, int]]:
    """Every process's state letter and parent pid."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                found[int(entry)] = (fields[0], int(fields[1]))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _parents() -> dict[int, int]:
    return {pid: parent for pid, (_, parent) in _states().items()}


def unreaped_children(parent: int) -> list[int]:
    """Children of `parent` that ended and were never reaped (zombies)."""
    return [pid for pid, (state, pp) in _states().items() if state == "Z" and pp == parent]


def process_tree(root: int) -> set[int]:
    """`root` and every process below it: a command's workers, hypervisors and helpers, whatever they call
    themselves."""
    parents = _parents()
    ours = {root}
    grew = True
    while grew:
        more = {p for p, pp in parents.items() if pp in ours} - ours
        grew = bool(more)
        ours |= more
    return ours


def descendants() -> set[int]:
    """This test process's live descendants: what its tests started and still runs."""
    return process_tree(os.getpid()) - {os.getpid()}


def strangers() -> list[int]:
    """Live processes that this session did not start: another test session, a user's libguestfs tool, CI."""
    mine = descendants() | {os.getpid()}
    return [p for p in _parents() if p not in mine]


def leftover_sockdirs(before: set[Path]) -> set[Path]:
    """Socket directories made since `before` that no stranger holds: ours (a stranger's live appliance on a shared
    machine, or another worker's, is not ours to judge)."""
    new = socket_dirs() - before
    return new - set(socket_dirs_of(strangers())) if new else set()


def leftover_groups() -> list[Path]:
    """guestbench's control groups that are ours: a dead run's, or a live one's this session started. A live
    stranger's run on the same host has its own."""
    from guestbench.host import procs

    mine = descendants() | {os.getpid()}  # an in-process Supervisor's group is guestbench-<this pid>-<start>
    found = []
    for g in cgroups.leftovers(alive_owners_too=True):
        pid, start = cgroups.owner_of(g.name) or (0, None)
        if pid in mine or not procs.same_process(pid, start):  # a pid reused since is not the owner
            found.append(g)
    return found


def lasting(unheld: Callable[[], set[Path]], patience: float) -> set[Path]:
    """The socket directories `unheld()` names that stay for `patience` s. Beside another worker a directory no
    process holds may be its: one whose appliance just ended or was killed, before its handle is closed. Ours
    would stay; a moment's more patience tells them apart."""
    deadline = time.monotonic() + patience
    found = unheld()
    while found and time.monotonic() < deadline:
        time.sleep(0.5)
        found &= unheld()
    return found


def wait_no_leftovers(sockdirs_before: set[Path] | None = None, timeout: float = 10.0) -> None:
    """Assert that no run dir, socket dir or hypervisor of ours is left (allowing a moment for reaping)."""
    def new_sockdirs() -> set[Path]:
        return leftover_sockdirs(sockdirs_before) if sockdirs_before is not None else set()

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (run_dirs() or hypervisor_processes() or new_sockdirs()
                                           or leftover_groups()):
        time.sleep(0.2)
    left = lasting(new_sockdirs, deadline + (50 if WORKER else 0) - time.monotonic())
    assert run_dirs() == [], f"run directories left behind: {run_dirs()}"
    assert leftover_groups() == [], "control groups left behind"
    assert hypervisor_processes() == [], f"processes left behind: {hypervisor_processes()}"
    assert left == set(), ("libguestfs socket directories left behind: "
                           + " | ".join(made_by(f"sockdir:{d}") for d in sorted(left)))
