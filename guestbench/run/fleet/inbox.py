"""What the fleet's hosts sent, waiting for the coordinator, in bounded memory whatever they send.

Dask's client hands each event to a callback on its own thread as it arrives; a host that sends thousands of
messages, or large ones, must not grow the coordinator. Every message a host sends is a whole snapshot (the
newest replaces the ones before: guestbench.run.fleet.task), so the inbox keeps, for each of the run's workers,
only the newest message that came from it (the scheduler stamps each worker's events with its address, and its
roles preload keeps a worker from stamping another's: guestbench.run.fleet.roles). A message from no worker of
the run, or larger than any a host seals, is dropped as it arrives: nobody can be blamed for it, and it is never
read. At most one message per worker, each at most seal.MAX_SEALED bytes, is held."""

from __future__ import annotations

import threading
import time
from typing import Any
from collections.abc import Iterable

from guestbench.run.fleet import seal


class Inbox:
    def __init__(self, workers: Iterable[str]) -> None:
        self.workers = frozenset(workers)  # the run's workers' addresses
        self._newest: dict[str, Any] = {}  # worker address -> its newest message, not yet taken
        self._ready = threading.Condition()
        self.dropped = 0  # messages dropped as they arrived (from no worker of the run, or too large)

    def put(self, msg: Any) -> None:
        """Called by Dask's client for each event on the run's topic (its thread): kept, or dropped."""
        stamp = msg.get("worker") if isinstance(msg, dict) else None
        data = msg.get("data") if isinstance(msg, dict) else None
        if stamp not in self.workers or not isinstance(data, bytes) or len(data) > seal.MAX_SEALED:
            self.dropped += 1
            return
        with self._ready:
            self._newest[stamp] = msg
            self._ready.notify_all()

    def take(self, timeout: float) -> list[Any]:
        """Every message held (at most one per worker), waiting up to `timeout` seconds for a first one."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while not self._newest:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._ready.wait(left)
            out = list(self._newest.values())
            self._newest.clear()
            return out
