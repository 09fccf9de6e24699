"""Where a run's outcomes go: the results file (rewritten after every change) and the console.

Every change to a cell is made here, as typed records handed to the results writer (guestbench.results.writer),
under its lock (concurrent appliances record into one document from their own threads), so a cell's status and
samples have one writer. A cell is the model's Cell: the run reads it, the writer alone changes it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn, Task, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.text import Text

from guestbench.util import units
from guestbench.util.errors import inert
from guestbench.host.neighbours import Neighbours
from guestbench.results import Cell, Density, Failure, ModelError, ResultsWriter, Sample, utc_now
from guestbench.plan.cells import system_of

Iteration = tuple[str, int]  # ("cold" | "warmup" | "rep", its number among its kind, 1-based)


def numbered(iterations: list[str]) -> list[Iteration]:
    """Each iteration with its number among those of its kind: warmup 1, warmup 2, rep 1, ..."""
    seen: dict[str, int] = {}
    out = []
    for kind in iterations:
        seen[kind] = seen.get(kind, 0) + 1
        out.append((kind, seen[kind]))
    return out


class _Description(ProgressColumn):
    """A task's description as text, never markup: it names cells and quotes the status a level-1 guest or a
    fleet host sent."""

    def render(self, task: Task) -> Text:
        return inert(task.description)


def progress_display(console: Console, open_ended: bool = False) -> Progress:
    """One progress display for host cells and the nested part: bar, count, elapsed, ETA. Sampling towards a
    precision target has no fixed end: no ETA then; each cell's description says the precision so far."""
    ending = [] if open_ended else [TextColumn("ETA"), TimeRemainingColumn()]
    return Progress(SpinnerColumn(), _Description(), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), *ending, console=console, transient=False)


