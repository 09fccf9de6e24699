"""The one way a run's results document changes: typed records in (the model's Cell, Sample, Failure,
BackendVerdict, Placement, FleetHost, Density, AbSides), each serialised once, here, and the file rewritten
atomically after every change (io.atomic_write_bytes), so an interrupted run keeps every sample taken.

The document is held as the JSON it is written as (`doc`: read and changed only in guestbench.results, and by
tests that build documents by hand). The file must come out as docs/results-format.md lays it out, byte for
byte (keys in the order they were first written, null where a field is not known yet), and it is rewritten after
every sample: re-serialising the whole typed run on each save would cost the run more than json's encoder does.
Each cell the writer added or merged is also kept as its typed Cell, changed in step with its JSON: the run reads
its cells (samples, failures, status) from those, never from the JSON. A backend's verdict, a placement or a
fleet host is read back typed from the JSON when asked for (`verdict`, `placement`, `host`).
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import guestbench.results.validate as validate
from guestbench.results import limits
from guestbench.results.fields import Record, plain
from guestbench.results.io import atomic_write_bytes, encode, results_path, utc_now
from guestbench.results.model import (SCHEMA, SCHEMA_VERSION, AbSides, BackendVerdict, Cell, Density, Failure,
                                      FleetHost, Placement, Run, Sample)
from guestbench.util.errors import UserError

ALWAYS = ("samples", "warmups", "failures", "verification", "cold_s", "status", "skip_reason")
"""What every cell of a document has from the moment it is added, null or empty until known."""
UNFINISHED = ("pending", "running")
LISTS = ("samples", "warmups", "failures")
REMOTE_SECTIONS = {"host": ("hosts", FleetHost), "placement": ("placements", Placement)}
"""Where the record of a run that ran elsewhere sits, by the key its cells carry: a fleet host's, a placement's."""


def _cell_json(cell: Cell) -> dict[str, Any]:
    """A cell's JSON, with lists of its own (to_dict hands an empty list on as it is: shared with the typed cell,
    it would take every record twice)."""
    out = cell.to_dict()
    for name in LISTS:
        if name in out:
            out[name] = _detached(out[name], getattr(cell, name))
    return out


def _put(record: Record, out: dict[str, Any], name: str, value: Any) -> None:
    """One field of a record and of its JSON: read as a file's value is (a ModelError names the field), unless it
    is a record already; a key the record did not have goes after the rest, as in its JSON."""
    if name in record.FIELDS:
        typed = value if isinstance(value, Record) else record.FIELDS[name](value, name)
        setattr(record, name, typed)
        out[name] = _detached(plain(typed), typed)
    else:  # a field this guestbench does not know: kept as it came (a newer worker's)
        record.extra[name] = value
        out[name] = value
    if name not in record.source_keys:
        record.source_keys += (name,)


def _detached(value: Any, typed: Any) -> Any:
    """The JSON of a field, never the typed record's own list (an empty list's plain form is the list itself): a
    record appended to it later would otherwise land in the document as an object json cannot write."""
    return list(value) if isinstance(value, list) and value is typed else value


def _update(out: dict[str, Any], cls: type[Record], fields: dict[str, Any]) -> None:
    """Fields of a record held only as JSON (a placement, a fleet host), each read as a file's value is."""
    for name, value in fields.items():
        if name not in cls.FIELDS:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        out[name] = plain(value if isinstance(value, Record) else cls.FIELDS[name](value, name))


