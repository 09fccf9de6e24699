"""A store of runs: the results files a directory holds (or the files named), with pytest-benchmark's saved runs
(`.benchmarks/`) read through the same import as `guestbench import`, each read through the model. What
`guestbench history` reads; every file is untrusted input, so anything that is not a run is one line and exit 2.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from guestbench.results import pytest_benchmark as pbj
from guestbench.results.io import read_json
from guestbench.results.model import SCHEMA, ModelError, Run
from guestbench.util.errors import UserError

MAX_FILES = 10_000
"""Files read at most from the paths given: a history is a few hundred runs; a directory tree past this is not one."""

MAX_DEPTH = 4
"""Directory levels walked below a path given (pytest-benchmark keeps its runs one level down, per machine)."""

MAX_ENTRIES = 100_000
"""Directory entries looked at, at most, below the paths given."""

MAX_TOTAL_BYTES = 2 * 2**30
"""Bytes read at most over all files: every run is kept while the history is built."""


@dataclass(frozen=True)
class Stored:
    """One run of the store and the file it came from."""

    path: str
    run: Run
    imported: bool  # from a pytest-benchmark file


def files(paths: list[str]) -> list[Path]:
    """The JSON files under `paths` (a directory named is walked, links below it not followed; a file is taken as
    named), in a stable order; a path that is neither is refused."""
    out: list[Path] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            out += _walk(p, given)
        elif p.exists() or p.is_symlink():
            out.append(p)
        else:
            raise UserError("no such file or directory; expected results files or a directory of them", source=given)
        if len(out) > MAX_FILES:
            raise UserError(f"more than {MAX_FILES:,} files; allowed: a results directory (name fewer files)",
                            source=given)
    return out


def _walk(top: Path, given: str) -> list[Path]:
    """Regular *.json files below `top`, MAX_DEPTH levels down, each directory read entry by entry so that a huge
    one costs no more than MAX_ENTRIES entries."""
    found, seen, todo = [], 0, [(top, 0)]
    while todo:
        directory, depth = todo.pop(0)
        listed = []
        with os.scandir(directory) as entries:
            for e in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    raise UserError(f"more than {MAX_ENTRIES:,} entries; allowed: a results directory", source=given)
                listed.append(e)
        for e in sorted(listed, key=lambda e: e.name):
            if e.is_dir(follow_symlinks=False) and depth < MAX_DEPTH:
                todo.append((Path(e.path), depth + 1))
            elif e.name.endswith(".json") and e.is_file(follow_symlinks=False):
                found.append(Path(e.path))
    return sorted(found)


def read(path: Path) -> Stored:
    """One file as a run: a guestbench results file, or a pytest-benchmark file with raw samples."""
    doc = read_json(path, "results file", "a guestbench results file or a pytest-benchmark JSON file")
    imported = isinstance(doc, dict) and doc.get("schema") != SCHEMA and isinstance(doc.get("benchmarks"), list)
    if imported:
        doc, _ = pbj.import_(doc, str(path))
    elif not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UserError(f"not a guestbench results file (key 'schema' must be {SCHEMA!r}) nor a pytest-benchmark "
                        "file (key 'benchmarks')", source=str(path))
    try:
        return Stored(str(path), Run.from_dict(doc), imported)
    except ModelError as e:
        raise UserError(e.message, source=str(path), key=e.key) from None


def load(paths: list[str]) -> list[Stored]:
    """Every run under `paths`; none at all is refused, as a history of nothing."""
    named = files(paths)
    total = sum(p.stat().st_size for p in named if p.is_file())
    if total > MAX_TOTAL_BYTES:
        raise UserError(f"{total / 2**30:.1f} GiB of results; allowed: at most {MAX_TOTAL_BYTES / 2**30:.0f} GiB "
                        "(name fewer files)", source=" ".join(paths))
    found = [read(p) for p in named]
    if not found:
        raise UserError("no results files (*.json) found; give a results directory or files",
                        source=" ".join(paths) or "command line")
    return found
