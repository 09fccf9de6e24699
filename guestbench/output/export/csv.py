"""CSV: the rows a command prints with --csv, under the header its help names (output/export/columns.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from guestbench.util.errors import UserError

if TYPE_CHECKING:
    from guestbench.output.formats import Printable


def emit(p: Printable) -> None:
    if p.csv is None:
        raise UserError(p.no_csv, source="command line", key="--csv")
    sys.stdout.write(p.csv())
