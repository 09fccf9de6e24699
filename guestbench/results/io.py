"""Results files on disk: atomic writes (the run's document is written by guestbench.results.writer) and the one
parse every reader of a results file shares (`parse_document`, through the typed model).

The layout of a results file, field by field, and the history of its versions are in docs/results-format.md;
the JSON Schema of the version written here is schema-v3.json next to this module. Summaries are not stored:
they are recomputed from the raw samples by ``stats``.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from guestbench.host import safe_write
from guestbench.util.errors import UserError
from guestbench.results import limits
from guestbench.results.header import HeaderError
from guestbench.results.model import ModelError, Run


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def encode(doc: dict[str, Any]) -> bytes:
    """The JSON of a document guestbench writes: never a NaN or Infinity (ValueError here, the file untouched), which
    every reader of results would refuse (results.limits)."""
    return (json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n").encode()


def atomic_write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write to a temp file in the same directory, fsync, rename: readers never see half a file."""
    atomic_write_bytes(path, encode(doc))


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
    return parse_document(read_json(path, "results file", "a guestbench results file", data), str(path))


def parse_document(doc: Any, source: str, nor: str | None = None) -> Run:
    """A results document as the typed model, parsed as every reader parses it (load_results, the store): its
    header first (guestbench.results.header), then every field; a problem is one UserError naming `source` (and the
    field). `nor`: what else the file could have been, said when it is no results document at all."""
    try:
        return Run.from_dict(doc)
    except HeaderError as e:  # the whole file is refused, as a reader says it
        raise UserError(e.plain + (f" nor {nor}" if nor and e.whole else ""), source=source) from None
    except ModelError as e:
        raise UserError(e.message, source=source, key=e.key) from None
