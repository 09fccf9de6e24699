"""Sweeps undo only their own, and all of it (issue 31): state files another user plants remove nothing; a
root-owned state file's resources are acted on only when its run could have made them; the directory of a
SIGKILLed `guestbench` run, and of a SIGKILLed `guestbench worker`, is swept at the next start, while a live
run's directory and another user's are left alone.

Everything is real: files planted by the `nobody` user, loop devices, a tmpfs mount, a qemu-nbd, real
`guestbench scenario` runs (a `command` cell that waits for a file: no appliance) and real Dask workers.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from guestbench.host import rundirs
from guestbench.host.paths import RUN_PREFIX, WORKER_PREFIX
from guestbench.run.fleet.keeper import sweep_dead_workers
from guestbench.storage import backing_sys as bs
from guestbench.storage.backing import sweep_stale
from helpers.cli import start_guestbench, stop_run
from helpers.dirs import small_tmpfs
from helpers.fleet import scheduler_address
from helpers.paths import ROOT
from helpers.session import session_tmp_path
from helpers.users import as_nobody
from helpers.waits import wait_for
from guestbench.host import procs

TIMEOUT = 60
NOBODY = pwd.getpwnam("nobody")


def victim(tmp_path: Path) -> Path:
    """A file of root's that nobody else can even reach: 0600 in a 0700 directory."""
    d = tmp_path / "secret"
    d.mkdir(mode=0o700)
    f = d / "victim"
    f.write_text("root's own")
    f.chmod(0o600)
    return f


def dead_owner() -> dict[str, int]:
    """The pid and start time of a process that has ended (a real one: started, then killed)."""
    p = subprocess.Popen(["sleep", "60"])
    start = procs.proc_start(p.pid)
    p.kill()
    p.wait()
    assert start is not None
    return {"pid": p.pid, "start": start}


# ------------------------------------------------------------------ another user's state files

