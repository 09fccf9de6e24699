"""One cell's libguestfs handles run in this process, with a deadline on every step that can hang.

Why in-process: pytest-benchmark's timer must wrap the timed call itself, so the pytest plugin cannot hand
a cell to guestbench's worker process. libguestfs has no timeout of its own, so a watchdog thread stands in
for the supervisor: when a step overruns, it kills what the cell started (the hypervisor and libguestfs's
recovery process, children of this process; or the libvirt domain), and the blocked libguestfs call then
returns with an error, reported as a `StepFailed` naming the step and the limit.

Handles are built by the worker's `Handle` and the steps are the measurements' worker-side methods, split
as in the worker: the handle and images, the launch (unless it is what is timed), `after_launch` and
`prepare` are untimed; `timed_op`, or for start-up the launch itself, is timed.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from collections.abc import Callable, Iterator

from guestbench.backends import BACKENDS, Backend
from guestbench.measurements import get as get_measurement
from guestbench.measurements.base import CellContext, verification_problem
from guestbench.host.paths import WORKDIR_ENV, cache_dir, remove_tree, scratch_env, workdir_for
from guestbench.measurements.payload import payload
from guestbench.scenario import DEFAULT_SAMPLE_TIMEOUT_S, DEFAULT_TIMEOUT_S
from guestbench.execute.protocol import Request
from guestbench.backends.base import LIBGUESTFS_OVERRIDES
from guestbench.execute.supervisor import alive, descendants, kill_processes
from guestbench.execute.worker import SHUTDOWN_TIMEOUT_S, Handle, failure_reason

_SEQ = itertools.count(1)
T = TypeVar("T")


class StepFailed(Exception):
    """A step of a cell failed or overran its deadline; the message is the whole, readable reason."""


class _Overrun(Exception):
    pass


class Watchdog:
    """Kills what a cell started (processes below this one, libvirt domains) when a step overruns its deadline.

    "Started by the cell" is what exists now and did not when the cell began, so nothing of other cells, of
    other libguestfs users or of the test session is touched.
    """

    def __init__(self, backend: Backend, workdir: Path) -> None:
        self.backend = backend
        self.workdir = workdir
        self.pid = os.getpid()
        self.before = set(descendants(self.pid))

    def started(self) -> list[int]:
        return [p for p in descendants(self.pid) if p not in self.before]

    def kill(self) -> list[int]:
        pids = self.started()
        kill_processes(pids)
        self.backend.cleanup(self.workdir)
        return pids

    @contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Run the block; past `seconds`, kill. Raises _Overrun when it fired, even if the block then returned."""
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            self.kill()

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        except Exception as exc:
            timer.cancel()
            timer.join()
            if fired.is_set():
                raise _Overrun() from exc
            raise
        timer.cancel()
        timer.join()  # a kill under way finishes before anything else touches the handle
        if fired.is_set():
            raise _Overrun()


