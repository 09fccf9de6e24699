"""No unpickling in the coordinator while it speaks to a fleet.

Dask's client unpickles what reaches it from the scheduler and the workers in several places no setting turns off:
a `__Pickled__` frame in any message (distributed.protocol.core.loads), a result's type (`key-in-memory`), a
task's exception and traceback, a `warn` event's payload. A fleet host is not trusted, and a pickle is code. So,
while a fleet run talks to Dask, an audit hook (PEP 578) refuses every `pickle.find_class`, the one step by which
a pickle reaches a function or class (but `bytes`, below); what is left of pickle builds only plain values (str,
bytes, numbers, containers), which run nothing. guestbench itself needs no pickle from a fleet: what a host sends
crosses as sealed bytes it parses (guestbench.run.fleet.seal). An audit hook cannot be removed, so it is added once and
acts only inside `refusing()` (every thread), or inside `refusing_in_task()` (this asyncio task, or thread, only:
a context variable, which Dask's offloading to a thread carries along)."""

from __future__ import annotations

import logging
import sys
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from collections.abc import Iterator

_lock = threading.Lock()
_state = {"installed": False, "refusing": 0}
_here: ContextVar[bool] = ContextVar("guestbench_nopickle_here", default=False)


class PickleRefused(TypeError):
    """TypeError: what Dask's client catches where a payload fails to load (a result's type, a traceback)."""


# What Dask's own messages need: a task's error reaches the client as bytes wrapped in Dask's "dask" family, whose
# header names its type by pickle; were it refused, the client would stop reading the scheduler. Calling bytes()
# makes bytes, and nothing else.
ALLOWED = {("builtins", "bytes")}


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "pickle.find_class" and (_state["refusing"] or _here.get()) and tuple(args[:2]) not in ALLOWED:
        raise PickleRefused(f"refused to unpickle {str(args[0])[:60]}.{str(args[1])[:60]}: nothing a fleet host "
                            "sends is unpickled (guestbench.run.fleet.nopickle)")


def _install() -> None:
    with _lock:
        if not _state["installed"]:
            sys.addaudithook(_hook)
            _state["installed"] = True


@contextmanager
def refusing_in_task() -> Iterator[None]:
    """Every unpickling in this asyncio task (or thread) refused while inside, awaits included; other tasks
    unpickle as before. For a server that reads hosts and a trusted peer in the same event loop."""
    _install()
    token = _here.set(True)
    try:
        yield
    finally:
        _here.reset(token)


@contextmanager
def refusing() -> Iterator[None]:
    """Every unpickling in this process, in every thread, refused while inside."""
    _install()
    with _lock:
        _state["refusing"] += 1
    # Dask logs each load that fails, traceback and all: a result's type (sent pickled with every finished task)
    # fails here every time, as it should; a message that fails is reported by the coordinator in its words
    quiet = [logging.getLogger(name) for name in ("distributed.protocol.pickle", "distributed.protocol.core")]
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for log, level in zip(quiet, levels):
            log.setLevel(level)
        with _lock:
            _state["refusing"] -= 1
