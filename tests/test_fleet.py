"""Fleet runs on a real Dask scheduler and two real `guestbench worker`s (subprocesses on this machine), each
offering a different backend: one results file with both hosts' cells, a worker SIGKILLed mid-run, Ctrl-C of
the run, and `guestbench fleet local`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from helpers.cli import guestbench, start_guestbench, write_scenario
from helpers.fleet import (START_S, TMP, cluster_workers, fleet_wait, scheduler_address, tls_settings,
                           worker_homes)
from helpers.leaks import leftover_sockdirs, processes_mentioning, socket_dirs, unreaped_children
from helpers.paths import ROOT
from helpers.session import session_tmp_path

pytestmark = pytest.mark.launch


def _zombies(f: Fleet) -> list[str]:
    """Ended children of the fleet's keepers (`guestbench worker`) that were never reaped."""
    return [f"{name}: {pid}" for name, keeper in f.procs.items() for pid in unreaped_children(keeper.pid)]


def _daskworker_pid(address: str, name: str) -> int | None:
    """The Dask worker process of worker `name` of the scheduler at `address` (other fleets may have a `name`)."""
    for line in processes_mentioning("guestbench.run.fleet.daskworker"):
        pid, cmd = line.split(": ", 1)
        if f" {address} {name} " in cmd:
            return int(pid)
    return None


class Fleet:
    def __init__(self, tmp: Path, protocol: str = "tcp") -> None:
        self.tmp = tmp
        self.insecure = ["--insecure"] if protocol == "tcp" else []  # plain tcp:// needs it, loopback too
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        sched_file = tmp / "scheduler.json"
        self.scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                                           "127.0.0.1", "--port", "0", "--protocol", protocol, "--no-dashboard",
                                           "--scheduler-file", str(sched_file)], stdin=subprocess.DEVNULL,
                                          stderr=open(tmp / "scheduler.log", "wb"))
        self.address = fleet_wait("the scheduler's address", lambda: scheduler_address(sched_file), 60)

    def start_worker(self, name: str, backend: str, tmpdir: Path | None = None, *, wait: bool = True) -> None:
        env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir else None
        self.procs[name] = subprocess.Popen([sys.executable, "-m", "guestbench", "worker", self.address, "--backend",
                                             backend, "--name", name, *self.insecure], cwd=ROOT,
                                            stdin=subprocess.DEVNULL,
                                            stderr=open(self.tmp / f"{name}.log", "wb"), env=env)
        if wait:
            self.joined(name)

    def joined(self, name: str) -> None:
        """Wait until worker `name` is in the cluster (it probes its backend first)."""
        fleet_wait(f"worker {name} to join", lambda: name in cluster_workers(self.address) or self._died(name),
                   START_S, every=1.0)
        assert self.procs[name].poll() is None, (self.tmp / f"{name}.log").read_text()

    def _died(self, name: str) -> bool:
        return self.procs[name].poll() is not None

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=200)
            except subprocess.TimeoutExpired:
                p.kill()
        self.scheduler.terminate()
        self.scheduler.wait(timeout=30)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """The module's fleet speaks TLS: scheduler, workers, the runs and this test process all read Dask's
    settings from the environment."""
    import dask.config

    tmp = tmp_path_factory.mktemp("fleet")
    settings = tls_settings(tmp)
    old = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    dask.config.refresh()
    f = Fleet(tmp, protocol="tls")
    try:
        f.start_worker("alpha", "uml", wait=False)  # both probe at once (each its own backend)
        f.start_worker("beta", "tcg", wait=False)
        f.joined("alpha")
        f.joined("beta")
        yield f
    finally:
        f.close()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        dask.config.refresh()
    assert worker_homes() == [], "a worker's directory was left behind"


def _tmp_entries(tmpdir: Path) -> set[str]:
    """What a worker's temp directory holds, but Dask's own scratch space and libguestfs's appliance cache
    (.guestfs-UID), which both keep by design."""
    return {n for n in os.listdir(tmpdir) if n != "dask-scratch-space" and not n.startswith(".guestfs-")}


def _hypervisors() -> list[str]:
    """Processes of ours other than the Dask workers themselves (whose command line names their directory)."""
    return [p for p in processes_mentioning(str(TMP)) if "guestbench.run.fleet.daskworker" not in p]


