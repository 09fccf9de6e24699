"""A hung or crashed hypervisor is killed/reported with its reason, and nothing is left behind.

The hypervisors here are real programs given to libguestfs as its qemu (LIBGUESTFS_HV): they pass
libguestfs's probes to the real qemu, then hang or die at the launch, as KVM does on PVM hosts.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from guestbench.measurements import get as get_measurement
from guestbench.host.paths import make_run_dir, remove_tree, workdir_for
from guestbench.execute.protocol import Request
from guestbench.execute.supervisor import Supervisor

from helpers.hv import HV, ScriptBackend
from helpers.leaks import hypervisor_processes

pytestmark = pytest.mark.launch


def run_startup(script: str, timeout: float, iterations: list[str]) -> tuple[Any, list[dict[str, Any]], float]:
    run_dir = make_run_dir()
    try:
        request = Request(measurement="startup", params=get_measurement("startup").defaults(),
                          iterations=iterations, backend=ScriptBackend(HV / script).handle_config(run_dir).to_dict(),
                          timeout=timeout, sample_timeout=timeout, workdir=str(workdir_for(run_dir, "cell")))
        messages: list[dict[str, Any]] = []
        t0 = time.monotonic()
        ex = Supervisor().run_worker(request, ScriptBackend(HV / script), messages.append)
        return ex, messages, time.monotonic() - t0
    finally:
        remove_tree(run_dir)


def test_hung_launch_is_killed_at_its_deadline(no_leftovers) -> None:
    ex, messages, elapsed = run_startup("hang.sh", timeout=8, iterations=["cold", "rep"])
    assert ex.kind == "timeout"
    assert ex.what == "launch"
    assert ex.limit_s == 8
    assert ex.index == 0
    assert not [m for m in messages if m["t"] == "sample"]
    # killed at the deadline, not after the hypervisor gave up by itself
    assert 8 <= elapsed < 8 + 20, elapsed
    assert hypervisor_processes() == []


def test_crashed_hypervisor_is_a_failure_with_its_reason(no_leftovers) -> None:
    ex, messages, _ = run_startup("crash.sh", timeout=120, iterations=["cold", "rep"])
    failures = [m for m in messages if m["t"] == "failure"]
    assert ex.kind == "done"  # the worker survives a dead hypervisor and goes on
    assert len(failures) == 2
    assert "simulated hypervisor crash" in failures[0]["reason"]


def test_a_hypervisor_keeps_its_temporary_files_in_the_cells_work_dir(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """qemu makes a snapshot=on drive's overlay (libguestfs's appliance root) in $TMPDIR, else /var/tmp, and supermin
    its build directory: a program killed in between left them there (issue 45). A cell's programs get its work dir,
    which the run's clean-up removes however they end; libguestfs's cache (its appliance, qemu's probe answers) stays
    where it was."""
    told = tmp_path / "env"
    monkeypatch.setenv("GUESTBENCH_TEST_HV_ENV", str(told))
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.delenv("LIBGUESTFS_CACHEDIR", raising=False)
    ex, messages, _ = run_startup("env.sh", timeout=120, iterations=["cold"])
    assert ex.kind == "done" and [m for m in messages if m["t"] == "failure"], messages
    env = dict(line.split("=", 1) for line in told.read_text().splitlines())
    workdir = Path(env["TMPDIR"])
    assert workdir.name == "cell" and workdir.parent.name.startswith("guestbench-run-"), env
    assert not workdir.exists()  # removed with its run
    assert env["LIBGUESTFS_CACHEDIR"] == "/var/tmp", env


def test_socket_dirs_are_found_by_the_processes_own_sockets(tmp_path: Path) -> None:
    """Only a libguestfsXXXXXX directory holding a socket bound by the given process is ever returned."""
    import socket
    import subprocess
    import sys

    from guestbench.execute.supervisor import socket_dirs_of

    ours = tmp_path / "libguestfsAb3xYz"  # libguestfs's own pattern: six characters after the prefix
    ours.mkdir()
    elsewhere = tmp_path / "plain"
    elsewhere.mkdir()
    code = ("import socket, sys, time\n"
            "socks = []\n"
            "for p in sys.argv[1:]:\n"
            "    s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(); socks.append(s)\n"
            "print('ready', flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(ours / "guestfsd.sock"), str(elsewhere / "x.sock")],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert socket_dirs_of([child.pid]) == [ours]
        assert socket_dirs_of([os.getpid()]) == []  # sockets of another process do not count
    finally:
        child.kill()
        child.wait()
    assert socket_dirs_of([child.pid]) == []
    # the pattern never matches a base directory such as /tmp itself
    lone = socket.socket(socket.AF_UNIX)
    lone.bind(str(tmp_path / "libguestfs.sock"))
    try:
        assert socket_dirs_of([os.getpid()]) == []
    finally:
        lone.close()


def test_after_an_abort_no_worker_starts(no_leftovers) -> None:
    """A signal's abort kills the running worker, and a cell thread that reaches run_worker after it (it passed
    its stop check in the same instant) gets an exit at once instead of a worker nobody would kill."""
    import threading

    run_dir = make_run_dir()
    try:
        sup = Supervisor()
        request = Request(measurement="startup", params=get_measurement("startup").defaults(), iterations=["rep"],
                          backend=ScriptBackend(HV / "hang.sh").handle_config(run_dir).to_dict(),
                          timeout=300, sample_timeout=300, workdir=str(workdir_for(run_dir, "cell")))
        launching = threading.Event()
        exits: list[Any] = []

        def on_message(msg: dict[str, Any]) -> None:
            if msg["t"] == "deadline" and msg.get("what") == "launch":
                launching.set()

        t = threading.Thread(target=lambda: exits.append(sup.run_worker(request, ScriptBackend(HV / "hang.sh"),
                                                                         on_message)))
        t.start()
        assert launching.wait(120), "the worker never announced its launch"
        t0 = time.monotonic()
        sup.abort()
        t.join(30)
        assert not t.is_alive() and exits[0].kind != "done"
        assert time.monotonic() - t0 < 30
        later = sup.run_worker(request, ScriptBackend(HV / "hang.sh"), on_message)
        assert later.kind == "crash" and "not started" in (later.reason or "")
        assert sup.current is None and hypervisor_processes() == []
    finally:
        remove_tree(run_dir)


# A libguestfs handle whose launch failed, or that was shut down, keeps its /tmp/libguestfsXXXXXX with no live socket in
# it until guestfs_close removes it (lib/launch-direct.c unlinks guestfsd.sock at shutdown; handle.c removes the
# directory at close). This child stops there, as a worker killed in that window would be, and says which it is: the
# path is in libguestfs's own log of the hypervisor's command line.
_FAILED_LAUNCH = r"""
import re, sys, time, guestfs
g = guestfs.GuestFS(python_return_dict=True, close_on_exit=False)
seen = []
g.set_event_callback(lambda ev, eh, buf, arr: seen.append(buf), guestfs.EVENT_ALL)
g.set_verbose(True)
g.set_tmpdir(sys.argv[2])
g.set_hv(sys.argv[1])
g.add_drive_scratch(2**20)
try:
    g.launch()