@pytest.mark.parametrize("where", ["shared-tmpdir", "legacy-var-tmp"])
def test_a_state_file_planted_by_another_user_removes_nothing(tmp_path: Path, shared: Path, where: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: sweep_stale read every guestbench-run-*/host-storage.json whoever owned it and removed the
    0600 file it named. Now the user's own home is swept, and handed a shared root, the sweep leaves what is
    not the user's alone (and says so)."""
    target = victim(tmp_path)
    base = shared if where == "shared-tmpdir" else Path("/var/tmp")
    planted = base / f"{RUN_PREFIX}evil{os.getpid()}"
    noisy = base / f"{RUN_PREFIX}\x1b]0;owned\x07{os.getpid()}"  # an OSC sequence, for the log line
    state = {"owner": {"pid": 2**22 + 1, "start": 1}, "resources": [{"type": "image", "path": str(target)}]}
    as_nobody("sh", "-c", f"mkdir {planted} {planted}/cell && printf '%s' '{json.dumps(state)}'"
              f" | tee {planted}/host-storage.json > {planted}/cell/host-storage.json", timeout=TIMEOUT)
    as_nobody("mkdir", str(noisy), timeout=TIMEOUT)
    try:
        if where == "shared-tmpdir":
            monkeypatch.setenv("GUESTBENCH_TMPDIR", str(shared))
            assert sweep_stale() == []  # the user's home: a directory of its own inside the shared one
        log = sweep_stale(base)  # handed the shared directory itself
        assert target.read_text() == "root's own"
        assert (planted / "host-storage.json").exists() and (planted / "cell" / "host-storage.json").exists()
        assert f"left alone: {planted} is owned by uid {NOBODY.pw_uid}, not 0" in log, log
        assert all(line.isprintable() for line in log)
    finally:
        shutil.rmtree(planted, ignore_errors=True)
        shutil.rmtree(noisy, ignore_errors=True)


# ------------------------------------------------------------------ root's own state, listing what is not its run's

@pytest.fixture
def bystanders(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Real things of root's outside any run directory: a file, a loop device, a tmpfs mount, a qemu-nbd."""
    image = tmp_path / "bystander.raw"
    subprocess.run(["qemu-img", "create", "-q", "-f", "raw", str(image), "1M"], check=True, timeout=TIMEOUT)
    loop = subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True, text=True,
                          timeout=TIMEOUT).stdout.strip()
    server = subprocess.Popen(["qemu-nbd", f"--socket={tmp_path}/b.sock", "--format=raw", "--persistent",
                               "--read-only", str(image)], start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        with small_tmpfs("1M") as mnt:
            wait_for("qemu-nbd to start", lambda: procs.proc_comm(server.pid) == "qemu-nbd", 30)
            yield {"file": victim(tmp_path), "image": image, "loop": loop, "mount": mnt, "server": server}
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=TIMEOUT)
        if bs.loop_backing(loop) == str(image):  # still ours (a broken sweep may have detached it)
            subprocess.run(["losetup", "-d", loop], check=False, timeout=TIMEOUT)


@pytest.mark.parametrize("recorded", [True, False], ids=["dead-owner-record", "no-owner-record"])
def test_a_dead_runs_state_is_acted_on_only_for_what_that_run_could_have_made(
        tmp_path: Path, bystanders: dict[str, Any], recorded: bool) -> None:
    root = tmp_path / "home"
    root.mkdir(mode=0o755)
    if recorded:  # made as guestbench makes a run dir, its owner then dead
        run_dir = rundirs.make(root, RUN_PREFIX)
        (run_dir / rundirs.OWNER_FILE).write_text(json.dumps(dead_owner()))
    else:  # an older guestbench's run dir
        run_dir = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=root))
    workdir = run_dir / "cell"
    workdir.mkdir()
    (workdir / "via-link").symlink_to(bystanders["file"].parent)
    own = workdir / "own.raw"
    own.write_text("made by the run")
    b = bystanders
    server = b["server"]
    resources = [
        {"type": "image", "path": str(own)},  # the one thing that run made
        {"type": "image", "path": str(b["file"])},
        {"type": "path", "path": f"{workdir}/../../../secret/victim"},
        {"type": "image", "path": f"{workdir}/via-link/victim"},
        {"type": "loop", "device": b["loop"], "backing": str(b["image"])},
        {"type": "loop", "device": b["loop"], "backing": f"{workdir}/x.raw"},
        {"type": "fuse", "mountpoint": str(b["mount"])},
        {"type": "vg", "vg": "important", "pv": b["loop"]},
        {"type": "vg", "vg": "guestbench-1-1", "pv": b["loop"]},
        {"type": "server", "program": "qemu-nbd", "pid": server.pid, "start": procs.proc_start(server.pid)},
        {"type": "daemon", "path": str(b["file"])},
    ]
    (workdir / "host-storage.json").write_text(json.dumps({"owner": dead_owner(), "resources": resources}))

    log = sweep_stale(root)

    refused = [line for line in log if "refused:" in line]
    assert len(refused) == len(resources) - 1, "\n".join(log)
    assert any("volume group guestbench-1-1 is not on a loop device" in line for line in refused), refused
    assert any("'important' is not named guestbench-<pid>-<n>" in line for line in refused), refused
    assert any(f"process {server.pid} is not a server" in line for line in refused), refused
    assert b["file"].read_text() == "root's own"
    assert bs.loop_backing(b["loop"]) == str(b["image"])
    assert str(b["mount"]) in bs.mounts()
    assert server.poll() is None, "a server that only shares a program name was killed"
    assert not own.exists()
    if recorded:
        assert not run_dir.exists(), "a dead run's directory goes whole"
    assert all(len(line) < 400 for line in log)


def test_a_sweep_handed_a_directory_others_may_change_refuses_in_one_line(tmp_path: Path) -> None:
    from guestbench.host.owned import UnsafePath

    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)  # not sticky: another user could swap a run directory in it for one of theirs
    with pytest.raises(UnsafePath, match="writable by others"):
        sweep_stale(d)


# ------------------------------------------------------------------ what a SIGKILLed run leaves

WAITER = """name: {name}
backends: [tcg]
repetitions: 1
warmup: 0
measurements:
  - {{measurement: command, label: wait, argv: "{argv}", disk_size: 8MiB, files: 0, os: false}}
"""