def _results(tmp: Path) -> dict[str, Any]:
    files = list((tmp / "r").glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def _start_run(tmp: Path, address: str, reps: int, backends: str = "uml, tcg",
               measurement: str = "startup") -> subprocess.Popen[str]:
    sc = write_scenario(tmp / "s.yaml", SCENARIO.format(reps=reps, backends=backends, measurement=measurement))
    insecure = ["--insecure"] if address.startswith("tcp://") else []  # a plain scheduler, on loopback too
    return start_guestbench("scenario", str(sc), "--cluster", address, *insecure, "--results", str(tmp / "r"))


def _in_results(tmp: Path, check: Any) -> bool:
    """Whether the run's results file, as it is now on disk, passes `check` (False while there is none)."""
    try:
        return bool(check(_results(tmp)))
    except (AssertionError, ValueError):
        return False


SCENARIO = "name: fleet\nrepetitions: {reps}\nwarmup: 0\nbackends: [{backends}]\nmeasurements: [{measurement}]\n"
# one launch per host, then uploads into the appliance's memory: what is proven is the fleet, not start-up
UPLOADS = "{measurement: upload-no-write, size: 1MiB}"


def test_the_coordinator_sees_every_worker_at_every_check_however_often_its_client_refreshes(fleet: Fleet) -> None:
    """Beside two CPU hogs a run marked both hosts lost 5 s in while no worker had left: the liveness check read
    the client's cached identity, which the client's own refresh replaces with one listing no workers. Here the
    refresh runs every 10 ms (the window made wide without needing a loaded machine) and the check is asked
    200 times: every answer holds both workers. The cached read missed them in about 2 % of calls."""
    import dask.config

    from guestbench.run.fleet import cluster

    with dask.config.set({"distributed.client.scheduler-info-interval": "10ms"}):
        client = cluster.connect(fleet.address)
        try:
            answers = [set(cluster.workers(client)) for _ in range(200)]  # each bounded by ASK_TIMEOUT_S
        finally:
            client.close()
    missed = sum(a != {"alpha", "beta"} for a in answers)
    assert missed == 0, f"{missed} of {len(answers)} checks missed a worker"


def test_one_scenario_on_two_hosts_gives_one_results_file_with_both_named(fleet: Fleet, tmp_path: Path) -> None:
    assert fleet.address.startswith("tls://")  # encrypted, both ends authenticated by certificate
    workers = cluster_workers(fleet.address)
    assert workers["alpha"]["resources"] == {"bench": 1, "uml": 1}
    assert workers["beta"]["resources"] == {"bench": 1, "tcg": 1}
    sc = write_scenario(tmp_path / "s.yaml", SCENARIO.format(reps=2, backends="uml, tcg", measurement=UPLOADS))
    proc = guestbench("scenario", str(sc), "--cluster", fleet.address, "--results", str(tmp_path / "r"), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = _results(tmp_path)
    assert doc["status"] == "complete" and doc["schema_version"] == 3
    assert set(doc["hosts"]) == {"alpha", "beta"}
    for name, backend in (("alpha", "uml"), ("beta", "tcg")):
        info = doc["hosts"][name]
        assert info["status"] == "complete" and info["address"] == workers[name]["address"]
        assert info["host"]["cpu_model"] and info["backends"][backend]["usable"] is True, info["backends"]
        cells = [c for c in doc["cells"] if c["host"] == name]
        assert [c["backend"] for c in cells] == [backend], cells  # each host ran only what it offers
        assert len(cells[0]["samples"]) == 2 and all(s["seconds"] > 0 for s in cells[0]["samples"])
    # each keeper reaps what its worker's launches hand it (UML's helper processes end orphaned) as they end
    assert fleet.procs["alpha"].poll() is None
    fleet_wait("the keepers' orphans to be reaped", lambda: not _zombies(fleet), 10)
    # show: the hosts side by side, then each host's own tables
    shown = guestbench("show", str(next((tmp_path / "r").glob("*.json"))))
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "upload-no-write: host × backend" in out and "host alpha" in out and "host beta" in out, out
    for host, backend in (("alpha", "uml"), ("beta", "tcg")):
        assert any(host in ln and backend in ln for ln in out.splitlines()), out
    summary = json.loads(guestbench("show", "--json", str(next((tmp_path / "r").glob("*.json")))).stdout)
    rows = {(r["host"], r["backend"]): r for r in summary["fleet"]["tables"][0]["rows"]}
    assert set(rows) == {("alpha", "uml"), ("beta", "tcg")} and all(r["n"] == 2 for r in rows.values())
    # report: the same tables on the page
    rep = guestbench("report", str(next((tmp_path / "r").glob("*.json"))), "-o", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stderr
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "host × backend" in page and "host alpha" in page and "host beta" in page
    # compare: two fleet runs are matched host by host (here the run against itself: no change)
    path = str(next((tmp_path / "r").glob("*.json")))
    cmp = guestbench("compare", path, path, "--json")
    assert cmp.returncode == 0, cmp.stderr
    compared = {(r["backend"], r["placement"]) for c in json.loads(cmp.stdout)["comparisons"] for r in c["rows"]}
    assert compared == {("uml", "host@alpha"), ("tcg", "host@beta")}, cmp.stdout
    assert _hypervisors() == []


REPS = 20  # beta's are not all taken in the moment between its first sample and its SIGKILL


def test_a_worker_killed_mid_run_costs_only_its_own_samples_and_leaves_nothing(tmp_path: Path) -> None:
    """A fleet of its own (the worker it kills is gone for good): beta is SIGKILLed after its first sample. Both
    hosts offer uml (3 s a launch; what is proven is the loss, not the backend: routing is the test above's), and
    each launches once: uploads into memory, a second or so each, are the samples."""
    homes = worker_homes()  # the module's fleet may be up: its workers' directories are not this test's
    sockdirs = socket_dirs()  # libguestfs's, in /tmp as root whatever TMPDIR says; the rest go to the workers' own
    tmpdir = Path(tempfile.mkdtemp(prefix="t-", dir=session_tmp_path()))  # short: sockets are made in it
    f = Fleet(tmp_path)
    try:
        f.start_worker("alpha", "uml", tmpdir)
        f.start_worker("beta", "uml", tmpdir)
        run = _start_run(tmp_path, f.address, reps=REPS, backends="uml", measurement=UPLOADS)
        fleet_wait("beta's first sample", lambda: _in_results(tmp_path, lambda doc: any(
            c.get("host") == "beta" and c["samples"] for c in doc["cells"])), 600, every=0.5)
        pid = _daskworker_pid(f.address, "beta")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        out, err = run.communicate(timeout=900)
        assert run.returncode == 1, err[-3000:]  # samples failed: beta's
        doc = _results(tmp_path)
        assert doc["status"] == "complete"
        assert doc["hosts"]["beta"]["status"] == "lost" and "left the cluster" in doc["hosts"]["beta"]["error"]
        alpha = [c for c in doc["cells"] if c["host"] == "alpha"]
        assert len(alpha) == 1 and len(alpha[0]["samples"]) == REPS and alpha[0]["status"] == "done"
        beta = [c for c in doc["cells"] if c["host"] == "beta"][0]
        assert 1 <= len(beta["samples"]) < REPS
        assert beta["failures"] and all("host beta lost" in x["reason"] for x in beta["failures"])
        assert len(beta["samples"]) + len(beta["failures"]) >= REPS
        assert "host beta" in err and "lost" in err
        # beta's keeper cleaned up after its worker: no hypervisor, no directory, and it exited
        f.procs["beta"].wait(timeout=300)
        assert "the Dask worker ended by signal 9" in f.log("beta")
        fleet_wait("beta's hypervisors to be gone", lambda: not [p for p in _hypervisors() if "beta" in p], 30)
    finally:
        f.close()
    assert worker_homes() == homes and _hypervisors() == []
    assert _tmp_entries(tmpdir) == set(), "the killed worker's task left files in the temp directory"
    assert leftover_sockdirs(sockdirs) == set(), "the killed worker's launch left its socket directory"


def test_ctrl_c_of_a_cluster_run_stops_the_hosts_and_keeps_every_sample(fleet: Fleet, tmp_path: Path) -> None:
    # alpha's samples come after one launch; enough of them that the run is still going when the SIGINT comes: with
    # 20 the coordinator's file showed two samples only as the run ended (CI E8, beside the suite's stack builds)
    run = _start_run(tmp_path, fleet.address, reps=200, measurement=UPLOADS)
    fleet_wait("two samples",
               lambda: _in_results(tmp_path, lambda doc: sum(len(c["samples"]) for c in doc["cells"]) >= 2),
               600, every=0.5)
    run.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out, err = run.communicate(timeout=300)
    took = time.monotonic() - t0
    assert run.returncode == 130, err[-3000:]
    doc = _results(tmp_path)
    assert doc["status"] == "interrupted", doc["status"]
    assert {doc["hosts"][n]["status"] for n in ("alpha", "beta")} <= {"interrupted", "complete"}
    kept = sum(len(c["samples"]) for c in doc["cells"])
    assert 2 <= kept < 400  # stopped before the 2 × 200 it planned
    assert took < 120, f"the hosts took {took:.0f} s to stop"
    # the workers are still there, idle and clean: no host run, no hypervisor
    fleet_wait("the hosts' runs to end", lambda: not _hypervisors(), 60)
    assert set(cluster_workers(fleet.address)) == {"alpha", "beta"}


def test_bad_cluster_input_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k.startswith("DASK_DISTRIBUTED__COMM__TLS")]:  # the module fleet's
        monkeypatch.delenv(k)
    sc = write_scenario(tmp_path / "s.yaml", SCENARIO.format(reps=1, backends="uml, tcg", measurement="startup"))
    # port 1: nothing listens there, known at once (not after Dask's 20 s of retries: the fleet-security unit test)
    for args, expect in ((["--cluster", "tcp://127.0.0.1:1", "--insecure"],
                          "cannot reach a Dask scheduler there (nothing listens on that port of this host)"),
                         (["--cluster", "tcp://127.0.0.1:1"], "plain tcp:// to a scheduler lets any local user"),
                         (["--hosts", "a"], "--hosts: needs --cluster ADDRESS"),
                         (["--cluster", "tcp://127.0.0.1:1", "--dry-run"],
                          "--dry-run: is not available with --cluster"),
                         (["--cluster", "tls://127.0.0.1:1"], "a tls:// scheduler needs Dask's TLS settings")):
        proc = guestbench("scenario", str(sc), *args, "--results", str(tmp_path / "r"), timeout=120)
        assert proc.returncode == 2, (args, proc.stderr)
        said = proc.stderr.split("warning: --insecure:")[-1] if "--insecure" in args else proc.stderr  # and why
        assert len([ln for ln in said.splitlines() if ln.startswith("guestbench:")]) == 1, proc.stderr
        assert expect in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