except RuntimeError:
    pass
found = re.search(r"(/tmp/libguestfs[A-Za-z0-9]{6})/guestfsd\.sock", "".join(str(b) for b in seen))
print(found.group(1) if found else "none", flush=True)
time.sleep(600)
"""


def test_a_killed_worker_leaves_no_socket_directory_it_reported(tmp_path: Path) -> None:
    """The mechanism behind an empty /tmp/libguestfsXXXXXX that no test owned (issue 45): a process killed between
    its launch's end and its handle's close leaves the directory, and nothing finds it by the process's sockets. A
    worker reports its launches' directories (LAUNCHED); the supervisor's kill removes those too."""
    import subprocess
    import sys

    from guestbench.execute.supervisor import end_tree, reported_socket_dirs, socket_dirs_of

    left = []
    for report in (False, True):
        child = subprocess.Popen([sys.executable, "-c", _FAILED_LAUNCH, str(HV / "crash.sh"), str(tmp_path)],
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert child.stdout is not None
            sockdir = Path(child.stdout.readline().strip())
            assert sockdir.is_dir() and str(sockdir).startswith("/tmp/libguestfs"), sockdir
            assert socket_dirs_of([child.pid]) == []  # no socket of the process leads to it any more
            end_tree(child, None, reported_socket_dirs([str(sockdir)]) if report else None)
            left.append(sockdir.exists())
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            if sockdir.exists():
                import shutil

                shutil.rmtree(sockdir)
    assert left == [True, False], "unreported it stays behind (the leak); reported it is removed with the worker"


def test_a_reported_socket_directory_is_checked_before_anything_is_removed(tmp_path: Path) -> None:
    """A worker's word names only real libguestfs directories directly under /tmp, of this user, never a link."""
    import secrets

    from guestbench.execute.supervisor import reported_socket_dirs

    def name() -> Path:
        return Path("/tmp") / ("libguestfs" + secrets.token_hex(3))  # libguestfs's pattern: six characters

    real, link = name(), name()
    real.mkdir(mode=0o755)
    try:
        link.symlink_to(real)
        elsewhere = tmp_path / "libguestfsAb3xYz"
        elsewhere.mkdir()
        assert reported_socket_dirs([str(real)]) == [real]
        assert reported_socket_dirs([str(link), str(elsewhere), "/tmp/../etc", 7, "/tmp/libguestfsNOPE00"]) == []
        assert reported_socket_dirs("not a list") == []
        if os.geteuid() == 0:  # another user's directory of that name is not ours to remove
            os.chown(real, 65534, 65534)
            assert reported_socket_dirs([str(real)]) == []
    finally:
        if link.is_symlink():
            link.unlink()
        real.rmdir()
