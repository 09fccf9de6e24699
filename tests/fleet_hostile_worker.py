"""A Dask worker preload (`dask worker --preload THIS`) for tests/test_fleet_hostile.py: the host's share of a run
is scripted, so no appliance is launched. GUESTBENCH_TEST_ROLE=honest: the real `task.host_share` (sealing,
numbering, the final message) around a scripted child run that reports a real start-up run's cells of its
backend (tests/data). GUESTBENCH_TEST_ROLE=hostile: what a host taken over can do, chosen by the scenario's name:

- forge: once the coordinator's results file shows beta complete, an event naming host beta with altered cells
  (sealed with its own key, as the coordinator speaks; a plain {"host", "doc"} event to a coordinator before
  issue 46);
- digits200, digits5000: an honest share whose final document has a sample `rep` of that many digits;
- pickle: a task result whose unpickling would create a file, and a `warn` event carrying such a pickle (Dask's
  client unpickles a warn event's message);
- raise: its task raises (Dask sends the exception, pickled, on to the coordinator as the task's error);
- deafen: while beta runs (its honest share waits for alpha's attack to reach the scheduler before it ends), two
  events on the run's topic whose payloads Dask's client loads before any handler sees them: a Dask-serialized
  msgpack frame that inflates from about 0.5 MB to BOMB bytes, and such a pickle as a Dask-serialized frame.

GUESTBENCH_TEST_DIR is where the coordinator's results go (one directory per scenario name) and the file a
pickle would create; GUESTBENCH_TEST_REAL the real run's results file."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import sys
import time
from pathlib import Path
from typing import Any

from guestbench.run.fleet import task

REAL = Path(os.environ.get("GUESTBENCH_TEST_REAL", "/nonexistent"))  # Dask runs a copy of this file elsewhere
DIR = Path(os.environ.get("GUESTBENCH_TEST_DIR", "/nonexistent"))
WAIT_S = 120.0
BOMB = 512 * 2**20  # bytes the deafen attack's compressed frame inflates to


def host_doc(backend: str, status: str) -> dict[str, Any]:
    """The real start-up run's document with only `backend`'s cells, as a host's child run writes it."""
    doc = json.loads(REAL.read_text())
    doc["cells"] = [c for c in doc["cells"] if c["backend"] == backend]
    doc["status"] = status
    return doc


def scripted_child(final: dict[str, Any]) -> Any:
    """A stand-in for task.run_child: one snapshot of the run under way, then `final` as the run's end (in the
    deafen scenario, only once alpha's attack has reached the scheduler)."""
    def run_child(host: str, scenario_file: dict[str, Any], options: list[str], send: Any,
                  cancelled: Any) -> dict[str, Any]:
        send(host_doc(final["cells"][0]["backend"], "running"))
        if scenario_file["name"] == "deafen":
            _wait_for_file(DIR / "deafen-sent")
        send(final)
        return {"host": host, "exit": 0, "doc": final, "stderr": ""}

    return run_child


class Evil:
    """Unpickled, it creates the file DIR/NAME-ran (pathlib.Path.touch): code run by whoever loads it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> Any:
        return (pathlib.Path.touch, (DIR / f"{self.name}-ran",))


def _wait_for_file(path: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never came")
        time.sleep(0.05)


def _bomb() -> Any:
    """A Dask-serialized msgpack value whose one zlib frame (about 0.5 MB) inflates to BOMB bytes."""
    import struct
    import zlib

    from distributed.protocol.serialize import Serialized

    squeeze = zlib.compressobj(9)
    parts = [squeeze.compress(b"\xc6" + struct.pack(">I", BOMB))]  # msgpack's bin 32 header, then BOMB zeros
    zeros = bytes(2**20)
    parts += [squeeze.compress(zeros) for _ in range(BOMB // len(zeros))]
    return Serialized({"serializer": "msgpack", "compression": ("zlib",)}, [b"".join(parts) + squeeze.flush()])


def _wait_for_beta(name: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for path in (DIR / name).glob("*.json"):
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if doc.get("hosts", {}).get("beta", {}).get("status") == "complete":
                return doc
        time.sleep(0.1)
    raise TimeoutError("beta never completed")


def hostile_share(*args: Any) -> Any:
    """Speaks whichever protocol the coordinator does: (run_id, host, key, scenario, options) since issue 46,
    (run_id, host, scenario, options) before."""
    from distributed import get_worker

    run_id, host, scenario_file = args[0], args[1], args[-2]
    key = args[2] if len(args) == 5 else None
    name = scenario_file["name"]
    worker = get_worker()
    if name == "forge":
        _wait_for_beta(name)
        forged = host_doc("tcg", "complete")
        for s in forged["cells"][0]["samples"]:
            s["seconds"] = 999.0
        forged["host"]["cpu_model"] = "forged by alpha"
        if key is not None:
            from guestbench.run.fleet import seal

            worker.log_event(task.topic(run_id), seal.seal(key, "beta", 99, {"doc": forged}))
        else:
            worker.log_event(task.topic(run_id), {"host": "beta", "doc": task.pack(forged)})  # type: ignore[attr-defined]
        return {"host": host, "exit": 0, "doc": None, "stderr": ""}
    if name.startswith("digits"):
        final = host_doc("uml", "complete")
        final["cells"][0]["samples"][0]["rep"] = int("9" * int(name[len("digits"):]))
        task.run_child = scripted_child(final)
        return ORIGINAL(*args)
    if name == "deafen":  # objects in events, as Dask's own frames carry them: Dask's client loads those itself
        from distributed.protocol import to_serialize
        from distributed.utils import sync

        for payload in (_bomb(), to_serialize(Evil(name))):
            worker.loop.add_callback(worker.batched_send, {"op": "log-event", "topic": task.topic(run_id),
                                                           "msg": {"host": host, "data": payload}})
        # then a plain event on a topic of its own: once the scheduler has it, it has the two before it (one stream,
        # in order) and sent them on to the coordinator; asking for the attack's own would load them here
        sent = f"test-sent-{run_id}"
        worker.loop.add_callback(worker.batched_send, {"op": "log-event", "topic": sent, "msg": {"sent": 2}})
        deadline = time.monotonic() + WAIT_S
        while not sync(worker.loop, worker.scheduler.events, topic=sent):
            if time.monotonic() > deadline:
                raise TimeoutError("the attack never reached the scheduler")
            time.sleep(0.05)
        (DIR / f"{name}-sent").touch()
        return None
    if name == "raise":  # its task fails: Dask sends the exception on to the coordinator, pickled
        raise RuntimeError("alpha's share failed \x1b]0;pwned\x07 on purpose")
    if name == "pickle":
        worker.log_event("warn", {"message": pickle.dumps(Evil(name))})
        return Evil(name)
    task.run_child = scripted_child(host_doc("uml", "complete"))
    return ORIGINAL(*args)


ORIGINAL = getattr(task, "honest_share", task.host_share)  # Dask imports a preload twice
task.honest_share = ORIGINAL  # type: ignore[attr-defined]
sys.set_int_max_str_digits(0)  # a hostile host writes what numbers it likes (json.dumps of 5000 digits)
if os.environ.get("GUESTBENCH_TEST_ROLE") == "hostile":
    task.host_share = hostile_share  # type: ignore[assignment]
else:
    task.run_child = scripted_child(host_doc("tcg", "complete"))
