"""Where a run's outcomes go: the results file (rewritten after every change) and the console.

Every change to a cell of the results document is made here, under the results lock (concurrent appliances
record into one document from their own threads), so a cell's status and samples have one writer.
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
from guestbench.results import Failure, ModelError, ResultsFile, Sample, utc_now
from guestbench.plan.cells import system_of

CellDoc = dict[str, Any]  # a cell of the results document, as written (the typed view: results.Cell) (guestbench.results, docs/results-format.md)
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

    def __init__(self, results: ResultsFile, console: Console, others: Neighbours | None = None) -> None:
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

    def note(self, **fields: Any) -> None:
        """A fact about the whole run (its order), kept at the top level of the results document."""
        with self.lock:
            self.results.doc.update(fields)
            self.results.save()

    def track(self, progress: Progress | None, task: Any = None) -> None:
        self._progress, self._task = progress, task

    def doing(self, cell: CellDoc, what: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=f"{system_of(cell)} · {cell['label']} · {what}")

    def _advance(self, n: int = 1) -> None:
        if self._progress is not None and n:
            self._progress.advance(self._task, n)

    # ------------------------------------------------------------------ cell states
    def add_cell(self, cell: CellDoc) -> CellDoc:
        with self.lock:
            return self.results.add_cell(cell)

    def state(self, cell: CellDoc, status: str) -> None:
        with self.lock:
            cell["status"] = status
            self.results.save()

    def finish(self, cell: CellDoc) -> None:
        """The cell ran to its end (unless something already said how it ended)."""
        with self.lock:
            if cell["status"] == "running":
                cell["status"] = "done"
            self.results.save()

    def unavailable(self, cell: CellDoc, left: int, reason: str) -> None:
        """The cell cannot run on this machine (reported in its place in every table, never dropped)."""
        self._end(cell, "unavailable", reason, left)
        self._say("[yellow]–[/] ", f"{system_of(cell)} · {cell['label']}: unavailable here: {reason}")

    def skip(self, cell: CellDoc, left: int, reason: str) -> None:
        self._end(cell, "skipped", reason, left)

    def _end(self, cell: CellDoc, status: str, reason: str, left: int) -> None:
        with self.lock:
            cell["status"] = status
            cell["skip_reason"] = reason
            self.results.save()
        self._advance(left)

    def update(self, cell: CellDoc, **fields: Any) -> None:
        """Facts about the cell learned while it runs: its set-up record, its verification, its disk."""
        with self.lock:
            cell.update(fields)
            self.results.save()

    # ------------------------------------------------------------------ iterations
    def cold(self, cell: CellDoc, seconds: float) -> None:
        """A measurement that does not time the launch keeps its first launch's time apart."""
        with self.lock:
            if cell["cold_s"] is None:
                cell["cold_s"] = seconds
                self.results.save()

    def sample(self, cell: CellDoc, it: Iteration, seconds: float, *, phases: list[dict[str, Any]] | None = None,
               metrics: dict[str, float | str] | None = None, extra: dict[str, Any] | None = None) -> None:
        kind, k = it
        refused = None
        with self.lock:
            if kind == "cold":
                cell["cold_s"] = seconds
            else:
                extra = self._shared(seconds, dict(extra or {}))
                entry = Sample(rep=k, seconds=seconds, utc=utc_now(), phases=phases, metrics=metrics,
                               seq=self._next_seq(), **extra).to_dict()
                try:  # what the worker measured is kept only as the model reads it back (a NaN figure is not)
                    Sample.from_dict(entry)
                    cell["samples" if kind == "rep" else "warmups"].append(entry)
                except ModelError as e:
                    refused = f"its figures cannot be recorded as a sample: {e}"
                    cell["failures"].append(Failure(kind=kind, rep=k, reason=refused, utc=entry["utc"],
                                                    seq=entry["seq"]).to_dict())
            self.results.save()
        self._advance()
        if refused is not None:
            self._say("[yellow]![/] ", f"{system_of(cell)} · {cell['label']} · {kind} {k} failed: {refused}")
        elif not self.console.is_terminal:  # no live progress bar in a log: one line per sample instead
            self._say("", f"{system_of(cell)} · {cell['label']} · {kind} {k}: {seconds:.3g} s"
                          f"{_headline(cell, seconds, metrics)}")

    def _shared(self, seconds: float, extra: dict[str, Any]) -> dict[str, Any]:
        """A sample's load record with "other_runs": how many other guestbench runs were active while it was
        taken (the sample just ended); absent when none was."""
        n = self.others.during(seconds) if self.others is not None else 0
        if n:
            extra["load"] = {**(extra.get("load") or {}), "other_runs": n}
        return extra

    def failure(self, cell: CellDoc, it: Iteration, reason: str) -> None:
        kind, k = it
        with self.lock:
            cell["failures"].append(Failure(kind=kind, rep=k, reason=reason, utc=utc_now(),
                                            seq=self._next_seq()).to_dict())
            self.results.save()
        self._advance()
        self._say("[yellow]![/] ", f"{system_of(cell)} · {cell['label']} · {kind} {k} failed: {reason}")

    def _say(self, mark: str, text: str) -> None:
        """A line of the run's log: guestbench's mark (markup), then text that names cells and quotes what a
        hypervisor, a tool or a guest said (never markup, nothing a terminal obeys)."""
        self.console.print(mark, inert(text), sep="", highlight=False)


def _headline(cell: CellDoc, seconds: float, metrics: dict[str, float | str] | None) -> str:
    """A sample's rate for the log line: the workload's headline figure, else MB/s when bytes moved."""
    if metrics and cell.get("metrics"):
        first = cell["metrics"][0]
        value = metrics.get(first["key"])
        shown = f"{value:.4g}" if isinstance(value, (int, float)) else str(value)
        return f", {first['label']} {shown} {first['unit']}"
    return f", {units.mb_per_s(cell['bytes'], seconds):.1f} MB/s" if cell.get("bytes") else ""
