"""What a fleet run costs beyond its measurements: the Dask scheduler's overhead per task, and per results snapshot.

Starts a real scheduler and two real Dask workers (subprocesses, with guestbench's resources: bench=1 and a
backend), then times, side by side in one run:
  1. N no-op tasks, each pinned to a worker and asking for bench=1 as a host share does, one after another
     (the round trip a task pays) and all at once (the scheduler's throughput under guestbench's resources);
  2. M results snapshots sent from a worker with Worker.log_event and merged here as the coordinator does,
     for a document the size of a real run's (the cost of streaming samples back).
  3. the rewrite of the merged results file (once per batch of snapshots) for 2, 20 and 200 hosts.
Prints one line per figure with n, median and spread. Usage: python tools/fleet_overhead.py [N] [M] [CELLS]
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def noop(i: int) -> int:
    return i


def send_snapshots(topic: str, host: str, key: str, doc: dict[str, Any], m: int) -> int:
    """What a host share sends on every change of its results file (guestbench.run.fleet.task), `m` times."""
    from distributed import get_worker

    from guestbench.run.fleet import seal

    w = get_worker()
    for i in range(m):
        w.log_event(topic, seal.seal(key, host, i + 1, {"doc": doc}))
    return m


def host_doc(cells: int) -> dict[str, Any]:
    """A host's results document of `cells` cells: the cells of a real start-up run (tests/data) repeated."""
    real = json.loads((ROOT / "tests/data/results/20261121T211449Z-startup.json").read_text())
    real_cells = [c for c in real["cells"] if c.get("samples")]
    return {**real, "cells": [dict(real_cells[i % len(real_cells)]) for i in range(cells)]}


def spread(xs: list[float]) -> str:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=20) if len(xs) >= 20 else [xs[0], xs[-1]]
    return (f"n={len(xs)} median {statistics.median(xs) * 1e3:.2f} ms, 5th-95th percentile "
            f"{q[0] * 1e3:.2f}-{q[-1] * 1e3:.2f} ms")


def start_cluster(tmp: Path, procs: list[subprocess.Popen[bytes]]) -> str:
    """A real scheduler and two real workers (w1 offers uml, w2 tcg, each bench=1), as subprocesses added to
    `procs`; the scheduler's address."""
    procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                   "--port", "0", "--no-dashboard", "--scheduler-file", str(tmp / "s.json")],
                                  stderr=subprocess.DEVNULL))
    deadline = time.monotonic() + 60
    while not (tmp / "s.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    address: str = json.loads((tmp / "s.json").read_text())["address"]
    for i, backend in ((1, "uml"), (2, "tcg")):
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads",
                                       "1", "--no-nanny", "--name", f"w{i}", "--resources",
                                       f"bench=1,{backend}=1", "--local-directory", str(tmp / f"w{i}")],
                                      stderr=subprocess.DEVNULL))
    return address


def time_tasks(client: Any, by_name: dict[str, str], n: int) -> None:
    """1. N no-op tasks pinned to a worker with bench=1: one after another (a task's round trip), then all at
    once (the scheduler's throughput under guestbench's resources)."""
    rt = []
    for i in range(n):
        t0 = time.perf_counter()
        client.submit(noop, i, workers=[by_name[f"w{1 + i % 2}"]], allow_other_workers=False,
                      resources={"bench": 1}, pure=False).result()
        rt.append(time.perf_counter() - t0)
    print(f"one task at a time (submit, run a no-op, result): {spread(rt)}")
    t0 = time.perf_counter()
    futs = [client.submit(noop, i, workers=[by_name[f"w{1 + i % 2}"]], allow_other_workers=False,
                          resources={"bench": 1}, pure=False) for i in range(n)]
    client.gather(futs)
    total = time.perf_counter() - t0
    print(f"{n} tasks at once over 2 workers: {total:.2f} s, {total / n * 1e3:.2f} ms per task")


