"""Taking turns: the cells of one measurement sample one iteration at a time, in the order the runner grants.

Each cell's worker is its own process and stays alive between its turns (an appliance that is not timed at
launch stays up, idle), so that interleaving costs no extra launch. The runner grants a turn by making a
file in the block's directory: `go-<slot>-<iteration>` lets that cell's worker run that iteration,
`stop-<slot>` tells it to shut down and end (its precision target was reached). A worker announces that it
waits through the protocol (Msg.WAITING) and holds the turn until it waits again or exits, so its launch,
set-up and shutdown never overlap another cell's timed work.

The wait is bounded (`wait_s`, worst case of every other cell's turn) and ends early when the runner that
would grant it is gone, so an orphaned worker never waits for ever.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

POLL_S = 0.02
GO, STOP = "go", "stop"


@dataclass(frozen=True)
class Turn:
    """One cell's place in a block: the shared directory, its slot (0-based), the longest wait for a turn, and
    the pid of the runner that grants them (the worker's parent)."""

    dir: str
    slot: int
    wait_s: float
    granter: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Turn:
        return cls(dir=str(d["dir"]), slot=int(d["slot"]), wait_s=float(d["wait_s"]), granter=int(d["granter"]))


def grant(directory: Path | str, slot: int, iteration: int) -> None:
    """The runner lets `slot` run its `iteration` (the cell's own iteration number, 0-based)."""
    _mark(Path(directory) / f"go-{slot}-{iteration}")


def stop(directory: Path | str, slot: int) -> None:
    """The runner tells `slot` to take no more iterations: shut down and end."""
    _mark(Path(directory) / f"stop-{slot}")


def _mark(path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.touch()
    tmp.rename(path)


def look(turn: Turn, iteration: int) -> str | None:
    """GO when the turn of `iteration` is granted, STOP when the cell was told to stop, else None (not yet)."""
    d = Path(turn.dir)
    if (d / f"go-{turn.slot}-{iteration}").exists():
        return GO
    if (d / f"stop-{turn.slot}").exists():
        return STOP
    return None


def wait(turn: Turn, iteration: int) -> str | None:
    """Wait for the turn of `iteration`: GO, STOP, or None when wait_s passed or the runner is gone."""
    t0 = time.monotonic()
    while True:
        if (got := look(turn, iteration)) is not None:
            return got
        if time.monotonic() - t0 > turn.wait_s or os.getppid() != turn.granter:  # reparented: the runner died
            return None
        time.sleep(POLL_S)
