"""A fleet host is not trusted (issue 46): a real Dask scheduler and two real Dask workers, subprocesses on
loopback, each running a scripted share of the run (tests/fleet_hostile_worker.py, as a preload: no appliance is
launched): beta honest, alpha hostile, its attack chosen by the scenario's name. The coordinator is the real
`guestbench scenario --cluster`. Whatever alpha sends, beta's cells stay as beta sent them, alpha fails saying
why, and the fleet's results file is one every reader accepts. And a plain tcp:// scheduler on loopback needs
--insecure: any local user reaches a loopback port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from helpers.cli import guestbench, write_scenario
from helpers.fleet import cluster_workers, fleet_wait, scheduler_address, stop
from helpers.paths import ROOT

HOSTILE = ROOT / "tests/fleet_hostile_worker.py"
JOIN_S = 120.0
SCENARIO = "name: {name}\nrepetitions: 5\nwarmup: 1\nbackends: [uml, tcg]\nmeasurements: [startup]\n"
REAL = ROOT / "tests/data/results/20261121T211449Z-startup.json"
# The CLI in a Python that writes its own peak resident memory (KiB) as it ends: VmHWM, its own memory's high-water
# mark, not getrusage's ru_maxrss, which keeps the forking process's when it execs (CI run A7: a pytest worker's
# 700 MiB)
PEAK = """import runpy, sys
peak = sys.argv.pop(1)
try:
    runpy.run_module("guestbench", run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status, open(peak, "w") as f:
        f.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
"""


class Cluster:
    """The scheduler and the two workers; `dir` is where runs write their results (one directory per attack)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.dir = tmp, tmp / "runs"
        self.dir.mkdir()
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            self._start(tmp)
        except BaseException:
            self.close()
            raise

    def _start(self, tmp: Path) -> None:
        dask_env = {**os.environ, "DASK_TEMPORARY_DIRECTORY": str(tmp)}  # Dask's scratch space: the test's
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
             "--no-dashboard", "--scheduler-file", str(tmp / "scheduler.json")],
            env=dask_env, stdin=subprocess.DEVNULL, stderr=open(tmp / "scheduler.log", "wb")))
        self.address = fleet_wait("the scheduler's address", lambda: scheduler_address(tmp / "scheduler.json"), 60)
        for name, backend, role in (("alpha", "uml", "hostile"), ("beta", "tcg", "honest")):
            env = {**dask_env, "GUESTBENCH_TEST_ROLE": role, "GUESTBENCH_TEST_DIR": str(self.dir),
                   "GUESTBENCH_TEST_REAL": str(REAL)}
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--name", name, "--nthreads", "1",
                 "--resources", f"bench=1 {backend}=1", "--host", "127.0.0.1", "--no-dashboard", "--no-nanny",
                 "--local-directory", str(tmp / name), "--preload", str(HOSTILE)], cwd=ROOT, env=env,
                stdin=subprocess.DEVNULL,
                stderr=open(tmp / f"{name}.log", "wb")))
        fleet_wait("both workers", lambda: set(cluster_workers(self.address)) == {"alpha", "beta"} or self._died(),
                   JOIN_S, every=0.5)
        assert not self._died(), [(self.tmp / f"{n}.log").read_text()[-2000:] for n in ("alpha", "beta")]

    def _died(self) -> bool:
        return any(p.poll() is not None for p in self.procs)

    def run(self, name: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        """`guestbench scenario` of the attack `name` on this cluster (--insecure: plain tcp:// on loopback)."""
        sc = write_scenario(self.tmp / f"{name}.yaml", SCENARIO.format(name=name))
        results = self.dir / name
        return guestbench("scenario", str(sc), "--cluster", self.address, "--insecure", "--results", str(results),
                          *extra, timeout=300), results

    def run_measured(self, name: str) -> tuple[subprocess.CompletedProcess[str], Path, int]:
        """`run`, in a Python that writes its own peak resident memory (KiB) when the CLI ends."""
        sc = write_scenario(self.tmp / f"{name}.yaml", SCENARIO.format(name=name))
        results, peak = self.dir / name, self.tmp / f"{name}.peak"
        proc = subprocess.run([sys.executable, "-c", PEAK, str(peak), "scenario", str(sc), "--cluster", self.address,
                               "--insecure", "--results", str(results)], cwd=ROOT, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=300)
        return proc, results, int(peak.read_text())

    def close(self) -> None:
        stop(self.procs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("hostile"))
    try:
        yield c
    finally:
        c.close()


def _results(results: Path) -> tuple[dict[str, Any], Any]:
    """The run's one results file: as JSON, and as `load_results` reads it (which refuses what no run writes)."""
    from guestbench.results import load_results

    (path,) = list(results.glob("*.json"))
    return json.loads(path.read_text()), load_results(path)


def _beta_as_sent(doc: dict[str, Any]) -> None:
    """Beta's host record and cells are those its honest share sent: the real run's tcg cells."""
    real = json.loads(REAL.read_text())
    beta = doc["hosts"]["beta"]
    assert beta["status"] == "complete" and "error" not in beta, beta
    assert beta["host"] == real["host"], beta["host"]
    (cell,) = [c for c in doc["cells"] if c["host"] == "beta"]
    (sent,) = [c for c in real["cells"] if c["backend"] == "tcg"]
    assert cell["samples"] == sent["samples"] and cell["status"] == "done"


def test_a_plain_scheduler_on_loopback_is_refused_without_insecure(cluster: Cluster, tmp_path: Path) -> None:
    """Before, tcp://127.0.0.1 was let in: any local user can submit to such a scheduler, and its workers run what
    they are sent as root. Refused in one line, before a results file or a probe; --insecure lets it in."""
    sc = write_scenario(tmp_path / "s.yaml", SCENARIO.format(name="loopback"))
    for args in (("scenario", str(sc), "--cluster", cluster.address, "--results", str(tmp_path / "r")),
                 ("worker", cluster.address, "--backend", "uml")):
        proc = guestbench(*args, timeout=120)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr[-2000:])
        assert "plain tcp:// to a scheduler lets any local user" in proc.stderr and "--insecure" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_a_host_whose_message_names_another_fails_and_the_other_keeps_its_cells(cluster: Cluster) -> None:
    """Alpha waits until beta is complete in the coordinator's file, then sends an event naming beta with other
    cells and fingerprint. Before, beta's cells, fingerprint and status became alpha's forgery."""
    proc, results = cluster.run("forge")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc, _ = _results(results)
    _beta_as_sent(doc)
    alpha = doc["hosts"]["alpha"]
    assert alpha["status"] == "failed" and "naming host beta, sealed with its own key" in alpha["error"], alpha
    assert "host alpha failed: it sent results naming host beta" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("digits", [200, 5000])
