"""One cell (backend × measurement × parameters) through an executor, until every iteration is done, failed
or skipped: a worker killed at a deadline or dead is replaced (up to MAX_WORKER_RESTARTS), a hung first
launch ends the cell, and every message the worker sends is handled by its own method.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

from guestbench.host import space
from guestbench.backends.appliance import ApplianceError
from guestbench.backends import BACKENDS
from guestbench.backends.uml.channel import MODE_ENV
from guestbench.backends.uml.drives import DRIVE_PATHS, DRIVES_ENV
from guestbench.util.errors import Unavailable
from guestbench.host.paths import cache_dir, workdir_for
from guestbench.execute import lockstep
from guestbench.execute.executor import Executor
from guestbench.plan.gate import Gate
from guestbench.plan.cells import measurement_of, params_of, stack_of, system_of, verdict_name
from guestbench.execute.protocol import Message, Msg, Request, WorkerExit
from guestbench.results import Cell
from guestbench.run.record import Recorder, numbered
from guestbench.plan.schedule import Turnstile
from guestbench.execute.turns import Turn
from guestbench.scenario import Scenario
from guestbench.stacks.backend import resolve
from guestbench.storage.backing import Backings

MAX_WORKER_RESTARTS = 3


@dataclass
class RunContext:
    """What every cell of a run shares: the scenario, where files go, the verdicts, the record, the stop flag."""

    sc: Scenario
    run_dir: Path
    gate: Gate
    recorder: Recorder
    stop: threading.Event  # a signal arrived: start nothing new
    verbose: bool = False
    # cells set up at the same time (a block, concurrent guests) build appliances, scripts and payloads in the
    # same caches: one at a time, as when cells ran one after another
    setup_lock: threading.Lock = field(default_factory=threading.Lock)

    def request(self, cell: Cell, iterations: list[str], handle_config: dict[str, Any], workdir: Path,
                **fields: Any) -> Request:
        """The worker's request for some of this cell's iterations; `fields` adds or overrides (protocol.Request)."""
        base: dict[str, Any] = dict(
            measurement=cell.measurement, params=cell.params, iterations=iterations, backend=handle_config,
            workdir=str(workdir), timeout=self.sc.timeout, sample_timeout=self.sc.sample_timeout,
            appliance={"memsize": cell.memsize or self.sc.memsize, "smp": self.sc.smp}, verbose=self.verbose,
            phases=BACKENDS[cell.backend].phase_markers if cell.phases else None,
            instance=cell.instance or 1, daemons=list(BACKENDS[cell.backend].daemons))
        return Request(**{**base, **fields})


@dataclass(frozen=True)
class Seat:
    """A cell's place in a block that takes turns: what its worker is told, and whom it tells it waits."""

    turn: Turn
    turnstile: Turnstile

    def request_field(self, indexes: list[int]) -> dict[str, Any]:
        return {**self.turn.to_dict(), "indexes": indexes}

    @property
    def stopped(self) -> bool:
        """The runner told this cell to stop (its precision target was met, or its backend was refused)."""
        return self.turn.slot in self.turnstile.stopped


class CellTask:
    """What every way of running a cell holds: its record, its iterations, its backend and measurement, its own
    work directory, and the executor its workers go to. Subclasses implement run()."""

    def __init__(self, ctx: RunContext, cell: Cell, iterations: list[str], executor: Executor,
                 rendezvous: lockstep.Rendezvous | None = None) -> None:
        self.ctx = ctx
        self.rec = ctx.recorder
        self.cell = cell
        self.its = iterations
        self.numbered = numbered(iterations)
        self.executor = executor
        self.rendezvous = rendezvous
        self.backend = resolve(cell.backend, stack_of(cell))
        self.m = measurement_of(cell)
        self.params = params_of(cell)
        self.workdir = workdir_for(ctx.run_dir, f"{cell.label}-{system_of(cell)}")

    def run(self) -> None:
        raise NotImplementedError

    def handle_config(self, workload: bool = False) -> dict[str, Any]:
        """The backend's handle configuration with the cell's own environment on top (a scenario item's env)."""
        config = self.backend.handle_config(cache_dir(), workload=workload)
        mode = {MODE_ENV: self.cell.uml_mode} if self.cell.uml_mode else {}
        drives = {DRIVES_ENV: self.cell.drive_path} if self.cell.drive_path else {}
        return config.with_environment({**mode, **drives, **(self.cell.env or {})}).to_dict()

    def software(self) -> dict[str, Any]:
        """What the cell runs on (its stack, their versions, UML's mode); Unavailable when the scenario asked for a
        UML mode this UML does not offer."""
        found = self.backend.software()
        offered = found.pop("uml_modes", None)
        if offered:
            mode = self.cell.uml_mode or offered[0]
            if mode not in offered:
                raise Unavailable(f"this UML ({found.get('uml')}, stack {stack_of(self.cell)}) has no {mode} mode; "
                                  f"it offers {', '.join(offered)} (seccomp mode came with Linux 6.16)")
            found["uml_mode"] = mode
        return found

    def probe_failed(self, reason: str) -> bool:
        """A launch failed before any launch of this backend succeeded in the run: with a deferred probe that
        launch was the probe, and the backend is refused (True). False when the backend is not on trial, or a
        concurrent guest's launch decided it first."""
        name = verdict_name(self.cell)
        if not self.ctx.gate.awaits_first_launch(name) or self.ctx.stop.is_set():
            return False
        self.ctx.gate.first_launch_failed(name, reason)
        return self.ctx.gate.refusal(name) is not None


