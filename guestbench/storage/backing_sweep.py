"""`sweep_stale`: what runs whose owner died left on the host (host storage, and their whole run directories),
undone at the next start, for the effective user's own runs only.

A state file is trusted only when its run directory, its work dir and the file itself are the effective
user's (lstat: no link, not writable by anyone else; guestbench.host.rundirs), and then each resource it lists
only when the dead run could have made it (`refusal`): files, directories and mounts strictly inside its
work dir, loop devices backed by a file there, volume groups with guestbench's prefix on such a loop device,
servers of the user's whose command line names the work dir. Anything else is left alone and said.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

from guestbench.host import rundirs
from guestbench.host.paths import RUN_PREFIX, temp_root
from guestbench.storage import backing_sys as bs
from guestbench.storage.backing_teardown import STATE_FILE, teardown, unmount
from guestbench.host import procs

_LOOP_RE = re.compile(r"/dev/loop[0-9]{1,6}")
_VG_RE = re.compile(re.escape(bs.VG_PREFIX) + r"[0-9]{1,10}-[0-9]{1,10}")
SHORT = 60  # at most this much of a value from a state file is quoted


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHORT else text[:SHORT] + "..."


def read_state(path: Path) -> dict[str, Any] | None:
    """A state file's contents when it is a regular file of the effective user's; None otherwise."""
    if rundirs.lstat_problem(path, want_dir=False):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            data = json.loads(os.read(fd, 4 * 2**20))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def owner_alive(state: dict[str, Any]) -> bool:
    owner = state.get("owner") or {}
    try:
        return procs.same_process(int(owner["pid"]), owner.get("start"))
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def inside(path: object, workdir: Path) -> bool:
    """Whether `path` names something strictly inside `workdir` (a real path), written plainly (absolute, no
    '..', '.' or '//') and reached only through real directories (no symbolic link on the way)."""
    if not isinstance(path, str) or "\0" in path or os.path.normpath(path) != path:
        return False
    prefix = str(workdir).rstrip("/") + "/"
    if not path.startswith(prefix) or len(path) == len(prefix):
        return False
    d = workdir
    for part in path[len(prefix):].split("/")[:-1]:
        d = d / part
        try:
            if not stat.S_ISDIR(os.lstat(d).st_mode):
                return False
        except OSError:
            return False
    return True


def _loop_inside(device: object, workdir: Path) -> bool:
    return isinstance(device, str) and _LOOP_RE.fullmatch(device) is not None \
        and inside(bs.loop_backing(device), workdir)


def refusal(res: dict[str, Any], workdir: Path) -> str | None:
    """Why a resource from a dead run's state file is not something that run could have made in `workdir`
    (so a sweep must not act on it); None when it is."""
    kind = res.get("type")
    if kind in ("image", "path"):
        return None if inside(res.get("path"), workdir) else f"{_short(res.get('path'))} is not inside it"
    if kind == "fuse":
        ok = inside(res.get("mountpoint"), workdir)
        return None if ok else f"mount {_short(res.get('mountpoint'))} is not inside it"
    if kind == "loop":
        ok = _loop_inside(res.get("device"), workdir) and inside(res.get("backing"), workdir)
        return None if ok else f"loop device {_short(res.get('device'))} is not backed by a file inside it"
    if kind == "vg":
        if not isinstance(res.get("vg"), str) or not _VG_RE.fullmatch(res["vg"]):
            return f"volume group {_short(res.get('vg'))} is not named {bs.VG_PREFIX}<pid>-<n>"
        ok = _loop_inside(res.get("pv"), workdir)
        return None if ok else f"volume group {res['vg']} is not on a loop device backed by a file inside it"
    if kind == "server":
        pid, start = res.get("pid"), res.get("start")
        if not isinstance(pid, int) or not isinstance(start, int) or isinstance(pid, bool) or pid <= 1:
            return f"server pid {_short(pid)} start {_short(start)} is not a process record"
        if not procs.same_process(pid, start):
            return None  # gone already: nothing will be done to it
        if procs.proc_comm(pid) not in bs.SERVER_PROGRAMS or not procs.names(pid, workdir):
            return f"process {pid} is not a server of the user's naming it"
        return None
    return f"unknown resource type {_short(kind)}"


def sweep_workdir(workdir: Path, state: dict[str, Any]) -> list[str]:
    """Remove what a dead owner left in `workdir` (a real path): what its state lists that it could have made
    there, and anything of ours found there that it had no time to record (a kill between creating and
    recording). What it lists and could not have made is left alone, and said."""
    log: list[str] = []
    listed = [r for r in state.get("resources", []) if isinstance(r, dict)] \
        if isinstance(state.get("resources"), list) else []
    resources = []
    for res in listed:
        why = refusal(res, workdir)
        if why:
            log.append(f"refused: {why} ({workdir}); left alone")
        else:
            resources.append(res)
    prefix = str(workdir).rstrip("/") + "/"
    # unmount first: a dead FUSE mount makes even looking at its directory fail
    for mnt in sorted({str(r["mountpoint"]) for r in resources if r["type"] == "fuse"}
                      | {m for m in bs.mounts() if m.startswith(prefix)}):
        unmount(mnt, log)
    for res in reversed(resources):
        if res["type"] == "server":
            teardown(res, None, log)
    for pid in bs.servers_under(workdir):
        teardown({"type": "server", "program": procs.proc_comm(pid), "pid": pid, "start": procs.proc_start(pid)},
                 None, log)
    for res in reversed(resources):
        if res["type"] == "vg":
            teardown(res, None, log)
    loops = {(str(r["device"]), str(r["backing"])) for r in resources if r["type"] == "loop"}
    for device, backing in sorted(loops | set(bs.loops_under(workdir))):
        teardown({"type": "loop", "device": device, "backing": backing}, None, log)
    for res in reversed(resources):
        if res["type"] in ("image", "path"):
            teardown(res, None, log)
    # a state file half written when its owner was killed (guestbench.results.atomic_write_bytes's temp file)
    for tmp in workdir.glob(f".{STATE_FILE}.*.tmp"):
        tmp.unlink(missing_ok=True)
    (workdir / STATE_FILE).unlink(missing_ok=True)
    return log


def _workdirs(run_dir: Path) -> list[Path]:
    """A run dir and the directories one level below it (a cell's work dir); empty when unreadable."""
    try:
        with os.scandir(run_dir) as it:
            return [run_dir, *sorted(Path(e.path) for e in it if e.is_dir(follow_symlinks=False))]
    except OSError:
        return []


def _storage(run_dir: Path) -> tuple[list[str], list[Path], bool]:
    """Undo the host storage of every work dir of `run_dir` whose owner is gone: what was done, the work dirs
    swept, and whether no owner of any is alive."""
    log: list[str] = []
    swept: list[Path] = []
    all_dead = True
    for workdir in _workdirs(run_dir):
        state_path = workdir / STATE_FILE
        if not os.path.lexists(state_path):
            continue
        if why := rundirs.lstat_problem(workdir, want_dir=True) or rundirs.lstat_problem(state_path, False):
            log.append(f"refused: {state_path} (or its directory) {why}; left alone")
            all_dead = False
            continue
        state = read_state(state_path) or {}
        if owner_alive(state):
            all_dead = False
            continue
        raw_owner = state.get("owner")
        owner = raw_owner if isinstance(raw_owner, dict) else {}
        done = sweep_workdir(workdir, state)
        log += [f"{workdir} (owner pid {_short(owner.get('pid', '?'))} gone): {line}" for line in done]
        swept.append(workdir)
    return log, swept, all_dead


def _remove_run_dir(run_dir: Path) -> list[str]:
    """A claimed run dir (its owner is dead): its host storage undone, then all of it removed."""
    log, _, all_dead = _storage(run_dir)
    if not all_dead:
        return log + [f"kept {run_dir}: a process of that run still holds host storage in it"]
    log += [f"{run_dir}: {line}" for line in sweep_workdir(run_dir, {})]  # mounts, servers, loops at any depth
    prefix = str(run_dir) + "/"
    if any(m.startswith(prefix) for m in bs.mounts()):
        return log + [f"failed: kept {run_dir}: something is still mounted in it"]
    if users := procs.users(run_dir):  # an orphan of that run (a hypervisor) still works in it
        return log + [f"kept {run_dir}: process {users[0]} still uses it"]
    shutil.rmtree(run_dir, ignore_errors=True)
    return log + [f"removed {run_dir} (its run died)"]


def sweep_stale(root: Path | None = None) -> list[str]:
    """Undo what dead runs under `root` (default: the temp root) left: the effective user's run directories
    whose owner is dead go whole, host storage first. A run directory of an older guestbench (no owner record)
    has only its dead work dirs' host storage undone, and is removed once empty. What is not the user's own,
    and any directory whose owner lives, is left alone."""
    base = rundirs.safe_root(Path(root) if root is not None else temp_root())
    found = rundirs.claim_dead(base, RUN_PREFIX)
    log = list(found.log)
    for run_dir in found.claimed:
        log += _remove_run_dir(run_dir)
        if run_dir.exists():
            found.release(run_dir)
    for run_dir in found.unrecorded:
        done, swept, _ = _storage(run_dir)
        log += done
        for d in [*(w for w in swept if w != run_dir), run_dir] if swept else []:
            try:
                d.rmdir()
                log.append(f"removed empty {d}")
            except OSError:
                pass
    return log
