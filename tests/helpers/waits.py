"""Waiting for an event rather than for a fixed time: a condition polled until it holds, with a deadline that
fails the test saying what never happened."""

from __future__ import annotations

import time
from typing import Any
from collections.abc import Callable


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120.0, every: float = 0.1) -> Any:
    """`check()`'s first true result, polled every `every` s; past `timeout` s an AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
    return got
