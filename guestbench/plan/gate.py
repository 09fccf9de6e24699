"""Which backends a run may use: each one's verdict (preconditions, then a probe launch or a cached verdict),
recorded in the results file and said on the console.

With a deferred probe (`--defer-probe`) a backend's first launch in the run is its probe: the gate holds
the backend as 'deferred' until that launch ends, then records the verdict; a backend whose first launch
failed is refused, and the rest of its cells are skipped without a launch.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from guestbench.backends import Availability
from guestbench.stacks.backend import named
from guestbench.util.errors import UserError, inert
from guestbench.util.reasons import short_reason
from guestbench.results import BackendVerdict, ResultsWriter
from guestbench.execute import probe
from guestbench.execute.executor import Executor

UNDECIDED = "not decided: no cell of this run launched it"


class Gate:
    """The backend verdicts of one run. Thread-safe: concurrent appliances report their first launches."""

    def __init__(self, results: ResultsWriter, console: Console, executor: Executor, run_dir: Path, *,
                 reprobe: bool = False, probe_timeout: float | None = None, defer: bool = False,
                 verbose: bool = False) -> None:
        self.results = results
        self.verbose = verbose  # full reasons on the console (the results file always has them)
        self.console = console
        self.executor = executor
        self.run_dir = run_dir
        self.reprobe = reprobe
        self.probe_timeout = probe_timeout
        self.defer = defer
        self._deferred: dict[str, Availability] = {}  # backends whose first launch is their probe, until it ends

    def check(self, names: list[str]) -> list[str]:
        """Every named backend's verdict, in order; the usable ones (a deferred one counts as usable)."""
        usable = []
        with self.console.status("") as status:
            for name in names:
                say = f"checking backend {name} (a real launch under a deadline, or a cached verdict)"
                status.update(say)
                if not self.console.is_terminal:  # no live status line in a log: say what the wait is for
                    self.console.print(say, highlight=False)
                av = self._verdict(name, refresh=self.reprobe, defer=self.defer)
                if av.details.get("deferred"):
                    self._deferred[name] = av
                if av.usable:
                    usable.append(name)
        return usable

    def verdict(self, name: str) -> BackendVerdict | None:
        """This run's verdict on backend `name` (a verdict name: `tcg`, `uml@sid`), None before its check."""
        return self.results.verdict(name)

    def usable(self, name: str) -> bool:
        """Whether the backend may still launch in this run (unknown backends: yes, nobody refused them)."""
        verdict = self.results.verdict(name)
        return verdict is None or verdict.usable

    def refusal(self, name: str) -> str | None:
        """Why the rest of this backend's cells are not run, when its deferred probe failed."""
        if self.usable(name):
            return None
        verdict = self.results.verdict(name)
        return f"not run: {name} is not usable here ({verdict.reason if verdict else None})"

    def awaits_first_launch(self, name: str) -> bool:
        return name in self._deferred

    def first_launch_ended(self, name: str, launch_s: float | None, failure: str | None = None) -> None:
        """A deferred probe's verdict, from the backend's first launch in this run (once per backend)."""
        with self.results.lock:
            deferred = self._deferred.pop(name, None)
            if deferred is None:
                return
            av = probe.decided(named(name), deferred, launch_s, failure)
            self.results.set_verdict(name, verdict_of(av))
        self._say(name, av)

    def probe_deferred(self, name: str) -> None:
        """A deferred backend about to run a cell whose launches are not guestbench's own (a command starts its
        own appliances, and its exit says nothing about the backend): its probe launch runs now instead."""
        with self.results.lock:
            deferred = self._deferred.pop(name, None)
        if deferred is None:
            return
        with self.console.status(f"checking backend {name} before a command runs on it (a real launch under a "
                                 "deadline)"):
            self._verdict(name, refresh=True, defer=False)

    def first_launch_failed(self, name: str, reason: str) -> None:
        self.first_launch_ended(name, None, f"the run's first launch failed: {reason}")

    def close(self) -> None:
        """Backends still deferred at the end of the run: no cell launched them (all unavailable, or stopped)."""
        for name in list(self._deferred):
            self.first_launch_ended(name, None, UNDECIDED)

    def kvm_usable(self) -> bool:
        """Whether KVM works here (for the level-1 guest): this run's verdict, else a cached or new probe."""
        known = self.results.verdict("kvm")
        if known is not None:
            return known.usable
        with self.console.status("checking whether KVM works here, for the level-1 guest"):
            av = probe.verdict(named("kvm"), self.executor, self.run_dir, refresh=self.reprobe,
                             timeout=self.probe_timeout)
        return av.usable

    def _verdict(self, name: str, *, refresh: bool, defer: bool) -> Availability:
        """One backend's verdict from probe.verdict, recorded in the results file and said."""
        try:
            backend = named(name)
        except UserError as e:  # a stack not built (or half-built): its backends are not usable, the rest run
            av = Availability(False, str(e))
            self.results.set_verdict(name, verdict_of(av))
            self._say(name, av)
            return av
        av = probe.verdict(backend, self.executor, self.run_dir, refresh=refresh, timeout=self.probe_timeout,
                         defer=defer)
        self.results.set_verdict(name, verdict_of(av))
        self._say(name, av)
        return av

    def _say(self, name: str, av: Availability) -> None:
        cached = " (cached verdict)" if av.details.get("cached") else ""
        reason = av.reason if self.verbose else short_reason(av.reason)
        if av.details.get("deferred"):
            self.console.print(f"[yellow]?[/] {name}: probe ", inert(reason), sep="", highlight=False)
        elif av.usable:
            self.console.print(f"[green]✓[/] {name}: usable — ", inert(reason + cached), sep="", highlight=False)
        else:
            self.console.print(f"[red]✗[/] {name}: not usable — ", inert(reason + cached), sep="", highlight=False)


def verdict_of(av: Availability) -> BackendVerdict:
    """A backend's availability as the results document records it: usable, reason and details, always all three."""
    return BackendVerdict.laid_out(**av.to_dict())
