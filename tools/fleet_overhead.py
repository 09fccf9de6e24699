"""What a fleet run costs beyond its measurements: the Dask scheduler's overhead per task, and per results snapshot.

Starts a real scheduler and two real Dask workers (subprocesses, with guestbench's resources: bench=1 and a
backend), then times, side by side in one run:
  1. N no-op tasks, each pinned to a worker and asking for bench=1 as a host share does, one after another
     (the round trip a task pays) and all at once (the scheduler's throughput under guestbench's resources);
  2. M results snapshots sent from a worker with Worker.log_event and merged here as the coordinator does,
     for a document the size of a real run's (the cost of streaming samples back).
Prints one line per figure with n, median and spread. Usage: python tools/fleet_overhead.py [N] [M] [CELLS]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def noop(i: int) -> int:
    return i


def send_snapshots(topic: str, doc: dict[str, Any], m: int) -> int:
    from distributed import get_worker

    w = get_worker()
    for i in range(m):
        w.log_event(topic, {"host": w.name, "doc": {**doc, "seq": i}})
    return m


def fake_doc(cells: int) -> dict[str, Any]:
    """A results document of `cells` cells with 10 samples each, shaped like a start-up run's."""
    cell = {"backend": "uml", "label": "startup", "measurement": "startup", "placement": "host", "status": "done",
            "params": {}, "timed": "launch", "samples": [{"rep": i, "seconds": 5.1 + i / 100,
                                                           "utc": "2026-11-25T04:00:00.000000Z", "seq": i,
                                                           "load": {"other_cores": 0.1, "busy": False}}
                                                          for i in range(1, 11)], "warmups": [], "failures": []}
    return {"status": "running", "host": {"cpu_model": "x"}, "backends": {}, "cells": [dict(cell) for _ in range(cells)]}


def spread(xs: list[float]) -> str:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=20) if len(xs) >= 20 else [xs[0], xs[-1]]
    return (f"n={len(xs)} median {statistics.median(xs) * 1e3:.2f} ms, 5th-95th percentile "
            f"{q[0] * 1e3:.2f}-{q[-1] * 1e3:.2f} ms")


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    cells = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    from distributed import Client

    tmp = Path(tempfile.mkdtemp(prefix="fleet-overhead-"))
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard", "--scheduler-file", str(tmp / "s.json")],
                              stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not (tmp / "s.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads((tmp / "s.json").read_text())["address"]
        for i, backend in ((1, "uml"), (2, "tcg")):
            procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads",
                                           "1", "--no-nanny", "--name", f"w{i}", "--resources",
                                           f"bench=1,{backend}=1", "--local-directory", str(tmp / f"w{i}")],
                                          stderr=subprocess.DEVNULL))
        client = Client(address, timeout=30, set_as_default=False)
        client.wait_for_workers(2, timeout=60)
        by_name = {w["name"]: a for a, w in client.scheduler_info()["workers"].items()}
        print(f"scheduler {address}, workers {sorted(by_name)}; python {sys.version.split()[0]}, "
              f"distributed {__import__('distributed').__version__}")
        # 1a: one task after another, alternating workers: the round trip of one task
        rt = []
        for i in range(n):
            t0 = time.perf_counter()
            client.submit(noop, i, workers=[by_name[f"w{1 + i % 2}"]], allow_other_workers=False,
                          resources={"bench": 1}, pure=False).result()
            rt.append(time.perf_counter() - t0)
        print(f"one task at a time (submit, run a no-op, result): {spread(rt)}")
        # 1b: all at once: throughput with one bench per worker (tasks of a worker run one after another)
        t0 = time.perf_counter()
        futs = [client.submit(noop, i, workers=[by_name[f"w{1 + i % 2}"]], allow_other_workers=False,
                              resources={"bench": 1}, pure=False) for i in range(n)]
        client.gather(futs)
        total = time.perf_counter() - t0
        print(f"{n} tasks at once over 2 workers: {total:.2f} s, {total / n * 1e3:.2f} ms per task")
        # 2: snapshots through log_event, merged as the coordinator merges them
        doc = fake_doc(cells)
        size = len(json.dumps(doc))
        got: list[float] = []
        done = threading.Event()
        merged: dict[str, Any] = {"cells": []}

        def on_event(event: Any) -> None:
            msg = event[1]
            merged["cells"] = [c for c in merged["cells"] if c.get("host") != msg["host"]] + [
                {**c, "host": msg["host"]} for c in msg["doc"]["cells"]]
            json.dumps(merged)  # the coordinator rewrites its results file on each merge
            got.append(time.perf_counter())
            if len(got) == m:
                done.set()

        client.subscribe_topic("overhead", on_event)
        t0 = time.perf_counter()
        client.submit(send_snapshots, "overhead", doc, m, workers=[by_name["w1"]], pure=False).result()
        done.wait(120)
        total = (got[-1] - t0) if got else float("nan")
        print(f"{len(got)} snapshots of a {cells}-cell document ({size / 1024:.0f} KiB) sent and merged: "
              f"{total:.2f} s, {total / max(1, len(got)) * 1e3:.2f} ms per snapshot")
        client.close()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        subprocess.run(["rm", "-rf", str(tmp)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
