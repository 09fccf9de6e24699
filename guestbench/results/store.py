"""A store of runs: the results files a directory holds (or the files named), with pytest-benchmark's saved runs
(`.benchmarks/`) read through the same import as `guestbench import`, each read through the model. What
`guestbench history` reads; every file is untrusted input, so anything that is not a run is one line and exit 2.
"""

from __future__ import annotations

import os
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from guestbench.results import limits
from guestbench.results import pytest_benchmark as pbj
from guestbench.results.io import parse_document, read_json
from guestbench.results.model import SCHEMA, Run
from guestbench.util import walk
from guestbench.util.errors import UserError

MAX_FILES = 10_000
"""Files read at most from the paths given: a history is a few hundred runs; a directory tree past this is not one."""

MAX_DEPTH = 4
"""Directory levels walked below a path given (pytest-benchmark keeps its runs one level down, per machine)."""

MAX_ENTRIES = 100_000
"""Directory entries looked at, at most, below the paths given."""

MAX_TOTAL_BYTES = 32 * 2**20
"""Bytes read at most over all files, counted as they are read: every run is kept while the history is built, at
up to ~18 times its JSON's size in memory (a file of 200,000 one-figure samples: 6.5 MB read, 115 MiB more RSS;
real results files ~4 times), so 32 MiB stays near 600 MiB on top of the interpreter's ~100, under 1 GiB. That
is 10,000 runs of up to 3 KB, or 2,700 of the 11.5 KB real runs in tests/data/history."""


def budget(depth: int = MAX_DEPTH) -> walk.Budget:
    """What reading a store may cost in all; the dry run's estimates read its results directory with it too."""
    return walk.Budget(files=MAX_FILES, bytes=MAX_TOTAL_BYTES, entries=MAX_ENTRIES, depth=depth)


@dataclass(frozen=True)
class Stored:
    """One run of the store and the file it came from."""

    path: str
    run: Run
    imported: bool  # from a pytest-benchmark file


def read(path: Path | str, data: bytes | None = None) -> Stored:
    """One file as a run: a guestbench results file, or a pytest-benchmark file with raw samples. `data`: its
    bytes, already read (from a directory, by the walk)."""
    nonfinite: list[str] = []  # NaN, Infinity: text in a pytest-benchmark file (its params), refused in guestbench's
    doc = read_json(path, "results file", "a guestbench results file or a pytest-benchmark JSON file", data, nonfinite)
    imported = isinstance(doc, dict) and doc.get("schema") != SCHEMA and isinstance(doc.get("benchmarks"), list)
    if nonfinite and not imported:
        raise limits.not_finite(nonfinite[0], str(path))
    if imported:
        doc, _ = pbj.import_(doc, str(path))
    return Stored(str(path), parse_document(doc, str(path), nor="a pytest-benchmark file (key 'benchmarks')"),
                  imported)


def load(paths: list[str]) -> list[Stored]:
    """Every run under `paths` (a directory named is walked by guestbench.util.walk: nothing below it is followed
    through a link, a name swapped while it is read is refused; a file is read as named), within one budget of
    files and bytes; none at all is refused, as a history of nothing."""
    found: list[Stored] = []
    spent = budget()
    for given in paths:
        if os.path.isdir(given):
            with closing(walk.files(given, ".json", spent)) as listed:
                found += sorted((read(f.path, f.read("results file", limits.MAX_BYTES)) for f in listed),
                                key=lambda s: s.path)  # the order of the names, as a path sorts
        elif os.path.lexists(given):
            spent.take_files(1, given)
            data = limits.read_capped(given, "results file")
            spent.take_bytes(len(data), given)
            found.append(read(given, data))
        else:
            raise UserError("no such file or directory; expected results files or a directory of them", source=given)
    if not found:
        raise UserError("no results files (*.json) found; give a results directory or files",
                        source=" ".join(paths) or "command line")
    return found
