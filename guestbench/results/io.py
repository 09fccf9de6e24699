"""Results files on disk: every raw sample, written atomically after each one, and read back through the model.

The layout of a results file, field by field, and the history of its versions are in docs/results-format.md;
the JSON Schema of the version written here is schema-v3.json next to this module. Summaries are not stored:
they are recomputed from the raw samples by ``stats``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from guestbench.host import safe_write
from guestbench.util.errors import UserError
import guestbench.results.validate as validate
from guestbench.results import limits
from guestbench.results.model import READABLE_VERSIONS, SCHEMA, SCHEMA_VERSION, Cell, ModelError, Run


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _encode(doc: dict[str, Any]) -> bytes:
    """The JSON of a document guestbench writes: never a NaN or Infinity (ValueError here, the file untouched), which
    every reader of results would refuse (results.limits)."""
    return (json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n").encode()


def atomic_write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write to a temp file in the same directory, fsync, rename: readers never see half a file."""
    atomic_write_bytes(path, _encode(doc))


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None, what: str = "output") -> None:
    """`atomic_write_json` for any file; `mode` (e.g. 0o644 for a report to share) instead of 0600. Refuses (one
    line, exit 2) to replace a device, FIFO, symbolic link or another user's file: guestbench.host.safe_write."""
    safe_write.replace_file(path, data, 0o600 if mode is None else mode, what)


SLUG_CHARS = 80  # of a scenario's name in its results file's name: a file name has at most 255 bytes


def results_path(directory: Path, scenario_name: str, when: float | None = None, content: bytes = b"") -> Path:
    """`results/<UTC timestamp>-<scenario>.json` (`-2`, `-3`, ... when taken), reserved holding `content` in one
    step (safe_write.reserve), so that runs started in the same second never share one and no reader sees it
    empty; the run then replaces its content, never another's."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when if when is not None else time.time()))
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", scenario_name).strip("-")[:SLUG_CHARS] or "scenario"
    return safe_write.reserve(directory, f"{stamp}-{slug}", ".json", "results file", content=content)


class ResultsFile:
    """The results document of one run, rewritten atomically whenever something is added.

    `doc` is a plain dict that the run edits in place (under `lock`) and then saves; with
    GUESTBENCH_VALIDATE_RESULTS=1 (the test suite sets it) every save is checked against schema-v3.json and the
    model first, and read back through results.limits as every reader reads it, so a writer that drifts from the
    documented format fails where it writes. Its depth needs no check when saved: guestbench's own parts nest
    about ten levels, and a document from elsewhere is merged only when the result nests at most
    results.limits.MAX_DEPTH (guestbench.execute.remote), so json's recursive encoder stays far below Python's
    recursion limit.
    """

    def __init__(self, path: Path | None, doc: dict[str, Any], directory: Path | None = None) -> None:
        """Saved at once to `path`; or, given `directory` instead, to a new results file reserved there for it."""
        self.doc = doc
        self.lock = threading.RLock()  # concurrent appliances record into one document
        if path is None:
            assert directory is not None
            self.path = results_path(directory, str(doc["scenario"].get("name") or ""), content=self._data())
        else:
            self.path = path
            self.save()

    @classmethod
    def create(cls, where: Path, *, scenario: dict[str, Any], host: dict[str, Any],
               command: list[str], guestbench: dict[str, Any], new: bool = False) -> "ResultsFile":
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

    def _data(self) -> bytes:
        data = _encode(self.doc)  # not JSON (a set, an object): TypeError here, the file is untouched
        if validate.enabled():
            where = str(getattr(self, "path", "new results file"))
            validate.check(json.loads(data), where)
            try:  # and read back as every reader reads it: nesting, numbers, NaN where the model does not look
                limits.loads(data, where, "a results file this guestbench reads back")
            except UserError as e:
                raise validate.SchemaViolation(f"written, but refused when read back: {e}") from None
        return data

    def save(self) -> None:
        with self.lock:
            atomic_write_bytes(self.path, self._data(), what="results file")

    def set_backend(self, name: str, info: dict[str, Any]) -> None:
        self.doc["backends"][name] = info
        self.save()

    def add_cell(self, cell: dict[str, Any] | Cell) -> dict[str, Any]:
        """Store a cell (a dict, or a model Cell turned into one) with its defaults; returns the stored dict,
        which the run then edits in place."""
        if isinstance(cell, Cell):
            cell = cell.to_dict()
        cell.setdefault("samples", [])
        cell.setdefault("warmups", [])
        cell.setdefault("failures", [])
        cell.setdefault("verification", None)
        cell.setdefault("cold_s", None)
        cell.setdefault("status", "pending")
        cell.setdefault("skip_reason", None)
        self.doc["cells"].append(cell)
        self.save()
        return cell

    def finish(self, status: str) -> None:
        self.doc["status"] = status
        self.doc["finished_utc"] = utc_now()
        for cell in self.doc["cells"]:
            if cell["status"] in ("pending", "running"):
                cell["status"] = "interrupted" if status == "interrupted" else cell["status"]
        self.save()


def read_json(path: str | Path, what: str, expected: str, data: bytes | None = None,
              nonfinite: list[str] | None = None) -> Any:
    """Read a JSON file a user named, bounded as untrusted input (results.limits: a regular file under a size cap,
    numbers of bounded length); any problem is a one-line UserError saying what was expected. `data`: the file's
    bytes, already read (by guestbench.util.walk, from a directory); `nonfinite`: as results.limits.loads."""
    return limits.loads(limits.read_capped(path, what) if data is None else data, str(path), expected, nonfinite)


def load_results(path: str | Path, data: bytes | None = None) -> Run:
    """Read a results file of any readable version as the typed model of a current-version run, refusing what no run
    can have written (negative or non-finite seconds, a sample without rep, an unknown status, ...); any
    problem is a one-line UserError naming the file and the field. `data`: its bytes, already read."""
    p = Path(path)
    doc = read_json(p, "results file", "a guestbench results file", data)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UserError(f"not a guestbench results file (key 'schema' must be {SCHEMA!r})", source=str(p))
    version = doc.get("schema_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise UserError(f"schema_version {version!r} is not supported; this guestbench reads version "
                        f"{', '.join(map(str, READABLE_VERSIONS[:-1]))} or {READABLE_VERSIONS[-1]}", source=str(p))
    if not isinstance(doc.get("cells"), list):
        raise UserError("key 'cells' is missing or not a list", source=str(p))
    try:
        return Run.from_dict(doc)
    except ModelError as e:
        raise UserError(e.message, source=str(p), key=e.key) from None
