"""Concurrent appliances start every timed sample together (E3's guests sharing one disk).

Each guest's worker is its own process, so the rendezvous is a directory of marker files that the runner
makes for the group: `ready-<iteration>-<guest>` when a worker reaches an iteration's timed operation
(or has given the iteration up), `gone-<guest>` when a guest's cell has ended. A worker waits until every
other guest is ready for the same iteration or gone; a failed or finished guest never holds the others, and
a wait is bounded, after which the sample runs out of step and says so.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

POLL_S = 0.02


@dataclass(frozen=True)
class Rendezvous:
    """One guest's place in its group: the shared directory, its number (1-based), the group's size, and
    the longest wait for the others (a peer may be relaunching after a failure)."""

    dir: str
    guest: int
    guests: int
    wait_s: float
    # what every guest's work dir starts with: their processes are the group's own work, not other load (noise)
    peers: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Rendezvous:
        return cls(dir=str(d["dir"]), guest=int(d["guest"]), guests=int(d["guests"]), wait_s=float(d["wait_s"]),
                   peers=str(d.get("peers") or ""))


def arrive(rendezvous: Rendezvous, iteration: int) -> None:
    """This guest is at `iteration`'s timed operation, or will not run it (failed): nobody waits for it."""
    (Path(rendezvous.dir) / f"ready-{iteration}-{rendezvous.guest}").touch()


def leave(directory: Path | str, guest: int) -> None:
    """This guest's cell has ended (done, failed, unavailable, interrupted)."""
    (Path(directory) / f"gone-{guest}").touch()


def _present(rendezvous: Rendezvous, iteration: int) -> set[int]:
    d = Path(rendezvous.dir)
    return ({int(p.name.rsplit("-", 1)[1]) for p in d.glob(f"ready-{iteration}-*")}
            | {int(p.name.split("-", 1)[1]) for p in d.glob("gone-*")})


def wait(rendezvous: Rendezvous, iteration: int) -> float | None:
    """Arrive, then wait for the others; the seconds waited, or None when they did not come within wait_s."""
    arrive(rendezvous, iteration)
    t0 = time.monotonic()
    everyone = set(range(1, rendezvous.guests + 1))
    while not everyone <= _present(rendezvous, iteration):
        if time.monotonic() - t0 > rendezvous.wait_s:
            return None
        time.sleep(POLL_S)
    return time.monotonic() - t0
