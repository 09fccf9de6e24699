"""A test cluster's parts, as the fleet tests start them: what a Dask scheduler says about itself."""

from __future__ import annotations

import json
from pathlib import Path


def scheduler_address(path: Path) -> str | None:
    """The address in a Dask scheduler's --scheduler-file, or None while it has not written it (whole) yet: a test
    waits for it (helpers.waits) before it starts workers or a client."""
    try:
        return str(json.loads(path.read_text())["address"])
    except (OSError, ValueError, KeyError):
        return None
