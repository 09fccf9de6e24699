"""What kind of day the suite ran on: at its end, `make test` prints its own wall time and the median tcg
start-up of the launches its tests recorded, so a slow day shows in every log (issue 32: the suite's budget is
25 minutes or 70 tcg start-up medians of that day)."""

from __future__ import annotations

import json
import os
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import pytest

_STARTED = time.monotonic()
_MAX_BYTES = 64 << 20


def results_files(roots: list[Path]) -> Iterator[dict[str, Any]]:
    """Every results document written under `roots` (pytest's temp dirs and the session's own)."""
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder, name)
                if not name.endswith(".json") or path.is_symlink() or path.stat().st_size > _MAX_BYTES:
                    continue
                try:
                    doc = json.loads(path.read_text())
                except (OSError, UnicodeDecodeError, ValueError):
                    continue
                if isinstance(doc, dict) and "schema_version" in doc and isinstance(doc.get("cells"), list):
                    yield doc


def tcg_startups(docs: Iterator[dict[str, Any]], since: float) -> list[float]:
    """Start-up samples on tcg (on the host, not nested) from runs that began after `since` (epoch seconds)."""
    seconds: list[float] = []
    for doc in docs:
        try:
            when = datetime.fromisoformat(str(doc.get("started_utc")).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        if when < since:
            continue
        for cell in doc["cells"]:
            if (isinstance(cell, dict) and cell.get("measurement") == "startup" and cell.get("backend") == "tcg"
                    and cell.get("placement", "host") == "host"):
                seconds += [float(s["seconds"]) for s in cell.get("samples") or [] if isinstance(s, dict)
                            and isinstance(s.get("seconds"), (int, float))]
    return seconds


class SuiteDay:
    """Collects the figures before the session's temp root is removed; prints them in the terminal summary."""

    def __init__(self) -> None:
        self.epoch_started = time.time()
        self.samples: list[float] = []

    def collect(self, session: pytest.Session, own_root: Path) -> None:
        roots = [own_root]
        factory = getattr(session.config, "_tmp_path_factory", None)
        if factory is not None:
            roots.append(factory.getbasetemp())
        self.samples = tcg_startups(results_files(roots), self.epoch_started - 1)

    def line(self) -> str:
        wall = time.monotonic() - _STARTED
        text = f"suite wall time {wall / 60:.0f} min {wall % 60:02.0f} s"
        if not self.samples:
            return text + "; no tcg start-up was recorded in this run (no launch test ran)"
        med = statistics.median(self.samples)
        return (f"{text}; tcg start-up this run: median {med:.1f} s (n={len(self.samples)}, "
                f"{min(self.samples):.1f}–{max(self.samples):.1f} s), so the suite took {wall / med:.0f} tcg "
                "start-ups (budget: 25 min or 70)")
