"""What the runner and a worker say to each other: the request, the message kinds, how a worker ended.

One request goes to the worker (one JSON document on its stdin); the worker answers with messages, one JSON
object per line on its protocol fd, each with its kind under "t":

  begin         {"i": index}                      an iteration starts
  waiting       {"i": index}                      cells that take turns: it waits for iteration i's turn
                                                  (guestbench.execute.turns); the previous turn is over
  deadline      {"what": "launch", "s": 300}      the next step must finish within s seconds
                {"what": null}                    no step is under way
  launched      {"s": 12.3, "first": true}        a launch finished (first: the worker's first launch)
  sample        {"i": index, "s": 11.2}           a timed sample; start-up with phases adds "phases": [...],
                                                  a workload "metrics": {key: value} from its tool,
                                                  concurrent guests "in_step" and "waited_s", and
                                                  "load": the rest of the machine meanwhile (noise.LoadMeter),
                                                  "resources": what the cell's processes used (usage.UsageMeter)
  failure       {"i": index, "reason": "..."}     an iteration failed (the worker goes on)
  verification  {"record": {...}}                 the data arrived intact (or not)
  setup         {"record": {...}}                 what after_launch built (a workload's disk stack)
  unavailable   {"reason": "..."}                 the cell cannot run here (no further iterations)
  powercut      {"i": index}                      durability: data written and fsynced; cut the power now
  crash         {"reason": "..."}                 the worker itself failed (its last words)
  done          {}                                every iteration ended

Every place that builds a request or reads a message uses this module: the worker, the local executor
(supervisor), the cell runner, the power-cut trials, the probe and the in-process cells of the pytest plugin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the worker imports this module: it needs no backend
    from guestbench.backends.base import Backend


class Msg:
    """Message kinds (the "t" of every message)."""

    BEGIN: Final = "begin"
    WAITING: Final = "waiting"
    DEADLINE: Final = "deadline"
    LAUNCHED: Final = "launched"
    SAMPLE: Final = "sample"
    FAILURE: Final = "failure"
    VERIFICATION: Final = "verification"
    SETUP: Final = "setup"
    UNAVAILABLE: Final = "unavailable"
    POWERCUT: Final = "powercut"
    CRASH: Final = "crash"
    DONE: Final = "done"


Message = dict[str, Any]  # {"t": Msg.*, ...fields above}


@dataclass
class Request:
    """What a worker is asked to do: one measurement's iterations on one backend's handle configuration."""

    measurement: str
    params: dict[str, Any]
    iterations: list[str]  # "cold" (a start-up's first launch), "warmup", "rep"
    backend: dict[str, Any]  # HandleConfig.to_dict()
    workdir: str
    timeout: float  # a launch's deadline
    sample_timeout: float  # every other step's deadline
    appliance: dict[str, Any] = field(default_factory=dict)  # memsize, smp (None: libguestfs's default)
    verbose: bool = False
    verify: bool = True  # check the data arrived (once per cell, on the first sample that can)
    phases: str | None = None  # record start-up phases with this marker family (guestbench.instruments.markers)
    drives: list[dict[str, Any]] = field(default_factory=list)  # host-side disks (storage.backing.Drive.to_dict())
    payload: str | None = None  # uploads: the file sent, and its digest
    payload_sha256: str | None = None
    rendezvous: dict[str, Any] | None = None  # concurrent guests: lockstep.Rendezvous.to_dict() plus "indexes"
    turn: dict[str, Any] | None = None  # cells that take turns: turns.Turn.to_dict() plus "indexes"
    instance: int = 1  # which of N concurrent guests, 1-based
    daemons: list[str] = field(default_factory=list)  # the backend's shared daemons, by process name (usage)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Request:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class WorkerExit:
    """How a worker ended: 'done', 'timeout' (killed at a deadline) or 'crash' (died on its own)."""

    kind: str
    what: str | None = None  # for timeouts: the step that overran (launch, sample, shutdown...)
    limit_s: float | None = None
    index: int | None = None  # the iteration under way when it ended
    reason: str | None = None
    stderr_tail: list[str] = field(default_factory=list)

    def explain(self, backend: Backend) -> str:
        """Why the iteration under way failed, in the backend's own terms."""
        if self.kind == "timeout":
            return backend.explain(f"{self.what} did not finish within {self.limit_s:g} s; the hypervisor was "
                                   "killed", True)
        detail = self.reason or stderr_reason(self.stderr_tail)
        return backend.explain(f"the worker died ({detail})", False)


def stderr_reason(tail: list[str]) -> str:
    """The most telling line of a worker's stderr, for a failure reason."""
    for line in reversed(tail):
        low = line.lower()
        if any(k in low for k in ("error", "fail", "abort", "assert")):
            return " ".join(line.split())
    return " ".join(tail[-1].split()) if tail else ""
