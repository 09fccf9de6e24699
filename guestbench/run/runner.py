"""Runs a scenario: the backends' verdicts, then every cell of the host placement, then the nested placement.

Groups of cells run one after another, in the plan's order (guestbench.run.plan); the cells of a group
(concurrent appliances) run at the same time, each in its own thread with its own executor. A signal stops
the run between two instructions: every worker's process tree and any libvirt domain are killed, and the
results file is closed as 'interrupted' with every sample already taken.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from guestbench import host
from guestbench.backends import BACKENDS
from guestbench.errors import Interrupted
from guestbench.measurements import get as get_measurement
from guestbench.nested.job import exit_problem
from guestbench.paths import make_run_dir, remove_tree, workdir_for
from guestbench.results import ResultsFile, results_path
from guestbench.run import lockstep
from guestbench.run.cell import CellRun, RunContext
from guestbench.run.executor import Executor, local
from guestbench.run.gate import Gate
from guestbench.run.nested import NestedPlacement
from guestbench.run.plan import Group, plan
from guestbench.run.powercut import PowerCutTrials
from guestbench.run.record import CellDoc, Recorder, progress_display
from guestbench.run.supervisor import TrapSignals
from guestbench.scenario import Scenario
from guestbench.storage.host import sweep_stale


@dataclass
class RunOptions:
    results_dir: Path
    verbose: bool = False
    reprobe: bool = False
    probe_timeout: float | None = None
    defer_probe: bool = False  # a backend's first launch in the run is its probe (probe.check(defer=True))
    command: tuple[str, ...] = ()


class Runner:
    """One run of one scenario on this machine, its results file written as it goes."""

    def __init__(self, sc: Scenario, opts: RunOptions, console: Console, executor: Executor | None = None) -> None:
        self.sc = sc
        self.opts = opts
        self.console = console
        self.executor = executor or local(
            verbose=opts.verbose, echo=lambda line: console.print(line, markup=False, highlight=False))
        self._running: list[Executor] = [self.executor]  # what a signal must stop
        self.stop = threading.Event()  # a signal arrived: threads of concurrent appliances start nothing new

    def run(self) -> ResultsFile:
        fp = host.fingerprint()
        results = ResultsFile.create(results_path(self.opts.results_dir, self.sc.name), scenario=self.sc.to_dict(),
                                     host=fp, command=list(self.opts.command), guestbench=fp["guestbench"])
        sweep_stale()  # what a run killed with SIGKILL left on the host (loop devices, NBD servers, mounts)
        run_dir = make_run_dir()
        gate = Gate(results, self.console, self.executor, run_dir, reprobe=self.opts.reprobe,
                    probe_timeout=self.opts.probe_timeout, defer=self.opts.defer_probe)
        ctx = RunContext(self.sc, run_dir, gate, Recorder(results, self.console), self.stop, self.opts.verbose)
        with TrapSignals():
            try:
                if "host" in self.sc.placements:
                    self._host(ctx, gate.check(list(self.sc.backends or BACKENDS)))
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
        groups = plan(self.sc, usable)
        for g in groups:
            g.cells = [ctx.recorder.add_cell(c) for c in g.cells]
        with progress_display(self.console) as progress:
            ctx.recorder.track(progress, progress.add_task(self.sc.name, total=sum(
                len(g.iterations) * len(g.cells) for g in groups)))
            try:
                for g in groups:
                    if not get_measurement(g.cells[0]["measurement"]).launches:
                        ctx.gate.probe_deferred(g.backend)  # a command's exit is no verdict: probe it first
                    if (refusal := ctx.gate.refusal(g.backend)) is not None:
                        for cell in g.cells:
                            ctx.recorder.skip(cell, len(g.iterations), refusal)
                    elif len(g.cells) == 1:
                        self._cell(ctx, g.cells[0], g.iterations, self.executor)
                    else:
                        self._together(ctx, g)
            finally:
                ctx.recorder.track(None)

    @staticmethod
    def _cell(ctx: RunContext, cell: CellDoc, iterations: list[str], executor: Executor,
              step: lockstep.Step | None = None) -> None:
        task = PowerCutTrials if get_measurement(cell["measurement"]).kills_hypervisor else CellRun
        task(ctx, cell, iterations, executor, step).run()

    def _together(self, ctx: RunContext, g: Group) -> None:
        """N appliances with the same workload at once, each with its own images in the same host directory
        (E3's guests sharing a disk): one thread and one executor each; a signal stops them all."""
        together = [self.executor, *(self.executor.spawn() for _ in g.cells[1:])]
        self._running = together
        errors: list[BaseException] = []
        # every timed sample starts together (a peer may be relaunching after a failure: wait that long)
        step_dir = workdir_for(ctx.run_dir, f"step-{g.cells[0]['label']}-{g.backend}")  # one per group
        wait_s = self.sc.timeout + 2 * self.sc.sample_timeout

        def one(cell: CellDoc, ex: Executor) -> None:
            step = lockstep.Step(str(step_dir), cell["instance"], len(g.cells), wait_s)
            try:
                self._cell(ctx, cell, g.iterations, ex, step)
            except BaseException as e:  # handed to the main thread
                errors.append(e)
            finally:
                lockstep.leave(step_dir, cell["instance"])

        threads = [threading.Thread(target=one, args=(c, ex), name=f"guest{c['instance']}", daemon=True)
                   for c, ex in zip(g.cells, together)]
        try:
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.2)
        except BaseException:  # a signal: kill every appliance, then let the threads clean up their disks
            self.stop.set()
            self._abort_all()
            for t in threads:
                t.join(120)
            raise
        finally:
            self._running = [self.executor]
        if errors:
            raise errors[0]

    def _abort_all(self) -> None:
        for ex in self._running:
            ex.abort()


def run_scenario(sc: Scenario, opts: RunOptions, console: Console | None = None,
                 executor: Executor | None = None) -> ResultsFile:
    return Runner(sc, opts, console or Console(stderr=True), executor).run()


def exit_status(doc: dict[str, Any]) -> int:
    """0 when every measured cell has samples; 1 when some usable backend produced none or the level-1 run failed."""
    if exit_problem(doc):
        return 1
    unusable = {name for name, av in doc.get("backends", {}).items() if av.get("usable") is False}
    for cell in doc.get("cells", []):
        if cell.get("backend") in unusable:  # a deferred probe's failed first launch: reported like a probe's
            continue
        if not cell.get("samples") and cell.get("status") != "unavailable":  # unavailable: reported, expected
            return 1
    return 0

