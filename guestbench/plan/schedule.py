"""Which cell samples next: the order of a run's samples, and the turnstile that enforces it.

A block is the cells of one scenario item (its backends × its variants) that take turns
(guestbench.execute.turns). Order `interleaved` grants them round by round, one iteration each, always in the
same cell order; `random` shuffles every round with a seeded generator; either way every cell of a
measurement sees the same stretch of the machine's time. Order `sequential` makes every cell a block of its
own: all its samples, then the next cell's (the order before interleaving existed).

The turnstile runs in the runner's main thread (so a signal reaches it); the cells run in their own threads
and tell it when their worker waits for a turn, when the worker ended and when the cell ended.
"""

from __future__ import annotations

import random
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

from guestbench.execute import turns

INTERLEAVED, RANDOM, SEQUENTIAL = "interleaved", "random", "sequential"
POLL_S = 0.2  # how often the main thread wakes while it waits (a signal is raised there between waits)


@dataclass(frozen=True)
class Order:
    """How a run orders its samples; `seed` only for random (drawn when the run starts unless given)."""

    mode: str
    seed: int | None = None

    @classmethod
    def resolve(cls, mode: str | None, seed: int | None, cells_per_item: int) -> Order:
        """The scenario's order, or the default: interleaved as soon as some measurement has two cells."""
        chosen = mode or (INTERLEAVED if cells_per_item >= 2 else SEQUENTIAL)
        if chosen == RANDOM and seed is None:
            seed = secrets.randbelow(2**32)
        return cls(chosen, seed if chosen == RANDOM else None)

    def to_dict(self) -> dict[str, object]:
        return {"mode": self.mode, **({"seed": self.seed} if self.seed is not None else {})}

    def describe(self) -> str:
        return {INTERLEAVED: "interleaved (a measurement's cells take turns, one iteration each, round by round)",
                RANDOM: f"random (each round of turns shuffled, seed {self.seed})",
                SEQUENTIAL: "sequential (every sample of a cell, then the next cell)"}[self.mode]


def rounds(order: Order, slots: int) -> Callable[[list[int]], list[int]]:
    """The order of one round of turns over the live slots: as listed, or shuffled (seeded) for random."""
    rng = random.Random(order.seed)

    def one_round(live: list[int]) -> list[int]:
        if order.mode != RANDOM:
            return list(live)
        shuffled = list(live)
        rng.shuffle(shuffled)
        return shuffled
    return one_round


Decide = Callable[[int, int], bool]  # (slot, iteration) → True: stop this cell instead of granting it


class Turnstile:
    """Grants the cells of one block their iterations one at a time, in the block's order. A slot holds the
    turn from its grant until its worker waits again, its worker exits, or its cell ends."""

    def __init__(self, directory: Path, slots: int, order: Order, stop: threading.Event,
                 decide: Decide | None = None, on_grant: Callable[[int, int], None] | None = None) -> None:
        self.dir = directory
        self.slots = slots
        self.next_round = rounds(order, slots)
        self.stop_flag = stop
        self.decide = decide or (lambda slot, k: False)
        self.on_grant = on_grant or (lambda slot, k: None)
        self.cond = threading.Condition()
        self.waiting: dict[int, int] = {}  # slot → the iteration its worker waits to run
        self.ended: set[int] = set()
        self.holder: int | None = None
        self.stopped: set[int] = set()  # slots told to stop (their target reached, or their backend refused)
        self.granted: list[tuple[int, int]] = []  # (slot, iteration) in grant order

    # ------------------------------------------------------------------ from the cells' threads
    def worker_waits(self, slot: int, iteration: int) -> None:
        with self.cond:
            self.waiting[slot] = iteration
            self._release(slot)

    def worker_exited(self, slot: int) -> None:
        with self.cond:
            self.waiting.pop(slot, None)
            self._release(slot)

    def cell_ended(self, slot: int) -> None:
        with self.cond:
            self.ended.add(slot)
            self.waiting.pop(slot, None)
            self._release(slot)

    def _release(self, slot: int) -> None:
        if self.holder == slot:
            self.holder = None
        self.cond.notify_all()

    # ------------------------------------------------------------------ the main thread
    def run(self) -> None:
        """Round after round until every cell has ended (or a signal stops the run). Nothing is granted before
        every cell is ready (its host disks made, its worker waiting), so no set-up overlaps a timed sample."""
        self._wait_until(lambda: all(s in self.waiting or s in self.ended for s in range(self.slots)))
        while not self.stop_flag.is_set():
            live = [s for s in range(self.slots) if s not in self.ended]
            if not live:
                return
            for slot in self.next_round(live):
                self._turn(slot)

    def _turn(self, slot: int) -> None:
        if not self._wait_until(lambda: slot in self.ended or slot in self.waiting):
            return
        with self.cond:
            if slot in self.ended:
                return
            k = self.waiting.pop(slot)
            self.holder = slot
        halt = self.decide(slot, k)  # outside the turnstile's lock: it reads the results (another lock)
        if halt:
            self.stopped.add(slot)
            turns.stop(self.dir, slot)
        else:
            self.granted.append((slot, k))
            self.on_grant(slot, k)
            turns.grant(self.dir, slot, k)
        self._wait_until(lambda: self.holder != slot)

    def _wait_until(self, ready: Callable[[], bool]) -> bool:
        """Wait for `ready` (under the lock), waking every POLL_S so that a signal gets through; False: stopped."""
        with self.cond:
            while not ready():
                if self.stop_flag.is_set():
                    return False
                self.cond.wait(POLL_S)
        return True
