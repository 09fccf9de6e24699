"""A run elsewhere — a nested placement's level-1 guest, a fleet host's share — whose results file comes back
while it runs. Each snapshot is merged into this run's file: the remote run's cells, tagged with where they ran,
replace what it sent before, and its record of the run (fingerprint, verdicts, status) goes beside them. Its
progress is counted one way for both."""

from __future__ import annotations

from typing import Any

from guestbench.measurements import get as get_measurement
from guestbench.results import Cell, FleetHost, ModelError, Placement, ResultsWriter, Run, limits
from guestbench.util.errors import UserError
from guestbench.scenario import Scenario

ENDED_UNRUN = ("skipped", "unavailable")  # a cell that ended without its iterations: they count as done
KEPT_BELOW = 2
"""Levels further down that a remote document's fields are kept in this run's: doc["placements"]["nested"][key],
doc["hosts"][name][key] (its cells stay as deep as they were)."""


class Remote:
    """One remote run's share of this run's results file: `tag` the key and value its cells carry (placement
    nested, or host NAME), which names its record too (placements.nested, or hosts.NAME: `record`), `fields` what
    of its own document goes into that record."""

    def __init__(self, results: ResultsWriter, tag: tuple[str, str], fields: tuple[str, ...]):
        self.results = results
        self.key, self.value = tag
        self.fields = fields
        self.refused: str | None = None  # why the newest document it sent was not taken (the model refused it)

    def record(self) -> FleetHost | Placement | None:
        """Its record in this run's file, as it stands (None until there is one)."""
        return self.results.remote(self.key, self.value)

    def take(self, doc: dict[str, Any]) -> bool:
        """The remote run's newest document replaces what it sent before (the file rewritten, once for several in
        the writer's `batch`). False when it is no results document, its run was written
        off (a late snapshot from a lost host changes nothing), or it holds what no run writes: it comes from
        another machine, and this run's file must stay one that every reader accepts (`refused` says why): so
        one nested too deep to be kept KEPT_BELOW levels down and read back (results.limits) is refused before
        anything reads it further; what this run's file holds then never nests past MAX_DEPTH, and saving it
        never meets Python's recursion limit."""
        self.refused = None
        record = self.record()
        if not isinstance(doc.get("cells"), list) or (record is not None and record.status == "lost"):
            return False
        allowed = limits.MAX_DEPTH - KEPT_BELOW
        if limits.deepest(doc) > allowed:
            self.refused = f"arrays and objects nested more than {allowed} levels deep; allowed: at most {allowed}"
            return False
        try:
            run = Run.from_dict(doc)
        except ModelError as e:
            self.refused = str(e)
            return False
        self.results.merge_remote(self.key, self.value, run, self.fields)
        return True

    def take_bytes(self, content: bytes) -> bool:
        """A snapshot as the bytes of its file: half a file (it was being written) is no document."""
        try:  # bounded as any untrusted JSON: nesting and numbers bounded, no NaN (results.limits)
            doc = limits.loads(content, "snapshot", "a guestbench results file")
        except UserError:
            return False
        return isinstance(doc, dict) and self.take(doc)

    def progress(self, sc: Scenario) -> tuple[int, int | None]:
        """(iterations ended, planned) of the remote run's cells; planned is None until it has any cell (its
        backends not yet checked)."""
        cells = self.results.cells_where(self.key, self.value)
        if not cells:
            return 0, None
        done = total = 0
        for c in cells:
            n = planned(sc, c)
            total += n
            done += n if c.status in ENDED_UNRUN else min(n, ended_iterations(c))
        return done, total


def planned(sc: Scenario, cell: Cell) -> int:
    """The iterations the scenario plans for a cell of its measurement (cold, warm-ups, repetitions)."""
    return len(sc.iterations(get_measurement(str(cell.measurement)).times_launch))


def ended_iterations(cell: Cell) -> int:
    """A cell's iterations that ended: samples, warm-ups, failures, and a start-up's cold launch."""
    times_launch = get_measurement(str(cell.measurement)).times_launch
    return len(cell.samples) + len(cell.warmups) + len(cell.failures) + int(times_launch and cell.cold_s is not None)