@pytest.fixture
def private_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A cache and temp root of this test's own (the root where `nobody` can reach it), with a tcg verdict in
    the cache (tcg launches here: the suite's other tests probe it), so that a `command` run starts without a
    probe launch."""
    from guestbench.backends import BACKENDS, Availability
    from guestbench.execute import probe

    tmp = Path(tempfile.mkdtemp(prefix="root-", dir=session_tmp_path()))
    tmp.chmod(0o755)
    monkeypatch.setenv("GUESTBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GUESTBENCH_TMPDIR", str(tmp))
    tcg = BACKENDS["tcg"]
    probe.store_verdict(tcg, tcg.probe_key(), Availability(True, "usable (planted by test_sweep)", {}))
    try:
        yield {**os.environ}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _start(tmp_path: Path, name: str, argv: str, env: dict[str, str]) -> subprocess.Popen[str]:
    sc = tmp_path / f"{name}.yaml"
    sc.write_text(WAITER.format(name=name, argv=argv))
    return start_guestbench("scenario", str(sc), "--results", str(tmp_path / f"r-{name}"), env=env)


def _waiting_on(release: Path) -> list[int]:
    """The processes (a run's command) that wait for `release` to appear."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and str(release) in procs.proc_cmdline(int(e))]


def _descendants(pid: int) -> list[tuple[int, int | None]]:
    """(pid, start time) of every process below `pid`."""
    kids: dict[int, list[int]] = {}
    for e in os.listdir("/proc"):
        try:
            ppid = int(Path(f"/proc/{e}/stat").read_text().rsplit(")", 1)[1].split()[1]) if e.isdigit() else None
        except (OSError, IndexError):
            continue
        if ppid is not None:
            kids.setdefault(ppid, []).append(int(e))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append((k, procs.proc_start(k)))
            todo.append(k)
    return out


def _new_run_dir(tmp: Path, known: set[Path]) -> Path:
    (d,) = wait_for("a new run directory", lambda: [p for p in tmp.glob(f"{RUN_PREFIX}*") if p not in known])
    return d


@pytest.mark.timeout(600)
def test_a_sigkilled_runs_directory_is_swept_at_the_next_start_and_a_live_runs_is_kept(
        tmp_path: Path, private_env: dict[str, str]) -> None:
    """Before: a run killed with SIGKILL left its guestbench-run-* directory for ever. Now the next run's start
    removes it, while a run that is still going (started before, running beside it) keeps its own."""
    tmp = Path(private_env["GUESTBENCH_TMPDIR"])
    killed_release, live_release = tmp_path / "release-killed", tmp_path / "release-live"
    wait_cmd = "sh -c 'while [ ! -e {} ]; do sleep 0.1; done'"
    live = _start(tmp_path, "live", wait_cmd.format(live_release), private_env)
    killed = quick = None
    orphans: list[tuple[int, int | None]] = []
    try:
        live_dir = _new_run_dir(tmp, set())
        wait_for("the live run's command", lambda: _waiting_on(live_release))
        killed = _start(tmp_path, "killed", wait_cmd.format(killed_release), private_env)
        killed_dir = _new_run_dir(tmp, {live_dir})
        wait_for("the killed run's command", lambda: _waiting_on(killed_release))
        orphans = _descendants(killed.pid)
        killed.kill()  # SIGKILL: nothing of guestbench's own clean-up runs
        killed.communicate(timeout=TIMEOUT)
        killed_release.touch()  # its orphaned worker's command ends, and the worker with it
        wait_for("the killed run's worker to end", lambda: not any(procs.same_process(p, s) for p, s in orphans), 90)
        assert killed_dir.is_dir() and [d for d in killed_dir.iterdir() if d.is_dir()], "no cell work dir"

        quick = _start(tmp_path, "quick", "true", private_env)
        out, err = quick.communicate(timeout=300)
        assert quick.returncode == 0, err[-3000:]
        assert f"swept: removed {killed_dir} (its run died)" in err, err[-3000:]  # the run's console
        assert not killed_dir.exists()
        assert live_dir.is_dir() and str(live_dir) not in err, err[-3000:]

        live_release.touch()
        out, err = live.communicate(timeout=300)
        assert live.returncode == 0, err[-3000:]
        assert list(tmp.glob(f"{RUN_PREFIX}*")) == []
    finally:
        killed_release.touch()
        live_release.touch()
        for p in (killed, live, quick):
            if p is not None:
                stop_run(p)
        for pid, start in orphans:
            if procs.same_process(pid, start):
                os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------ what a SIGKILLed fleet worker leaves

@pytest.mark.timeout(600)
def test_a_sigkilled_workers_directory_is_swept_at_the_next_worker_start_and_another_users_is_not(
        tmp_path: Path, private_env: dict[str, str]) -> None:
    tmp = Path(private_env["GUESTBENCH_TMPDIR"])
    theirs = tmp / f"{WORKER_PREFIX}theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    as_nobody("sh", "-c", f"mkdir {theirs}/dask && echo mine > {theirs}/dask/file", timeout=TIMEOUT)
    sched_file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--no-dashboard", "--scheduler-file", str(sched_file)],
                                 stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=private_env)
    workers: list[subprocess.Popen[bytes]] = []
    orphans: list[tuple[int, int | None]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"{name}.log", "wb")
        w = subprocess.Popen([sys.executable, "-m", "guestbench", "worker", address, "--insecure", "--backend", "tcg",
                              "--name", name], cwd=ROOT, env=private_env, stdin=subprocess.DEVNULL, stderr=log)
        workers.append(w)
        return w

    try:
        address = wait_for("the scheduler's address", lambda: scheduler_address(sched_file), 60)
        first = start("first")
        home = wait_for("the first worker's Dask scratch space",
                        lambda: [d for d in tmp.glob(f"{WORKER_PREFIX}*") if d != theirs and (d / "dask").is_dir()])[0]
        orphans = _descendants(first.pid)
        assert orphans, "the worker's Dask worker is its child"
        first.kill()
        first.wait(timeout=TIMEOUT)
        wait_for("the killed worker's Dask worker to end",
                 lambda: not any(procs.same_process(p, s) for p, s in orphans),
                 90)
        assert home.is_dir()

        second = start("second")
        wait_for("the second worker's start", lambda: "offering tcg" in (tmp_path / "second.log").read_text(), 120)
        said = " ".join((tmp_path / "second.log").read_text().split())  # as said, without the console's wrapping
        assert not home.exists(), said
        assert f"swept: removed {home} (its worker died)" in said, said
        assert (theirs / "dask" / "file").read_text() == "mine\n"
        assert f"left alone: {theirs} is owned by uid {NOBODY.pw_uid}" in said, said
        second.terminate()
        second.wait(timeout=200)
        assert sorted(p.name for p in tmp.glob(f"{WORKER_PREFIX}*")) == [theirs.name]
    finally:
        for w in workers:
            if w.poll() is None:
                w.terminate()
                try:
                    w.wait(timeout=200)
                except subprocess.TimeoutExpired:
                    w.kill()
        scheduler.terminate()
        scheduler.wait(timeout=30)
        for pid, s in orphans:
            if procs.same_process(pid, s):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(theirs, ignore_errors=True)


def test_the_keepers_sweep_leaves_a_live_workers_directory(tmp_path: Path) -> None:
    """A worker directory whose keeper lives (this process) is never claimed by another worker's start."""
    root = tmp_path / "home"
    root.mkdir(mode=0o755)
    mine = rundirs.make(root, WORKER_PREFIX)
    assert sweep_dead_workers(root) == [] and mine.is_dir()


def test_two_sweeps_at_once_never_both_take_a_dead_directory_nor_one_being_made(tmp_path: Path) -> None:
    """A dead directory whose record another sweep holds locked (claiming it this instant) is left to that
    sweep; a directory with no record yet (mkdtemp'd, its record not yet written) is not removed."""
    import fcntl

    root = tmp_path / "home"
    root.mkdir(mode=0o755)
    dead = rundirs.make(root, RUN_PREFIX)
    (dead / rundirs.OWNER_FILE).write_text(json.dumps(dead_owner()))
    being_made = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=root))
    fd = os.open(dead / rundirs.OWNER_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the other sweep's claim, under way
        assert rundirs.alive(dead)
        assert sweep_stale(root) == [] and dead.is_dir() and being_made.is_dir()
    finally:
        os.close(fd)
    assert sweep_stale(root) == [f"removed {dead} (its run died)"]
    assert being_made.is_dir()


def test_a_dead_runs_directory_is_kept_while_an_orphan_of_it_still_works_in_it(tmp_path: Path) -> None:
    """A process of the user's whose command line names the directory (a hypervisor left by the dead run names
    its drives there) keeps it until it ends."""
    root = tmp_path / "home"
    root.mkdir(mode=0o755)
    run_dir = rundirs.make(root, RUN_PREFIX)
    (run_dir / rundirs.OWNER_FILE).write_text(json.dumps(dead_owner()))
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"{run_dir}/disk.img"])
    try:
        wait_for("the orphan to start", lambda: f"{run_dir}/disk.img" in procs.proc_cmdline(orphan.pid), 30)
        assert sweep_stale(root) == [f"kept {run_dir}: process {orphan.pid} still uses it"]
        assert run_dir.is_dir()
    finally:
        orphan.kill()
        orphan.wait()
    assert sweep_stale(root) == [f"removed {run_dir} (its run died)"] and not run_dir.exists()