def time_snapshots(client: Any, address: str, by_name: dict[str, str], tmp: Path, m: int, cells: int) -> None:
    """2. M snapshots through log_event as sealed compressed JSON (guestbench.run.fleet.seal), opened and merged
    into a real results file as the coordinator does (seal.open_message, FleetRun.merge, which rewrites it)."""
    from rich.console import Console

    from guestbench.results import FleetHost, ResultsFile
    from guestbench.run.fleet import coordinator, seal
    from guestbench.scenario import parse_scenario

    doc = host_doc(cells)
    text = json.dumps(doc)
    packed = seal.pack(doc)
    key = seal.new_key()
    sc = parse_scenario({"name": "overhead", "backends": ["uml"], "measurements": ["startup"]}, "overhead")
    run = coordinator.FleetRun(sc, coordinator.FleetOptions(address=address), Console(stderr=True))
    run.results = ResultsFile.create(tmp / "merged.json", scenario=doc["scenario"], host=doc["host"],
                                     command=["fleet_overhead"], guestbench=doc["guestbench"])
    run.results.add_hosts({"w1": FleetHost(address=by_name["w1"], status="running")})
    arrived: list[float] = []
    merge_s: list[float] = []
    done = threading.Event()

    def on_event(event: Any) -> None:
        t0 = time.perf_counter()
        message = seal.open_message(event[1], {"w1": key}, {"w1": by_name["w1"]})
        assert message is not None and message.body is not None
        run.merge(message.host, message.body["doc"])
        now = time.perf_counter()
        merge_s.append(now - t0)
        arrived.append(now)
        if len(arrived) == m:
            done.set()

    client.subscribe_topic("overhead", on_event)
    t0 = time.perf_counter()
    client.submit(send_snapshots, "overhead", "w1", key, doc, m, workers=[by_name["w1"]], pure=False).result()
    done.wait(300)
    total = (arrived[-1] - t0) if arrived else float("nan")
    merged = json.loads((tmp / "merged.json").read_text())
    assert len(merged["cells"]) == cells, "every cell merged"
    print(f"{len(arrived)} snapshots of a {cells}-cell host document ({len(text) / 1024:.0f} KiB JSON, "
          f"{len(packed) / 1024:.1f} KiB packed) sent and "
          f"merged into the results file: {total:.2f} s in all, {total / max(1, len(arrived)) * 1e3:.2f} ms each; "
          f"the merge alone: {spread(merge_s)}")


def time_rewrites(tmp: Path, cells: int) -> None:
    """3. The coordinator's rewrite of the merged file, once per batch of snapshots, as hosts are added."""
    from guestbench.results import FleetHost, ResultsFile

    doc = host_doc(cells)
    for hosts in (2, 20, 200):
        rf = ResultsFile.create(tmp / f"merged-{hosts}.json", scenario=doc["scenario"], host=doc["host"],
                                command=["fleet_overhead"], guestbench=doc["guestbench"])
        with rf.batch():
            rf.add_hosts({f"h{i}": FleetHost(status="running") for i in range(hosts)})
            for i in range(hosts):
                for c in doc["cells"]:
                    rf.add_cell({**c, "host": f"h{i}"})
        took = []
        for _ in range(20 if hosts < 200 else 5):
            t0 = time.perf_counter()
            rf.save()
            took.append(time.perf_counter() - t0)
        size = (tmp / f"merged-{hosts}.json").stat().st_size
        print(f"rewrite of the merged results file, {hosts} hosts x {cells} cells ({size / 2**20:.1f} MiB): "
              f"{spread(took)}")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:  # a worker still trying to say goodbye to its scheduler
            p.kill()
            p.wait()


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    cells = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    from distributed import Client

    tmp = Path(tempfile.mkdtemp(prefix="fleet-overhead-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        address = start_cluster(tmp, procs)
        client = Client(address, timeout=30, set_as_default=False)
        client.wait_for_workers(2, timeout=60)
        by_name = {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}
        print(f"scheduler {address}, workers {sorted(by_name)}; python {sys.version.split()[0]}, "
              f"distributed {__import__('distributed').__version__}")
        time_tasks(client, by_name, n)
        time_snapshots(client, address, by_name, tmp, m, cells)
        time_rewrites(tmp, cells)
        client.close()
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
