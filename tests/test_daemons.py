"""host/daemons.py on real processes: a chroot's process of the same name is not this root's daemon, and a
stopped one is described as stopped, with its threads and the child it waits on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from guestbench.host import daemons


def _chroot_with(tmp_path: Path, program: str) -> Path:
    """A directory holding `program` and the libraries it links, enough to run it chrooted there."""
    root = tmp_path / "root"
    libs = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout.split()
    for path in [program, *(w for w in libs if w.startswith("/"))]:
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    return root


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root (CI runs as root)")
def test_a_chroots_process_of_the_same_name_is_not_this_roots(tmp_path: Path) -> None:
    sleep = shutil.which("sleep") or "/bin/sleep"
    root = _chroot_with(tmp_path, sleep)
    ours = subprocess.Popen([sleep, "300"])
    theirs = subprocess.Popen(["chroot", str(root), sleep, "300"])
    try:
        deadline = time.monotonic() + 30
        while daemons.procs.proc_comm(theirs.pid) != "sleep" and time.monotonic() < deadline:  # chrooted, exec'd
            time.sleep(0.01)
        found = daemons.pids_of("sleep", uid=None)
        assert ours.pid in found
        assert theirs.pid not in found and not daemons.same_root(theirs.pid)
    finally:
        for p in (ours, theirs):
            p.kill()
            p.wait()


def test_a_stopped_daemon_is_described_as_stopped_with_its_child(tmp_path: Path) -> None:
    """A stand-in daemon (a name of its own: another worker's libvirt runs must not take it for libvirtd), stopped,
    with a child it started: the one line names it stopped, counts its threads and names the child and its age."""
    name = f"gbdaemon{os.getpid()}"[:15]
    script = tmp_path / name
    script.write_text("#!/bin/sh\nsleep 300 &\nwait\n")
    script.chmod(0o755)
    proc = subprocess.Popen([str(script)], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not procs_named(proc.pid, "sleep") and time.monotonic() < deadline:  # its child started
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGSTOP)
        while (st := daemons.procs.stat(proc.pid)) is not None and st.state != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        text = daemons.describe((name,), uid=os.geteuid())
        assert text.startswith(f"{name}: pid {proc.pid} stopped, up "), text
        assert "1 threads: " in text and "waiting on sleep (pid " in text, text
        # the daemons' part: the line also names any qemu on the machine in an odd state, such as another worker's
        # just-killed qemu, a zombie until PID 1 reaps it (1.4-2.0 s on these machines)
        assert daemons.describe(("no-such-daemon",)).split(" | ")[0] == "no-such-daemon: not running"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def procs_named(parent: int, name: str) -> list[int]:
    return [p for p in daemons.procs.pids() if (st := daemons.procs.stat(p)) is not None and st.ppid == parent
            and daemons.procs.proc_comm(p) == name]