class CellRun(CellTask):
    """Runs one cell's iterations through `executor`; `rendezvous`: where concurrent guests meet; `seat`: its
    turns in a block (guestbench.run.block)."""

    def __init__(self, ctx: RunContext, cell: Cell, iterations: list[str], executor: Executor,
                 rendezvous: lockstep.Rendezvous | None = None, seat: Seat | None = None) -> None:
        super().__init__(ctx, cell, iterations, executor, rendezvous)
        self.seat = seat
        self.launched = False  # some launch of this cell succeeded
        self._index_map: list[int] = []  # the running worker's iteration i is the cell's iteration _index_map[i]
        self._ended: set[int] = set()  # the cell's iterations that ended in the running worker

    def run(self) -> None:
        """One cell; a workload's host-side disks live exactly as long as the cell (removed in every case)."""
        self.rec.state(self.cell, "running")
        with contextlib.ExitStack() as resources:
            try:
                with self.ctx.setup_lock:
                    if self.ctx.stop.is_set():  # a signal came while another cell was set up: make nothing
                        return
                    space.require(self.workdir, self.m.image_bytes(self.params), "its disk images")
                    handle_config = self.handle_config(workload=self.m.workload)
                    self.rec.update(self.cell, software=self.software())
                    drives: list[dict[str, Any]] = []
                    if self.m.workload:
                        storage = resources.enter_context(Backings(self.workdir))
                        drives = self.m.host_drives(storage, self.params, opens_nbd=self.backend.opens_nbd)
            except (Unavailable, ApplianceError) as e:
                self.rec.unavailable(self.cell, len(self.its), str(e))
                return
            try:
                self._workers(handle_config, drives)
            except Unavailable as e:  # its payload does not fit in the cache: made before any worker starts
                self.rec.unavailable(self.cell, len(self.its), str(e))
                return
        if not self.ctx.stop.is_set():  # stopped by a signal: the run closes the cell as interrupted
            self.rec.finish(self.cell)

    # ------------------------------------------------------------------ workers
    def _workers(self, handle_config: dict[str, Any], drives: list[dict[str, Any]]) -> None:
        payload = digest = None
        if self.m.needs_payload:
            self.rec.doing(self.cell, "generating payload")
            with self.ctx.setup_lock:
                if self.ctx.stop.is_set():
                    return
                payload, digest = self.m.make_payload(self.params)
        remaining = list(range(len(self.its)))
        restarts = 0
        while remaining and not self.ctx.stop.is_set():
            self._index_map, self._ended = list(remaining), set()
            meet = {**self.rendezvous.to_dict(), "indexes": remaining} if self.rendezvous else None
            request = self.ctx.request(self.cell, [self.its[i] for i in remaining], handle_config, self.workdir,
                                       verify=self.cell.verification is None, drives=drives,
                                       payload=str(payload) if payload else None, payload_sha256=digest,
                                       rendezvous=meet,
                                       turn=self.seat.request_field(remaining) if self.seat else None)
            ex = self.executor.run_worker(request, self.backend, self._locked(self.on_message))
            if self.ctx.stop.is_set():  # a signal stopped the run and killed the worker: no failure of its own
                return
            remaining = [i for i in remaining if i not in self._ended]
            said = self.cell.failures[-1].reason if self.cell.failures else None  # the worker's own words
            mid_iteration = ex.kind != "done" and bool(remaining)
            if mid_iteration:  # killed at a deadline or died: the iteration under way failed
                self._lost(ex, remaining)
            # a command's failure says nothing about the backend's launch: it is never a deferred probe's verdict
            if not self.launched and self.m.launches and self.probe_failed(said or ex.explain(self.backend)):
                if remaining:
                    self.rec.skip(self.cell, len(remaining), self.ctx.gate.refusal(verdict_name(self.cell)) or "")
                return
            if not mid_iteration:
                if remaining and (refusal := self.ctx.gate.refusal(verdict_name(self.cell))) is not None:
                    self.rec.skip(self.cell, len(remaining), refusal)  # its backend was refused during the block
                elif remaining and self.seat is not None and not self.seat.stopped:  # its turn wait ran out
                    self.rec.skip(self.cell, len(remaining), "not run: no turn was granted in time")
                return
            restarts += 1
            if ex.kind == "timeout" and ex.what == "launch" and not self.launched:
                self.rec.skip(self.cell, len(remaining), f"not run: the launch hung ({ex.explain(self.backend)})")
                return
            if restarts > MAX_WORKER_RESTARTS and remaining:
                self.rec.skip(self.cell, len(remaining), f"not run: the worker failed {restarts} times; "
                              f"last: {ex.explain(self.backend)}")
                return
            if self.seat is not None:  # a new worker comes; when the cell ends instead, its turn ends with the
                self.seat.turnstile.worker_exited(self.seat.turn.slot)  # cell (after its disks are removed)

    def _lost(self, ex: WorkerExit, remaining: list[int]) -> None:
        """The worker ended in the middle of an iteration: that iteration failed with how the worker ended."""
        current = remaining[0] if ex.index is None else self._index_map[ex.index]
        if current in remaining:
            if self.rendezvous is not None:
                lockstep.arrive(self.rendezvous, current)  # its peers need not wait for it
            self.rec.failure(self.cell, self.numbered[current], ex.explain(self.backend))
            remaining.remove(current)

    def _locked(self, handler: Callable[[Message], None]) -> Callable[[Message], None]:
        def locked(msg: Message) -> None:
            with self.rec.lock:  # cells of concurrent appliances share the results document
                handler(msg)
        return locked

    # ------------------------------------------------------------------ messages
    def on_message(self, msg: Message) -> None:
        handler = self._handlers.get(msg["t"])
        if handler is not None:
            handler(self, msg)

    def _iteration(self, msg: Message) -> int:
        return self._index_map[msg["i"]]

    def on_begin(self, msg: Message) -> None:
        if self.seat is not None:  # said when its turn is granted (guestbench.run.block)
            return
        kind, k = self.numbered[self._iteration(msg)]
        self.rec.doing(self.cell, f"{kind} {k}/{self.its.count(kind)}")

    def on_waiting(self, msg: Message) -> None:
        if self.seat is not None:
            self.seat.turnstile.worker_waits(self.seat.turn.slot, self._iteration(msg))

    def on_launched(self, msg: Message) -> None:
        self.launched = True
        paths = msg.get("drive_paths")
        if isinstance(paths, list) and paths and all(p in DRIVE_PATHS for p in paths) \
                and paths != self.cell.drive_paths:
            self.rec.update(self.cell, drive_paths=list(paths))
        self.ctx.gate.first_launch_ended(verdict_name(self.cell), msg["s"])
        if msg.get("first") and not self.m.times_launch:
            self.rec.cold(self.cell, msg["s"])

    def on_sample(self, msg: Message) -> None:
        i = self._iteration(msg)
        self._ended.add(i)
        self.rec.sample(self.cell, self.numbered[i], msg["s"], phases=msg.get("phases"), metrics=msg.get("metrics"),
                        extra={k: msg[k] for k in ("in_step", "waited_s", "load", "resources") if k in msg})

    def on_failure(self, msg: Message) -> None:
        i = self._iteration(msg)
        self._ended.add(i)
        reason = self.backend.explain(msg["reason"], False)
        self.rec.failure(self.cell, self.numbered[i], reason)
        if not self.launched and self.m.launches:  # a deferred probe's verdict at once: in a block, no other
            self.probe_failed(reason)  # cell of this backend launches after it (guestbench.run.block)

    def on_verification(self, msg: Message) -> None:
        self.rec.update(self.cell, verification=msg["record"])

    def on_setup(self, msg: Message) -> None:
        self.rec.update(self.cell, **msg["record"])

    def on_unavailable(self, msg: Message) -> None:
        left = [i for i in self._index_map if i not in self._ended]
        self._ended.update(left)
        self.rec.unavailable(self.cell, len(left), msg["reason"])

    _handlers: dict[str, Callable[[CellRun, Message], None]] = {
        Msg.BEGIN: on_begin, Msg.WAITING: on_waiting, Msg.LAUNCHED: on_launched, Msg.SAMPLE: on_sample,
        Msg.FAILURE: on_failure,
        Msg.VERIFICATION: on_verification, Msg.SETUP: on_setup, Msg.UNAVAILABLE: on_unavailable,
    }
