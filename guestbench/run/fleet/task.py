"""What a fleet host runs: its share of the scenario, as `guestbench scenario` on this machine, in a child process.

The child is the one-machine run unchanged (gate, blocks, supervisor, clean-up, its own results file). It exits
on its own when its stdin closes (`--exit-with-stdin`): if the Dask worker that started it dies, even by
SIGKILL, the child stops as on Ctrl-C, kills its hypervisors, removes what it made and closes its results file
as 'interrupted'. This function runs in a Dask worker thread: it sends every new version of the child's
results file to the coordinator (`Worker.log_event`), stops the child when the coordinator sets the run's
cancel event, and sends the final document the same way, every message sealed with the host's own key.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

import yaml

from guestbench.host.paths import temp_root
from guestbench.run.fleet import seal

POLL_S = 0.25  # how often the child's results file is looked at
STOP_GRACE_S = 120.0  # after SIGTERM, how long the child may take to clean up before SIGKILL
ASK_S = 30.0  # how long the scheduler may take to say whether the run was cancelled


TOPIC_PREFIX = "guestbench-fleet-"


def topic(run_id: str) -> str:
    """The event topic on which a run's hosts send their messages (each sealed: guestbench.run.fleet.seal)."""
    return f"{TOPIC_PREFIX}{run_id}"


def key(run_id: str, host: str) -> str:
    """The Dask key of `host`'s task in run `run_id` (the scheduler's roles take a run's events only from a worker
    running one: guestbench.run.fleet.admission)."""
    return f"guestbench-{run_id}-{host}"


def key_prefix(run_topic: str) -> str:
    """What the keys of the tasks of the run whose topic is `run_topic` begin with."""
    return key(run_topic[len(TOPIC_PREFIX):], "")


def cancel_event_name(run_id: str) -> str:
    return f"guestbench-fleet-cancel-{run_id}"


def host_share(run_id: str, host: str, key: str, scenario_file: dict[str, Any], options: list[str]) -> None:
    """Run on the worker of `host`: the scenario (already limited to the host's backends), `options` passed to
    `guestbench scenario`. Every snapshot, then the end ({"doc", "exit", "stderr", "final"}), goes to the
    coordinator as an event sealed with `key` (its own, given to this host alone); nothing is returned, so
    nothing of the worker's reaches the coordinator as Dask's pickled task result."""
    from distributed import get_worker

    worker = get_worker()
    numbers = itertools.count(time.time_ns())  # never one a rerun of this task at this address sent already

    def send(body: dict[str, Any]) -> None:
        worker.log_event(topic(run_id), seal.seal(key, host, next(numbers), body))

    try:
        out = run_child(host, scenario_file, options, lambda doc: send({"doc": doc}),
                        lambda: cancel_requested(run_id))
    except Exception as e:  # said in the final message: a task's own exception would cross as pickle
        out = {"exit": None, "doc": None, "stderr": f"{type(e).__name__}: {e}"}
    send({"doc": out.get("doc"), "exit": out.get("exit"), "stderr": out.get("stderr"), "final": True})


def cancel_requested(run_id: str) -> bool:
    """Whether the coordinator set the run's cancel event, asked on this worker's own connection to the
    scheduler: a worker's certificate may not register the Dask client `distributed.Event` would
    (guestbench.run.fleet.roles). True when the scheduler does not answer: nobody is left to receive samples."""
    from distributed import get_worker
    from distributed.utils import sync

    worker = get_worker()
    try:
        return bool(sync(worker.loop, worker.scheduler.event_is_set, name=cancel_event_name(run_id),
                         callback_timeout=ASK_S))
    except Exception:
        return True


def run_child(host: str, scenario_file: dict[str, Any], options: list[str], send: Callable[[dict[str, Any]], None],
              cancelled: Callable[[], bool]) -> dict[str, Any]:
    """The child run, its results file sent on each change; stopped (SIGTERM, then SIGKILL) when `cancelled`."""
    # in the worker's directory (temp_root() there), which its keeper removes even when this process is killed
    work = Path(tempfile.mkdtemp(prefix="share-", dir=temp_root()))
    try:
        (work / "scenario.yaml").write_text(yaml.safe_dump(scenario_file, sort_keys=False))
        results = work / "results"
        stderr = open(work / "stderr", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "guestbench", "scenario", str(work / "scenario.yaml"),
                                 "--results", str(results), "--exit-with-stdin", "--json", *options],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr,
                                env={**os.environ, "GUESTBENCH_FLEET_HOST": host})
        stderr.close()
        seen: tuple[float, int] | None = None
        doc: dict[str, Any] | None = None
        stop_at: float | None = None
        while True:
            ended = proc.poll() is not None
            path = _results_file(results)
            if path is not None:
                st = path.stat()
                if (st.st_mtime, st.st_size) != seen:
                    seen = (st.st_mtime, st.st_size)
                    fresh = _read(path)
                    if fresh is not None:
                        doc = fresh
                        send(doc)
            if ended:
                break
            if stop_at is None and cancelled():
                proc.send_signal(signal.SIGTERM)  # as Ctrl-C: samples kept, status 'interrupted'
                stop_at = time.monotonic() + STOP_GRACE_S
            elif stop_at is not None and time.monotonic() > stop_at:
                proc.kill()
            time.sleep(POLL_S)
        if proc.stdin is not None:
            proc.stdin.close()
        tail = (work / "stderr").read_bytes()[-4000:].decode("utf-8", "replace")
        return {"host": host, "exit": proc.returncode, "doc": doc, "stderr": tail}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _results_file(results: Path) -> Path | None:
    try:
        found = sorted(results.glob("*.json"))
    except OSError:
        return None
    return found[-1] if found else None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
