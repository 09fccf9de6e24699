"""UML's drives through qemu-storage-daemon (issue 48), when the daemon fails or guestbench is killed: a daemon that
dies or is stopped ends the launch in seconds with the reason; a SIGKILL of guestbench mid-sample leaves no daemon,
socket or overlay. The drives themselves: tests/test_exec.py (qcow2 with a backing file, 4096-byte sectors) and
tests/test_uml_hv.py (how each drive is chosen and opened)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from guestbench.host import cgroups
from guestbench.storage.backing import sweep_stale

from helpers.cli import start_guestbench, stop_run, write_scenario
from helpers.leaks import hypervisor_processes, socket_dirs, wait_no_leftovers
from helpers.session import run_dirs

pytestmark = pytest.mark.launch

DAEMON = "qemu-storage-daemon"


def _pid_of_daemon(mentioning: str) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(DAEMON.encode()) and any(mentioning.encode() in a for a in argv):
            return int(entry)
    return None


def _wait(what: str, until: float, check: object) -> object:
    while not (found := check()):  # type: ignore[operator]
        assert time.monotonic() < until, f"no {what} within the deadline"
        time.sleep(0.1)
    return found


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
def test_a_dead_or_stopped_storage_daemon_ends_the_launch_in_seconds(sig: int, tmp_path: Path) -> None:
    """The appliance is up and waiting in a command; the daemon serving its qcow2 disk is killed (or stopped): the
    command fails within seconds, not at a deadline, and says which daemon and why."""
    sockdirs = socket_dirs()
    disk = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "64M"], check=True, timeout=60)
    up = tmp_path / "up"
    script = tmp_path / "s.gf"
    script.write_text(f"add {disk} format:qcow2\nrun\n! touch {up}\ndebug sh 'sleep 600'\n")
    proc = start_guestbench("exec", "uml", "--", "guestfish", "-f", str(script))
    try:
        until = time.monotonic() + 300
        _wait("appliance up", until, lambda: up.exists() or proc.poll() is not None)
        assert proc.poll() is None, proc.communicate()
        pid = _wait("storage daemon", until, lambda: _pid_of_daemon(str(disk)))
        t0 = time.monotonic()
        os.kill(int(pid), sig)  # type: ignore[arg-type]
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        stop_run(proc)
    assert proc.returncode != 0
    assert took < 30, f"the command took {took:.1f} s to fail"
    said = "exited with status -9" if sig == signal.SIGKILL else "is stopped: the guest's disks cannot answer"
    assert f"{DAEMON} (pid {pid}) {said}" in err, err[-2000:]
    assert _pid_of_daemon(str(disk)) is None
    wait_no_leftovers(sockdirs)


@pytest.mark.timeout(900)
def test_sigkill_mid_sample_leaves_no_storage_daemon_socket_or_overlay(tmp_path: Path) -> None:
    """An upload run into a qcow2 image (vhost-user-blk): guestbench is SIGKILLed while a sample is under way, with
    the daemon serving; nothing of the launch is left (the daemon, UML, the hypervisor program's temp dir with the
    daemon's sockets and overlays, at once; the run's own dir at the next start's sweep), and the samples written so
    far are kept."""
    sockdirs = socket_dirs()
    sc = write_scenario(tmp_path / "s.yaml", "name: qkill\nbackends: [uml]\nrepetitions: 50\nwarmup: 0\n"
                        "appliance: {memsize: 512}\nmeasurements:\n  - measurement: upload\n    size: 32MiB\n"
                        "    disk_size: 256MiB\n    format: qcow2\n")
    results = tmp_path / "results"
    proc = start_guestbench("scenario", str(sc), "--results", str(results), "--defer-probe")
    try:
        until = time.monotonic() + 400

        def sampled() -> bool:
            for f in results.glob("*.json") if results.exists() else []:
                try:
                    return sum(len(c["samples"]) for c in json.loads(f.read_text())["cells"]) >= 1
                except (OSError, ValueError, KeyError):
                    return False
            return proc.poll() is not None
        _wait("sample", until, sampled)
        assert proc.poll() is None, proc.communicate()
        daemons = _wait("storage daemon", until,
                        lambda: [p for p in hypervisor_processes() if f"/{DAEMON} " in p])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        stop_run(proc)
    assert daemons
    until = time.monotonic() + 30
    _wait("the launch's processes to end", until, lambda: not hypervisor_processes())
    # the hypervisor program's temp dir (the daemon's sockets, logs and overlays): its guardian's to remove, at once
    _wait("the launch's temp dir to go", until, lambda: not [d for r in run_dirs() for d in r.rglob("uml-*")])
    # the run dir and control groups of a run killed with SIGKILL: the next start's sweep removes them
    # (guestbench.host.rundirs, guestbench.host.cgroups), at once here: every worker's leftover check sees a dead run's
    killed = run_dirs()
    swept = sweep_stale()
    cgroups.sweep()
    assert all(any(f"removed {d}" in line for line in swept) for d in killed), swept
    wait_no_leftovers(sockdirs, timeout=30)  # processes, run dirs, socket dirs, control groups
    [path] = results.glob("*.json")
    assert sum(len(c["samples"]) for c in json.loads(path.read_text())["cells"]) >= 1