class Recorder:
    """Records samples, failures and cell states into the results file, and says so on the console; advances
    the progress display (set with `track`) by one per iteration that ended, however it ended."""

    def __init__(self, results: ResultsWriter, console: Console, others: Neighbours | None = None) -> None:
        self.results = results
        self.others = others  # other guestbench runs on this host: a sample taken beside one says so
        self.console = console
        self.lock = results.lock
        self._progress: Progress | None = None
        self._task: Any = None
        self._seq = 0  # iterations ended in this run, in the order they ended (a sample's or failure's "seq")

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def order(self, order: dict[str, Any]) -> None:
        """The order the run's cells take, kept at the top level of the results document."""
        self.results.set_order(order)

    def density(self, record: Density) -> None:
        """A density item's record as it stands (its levels so far, why they stopped)."""
        self.results.put_density(record)

    def track(self, progress: Progress | None, task: Any = None) -> None:
        self._progress, self._task = progress, task

    def doing(self, cell: Cell, what: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=f"{system_of(cell)} · {cell.label} · {what}")

    def _advance(self, n: int = 1) -> None:
        if self._progress is not None and n:
            self._progress.advance(self._task, n)

    # ------------------------------------------------------------------ cell states
    def add_cell(self, cell: Cell) -> Cell:
        """A planned cell joins the results file; the Cell returned is the one the run goes on with."""
        return self.results.add(cell)

    def state(self, cell: Cell, status: str) -> None:
        self.results.set_status(cell, status)

    def finish(self, cell: Cell) -> None:
        """The cell ran to its end (unless something already said how it ended)."""
        with self.lock:
            if cell.status == "running":
                self.results.set_status(cell, "done")

    def unavailable(self, cell: Cell, left: int, reason: str) -> None:
        """The cell cannot run on this machine (reported in its place in every table, never dropped)."""
        self._end(cell, "unavailable", reason, left)
        self._say("[yellow]–[/] ", f"{system_of(cell)} · {cell.label}: unavailable here: {reason}")

    def skip(self, cell: Cell, left: int, reason: str) -> None:
        self._end(cell, "skipped", reason, left)

    def _end(self, cell: Cell, status: str, reason: str, left: int) -> None:
        self.results.end_unrun(cell, status, reason)
        self._advance(left)

    def update(self, cell: Cell, **fields: Any) -> None:
        """Facts about the cell learned while it runs: its set-up record, its verification, its disk, its
        precision (each read as a results file's value is). One the model refuses is left out and said: the run
        goes on, and its file stays one every reader takes. One rewrite of the file for them all."""
        with self.results.batch():
            for name, value in fields.items():
                self._update(cell, name, value)

    def _update(self, cell: Cell, name: str, value: Any) -> None:
        try:
            self.results.update_cell(cell, **{name: value})
        except ModelError as e:
            self._say("[yellow]![/] ", f"{system_of(cell)} · {cell.label}: not recorded: {e}")

    # ------------------------------------------------------------------ iterations
    def cold(self, cell: Cell, seconds: float) -> None:
        """A measurement that does not time the launch keeps its first launch's time apart."""
        with self.lock:
            if cell.cold_s is None:
                self._update(cell, "cold_s", seconds)

    def sample(self, cell: Cell, it: Iteration, seconds: float, *, phases: list[dict[str, Any]] | None = None,
               metrics: dict[str, float | str] | None = None, extra: dict[str, Any] | None = None) -> None:
        kind, k = it
        refused = None
        with self.lock:
            if kind == "cold":
                self._update(cell, "cold_s", seconds)
            else:
                extra = self._shared(seconds, dict(extra or {}))
                utc, seq = utc_now(), self._next_seq()
                try:  # what the worker measured is kept only as the model reads it (a NaN figure is not)
                    sample = Sample.checked(rep=k, seconds=seconds, utc=utc, phases=phases, metrics=metrics, seq=seq,
                                            **extra)
                except ModelError as e:
                    refused = f"its figures cannot be recorded as a sample: {e}"
                    self.results.add_failure(cell, Failure(kind=kind, rep=k, reason=refused, utc=utc, seq=seq))
                else:
                    self.results.add_sample(cell, kind, sample)
        self._advance()
        if refused is not None:
            self._say("[yellow]![/] ", f"{system_of(cell)} · {cell.label} · {kind} {k} failed: {refused}")
        elif not self.console.is_terminal:  # no live progress bar in a log: one line per sample instead
            self._say("", f"{system_of(cell)} · {cell.label} · {kind} {k}: {seconds:.3g} s"
                          f"{_headline(cell, seconds, metrics)}")

    def _shared(self, seconds: float, extra: dict[str, Any]) -> dict[str, Any]:
        """A sample's load record with "other_runs": how many other guestbench runs were active while it was
        taken (the sample just ended); absent when none was."""
        n = self.others.during(seconds) if self.others is not None else 0
        if n:
            extra["load"] = {**(extra.get("load") or {}), "other_runs": n}
        return extra

    def failure(self, cell: Cell, it: Iteration, reason: str) -> None:
        kind, k = it
        with self.lock:
            self.results.add_failure(cell, Failure(kind=kind, rep=k, reason=reason, utc=utc_now(),
                                                   seq=self._next_seq()))
        self._advance()
        self._say("[yellow]![/] ", f"{system_of(cell)} · {cell.label} · {kind} {k} failed: {reason}")

    def _say(self, mark: str, text: str) -> None:
        """A line of the run's log: guestbench's mark (markup), then text that names cells and quotes what a
        hypervisor, a tool or a guest said (never markup, nothing a terminal obeys)."""
        self.console.print(mark, inert(text), sep="", highlight=False)


def _headline(cell: Cell, seconds: float, metrics: dict[str, float | str] | None) -> str:
    """A sample's rate for the log line: the workload's headline figure (its first descriptor: key, label, unit),
    else MB/s when bytes moved."""
    if metrics and cell.metrics:
        first = cell.metrics[0]
        value = metrics.get(first["key"])
        shown = f"{value:.4g}" if isinstance(value, (int, float)) else str(value)
        return f", {first['label']} {shown} {first['unit']}"
    return f", {units.mb_per_s(int(cell.bytes), seconds):.1f} MB/s" if cell.bytes else ""
