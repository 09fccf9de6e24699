"""Runs a scenario: the backends' verdicts, then every cell of the host placement, then the nested placement.

Blocks run one after another, in the plan's order (guestbench.plan.cells). The cells of a block take turns
(guestbench.run.block: interleaved by default, one iteration at a time); the cells of a concurrency group run
at the same time. Either way each cell has its own thread and executor. A signal stops the run between two
instructions: every worker's process tree and any libvirt domain are killed, and the results file is closed
as 'interrupted' with every sample already taken.
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

from rich.console import Console

from guestbench.host import cgroups
from guestbench.host import fingerprint
from guestbench.host import neighbours
from guestbench.util.errors import Interrupted, inert
from guestbench.measurements import get as get_measurement
from guestbench.nested.job import exit_problem
from guestbench.host.paths import make_run_dir, remove_tree, workdir_for
from guestbench.results import Cell, ResultsWriter, Run
from guestbench.results.model import system_name
from guestbench.results import figures as cell_figures
from guestbench.results import hosts as fleet_hosts
from guestbench.execute import lockstep
from guestbench.run.cell import CellRun, RunContext
from guestbench.execute.executor import Executor, local
from guestbench.plan.gate import Gate
from guestbench.run.nested import NestedPlacement
from guestbench.run.block import BlockRun
from guestbench.run.density import DensityTrials
from guestbench.plan.cells import (Group, block_cap, blocks, cells_per_item, measurement_of, mode_lacking, plan,
                                   system_of, verdict_names)
from guestbench.plan.schedule import SEQUENTIAL, Order
from guestbench.execute.threads import run_together
from guestbench.run.powercut import PowerCutTrials
from guestbench.run.record import Recorder, progress_display
from guestbench.execute.supervisor import TrapSignals
from guestbench.scenario import Scenario
from guestbench.storage.backing import sweep_stale


@dataclass
class RunOptions:
    results_dir: Path
    verbose: bool = False
    reprobe: bool = False
    probe_timeout: float | None = None
    defer_probe: bool = False  # a backend's first launch in the run is its probe (probe.verdict(defer=True))
    command: tuple[str, ...] = ()


class Runner:
    """One run of one scenario on this machine, its results file written as it goes."""

    def __init__(self, sc: Scenario, opts: RunOptions, console: Console, executor: Executor | None = None) -> None:
        self.sc = sc
        self.opts = opts
        self.console = console
        self.executor = executor or local(
            verbose=opts.verbose, echo=lambda line: console.print(inert(line), highlight=False))  # the appliance's
        self.stop = threading.Event()  # a signal arrived: threads of concurrent appliances start nothing new

    def run(self) -> ResultsWriter:
        """The run, registered host-wide while it lasts, so that it and any other run know the host is shared."""
        with neighbours.Registration(f"{self.sc.name}: {' '.join(self.opts.command)}") as me, \
                neighbours.Neighbours(me) as others:
            return self._run(others)

    def _run(self, others: neighbours.Neighbours) -> ResultsWriter:
        # what a run killed with SIGKILL left on the host (its run directory, loop devices, NBD servers, mounts);
        # first, so that a temp root that is not safely this user's is refused before a results file is made
        for line in sweep_stale():
            self.console.print("swept: ", inert(line), sep="", highlight=False, style="dim", soft_wrap=True)
        cgroups.sweep()  # and its workers' control groups
        fp = fingerprint.fingerprint()
        results = ResultsWriter.create(self.opts.results_dir, scenario=self.sc.to_dict(), host=fp,
                                     command=list(self.opts.command), guestbench=fp["guestbench"], new=True)
        run_dir = make_run_dir()
        gate = Gate(results, self.console, self.executor, run_dir, reprobe=self.opts.reprobe,
                    probe_timeout=self.opts.probe_timeout, defer=self.opts.defer_probe, verbose=self.opts.verbose)
        ctx = RunContext(self.sc, run_dir, gate, Recorder(results, self.console, others), self.stop, self.opts.verbose)
        with TrapSignals():
            try:
                if "host" in self.sc.placements:
                    self._host(ctx, gate.check(verdict_names(self.sc)))
                    gate.close()
                if "nested" in self.sc.placements:
                    NestedPlacement(self.sc, gate, verbose=self.opts.verbose).run()
                results.finish("complete")
            except Interrupted:
                self._abort_all()
                results.finish("interrupted")
                raise
            except BaseException:
                self._abort_all()
                results.finish("failed")
                raise
            finally:
                remove_tree(run_dir)
        return results

    def _host(self, ctx: RunContext, usable: list[str]) -> None:
        groups = self._offered(ctx, plan(self.sc, usable))
        order = Order.resolve(self.sc.order, self.sc.seed, cells_per_item(groups))
        memsize = max([s.memsize for s in self.sc.measurements if s.memsize] + [self.sc.memsize or 0]) or None
        cap = block_cap(memsize, max(collections.Counter(g.cells[0].label for g in groups).values(), default=1))
        units = blocks(groups, interleave=order.mode != SEQUENTIAL, cap=cap)
        split = order.mode != SEQUENTIAL and cells_per_item(groups) > cap  # some item's cells take turns in parts
        ctx.recorder.order({**order.to_dict(), **({"block_cells": cap} if split else {})})
        for u in units:
            for g in u.groups:
                if measurement_of(g.cells[0]).density:
                    continue  # its cells are made level by level (guestbench.run.density)
                shared = u.turns and len(u.groups) > 1
                g.cells = [ctx.recorder.add_cell(c.replaced(order=order.mode if shared else SEQUENTIAL))
                           for c in g.cells]
        open_ended = self.sc.precision is not None or any(get_measurement(s.measurement).density
                                                          for s in self.sc.measurements)
        with progress_display(self.console, open_ended=open_ended) as progress:
            ctx.recorder.track(progress, progress.add_task(self.sc.name, total=None if open_ended else sum(
                len(g.iterations) * len(g.cells) for g in groups)))
            try:
                for number, u in enumerate(units, 1):
                    runnable = [g for g in u.groups if self._admitted(ctx, g)]
                    if not runnable:
                        continue
                    if u.turns:
                        BlockRun(ctx, [g.cells[0] for g in runnable], runnable[0].iterations, self.executor, order,
                              number).run()
                    else:
                        self._group(ctx, runnable[0])
            finally:
                ctx.recorder.track(None)

    @staticmethod
    def _offered(ctx: RunContext, groups: list[Group]) -> list[Group]:
        """The groups whose UML can run in the mode their item asks for; the others' cells are recorded unavailable
        now, saying why, and take no turns (their UML's verdict lists the modes it offers)."""
        kept = []
        for g in groups:
            verdict = ctx.gate.verdict(g.backend)
            why = mode_lacking(g.cells[0], ((verdict.details if verdict else None) or {}).get("modes"))
            if why is None:
                kept.append(g)
                continue
            for c in g.cells:
                ctx.recorder.unavailable(ctx.recorder.add_cell(c.replaced(order=SEQUENTIAL)), len(g.iterations), why)
        return kept

    @staticmethod
    def _admitted(ctx: RunContext, g: Group) -> bool:
        """Whether the group's backend may run; its cells are skipped with the reason when it may not."""
        if not measurement_of(g.cells[0]).launches:
            ctx.gate.probe_deferred(g.backend)  # a command's exit is no verdict: probe it first
        if (refusal := ctx.gate.refusal(g.backend)) is not None:
            if not measurement_of(g.cells[0]).density:  # a density group's cell is a template, never recorded
                for cell in g.cells:
                    ctx.recorder.skip(cell, len(g.iterations), refusal)
            return False
        return True

    def _group(self, ctx: RunContext, g: Group) -> None:
        if measurement_of(g.cells[0]).density:
            DensityTrials(ctx, g.cells[0], g.iterations, self._together).run()
        elif len(g.cells) == 1:
            self._cell(ctx, g.cells[0], g.iterations, self.executor)
        else:
            self._together(ctx, g)

    @staticmethod
    def _cell(ctx: RunContext, cell: Cell, iterations: list[str], executor: Executor,
              rendezvous: lockstep.Rendezvous | None = None) -> None:
        task = PowerCutTrials if measurement_of(cell).kills_hypervisor else CellRun
        task(ctx, cell, iterations, executor, rendezvous).run()

    def _together(self, ctx: RunContext, g: Group) -> None:
        """N appliances with the same workload at once, each with its own images in the same host directory
        (E3's guests sharing a disk): one thread and one executor each; a signal stops them all."""
        together = [self.executor, *(self.executor.spawn() for _ in g.cells[1:])]
        # every timed sample starts together (a peer may be relaunching after a failure: wait that long)
        meeting_dir = workdir_for(ctx.run_dir, f"step-{g.cells[0].label}-{system_of(g.cells[0])}")  # one per group
        wait_s = self.sc.timeout + 2 * self.sc.sample_timeout

        # the guests' work dirs share a prefix (their labels differ in the guest number): processes naming it are
        # the group's own, and the busy check does not count a peer's hypervisor as the host's other work
        peers = os.path.commonprefix([str(workdir_for(ctx.run_dir, f"{c.label}-{system_of(c)}")) for c in g.cells])

        def one(cell: Cell, ex: Executor) -> Callable[[], None]:
            instance = cell.instance or 1  # every cell of a group of guests has its number

            def job() -> None:
                rendezvous = lockstep.Rendezvous(str(meeting_dir), instance, len(g.cells), wait_s, peers)
                try:
                    self._cell(ctx, cell, g.iterations, ex, rendezvous)
                finally:
                    lockstep.leave(meeting_dir, instance)
            return job

        run_together([(f"guest{c.instance}", one(c, ex)) for c, ex in zip(g.cells, together)], together,
                     self.stop)

    def _abort_all(self) -> None:
        self.executor.abort()  # the threads of a block or of concurrent guests abort their own (execute.threads)


def run_scenario(sc: Scenario, opts: RunOptions, console: Console | None = None,
                 executor: Executor | None = None) -> ResultsWriter:
    return Runner(sc, opts, console or Console(stderr=True), executor).run()


def exit_status(run: Run) -> int:
    """0 when every measured cell has samples; 1 when some usable backend produced none, the level-1 run failed,
    or (a fleet run) a host was lost or its run failed."""
    if fleet_hosts.is_fleet(run):
        views = [fleet_hosts.view(run, n) for n in fleet_hosts.names(run)]
        ran = [(member, share) for member, share in views if share.cells or member.status is not None]
        lost = any(member.status in ("lost", "failed") for member, _ in ran)
        return max([1 if lost else 0, *(exit_status(share) for _, share in ran)])
    if exit_problem(run):
        return 1
    unusable = {name for name, verdict in run.backends.items() if verdict.usable is False}
    for cell in run.cells:
        if system_name(cell.backend, cell.stack_name) in unusable:  # a deferred probe's failed first launch
            continue
        if cell_figures.is_density(cell) and (cell.concurrency or 1) > 1:
            continue  # a density level past the first may fail: that is where the levels stopped (run.density)
        if not cell.samples and cell.status != "unavailable":  # unavailable: reported, expected
            return 1
    return 0