def test_a_hosts_final_document_goes_through_the_bounded_parser(cluster: Cluster, digits: int) -> None:
    """Alpha's final document has a sample `rep` of 200 (5000) digits. Before, it was merged as Dask handed it
    over: the fleet's file was then refused by every reader (200), or could no longer be saved (5000)."""
    proc, results = cluster.run(f"digits{digits}")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc, _ = _results(results)  # loads: every reader accepts the file
    assert doc["status"] == "complete"
    _beta_as_sent(doc)
    alpha = doc["hosts"]["alpha"]
    assert alpha["status"] == "failed", alpha
    assert f"its results were refused: JSON: line 1: a number of {digits:,} characters" in alpha["error"], alpha
    assert all(len(str(s["rep"])) < 5 for c in doc["cells"] for s in c["samples"])


def test_nothing_a_host_sends_is_unpickled_by_the_coordinator(cluster: Cluster) -> None:
    """Alpha returns an object whose unpickling creates a file, and logs a `warn` event carrying one (Dask's
    client unpickles a warn event's message). Before, the coordinator ran both."""
    marker = cluster.dir / "pickle-ran"
    proc, results = cluster.run("pickle")
    assert not marker.exists(), "the coordinator unpickled what a host sent"
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc, _ = _results(results)
    _beta_as_sent(doc)
    alpha = doc["hosts"]["alpha"]
    assert alpha["status"] == "failed" and "without sending its final results" in alpha["error"], alpha


def test_a_host_whose_task_fails_fails_saying_so_and_the_run_ends(cluster: Cluster) -> None:
    """Alpha's task raises. Its error reaches the coordinator as an object Dask serialized, which the coordinator
    does not load (guestbench.run.fleet.plain): its future must still end (the first version of that left it
    pending and the run never ended: review), alpha failing, beta complete."""
    proc, results = cluster.run("raise")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "\x1b]0;" not in proc.stderr, proc.stderr
    doc, _ = _results(results)
    _beta_as_sent(doc)
    alpha = doc["hosts"]["alpha"]
    assert alpha["status"] == "failed" and "its task failed on the worker" in alpha["error"], alpha


def test_objects_in_a_hosts_events_are_withheld_and_the_other_hosts_go_on(cluster: Cluster) -> None:
    """While beta runs, alpha logs two events whose payloads Dask's client loads as it reads them, before any
    handler: a compressed frame that inflates to 512 MiB, and a pickle. Before, the coordinator inflated the
    first in full and unpickled the second, or, refusing it, its Dask client stopped reading the scheduler for good:
    beta's final results were never read and beta was written off as lost. Now neither is loaded
    (guestbench.run.fleet.plain): beta ends complete with its cells as sent, alpha fails for sending no results."""
    proc, results, peak_kib = cluster.run_measured("deafen")
    assert not (cluster.dir / "deafen-ran").exists(), "the coordinator unpickled what a host sent"
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "stopped reading the scheduler" not in proc.stderr, proc.stderr[-3000:]
    assert peak_kib < 400 * 2**10, f"the coordinator peaked at {peak_kib // 2**10} MiB: the frame was inflated"
    doc, _ = _results(results)
    _beta_as_sent(doc)
    alpha = doc["hosts"]["alpha"]
    assert alpha["status"] == "failed" and "without sending its final results" in alpha["error"], alpha