class _Environment:
    """The backend's environment variables, set while the cell's handles exist and restored afterwards."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.saved: dict[str, str | None] | None = None

    def apply(self) -> None:
        tempfile.gettempdir()  # this process's own temp dir, chosen now: never the cell's work dir (TMPDIR below)
        names = set(self.values) | set(LIBGUESTFS_OVERRIDES)
        self.saved = {k: os.environ.get(k) for k in names}
        for k in LIBGUESTFS_OVERRIDES:
            os.environ.pop(k, None)
        os.environ.update(self.values)

    def restore(self) -> None:
        if self.saved is None:
            return
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.saved = None


class InProcessCell:
    """One backend × measurement × parameters, run step by step in this process. Use as a context manager:
    leaving it closes every handle, kills anything left, removes the cell's files and restores the environment."""

    def __init__(self, backend: str, measurement: str, params: dict[str, Any], run_dir: Path, *,
                 memsize: int | None = None, smp: int | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 sample_timeout: float = DEFAULT_SAMPLE_TIMEOUT_S, verbose: bool = False) -> None:
        self.backend = BACKENDS[backend]
        self.measurement = get_measurement(measurement)
        self.params = params
        self.timeout = timeout
        self.sample_timeout = sample_timeout
        self.config = self.backend.handle_config(cache_dir())
        self.workdir = workdir_for(run_dir, f"{measurement}-{backend}-{next(_SEQ)}")
        path = digest = None
        if self.measurement.needs_payload:
            path, digest = payload(params["size"])
        self.ctx = CellContext(params=params, workdir=self.workdir, payload=path, payload_sha256=digest,
                               memsize_mib=memsize)
        # the request a worker would get; Handle reads the handle's configuration from it
        self.request = Request(measurement=measurement, params=params, iterations=[], backend=self.config.to_dict(),
                               workdir=str(self.workdir), timeout=timeout, sample_timeout=sample_timeout,
                               appliance={"memsize": memsize, "smp": smp}, verbose=verbose)
        self.env = _Environment({**scratch_env(self.workdir), **self.config.env, WORKDIR_ENV: str(self.workdir)})
        self.open: list[Handle] = []
        self.verification: dict[str, Any] | None = None
        self.watchdog: Watchdog | None = None

    def __enter__(self) -> InProcessCell:
        self.env.apply()
        self.watchdog = Watchdog(self.backend, self.workdir)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- steps; each under its deadline, each failure a StepFailed with the reason
    def _step(self, what: str, limit: float, app: Handle | None, fn: Callable[[], T]) -> T:
        assert self.watchdog is not None, "use InProcessCell as a context manager"
        try:
            with self.watchdog.deadline(limit):
                return fn()
        except _Overrun as e:
            why = f"{what} did not finish within {limit:g} s; the hypervisor was killed"
            raise StepFailed(f"{self.backend.name}: {self.backend.explain(why, True)}") from e.__cause__
        except StepFailed:
            raise
        except Exception as e:
            raise StepFailed(f"{self.backend.name}: {what} failed: "
                             f"{self.backend.explain(failure_reason(e, app), False)}") from e

    def new_handle(self) -> Handle:
        """A configured handle with the measurement's drives (host side: images are created here)."""
        def make() -> Handle:
            app = Handle(self.request, self.measurement, self.ctx)
            self.open.append(app)
            return app
        return self._step("handle and disk images", self.sample_timeout, None, make)

    def launch(self, app: Handle) -> None:
        """launch() and one daemon round trip: what start-up times."""
        def go() -> None:
            app.g.launch()
            app.g.ping_daemon()
        self._step("launch", self.timeout, app, go)

    def after_launch(self, app: Handle) -> None:
        self._step("set-up after launch", self.sample_timeout, app,
                   lambda: self.measurement.after_launch(app.g, self.ctx))

    def prepare(self, app: Handle) -> None:
        self._step("prepare", self.sample_timeout, app, lambda: self.measurement.prepare(app.g, self.ctx))

    def timed_op(self, app: Handle) -> None:
        self._step(self.measurement.name, self.sample_timeout, app, lambda: self.measurement.timed_op(app.g, self.ctx))

    def verify(self, app: Handle) -> dict[str, Any] | None:
        """The measurement's check that the data arrived; a mismatch is a StepFailed."""
        record = self._step("verification", self.sample_timeout, app, lambda: self.measurement.verify(app.g, self.ctx))
        if record is not None:
            self.verification = record
            if (problem := verification_problem(record)) is not None:
                raise StepFailed(f"{self.backend.name}: {problem}")
        return record

    def shutdown(self, app: Handle) -> None:
        try:
            self._step("shutdown", SHUTDOWN_TIMEOUT_S, app, app.g.shutdown)
        finally:
            self._close(app)

    def _close(self, app: Handle) -> None:
        if app in self.open:
            self.open.remove(app)
            try:
                self._step("close", SHUTDOWN_TIMEOUT_S, app, app.close)
            except StepFailed:
                pass  # killed at the deadline; close() returned after that

    def close(self) -> list[int]:
        """Close every handle, kill what is left (returned: the pids), remove the files, restore the env."""
        left: list[int] = []
        try:
            for app in list(self.open):
                self._close(app)
            if self.watchdog is not None:
                left = [p for p in self.watchdog.started() if alive(p)]
                if left:
                    kill_processes(left)
                self.backend.cleanup(self.workdir)
        finally:
            remove_tree(self.workdir)
            self.env.restore()
        return left