class ResultsWriter:
    """The results document of one run, rewritten atomically whenever something is added (under `lock`:
    concurrent appliances record into one document from their own threads; `batch` makes several changes one
    rewrite).

    With GUESTBENCH_VALIDATE_RESULTS=1 (the test suite sets it) every save is checked against schema-v3.json and
    the model first, and read back through results.limits as every reader reads it, so a writer that drifts from
    the documented format fails where it writes. Its depth needs no check when saved: guestbench's own parts nest
    about ten levels, and a document from elsewhere is merged only when the result nests at most
    results.limits.MAX_DEPTH (guestbench.execute.remote), so json's recursive encoder stays far below Python's
    recursion limit.
    """

    def __init__(self, path: Path | None, doc: dict[str, Any], directory: Path | None = None) -> None:
        """Saved at once to `path`; or, given `directory` instead, to a new results file reserved there for it."""
        self.doc = doc
        self.lock = threading.RLock()
        self._json: dict[int, dict[str, Any]] = {}  # id(typed cell) -> its JSON in doc["cells"]
        self._typed: dict[int, Cell] = {}  # id(a cell's JSON) -> its typed cell
        self._density: dict[int, tuple[Density, dict[str, Any]]] = {}  # id(a density record) -> it, its JSON
        self._held = 0  # batches open
        self._dirty = False  # changed since the last save, in a batch
        if path is None:
            assert directory is not None
            self.path = results_path(directory, str(doc["scenario"].get("name") or ""), content=self._data())
        else:
            self.path = path
            self.save()

    @classmethod
    def create(cls, where: Path, *, scenario: dict[str, Any], host: dict[str, Any],
               command: list[str], guestbench: dict[str, Any], new: bool = False) -> ResultsWriter:
        """A new run's document, saved to the file `where`; with `new`, to a new results file in the directory
        `where` (results_path), named after the scenario."""
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "guestbench": guestbench,
            "status": "running",
            "started_utc": utc_now(),
            "finished_utc": None,
            "command": command,
            "scenario": scenario,
            "host": host,
            "backends": {},
            "cells": [],
        }
        return cls(None, doc, where) if new else cls(where, doc)

    def run(self) -> Run:
        """The document as it stands, as the typed model its readers take."""
        with self.lock:
            return Run.from_dict(self.doc)

    # ------------------------------------------------------------------ the file
    def _data(self) -> bytes:
        data = encode(self.doc)  # not JSON (a set, an object): TypeError here, the file is untouched
        if validate.enabled():
            where = str(getattr(self, "path", "new results file"))
            validate.require(json.loads(data), where)
            try:  # and read back as every reader reads it: nesting, numbers, NaN where the model does not look
                limits.loads(data, where, "a results file this guestbench reads back")
            except UserError as e:
                raise validate.SchemaViolation(f"written, but refused when read back: {e}") from None
        return data

    def save(self) -> None:
        with self.lock:
            atomic_write_bytes(self.path, self._data(), what="results file")
            self._dirty = False

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Several changes, one rewrite at the end (a batch of fleet snapshots, a host written off)."""
        with self.lock:
            try:
                self._held += 1
                yield
            finally:
                self._held -= 1
            if not self._held and self._dirty:
                self.save()

    def _changed(self) -> None:
        if self._held:
            self._dirty = True
        else:
            self.save()

    # ------------------------------------------------------------------ the run
    def set_order(self, order: dict[str, Any]) -> None:
        """The order the run's cells take (plan.schedule.Order, and the block size when an item's cells are split)."""
        with self.lock:
            self.doc["order"] = order
            self._changed()

    def set_ab(self, sides: AbSides) -> None:
        """`guestbench ab`'s two sides and its noise threshold, beside the cells they ran."""
        with self.lock:
            self.doc["ab"] = sides.to_dict()
            self._changed()

    def put_density(self, density: Density) -> None:
        """A density item's record as it stands, replacing the one put for the same record before (kept as its
        levels end, so an interrupted run keeps them)."""
        with self.lock:
            before = self._density.get(id(density))
            out = density.to_dict()
            if "levels" in out:
                out["levels"] = _detached(out["levels"], density.levels)
            others = [d for d in self.doc.get("density") or [] if before is None or d is not before[1]]
            self.doc["density"] = [*others, out]
            self._density[id(density)] = (density, out)
            self._changed()

    def finish(self, status: str) -> None:
        """The run ended: its status and end time; cells still pending or running are interrupted with it."""
        with self.lock:
            self.doc["status"] = status
            self.doc["finished_utc"] = utc_now()
            for out in self.doc["cells"]:
                if out.get("status") in UNFINISHED:
                    out["status"] = "interrupted" if status == "interrupted" else out["status"]
                    if (cell := self._typed.get(id(out))) is not None:
                        cell.status = out["status"]
            self.save()

    # ------------------------------------------------------------------ backends
    def set_verdict(self, name: str, verdict: BackendVerdict) -> None:
        """Whether backend `name` (a verdict name: `tcg`, `uml@sid`) can be used in this run, and why."""
        with self.lock:
            self.doc["backends"][name] = verdict.to_dict()
            self._changed()

    def verdict(self, name: str) -> BackendVerdict | None:
        """This run's verdict on backend `name`, None before there is one."""
        with self.lock:
            found = self.doc["backends"].get(name)
            return None if found is None else BackendVerdict.from_dict(found, f"backends.{name}")

    def set_backend(self, name: str, info: dict[str, Any]) -> None:
        """A verdict as its JSON (documents built by hand, in tests); the run records BackendVerdicts."""
        with self.lock:
            self.doc["backends"][name] = info
            self._changed()

    # ------------------------------------------------------------------ cells
    def add(self, cell: Cell) -> Cell:
        """A planned cell joins the document, with every field a cell always has (ALWAYS). The Cell returned is
        the one given, from now on this cell's typed record: changed only here, in step with its JSON."""
        with self.lock:
            cell.source_keys += tuple(name for name in ALWAYS if name not in cell.source_keys)
            out = _cell_json(cell)
            self.doc["cells"].append(out)
            self._keep(cell, out)
            self._changed()
        return cell

    def add_cell(self, cell: dict[str, Any] | Cell) -> dict[str, Any]:
        """A cell as its JSON (documents built by hand, in tests): stored with its defaults, the stored dict
        returned to be edited in place before the next save. The run adds typed cells (`add`)."""
        if isinstance(cell, Cell):
            cell = cell.to_dict()
        defaults: dict[str, Any] = {"samples": [], "warmups": [], "failures": [], "verification": None, "cold_s": None,
                                    "status": "pending", "skip_reason": None}
        for name in ALWAYS:
            cell.setdefault(name, defaults[name])
        with self.lock:
            self.doc["cells"].append(cell)
            self._changed()
        return cell

    def set_status(self, cell: Cell, status: str) -> None:
        """Where the cell stands: running, done."""
        self.update_cell(cell, status=status)

    def end_unrun(self, cell: Cell, status: str, reason: str) -> None:
        """The cell ended without (the rest of) its iterations, skipped or unavailable, and why."""
        self.update_cell(cell, status=status, skip_reason=reason)

    def update_cell(self, cell: Cell, **fields: Any) -> None:
        """Facts about a cell learned while it runs (its software, set-up record, verification, disk, precision),
        each read as a file's value is; a field it did not have goes after the rest."""
        if refused := sorted(set(fields) & set(LISTS)):
            raise TypeError(f"{', '.join(refused)}: recorded by add_sample and add_failure, not update_cell")
        with self.lock:
            out = self._json[id(cell)]
            for name, value in fields.items():
                _put(cell, out, name, value)
            self._changed()

    def add_sample(self, cell: Cell, kind: str, sample: Sample) -> None:
        """A timed iteration: a measured repetition (`kind` "rep"), or a warm-up."""
        name = "samples" if kind == "rep" else "warmups"
        with self.lock:  # the JSON first: what is saved never lags the typed record
            self._json[id(cell)].setdefault(name, []).append(sample.to_dict())
            getattr(cell, name).append(sample)
            self._changed()

    def add_failure(self, cell: Cell, failure: Failure) -> None:
        """An iteration that produced no sample, and why."""
        with self.lock:  # a remote cell may lack the list (only backend and label are required of it)
            self._json[id(cell)].setdefault("failures", []).append(failure.to_dict())
            cell.failures.append(failure)
            self._changed()

    def cells_where(self, key: str, value: str) -> list[Cell]:
        """The cells whose `key` is `value` (the share of a run that ran elsewhere: host NAME, placement nested),
        typed, in the document's order."""
        with self.lock:
            found = []
            for out in self.doc["cells"]:
                if out.get(key) == value:
                    if id(out) not in self._typed:  # a cell written as JSON (by hand, in tests): typed once
                        self._keep(Cell.from_dict(out), out)
                    found.append(self._typed[id(out)])
            return found

    def _keep(self, cell: Cell, out: dict[str, Any]) -> None:
        self._json[id(cell)] = out
        self._typed[id(out)] = cell

    def _forget(self, out: dict[str, Any]) -> None:
        cell = self._typed.pop(id(out), None)
        if cell is not None:
            del self._json[id(cell)]

    # ------------------------------------------------------------------ runs elsewhere: placements, fleet hosts
    def set_placement(self, name: str, placement: Placement) -> None:
        """The record of a placement other than the host (nested: the level-1 guest), before its cells come."""
        with self.lock:
            self.doc.setdefault("placements", {})[name] = placement.to_dict()
            self._changed()

    def placement(self, name: str) -> Placement | None:
        with self.lock:
            found = (self.doc.get("placements") or {}).get(name)
            return None if found is None else Placement.from_dict(found, f"placements.{name}")

    def update_placement(self, name: str, **fields: Any) -> None:
        """What became of a placement's run (its status, its level-1 guest's seconds and error)."""
        with self.lock:
            _update(self.doc["placements"][name], Placement, fields)
            self._changed()

    def add_hosts(self, hosts: dict[str, FleetHost]) -> None:
        """The hosts of a fleet run, as it starts: those that run a share, and those left out (saying why)."""
        with self.lock:
            self.doc.setdefault("hosts", {}).update({name: h.to_dict() for name, h in hosts.items()})
            self._changed()

    def host(self, name: str) -> FleetHost | None:
        with self.lock:
            found = (self.doc.get("hosts") or {}).get(name)
            return None if found is None else FleetHost.from_dict(found, f"hosts.{name}")

    def set_host_state(self, name: str, **fields: Any) -> None:
        """What became of a fleet host's run (its status, why it ended early)."""
        with self.lock:
            _update(self.doc["hosts"][name], FleetHost, fields)
            self._changed()

    def remote(self, key: str, value: str) -> FleetHost | Placement | None:
        """The record of the run whose cells carry `key` `value` (host NAME, placement nested), if there is one."""
        return self.host(value) if key == "host" else self.placement(value)

    def merge_remote(self, key: str, value: str, run: Run, fields: tuple[str, ...]) -> None:
        """A run that ran elsewhere sent its newest document, `run` (already read through the model): its cells,
        each carrying `key` `value`, replace those it sent before (they become this document's: `run` is not to
        be used after); of its own record, the `fields` its document had go into its record here
        (REMOTE_SECTIONS), when there is one."""
        section, _ = REMOTE_SECTIONS[key]
        with self.lock:
            record = (self.doc.get(section) or {}).get(value)
            if record is not None:
                record.update({name: plain(getattr(run, name)) for name in fields if name in run.source_keys})
            kept = []
            for out in self.doc["cells"]:
                if out.get(key) != value:
                    kept.append(out)
                else:
                    self._forget(out)
            merged = []
            for cell in run.cells:
                setattr(cell, key, value)
                if key not in cell.source_keys:
                    cell.source_keys += (key,)
                merged.append(_cell_json(cell))
                self._keep(cell, merged[-1])
            self.doc["cells"] = kept + merged
            self._changed()


ResultsFile = ResultsWriter
"""The name its readers and the tests have long used."""
