"""Undoing host storage: one recorded resource at a time (HostStorage.close, power cuts), and `sweep_stale`,
which undoes what runs whose owner died left behind.

A resource is a dict in the state file with a "type": fuse (a mount), server (a process), vg (a volume
group), loop (a loop device), image or path (a file or an empty directory). Each undo acts only on what is
still the very thing recorded (a pid by its start time, a loop device by its backing file), so a reused pid
or device is never touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from guestbench.paths import RUN_PREFIX, temp_root
from guestbench.storage import host_sys as hs

STATE_FILE = "host-storage.json"
STOP_TIMEOUT_S = 10.0
NBDFUSE_GRACE_S = 2.0


# ------------------------------------------------------------------ one resource

def unmount(mountpoint: str, log: list[str]) -> bool:
    if mountpoint not in hs.mounts():
        return True
    fusermount = hs.which("fusermount3") or "fusermount3"
    r = hs.run([fusermount, "-u", mountpoint])
    if r.returncode == 0 and mountpoint not in hs.mounts():
        log.append(f"unmounted {mountpoint}")
        return True
    # busy: a hypervisor still has the file open. Detach it now; the kernel ends it when the last user goes.
    r = hs.run([fusermount, "-u", "-z", mountpoint])
    if mountpoint not in hs.mounts():
        log.append(f"unmounted {mountpoint} (lazily: it was busy)")
        return True
    log.append(f"failed: could not unmount {mountpoint}: {r.stderr.strip()}")
    return False


def stop_server(res: dict[str, Any], proc: subprocess.Popen[bytes] | None, log: list[str],
                sig: int = signal.SIGTERM, grace: float = 0.0) -> bool:
    """Stop a server: after `grace` seconds for it to end by itself, SIGTERM (SIGKILL for a power cut), then
    SIGKILL its group if it lingers."""
    pid, start, program = int(res["pid"]), res.get("start"), str(res.get("program", "server"))
    if proc is not None:
        if proc.poll() is None:
            if grace > 0:
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                hs.killpg(pid, sig)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    hs.killpg(pid, signal.SIGKILL)
                    proc.wait(timeout=STOP_TIMEOUT_S)
            log.append(f"stopped {program} pid {pid} (exit {proc.returncode})")
        hs.killpg(pid, signal.SIGKILL)  # anything it left in its group
        return True
    # not our child (a sweep): act only if the pid is still the very process we started
    if not hs.same_process(pid, start) or hs.proc_comm(pid) not in hs.SERVER_PROGRAMS:
        return True
    hs.kill(pid, signal.SIGKILL)
    if hs.wait_gone(pid, start, STOP_TIMEOUT_S):
        log.append(f"killed {program} pid {pid}")
        return True
    log.append(f"failed: {program} pid {pid} survived SIGKILL")
    return False


def _detach_loop(res: dict[str, Any], log: list[str]) -> bool:
    device, backing = str(res["device"]), str(res["backing"])
    if hs.loop_backing(device) != backing:
        return True  # already detached (and maybe reused by someone else: never touch it then)
    r = hs.run([hs.which("losetup") or "losetup", "-d", device])
    if r.returncode == 0 or hs.loop_backing(device) != backing:
        log.append(f"detached {device}")
        return True
    log.append(f"failed: losetup -d {device}: {r.stderr.strip()}")
    return False


def _remove_vg(res: dict[str, Any], log: list[str]) -> bool:
    vg, pv = str(res["vg"]), str(res["pv"])
    devices = ["--devices", pv]
    ok = True
    r = hs.run([hs.which("vgremove") or "vgremove", *devices, "-ff", "-y", vg])
    if r.returncode == 0:
        log.append(f"removed volume group {vg}")
    elif "not found" not in (r.stderr + r.stdout).lower() and "no such" not in r.stderr.lower():
        log.append(f"failed: vgremove {vg}: {r.stderr.strip()}")
        ok = False
    r = hs.run([hs.which("pvremove") or "pvremove", *devices, "-ff", "-y", pv])
    if r.returncode == 0:
        log.append(f"removed physical volume {pv}")
    return ok


def _remove_path(res: dict[str, Any], log: list[str]) -> bool:
    path = Path(res["path"])
    try:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    except FileNotFoundError:
        return True
    except OSError as e:
        log.append(f"failed: removing {path}: {e.strerror}")
        return False
    if res["type"] == "image":
        log.append(f"removed {path}")
    return True


def teardown(res: dict[str, Any], proc: subprocess.Popen[bytes] | None, log: list[str]) -> bool:
    """Undo one resource; True when it is gone (or was already). Never raises."""
    try:
        kind = res["type"]
        if kind == "fuse":
            return unmount(str(res["mountpoint"]), log)
        if kind == "server":
            # a clean unmount (done just before) ends nbdfuse by itself; a lazy one (file still open) does not
            return stop_server(res, proc, log, grace=NBDFUSE_GRACE_S if res.get("program") == "nbdfuse" else 0.0)
        if kind == "loop":
            return _detach_loop(res, log)
        if kind == "vg":
            return _remove_vg(res, log)
        return _remove_path(res, log)
    except Exception as e:  # a teardown must go on with the rest
        log.append(f"failed: tearing down {res}: {e}")
        return False


# ------------------------------------------------------------------ leftovers of dead runs

def read_state(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def owner_alive(state: dict[str, Any]) -> bool:
    owner = state.get("owner") or {}
    try:
        return hs.same_process(int(owner["pid"]), owner.get("start"))
    except (KeyError, TypeError, ValueError):
        return False


def sweep_workdir(workdir: Path, state: dict[str, Any]) -> list[str]:
    """Remove what a dead owner left in `workdir`: what its state lists, and anything of ours found there
    that it had no time to record (a kill between creating and recording)."""
    log: list[str] = []
    resources = [r for r in state.get("resources", []) if isinstance(r, dict) and "type" in r]
    prefix = str(workdir).rstrip("/") + "/"
    # unmount first: a dead FUSE mount makes even looking at its directory fail
    for mnt in sorted({str(r["mountpoint"]) for r in resources if r["type"] == "fuse"}
                      | {m for m in hs.mounts() if m.startswith(prefix)}):
        unmount(mnt, log)
    for res in reversed(resources):
        if res["type"] == "server":
            teardown(res, None, log)
    for pid in hs.servers_under(workdir):
        teardown({"type": "server", "program": hs.proc_comm(pid), "pid": pid, "start": hs.proc_start(pid)},
                 None, log)
    for res in reversed(resources):
        if res["type"] == "vg":
            teardown(res, None, log)
    loops = {(str(r["device"]), str(r["backing"])) for r in resources if r["type"] == "loop"}
    for device, backing in sorted(loops | set(hs.loops_under(workdir))):
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


def sweep_stale(root: Path | None = None) -> list[str]:
    """Tear down the host storage of runs under `root` (default: the temp root) whose owner process is gone.

    Looks at `<root>/guestbench-run-*/host-storage.json` and one directory level below (a cell's work
    dir). Directories left empty are removed; nothing else in a run dir is touched.
    """
    base = Path(root) if root is not None else temp_root()
    log: list[str] = []
    try:
        run_dirs = sorted(p for p in base.iterdir() if p.name.startswith(RUN_PREFIX))
    except OSError:
        return log
    for run_dir in run_dirs:
        for workdir in _workdirs(run_dir):
            state_path = workdir / STATE_FILE
            if not os.path.lexists(state_path):
                continue
            state = read_state(state_path)
            if state is not None and owner_alive(state):
                continue
            owner = (state or {}).get("owner", {}).get("pid", "?")
            done = sweep_workdir(workdir.resolve(), state or {})
            log += [f"{workdir} (owner pid {owner} gone): {line}" for line in done]
            for d in ([workdir] if workdir == run_dir else [workdir, run_dir]):
                try:
                    d.rmdir()
                    log.append(f"removed empty {d}")
                except OSError:
                    pass
    return log
