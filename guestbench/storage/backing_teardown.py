"""Undoing host storage: one recorded resource at a time (Backings.close, power cuts, and `sweep_stale` in
guestbench.storage.backing_sweep, which undoes what runs whose owner died left behind).

A resource is a dict in the state file with a "type": fuse (a mount), server (a process), vg (a volume
group), loop (a loop device), image or path (a file or an empty directory). Each undo acts only on what is
still the very thing recorded (a pid by its start time, a loop device by its backing file), so a reused pid
or device is never touched.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

from guestbench.storage import backing_sys as bs
from guestbench.host import procs

STATE_FILE = "host-storage.json"
STOP_TIMEOUT_S = 10.0
NBDFUSE_GRACE_S = 2.0


# ------------------------------------------------------------------ one resource

def unmount(mountpoint: str, log: list[str]) -> bool:
    if mountpoint not in bs.mounts():
        return True
    fusermount = bs.which("fusermount3") or "fusermount3"
    r = bs.run([fusermount, "-u", mountpoint])
    if r.returncode == 0 and mountpoint not in bs.mounts():
        log.append(f"unmounted {mountpoint}")
        return True
    # busy: a hypervisor still has the file open. Detach it now; the kernel ends it when the last user goes.
    r = bs.run([fusermount, "-u", "-z", mountpoint])
    if mountpoint not in bs.mounts():
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
                procs.killpg(pid, sig)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    procs.killpg(pid, signal.SIGKILL)
                    proc.wait(timeout=STOP_TIMEOUT_S)
            log.append(f"stopped {program} pid {pid} (exit {proc.returncode})")
        procs.killpg(pid, signal.SIGKILL)  # anything it left in its group
        return True
    # not our child (a sweep): act only if the pid is still the very process we started
    if not procs.same_process(pid, start) or procs.proc_comm(pid) not in bs.SERVER_PROGRAMS:
        return True
    procs.kill(pid, signal.SIGKILL)
    if procs.wait_gone(pid, start, STOP_TIMEOUT_S):
        log.append(f"killed {program} pid {pid}")
        return True
    log.append(f"failed: {program} pid {pid} survived SIGKILL")
    return False


def _detach_loop(res: dict[str, Any], log: list[str]) -> bool:
    device, backing = str(res["device"]), str(res["backing"])
    if bs.loop_backing(device) != backing:
        return True  # already detached (and maybe reused by someone else: never touch it then)
    r = bs.run([bs.which("losetup") or "losetup", "-d", device])
    if r.returncode == 0 or bs.loop_backing(device) != backing:
        log.append(f"detached {device}")
        return True
    log.append(f"failed: losetup -d {device}: {r.stderr.strip()}")
    return False


def _remove_vg(res: dict[str, Any], log: list[str]) -> bool:
    vg, pv = str(res["vg"]), str(res["pv"])
    devices = ["--devices", pv]
    ok = True
    r = bs.run([bs.which("vgremove") or "vgremove", *devices, "-ff", "-y", vg])
    if r.returncode == 0:
        log.append(f"removed volume group {vg}")
    elif "not found" not in (r.stderr + r.stdout).lower() and "no such" not in r.stderr.lower():
        log.append(f"failed: vgremove {vg}: {r.stderr.strip()}")
        ok = False
    r = bs.run([bs.which("pvremove") or "pvremove", *devices, "-ff", "-y", pv])
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
