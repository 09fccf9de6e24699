"""A control group per worker (guestbench.host.cgroups): the kernel counts what /proc readings miss, a dead worker's
leftovers are killed by membership, and a killed run's groups are swept. Real groups on this host, real
processes; skipped only where the host lets nobody make a group."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guestbench.host import cgroups, procs
from guestbench.instruments import usage

# a process that leaves the tree at once (double fork: init reaps it), names nothing of the cell, and burns
DAEMON = ("import os,sys,time\nif os.fork(): os._exit(0)\nt=time.process_time()\n"
          "while time.process_time()-t<float(sys.argv[1]): pass\n")
BURN_S = 0.6


@pytest.fixture
def group():
    g = cgroups.create()
    if g is None:
        pytest.skip("this host lets guestbench make no control group (GUESTBENCH_CGROUP=0, not root, or no cgroup2)")
    yield g
    g.end()
    assert not any(d.exists() for d in g.dirs())


def _in_group(g: cgroups.Group, argv: list[str]) -> subprocess.Popen[bytes]:
    """`argv` started in the group before it does anything (it waits for a line on stdin, as a worker does)."""
    proc = subprocess.Popen(["bash", "-c", 'read _; exec "$@"', "-", *argv], stdin=subprocess.PIPE)
    assert g.add(proc.pid)
    return proc


def _go(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.close()


def _wait_empty(g: cgroups.Group, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while g.pids() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_daemonised_helper_is_counted_by_the_group_and_missed_by_proc(group: cgroups.Group) -> None:
    """The daemon leaves the tree before the first reading and names nothing: /proc cannot find it, the group's
    CPU has it, listed as seen by the group only."""
    proc = _in_group(group, [sys.executable, "-c", DAEMON, str(BURN_S)])
    counted = usage.UsageMeter(root=proc.pid, interval=0.05, group=group)
    blind = usage.UsageMeter(root=proc.pid, interval=0.05)
    counted.start()
    blind.start()
    _go(proc)
    proc.wait()
    _wait_empty(group)
    got, missed = counted.stop(), blind.stop()
    assert got is not None and missed is not None
    assert got["cpu_method"] == "cgroup" and missed["cpu_method"] == "proc"
    assert BURN_S <= got["cpu_s"] <= BURN_S + 0.4, got
    assert got["cpu_by_program"].get(usage.UNSEEN, 0) >= BURN_S - 0.1, got
    assert missed["cpu_s"] < 0.3, missed


def test_the_groups_peak_memory_is_reset_at_each_step(group: cgroups.Group) -> None:
    """Two steps, 160 MiB touched in the first only: the second step's charged peak is far below it."""
    touch = "import sys; b = bytearray(int(sys.argv[1]) * 2**20); b[::4096] = b'x' * len(b[::4096])"
    peaks = []
    for mib in (160, 8):
        proc = _in_group(group, [sys.executable, "-c", touch, str(mib)])
        meter = usage.UsageMeter(root=proc.pid, interval=0.05, group=group)
        meter.start()
        _go(proc)
        proc.wait()
        got = meter.stop()
        assert got is not None
        peaks.append(got.get("peak_charged_mib"))
    if peaks[0] is None:
        pytest.skip("the group has no memory controller here")
    assert peaks[0] >= 160 and peaks[1] < 100, peaks


