"""Cells inside a software stack (issue 47): a real stack with what a uml start-up needs (built once for this file,
about a minute here), a real run of uml on the host and in the stack, side by side, the worker on the stack's own
Python in its sandbox; UML's modes (a mode the stack's UML lacks is one unavailable cell saying so); and a SIGKILL of
guestbench mid-launch that leaves nothing of the stack's sandbox behind and the host's libvirtd as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from guestbench.host import cgroups
from guestbench.results import load_results

from helpers.cli import guestbench
from helpers.paths import ROOT

pytestmark = pytest.mark.launch
NAME = f"t{os.getpid()}"  # a stack of this test file's own


@pytest.fixture(scope="module")
def stack() -> str:
    t0 = time.monotonic()
    built = guestbench("stack", "build", NAME, "--suite", "trixie", "--packages", "uml", timeout=1500)
    assert built.returncode == 0, built.stderr[-2000:]
    print(f"uml trixie stack built in {time.monotonic() - t0:.0f} s")
    yield NAME
    assert guestbench("stack", "rm", NAME).returncode == 0


def _scenario(tmp_path: Path, **top: object) -> Path:
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump({"name": "stack-run", "backends": ["uml"], "repetitions": 2, "warmup": 0,
                                    "cold": False, **top}))
    return path


def _in_stack(name: str) -> list[str]:
    """Processes of a stack's sandbox (its environment names the stack), and bubblewrap processes for it."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if f"GUESTBENCH_STACK={name}".encode() in env or (cmd.startswith("bwrap ") and f"stack-{name}" in cmd):
            found.append(f"{pid} {cmd[:200]}")
    return found


def _host_libvirt() -> tuple[str, str]:
    """The host's libvirtd (its pid) and its domains, as they are."""
    pid = subprocess.run(["pgrep", "-x", "libvirtd"], capture_output=True, text=True).stdout.strip()
    domains = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], capture_output=True,
                             text=True, timeout=60).stdout.strip()
    return pid, domains


def test_uml_runs_in_the_stack_on_its_own_python_beside_the_host(stack: str, tmp_path: Path) -> None:
    path = _scenario(tmp_path, stacks=["host", stack], measurements=[
        {"measurement": "startup", "uml_mode": ["seccomp", "ptrace"]}])
    done = guestbench("scenario", str(path), "--results", str(tmp_path / "results"), timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = (tmp_path / "results").glob("*.json")
    run = load_results(results)  # the model reads it: the file is valid
    cells = {c.system: c for c in run.cells}
    assert run.backends[f"uml@{stack}"].usable, run.backends[f"uml@{stack}"].reason
    assert set(cells) == {"uml+seccomp", "uml+ptrace", f"uml+seccomp@{stack}", f"uml+ptrace@{stack}"}
    inside = cells[f"uml+ptrace@{stack}"]
    assert len(inside.samples) == 2 and inside.software is not None
    assert inside.software["stack"] == stack and inside.software["suite"] == "trixie"
    assert inside.software["python"].startswith("3.13.") and inside.software["uml_mode"] == "ptrace"
    assert inside.software["libguestfs"].startswith("1.54") and inside.software["uml"].startswith("6.12")
    host = cells["uml+ptrace"]
    assert len(host.samples) == 2 and host.software and host.software["python"].startswith("3.11.")
    for lacking in (cells["uml+seccomp"], cells[f"uml+seccomp@{stack}"]):  # Linux 6.1 and 6.12: ptrace only
        assert lacking.status == "unavailable" and "has no seccomp mode; it offers ptrace" in str(lacking.skip_reason)
    shown = guestbench("show", str(results))
    assert f"uml+ptrace@{stack}" in shown.stdout and "Differs between the run's stacks:" in shown.stdout
    assert _in_stack(stack) == []


def test_sigkill_mid_launch_in_a_stack_leaves_nothing_and_the_hosts_libvirt_as_it_was(stack: str,
                                                                                      tmp_path: Path) -> None:
    before = _host_libvirt()
    path = _scenario(tmp_path, stacks=[stack], repetitions=3, measurements=["startup"])
    proc = subprocess.Popen([sys.executable, "-m", "guestbench", "scenario", str(path), "--results",
                             str(tmp_path / "results")], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:  # a launch under way: UML's hypervisor program
        if any("guestbench.backends.uml.hv" in p for p in _in_stack(stack)):
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    assert any("guestbench.backends.uml.hv" in p for p in _in_stack(stack)), "no launch in the stack began"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while _in_stack(stack) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_stack(stack) == []
    cgroups.sweep()  # the killed run's control groups, as the next start's sweep removes them: every worker's
    # leftover check counts a dead run's group until then
    with open("/proc/self/mountinfo") as f:
        assert not [line for line in f if f"/stacks/{stack}" in line.split()[4]]
    assert _host_libvirt() == before
    (results,) = (tmp_path / "results").glob("*.json")
    doc = json.loads(results.read_text())
    assert doc["status"] == "running"  # killed: the file as it was, its samples kept
