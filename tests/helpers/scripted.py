"""A scripted executor: it answers a cell's request with the messages a worker would send, from a script, and
starts nothing (as hyperfine's mock executor does). The run's own logic — the gate and deferred probes, blocks
and their turns, precision stops, power-cut trials, the record, signals — is then tested in `make check`
without a launch. The local executor (execute/supervisor.py) is the real one; each path scripted here also has an
end-to-end test with real appliances in `make test`.

A script is a function of (backend name, request, i) that says what iteration i of the request does: a sample of
some seconds, a failure, a step that overruns its deadline, a crashed worker, or a sample followed by a power
cut. It is called from the cell's thread, in the order the run grants the turns.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

from guestbench.backends.base import Backend
from guestbench.measurements import get as get_measurement
from guestbench.execute import turns
from guestbench.execute.protocol import Message, Msg, Request, WorkerExit

POLL_S = 0.01


@dataclass(frozen=True)
class Cue:
    """What one iteration does (a cue of the script); exactly one of seconds, fail, hang and crash."""

    seconds: float | None = None  # a sample of this many seconds (for a start-up: the launch too)
    fail: str | None = None  # a failed iteration, with the worker's reason; the worker goes on
    hang: str | None = None  # the step that overruns its deadline ("launch", "sample"): the worker is killed
    crash: str | None = None  # the worker dies, with these last words
    metrics: dict[str, Any] | None = None  # a workload's figures beside the seconds
    powercut: bool = False  # after the sample, the worker waits for the power cut (durability)
    then: Callable[[], None] | None = field(default=None, compare=False)  # called once its message is sent


Script = Callable[[str, Request, int], Cue]


class ScriptedExecutor:
    """An executor (execute/executor.py) whose workers are a script. `requests` lists every request it was given, with
    the backend's name, in order (shared with the executors it spawns)."""

    verbose = False

    def __init__(self, script: Script, requests: list[tuple[str, Request]] | None = None) -> None:
        self.script = script
        self.requests = requests if requests is not None else []
        self.aborted = threading.Event()  # a signal: no worker starts, a waiting one ends
        self.killed = threading.Event()  # the running worker was killed (a power cut)

    def spawn(self) -> ScriptedExecutor:
        return ScriptedExecutor(self.script, self.requests)

    def abort(self) -> None:
        self.aborted.set()
        self.killed.set()

    def kill(self) -> None:
        self.killed.set()

    def run_worker(self, request: Request, backend: Backend, on_message: Callable[[Message], None]) -> WorkerExit:
        if self.aborted.is_set():
            return WorkerExit("crash", reason="not started: the run was stopped")
        self.killed.clear()
        self.requests.append((backend.name, request))
        worker = _Worker(self, request, backend, on_message)
        return worker.run()


class _Worker:
    """One scripted worker: the iterations of one request, as execute/worker.py would send them."""

    def __init__(self, ex: ScriptedExecutor, request: Request, backend: Backend,
                 on_message: Callable[[Message], None]) -> None:
        self.ex = ex
        self.req = request
        self.backend = backend
        self.say = lambda t, **fields: on_message({"t": t, **fields})
        self.m = get_measurement(request.measurement)
        self.turn = turns.Turn.from_dict(request.turn) if request.turn else None
        self.launched = False

    def run(self) -> WorkerExit:
        for i, _kind in enumerate(self.req.iterations):
            self.say(Msg.BEGIN, i=i)
            granted = self._take_turn(i)
            if granted is not None:
                if granted == turns.GO:
                    cue = self.ex.script(self.backend.name, self.req, i)
                    if (ended := self._iteration(i, cue)) is not None:
                        return ended
                    if cue.then is not None:
                        cue.then()
                    continue
                if self.ex.aborted.is_set():
                    return WorkerExit("crash", reason="killed: the run was stopped", index=i)
            break
        self.say(Msg.DONE)
        return WorkerExit("done")

    def _take_turn(self, i: int) -> str | None:
        """GO when there are no turns or iteration i's is granted; STOP when told to stop; None when the run was
        stopped or no turn came within the wait (then the real worker reports a failure, as here)."""
        if self.turn is None:
            return turns.GO
        self.say(Msg.WAITING, i=i)
        index = list((self.req.turn or {}).get("indexes") or [])[i]
        until = time.monotonic() + self.turn.wait_s
        while not self.ex.aborted.is_set():
            if (got := turns.look(self.turn, index)) is not None:
                return got
            if time.monotonic() > until:
                self.say(Msg.FAILURE, i=i, reason=f"no turn was granted within {self.turn.wait_s:g} s")
                return None
            time.sleep(POLL_S)
        return None

    def _iteration(self, i: int, cue: Cue) -> WorkerExit | None:
        """Send the iteration's messages; how the worker ended when the cue ended it."""
        if cue.hang is not None:
            limit = self.req.timeout if cue.hang == "launch" else self.req.sample_timeout
            return WorkerExit("timeout", what=cue.hang, limit_s=limit, index=i)
        if cue.crash is not None:
            return WorkerExit("crash", reason=cue.crash, index=i)
        if cue.fail is not None:
            self.say(Msg.FAILURE, i=i, reason=cue.fail)
            return None
        assert cue.seconds is not None, "a cue needs seconds, fail, hang or crash"
        if self.m.launches and (self.m.times_launch or not self.launched):
            self.say(Msg.LAUNCHED, s=cue.seconds, first=not self.launched)
            self.launched = True
        self.say(Msg.SAMPLE, i=i, s=cue.seconds, **({"metrics": cue.metrics} if cue.metrics else {}))
        if cue.powercut:
            self.say(Msg.POWERCUT, i=i)  # the runner cuts the power and kills this worker
            self.ex.killed.wait(60)
            return WorkerExit("crash", reason="killed: the power was cut", index=i)
        return None
