"""The rendezvous that starts concurrent guests' samples together: real threads, real marker files."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from guestbench.execute import lockstep


def rendezvous(tmp_path: Path, guest: int, guests: int = 2, wait_s: float = 30.0) -> lockstep.Rendezvous:
    return lockstep.Rendezvous(str(tmp_path), guest, guests, wait_s)


def test_no_one_starts_before_everyone_has_arrived(tmp_path: Path) -> None:
    started: dict[int, float] = {}
    arrived: dict[int, float] = {}

    def guest(k: int, late_s: float) -> None:
        time.sleep(late_s)
        arrived[k] = time.monotonic()
        assert lockstep.wait(rendezvous(tmp_path, k, 3), 4) is not None
        started[k] = time.monotonic()

    threads = [threading.Thread(target=guest, args=(k, late)) for k, late in ((1, 0.0), (2, 0.3), (3, 0.6))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert set(started) == {1, 2, 3}
    assert min(started.values()) >= max(arrived.values())  # the first two waited for the last


def test_a_guest_that_gave_up_or_left_holds_no_one(tmp_path: Path) -> None:
    lockstep.arrive(rendezvous(tmp_path, 2), 0)  # guest 2 failed iteration 0 before its timed operation
    assert lockstep.wait(rendezvous(tmp_path, 1), 0) is not None
    lockstep.leave(tmp_path, 2)  # guest 2's cell ended
    assert lockstep.wait(rendezvous(tmp_path, 1), 1) is not None
    assert lockstep.wait(rendezvous(tmp_path, 1), 7) is not None


def test_a_missing_guest_is_waited_for_only_so_long(tmp_path: Path) -> None:
    assert lockstep.wait(rendezvous(tmp_path, 1, wait_s=0.2), 0) is None  # the sample then runs out of step
    # another iteration's marker is not this one's
    lockstep.arrive(rendezvous(tmp_path, 2), 1)
    assert lockstep.wait(rendezvous(tmp_path, 1, wait_s=0.2), 2) is None


def test_a_rendezvous_round_trips_through_a_request() -> None:
    s = lockstep.Rendezvous("/tmp/x", 2, 3, 99.0)
    assert lockstep.Rendezvous.from_dict({**s.to_dict(), "indexes": [0, 1]}) == s
