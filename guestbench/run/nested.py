"""The nested placement of a run: the scenario again, inside a level-1 guest, its samples joining this run's
results file as they are taken (the level-1 machinery itself is guestbench.nested)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from guestbench.util.errors import Interrupted, inert
from guestbench.nested import guest
from guestbench.nested import image as nested_image
from guestbench.nested import job
from guestbench.results import Placement, ResultsWriter
from guestbench.plan.gate import Gate
from guestbench.run.record import progress_display
from guestbench.execute.remote import Remote
from guestbench.scenario import Scenario

GUEST_FIELDS = ("host", "backends", "status", "started_utc", "finished_utc", "guestbench")  # into placements.nested
KERNEL_LINE = re.compile(r"^\[\s*\d+\.\d+\]")  # the level-1 kernel's own messages: shown with --verbose only


class NestedPlacement:
    """The run's results file, console, run directory and probe limit are the gate's: one set per run."""

    def __init__(self, sc: Scenario, gate: Gate, *, verbose: bool) -> None:
        self.sc = sc
        self.gate = gate
        self.results: ResultsWriter = gate.results
        self.console: Console = gate.console
        self.run_dir: Path = gate.run_dir
        self.verbose = verbose

    def run(self) -> None:
        level1 = job.plan(self.sc, self.gate.kvm_usable(), self.gate.probe_timeout)
        self.console.print(level1.describe(), highlight=False)
        try:
            img = nested_image.build(lambda line: self.console.print("nested build: ", inert(line), sep="",
                                                                   highlight=False))
            files = job.job_files(self.sc, level1)
        except nested_image.BuildError as e:
            self._failed(Merger(self.results, level1, None), None,
                         f"the level-1 guest image could not be built: {e}")
            return
        merger = Merger(self.results, level1, img.path.name)
        t0 = time.monotonic()
        try:
            result = self._boot(img, files, level1, merger)
        except guest.GuestError as e:
            self._failed(merger, time.monotonic() - t0, str(e))
            return
        except Interrupted:
            merger.finish(time.monotonic() - t0, "interrupted by a signal; samples taken inside until then are kept",
                          interrupted=True)
            raise
        final = job.guest_results(result.output)
        error = None
        if final is None:
            error = "the level-1 guest brought back no results file; its console last said: " + \
                " / ".join(result.console[-3:])
        elif not merger.take(final):
            error = f"the level-1 guest's results file was refused: {merger.refused or 'not a results document'}"
        elif result.exit_status not in (0, 1):  # 1: some cell has no samples, reported per cell
            error = f"guestbench inside the level-1 guest ended with exit status {result.exit_status}"
        if error:
            self._failed(merger, result.seconds, error)
        else:
            merger.finish(result.seconds, None)

    def _boot(self, img: nested_image.Image, files: dict[str, bytes | Path], level1: job.Level1,
              merger: Merger) -> guest.JobResult:
        """The level-1 guest runs the job; its console and live results are shown as they come."""
        with progress_display(self.console) as progress:
            task = progress.add_task(f"{self.sc.name} · nested · booting the level-1 guest", total=None)

            def on_live(snap: Any) -> None:
                merger.take_bytes(snap.content)
                done, total = merger.progress(self.sc)
                record = merger.record()
                progress.update(task, completed=done, total=total,
                                description=f"{self.sc.name} · nested · {record.status if record else None}")

            return guest.run_job(img, files, self.run_dir / "level1-out", memory_mib=level1.memory_mib,
                                 vcpus=level1.vcpus, kvm=level1.kvm, timeout_s=level1.deadline_s,
                                 on_console=self.show_console, on_live=on_live, silence_s=job.SILENCE_S)

    def show_console(self, line: str) -> None:
        """A line of the level-1 guest's console, as text (never markup) with nothing a terminal obeys."""
        if self.verbose or not KERNEL_LINE.match(line):
            self.console.print("  level-1 │ ", inert(line), sep="", highlight=False, soft_wrap=True)

    def _failed(self, merger: Merger, seconds: float | None, error: str) -> None:
        merger.finish(seconds, error)
        self.console.print("[red]✗[/] nested: ", inert(error), sep="", highlight=False)  # quotes the guest


class Merger(Remote):
    """The level-1 guest's run: its results join the host's results file as placement nested, every time newer
    ones arrive, and its record says how the level-1 run ended."""

    def __init__(self, results: ResultsWriter, level1: job.Level1, image: str | None) -> None:
        super().__init__(results, ("placement", job.PLACEMENT), GUEST_FIELDS)
        results.set_placement(job.PLACEMENT, Placement.laid_out(
            host=None, backends={}, status="starting", started_utc=None, finished_utc=None, guestbench=None,
            level1={**level1.to_dict(), "image": image, "seconds": None, "error": None}))

    def finish(self, seconds: float | None, error: str | None, interrupted: bool = False) -> None:
        with self.results.lock:
            record = self.results.placement(job.PLACEMENT)
            assert record is not None  # set when the merger was made
            ended = {"status": "interrupted" if interrupted else "failed"} \
                if (error or interrupted) and record.status in ("starting", "running") else {}
            self.results.update_placement(job.PLACEMENT, level1={**(record.level1 or {}), "seconds": seconds,
                                                                 "error": error}, **ended)
