"""Caps on what a scenario may ask for: none that a real run meets (2,000 cells of a few launches on five backends
take days), each checked before anything is expanded or planned, so that a few hostile bytes cost neither memory
nor hours (docs/safety.md). A refusal is a UserError: exit 2, one line saying the cap."""

from __future__ import annotations

import math
from typing import Any

from guestbench.util.errors import UserError, clip

MAX_REPETITIONS = 100_000  # repetitions and max_repetitions
MAX_WARMUP = 1_000
# items and their matrix combinations; at this many the file a nested or fleet run hands on stays within
# guestbench.util.bounded's caps (about 15 values and 250 bytes a cell)
MAX_CELLS = 1_000
MAX_SAMPLES = 1_000_000  # a cell's launches (cold, warm-ups, repetitions) summed over the cells, per backend
MAX_NAME = 100  # characters: the name is part of the results file's name
MAX_TEXT = 10_000  # characters of a description or any other text value
MAX_LABEL = 64  # characters of an item's label
MAX_CELL_LABEL = 200  # characters: a cell's label (with its backend) names the cell's directory in the run's
MAX_COUNT = 4096  # vCPUs
MAX_MIB = 2**22  # memory in MiB (4 TiB)
INT64_MAX = 2**63 - 1  # the most any integer key may be (a seed): what every JSON reader keeps exactly


def table() -> list[tuple[str, str]]:
    """Every cap, as the scenario reference lists them."""
    from guestbench.util import bounded
    from guestbench.measurements.base import C_INT_MAX

    return [
        ("the file", f"a regular file (not a FIFO, device or directory) of at most {bounded.MAX_FILE_BYTES // 2**20} "
                     "MiB, in UTF-8"),
        ("YAML", f"at most {bounded.MAX_ALIASES} aliases (`*name`), {bounded.MAX_NODES} values (an alias counted as "
                 f"the values it repeats), {bounded.MAX_DEPTH} levels of nesting; a number of at most "
                 f"{bounded.MAX_NUMBER_CHARS} characters"),
        ("`name`", f"at most {MAX_NAME} characters"),
        ("`description`, text values", f"at most {MAX_TEXT} characters; line breaks and tabs, no other control "
                                       "characters (nor in `name`)"),
        ("`label`", f"at most {MAX_LABEL} characters; a cell's label (with its matrix values) at most "
                    f"{MAX_CELL_LABEL}"),
        ("`repetitions`, `max_repetitions`", f"at most {MAX_REPETITIONS}"),
        ("`warmup`", f"at most {MAX_WARMUP}"),
        ("cells", f"at most {MAX_CELLS} (items and their matrix combinations), counted before any is expanded"),
        ("launches", f"cells × (cold launch + warm-ups + repetitions) at most {MAX_SAMPLES} per backend"),
        ("`smp`, `vcpus`", f"at most {MAX_COUNT}"),
        ("`memsize`, `memory`", f"at most {MAX_MIB} MiB"),
        ("`seed`", f"at most {INT64_MAX}"),
        ("integer parameters", f"at most {C_INT_MAX} where the parameter names no lower cap"),
    ]


def combinations(source: str, key: str, matrix: dict[Any, Any]) -> None:
    """A matrix's cells, counted from its lists' lengths before any value is read."""
    cells = math.prod(len(v) if isinstance(v, list) else 1 for v in matrix.values())
    if cells > MAX_CELLS:
        raise UserError(f"{clip(cells)} combinations; allowed: at most {MAX_CELLS} cells in all", source=source,
                        key=key)


def cells(source: str, key: str, n: int) -> None:
    if n > MAX_CELLS:
        raise UserError(f"makes more than {MAX_CELLS} cells; allowed: at most {MAX_CELLS} (items and their matrix "
                        "combinations)", source=source, key=key)


def samples(source: str, key: str, cells: int, per_cell: int) -> None:
    if cells * per_cell > MAX_SAMPLES:
        raise UserError(f"{cells} cells of {per_cell} launches each make more than {MAX_SAMPLES} per backend; "
                        "allowed: fewer repetitions, warm-ups or cells", source=source, key=key)


def cell_label(source: str, key: str, label: str) -> None:
    if len(label) > MAX_CELL_LABEL:
        raise UserError(f"the cell label {clip(label)} is too long; allowed: at most {MAX_CELL_LABEL} characters "
                        "(label and matrix values)", source=source, key=key)
