"""A block: cells that take turns (guestbench.plan.schedule), each in its own thread with its own worker, and
their sampling towards a precision target.

Every cell of a block is set up before the first grant (its host disks, its worker), and its worker stays
alive between turns, so interleaving adds no launch. With a precision target a cell is told to stop once
its 95% CI half-width relative to the median is at or below the target (after at least `repetitions`
samples) for every figure it reports (seconds, or a workload's own figures); a cell that reaches its cap
first is recorded as such and flagged by the reports.
"""

from __future__ import annotations

import os
from typing import Any

from guestbench.analysis import stats
from guestbench.host.paths import workdir_for
from guestbench.results.figures import figures
from guestbench.results.model import Cell, Precision
from guestbench.run.cell import MAX_WORKER_RESTARTS, CellRun, RunContext, Seat
from guestbench.execute.executor import Executor
from guestbench.plan.cells import system_of, verdict_name
from guestbench.run.record import numbered
from guestbench.plan.schedule import Order, Turnstile
from guestbench.execute.threads import run_together
from guestbench.execute.turns import Turn
from guestbench.execute.worker import SHUTDOWN_TIMEOUT_S


class BlockRun:
    """The cells of one block and the iterations each of them may run (with precision: up to the cap)."""

    def __init__(self, ctx: RunContext, cells: list[Cell], iterations: list[str], executor: Executor,
                 order: Order, number: int) -> None:
        self.ctx = ctx
        self.cells = cells
        self.its = iterations
        self.numbered = numbered(iterations)
        self.executor = executor
        self.order = order
        self.dir = workdir_for(ctx.run_dir, f"turns-{number}")
        self.target = ctx.sc.precision
        self.turnstile = Turnstile(self.dir, len(cells), order, ctx.stop, decide=self._decide,
                                   on_grant=self._granted)

    def wait_s(self) -> float:
        """The longest a worker may wait for its turn: every other cell's worst turn, each worker replaced
        as often as a cell allows (a hung launch, a timed step and its set-up, a shutdown)."""
        sc = self.ctx.sc
        worst_turn = sc.timeout + 2 * sc.sample_timeout + SHUTDOWN_TIMEOUT_S
        return max(1, len(self.cells) - 1) * worst_turn * (1 + MAX_WORKER_RESTARTS)

    def run(self) -> None:
        executors = [self.executor.spawn() for _ in self.cells]
        jobs = [(f"{system_of(c)}-{c.label}", self._job(slot, c, ex))
                for slot, (c, ex) in enumerate(zip(self.cells, executors))]
        try:
            run_together(jobs, executors, self.ctx.stop, main=self.turnstile.run)
        finally:
            if self.target is not None:
                for slot, cell in enumerate(self.cells):
                    self._precision(cell, ended_slot=slot)

    def _job(self, slot: int, cell: Cell, ex: Executor) -> Any:
        seat = Seat(Turn(str(self.dir), slot, self.wait_s(), os.getpid()), self.turnstile)

        def job() -> None:
            try:
                CellRun(self.ctx, cell, self.its, ex, seat=seat).run()
            finally:
                self.turnstile.cell_ended(slot)
        return job

    # ------------------------------------------------------------------ precision
    def _decide(self, slot: int, k: int) -> bool:
        """Stop this cell instead of running its iteration k: its backend was refused during the block (its
        deferred probe, another cell's first launch, failed), or its target is reached (only before a repetition)."""
        cell = self.cells[slot]
        if self.ctx.gate.refusal(verdict_name(cell)) is not None:
            return True
        if self.target is None or self.its[k] != "rep":
            return False
        reached = self._precision(cell)
        return len(cell.samples) >= self.ctx.sc.repetitions and reached is not None and reached <= self.target

    def _precision(self, cell: Cell, ended_slot: int | None = None) -> float | None:
        """The precision the cell's samples reach now, recorded in the cell (with why it stopped, at its end)."""
        if self.target is None:
            return None
        with self.ctx.recorder.lock:
            figs = figures(cell)  # the live cell, read as any results file's is
            n = len(cell.samples)
        reached = worst_precision([stats.relative_precision(f.values) for f in figs])
        stopped = {} if ended_slot is None else {"stopped": self._why_stopped(ended_slot, cell, reached)}
        self.ctx.recorder.update(cell, precision=Precision.laid_out(
            target=self.target, reached=reached, n=n, cap=self.ctx.sc.rep_cap, method=stats.PRECISION_METHOD,
            **stopped))
        return reached

    def _why_stopped(self, slot: int, cell: Cell, reached: float | None) -> str:
        """target: told to stop, or its last sample met the target; cap: every repetition allowed was tried."""
        if self.ctx.gate.refusal(verdict_name(cell)) is not None:
            return "ended"
        if slot in self.turnstile.stopped or (reached is not None and reached <= (self.target or 0)):
            return "target"
        tried = len(cell.samples) + sum(1 for f in cell.failures if f.kind == "rep")
        return "cap" if tried >= self.ctx.sc.rep_cap else "ended"

    def _granted(self, slot: int, k: int) -> None:
        cell = self.cells[slot]
        kind, n = self.numbered[k]
        what = f"{kind} {n}/{self.its.count(kind)}"
        if self.target is not None and kind == "rep":
            got = cell.precision.reached if cell.precision is not None else None
            what += f" · ±{got:.1%} so far (target {self.target:.1%})" if got is not None else \
                f" · target ±{self.target:.1%}"
        self.ctx.recorder.doing(cell, what)


def worst_precision(precisions: list[float | None]) -> float | None:
    """A cell's precision is its least precise figure's (a workload has several; None until each has a CI)."""
    if not precisions or any(p is None for p in precisions):
        return None
    return max(p for p in precisions if p is not None)