def test_ending_a_group_kills_what_left_the_tree_and_removes_it(group: cgroups.Group) -> None:
    proc = _in_group(group, [sys.executable, "-c", "import os,time\nif os.fork(): os._exit(0)\ntime.sleep(300)"])
    _go(proc)
    proc.wait()
    deadline = time.monotonic() + 30
    while not group.pids() and time.monotonic() < deadline:  # the daemon is in the group, reparented to init
        time.sleep(0.02)
    (daemon,) = group.pids()
    group.end()
    assert not Path(f"/proc/{daemon}").exists() or _state(daemon) == "Z"
    assert not any(d.exists() for d in group.dirs())


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_sweep_removes_the_groups_of_a_dead_run_with_what_is_in_them() -> None:
    """A run killed with SIGKILL: its owner pid is gone, its group holds a process; the next run's sweep kills
    that and removes the group. A live owner's group is left alone."""
    owner = subprocess.Popen([sys.executable, "-c", "from guestbench.host import cgroups; import sys\n"
                              "g = cgroups.create(); print(g.cpu if g else '', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None and owner.stdin is not None
    cpu = owner.stdout.readline().strip()
    if not cpu:
        owner.kill()
        pytest.skip("this host lets guestbench make no control group")
    left = cgroups.Group(cpu=Path(cpu), memory=None)
    run = Path(cpu).parent  # the owner's run group, guestbench-<owner pid>-<its start time>
    sleeper = _in_group(left, ["sleep", "300"])
    _go(sleeper)
    assert run.name == f"guestbench-{owner.pid}-{procs.proc_start(owner.pid)}"
    assert run in cgroups.leftovers(alive_owners_too=True) and run not in cgroups.leftovers()
    cgroups.sweep()
    assert Path(cpu).exists() and sleeper.poll() is None  # a live owner's group is not touched
    owner.kill()
    owner.wait()
    # the next run's sweep removes it: this one's, or one a run on another worker made first (every run sweeps)
    swept = cgroups.sweep()
    assert sleeper.wait(timeout=10) == -9
    assert any(str(run) in line for line in swept) or not run.exists()
    assert not run.exists() and not [d for d in cgroups.leftovers(alive_owners_too=True) if d.name == run.name]


def test_a_dead_runs_group_whose_pid_was_reused_is_swept_and_an_old_name_still_read(tmp_path: Path) -> None:
    """A group names its owner by pid and start time: with a pid alone (32768 of them here, reused within a suite),
    a dead run's group was kept as long as some other process had its pid, and every worker's leftover check saw it."""
    me = os.getpid()
    assert cgroups.owner_of(f"guestbench-{me}-{procs.proc_start(me)}") == (me, procs.proc_start(me))
    assert cgroups._owner_alive(me, procs.proc_start(me))
    assert not cgroups._owner_alive(me, (procs.proc_start(me) or 0) + 1)  # the pid lives, its start differs: reused
    assert cgroups.owner_of(f"guestbench-{me}") == (me, None)  # a group named before: the pid alone
    assert cgroups.owner_of("guestbench-x") is None and cgroups.owner_of("guestbench-1-2-3") is None


def test_the_run_group_keeps_what_an_ended_worker_used(group: cgroups.Group) -> None:
    """Two workers of one run: the first burns and is ended (its group removed) while the second lives on; the
    run group's CPU still has the first one's, so a peer that ends mid-step stays ours (guestbench.instruments.load)."""
    before = group.run_cpu_usec()
    peer = cgroups.create()
    assert peer is not None and peer.cpu is not None and group.cpu is not None
    assert peer.cpu.parent == group.cpu.parent
    proc = _in_group(peer, [sys.executable, "-c", "import time\nt=time.process_time()\n"
                            f"while time.process_time()-t<{BURN_S}: pass"])
    _go(proc)
    proc.wait()
    peer.end()
    assert not peer.cpu.exists() and group.cpu.exists()
    after = group.run_cpu_usec()
    assert before is not None and after is not None and (after - before) / 1e6 >= BURN_S


def test_the_busy_check_counts_a_peer_that_ends_mid_step_as_ours_and_a_stranger_as_other(
        group: cgroups.Group) -> None:
    """A peer worker (a sibling group of the same run) that has burnt CPU before the step, names the shared work
    dir prefix, burns on and is ended during the step: its work is ours, not other work. A process outside the run
    that burns as long during a step is other work. Judged on the meter's own accounting of our CPU (what the
    check subtracts from the machine's), not on how quiet the machine is: the burns are CPU time, however long
    a busy machine makes them take."""
    from guestbench.instruments import load as noise

    def ours_s(meter: noise.LoadMeter) -> float:
        got = meter.ours_s()
        assert got is not None
        return got

    marker = f"/var/tmp/peers-{os.getpid()}"
    root = _in_group(group, ["sleep", "60"])
    _go(root)
    burn = ("import sys,time\ndef burn(s):\n t=time.process_time()\n while time.process_time()-t<s: pass\n"
            "burn(0.8)\nprint('half', flush=True)\nsys.stdin.readline()\nburn(0.4)\n")
    peer = cgroups.create()
    assert peer is not None
    proc = subprocess.Popen(["bash", "-c", 'read _; exec "$@"', "-", sys.executable, "-c", burn, marker],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert peer.add(proc.pid) and proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "half"  # the peer has 0.8 s behind it and waits: the step starts
    meter = noise.LoadMeter(root=root.pid, marker=marker, group=group)
    meter.start()
    proc.stdin.write("on\n")
    proc.stdin.close()
    proc.wait()
    peer.end()
    ours = ours_s(meter)

    stranger = noise.LoadMeter(root=root.pid, marker=marker, group=group)
    stranger.start()
    subprocess.run([sys.executable, "-c", burn], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    strangers = ours_s(stranger)
    root.kill()
    root.wait()
    assert 0.3 <= ours < 0.8, f"the peer's last 0.4 s of CPU (and not its first 0.8 s) is ours: {ours:.2f} s"
    assert strangers < 0.2, f"a stranger's 1.2 s of CPU is not ours: {strangers:.2f} s counted as ours"
