"""JSON: the summary a command prints with --json (one document on stdout; no NaN, no infinity)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guestbench.output.formats import Printable


def emit(p: Printable) -> None:
    sys.stdout.write(json.dumps(p.summary(), indent=2, allow_nan=False) + "\n")
