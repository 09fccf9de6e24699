"""A run elsewhere — a nested placement's level-1 guest, a fleet host's share — whose results file comes back
while it runs. Each snapshot is merged into this run's file: the remote run's cells, tagged with where they ran,
replace what it sent before, and its record of the run (fingerprint, verdicts, status) goes beside them. Its
progress is counted one way for both."""

from __future__ import annotations

from typing import Any

from guestbench.measurements import get as get_measurement
from guestbench.results import ModelError, ResultsFile, Run, limits
from guestbench.util.errors import UserError
from guestbench.scenario import Scenario

ENDED_UNRUN = ("skipped", "unavailable")  # a cell that ended without its iterations: they count as done
KEPT_BELOW = 2
"""Levels further down that a remote document's fields are kept in this run's: doc["placements"]["nested"][key],
doc["hosts"][name][key] (its cells stay as deep as they were)."""


class Remote:
    """One remote run's share of this run's results file: `info` is its record (doc["placements"]["nested"], or
    doc["hosts"][name]), `tag` the key and value its cells carry (placement nested, or host NAME), `fields` what
    of its own document goes into `info`."""

    def __init__(self, results: ResultsFile, info: dict[str, Any], tag: tuple[str, str], fields: tuple[str, ...]):
        self.results = results
        self.info = info
        self.key, self.value = tag
        self.fields = fields
        self.refused: str | None = None  # why the newest document it sent was not taken (the model refused it)

    def take(self, doc: dict[str, Any], save: bool = True) -> bool:
        """The remote run's newest document replaces what it sent before (the file rewritten unless `save` is
        False: the caller saves once for several). False when it is no results document, its run was written
        off (a late snapshot from a lost host changes nothing), or it holds what no run writes: it comes from
        another machine, and this run's file must stay one that every reader accepts (`refused` says why): so
        one nested too deep to be kept KEPT_BELOW levels down and read back (results.limits) is refused before
        anything reads it further; what this run's file holds then never nests past MAX_DEPTH, and saving it
        never meets Python's recursion limit."""
        self.refused = None
        cells = doc.get("cells")
        if not isinstance(cells, list) or self.info.get("status") == "lost":
            return False
        allowed = limits.MAX_DEPTH - KEPT_BELOW
        if limits.deepest(doc) > allowed:
            self.refused = f"arrays and objects nested more than {allowed} levels deep; allowed: at most {allowed}"
            return False
        try:
            Run.from_dict(doc)
        except ModelError as e:
            self.refused = str(e)
            return False
        with self.results.lock:
            for k in self.fields:
                if k in doc:
                    self.info[k] = doc[k]
            kept = [c for c in self.results.doc["cells"] if c.get(self.key) != self.value]
            self.results.doc["cells"] = kept + [{**c, self.key: self.value} for c in cells if isinstance(c, dict)]
            if save:
                self.results.save()
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
        cells = [c for c in self.results.doc["cells"] if c.get(self.key) == self.value]
        if not cells:
            return 0, None
        done = total = 0
        for c in cells:
            n = planned(sc, c)
            total += n
            done += n if c.get("status") in ENDED_UNRUN else min(n, ended_iterations(c))
        return done, total


def planned(sc: Scenario, cell: dict[str, Any]) -> int:
    """The iterations the scenario plans for a cell of its measurement (cold, warm-ups, repetitions)."""
    return len(sc.iterations(get_measurement(str(cell.get("measurement"))).times_launch))


def ended_iterations(cell: dict[str, Any]) -> int:
    """A cell's iterations that ended: samples, warm-ups, failures, and a start-up's cold launch."""
    times_launch = get_measurement(str(cell.get("measurement"))).times_launch
    return (len(cell.get("samples") or []) + len(cell.get("warmups") or []) + len(cell.get("failures") or [])
            + int(times_launch and cell.get("cold_s") is not None))
