"""Cells that run at the same time, each in its own thread with its own executor (concurrent guests, and the
cells of a block that take turns). The main thread keeps the signals: when one arrives (or `main` fails), the
stop flag is set, every executor kills its worker's process tree, and the threads get to clean up their disks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from guestbench.execute.executor import Executor

JOIN_AFTER_ABORT_S = 120.0


def run_together(jobs: list[tuple[str, Callable[[], None]]], executors: list[Executor], stop: threading.Event,
                 main: Callable[[], None] | None = None) -> None:
    """Run every job in its own thread (and `main`, if given, in this one) until all have ended; the first
    exception of a job is raised here afterwards."""
    errors: list[BaseException] = []

    def guarded(job: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                job()
            except BaseException as e:  # handed to the main thread
                errors.append(e)
        return run

    threads = [threading.Thread(target=guarded(job), name=name, daemon=True) for name, job in jobs]
    try:
        for t in threads:
            t.start()
        if main is not None:
            main()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.2)
    except BaseException:  # a signal: kill every appliance, then let the threads clean up their disks
        stop.set()
        for ex in executors:
            ex.abort()
        until = time.monotonic() + JOIN_AFTER_ABORT_S  # one bound for all of them, not one each
        for t in threads:
            t.join(max(0.0, until - time.monotonic()))
        raise
    if errors:
        raise errors[0]
