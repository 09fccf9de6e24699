"""The seam between deciding what to run and running it: an executor takes a cell's request, runs it somewhere,
and hands back the worker's messages as they come, then how the worker ended.

The runner knows nothing else about where a worker runs. The local executor is the supervisor (a worker
process on this machine, its deadlines enforced, its process tree killed on overrun or signal); a scheduler
that interleaves cells, or one that sends them to other hosts, is another class with these four methods and
the `verbose` flag (whether a worker's own output is echoed as it runs; a probe's worker always keeps the
console, as the evidence of a failed launch).
"""

from __future__ import annotations

from typing import Protocol
from collections.abc import Callable

from guestbench.backends.base import Backend
from guestbench.execute.protocol import Message, Request, WorkerExit
from guestbench.execute.supervisor import Supervisor


class Executor(Protocol):
    verbose: bool

    def run_worker(self, request: Request, backend: Backend, on_message: Callable[[Message], None]) -> WorkerExit:
        """Run the request to its end; every message goes to `on_message` as it arrives (from the calling thread)."""

    def abort(self) -> None:
        """A signal: kill what is running, remove its leftovers, and start no worker after this; safe at any
        time and twice (a signal handler calls it)."""

    def kill(self) -> None:
        """Kill the running worker and remove its leftovers; the executor stays usable (a power-cut trial)."""

    def spawn(self) -> Executor:
        """Another executor of the same kind, for an appliance that runs at the same time (concurrent guests)."""


def local(verbose: bool = False, echo: Callable[[str], None] | None = None) -> Executor:
    """The local executor: the supervisor, one worker process at a time on this machine."""
    return Supervisor(verbose=verbose, echo=echo)
