"""What kind of day the suite ran on: at its end, `make test` prints its own wall time and the median tcg
start-up of the launches its tests recorded, so a slow day shows in every log (issue 32: the suite's budget is
25 minutes or 70 tcg start-up medians of that day; issue 45: 60, for margin)."""

from __future__ import annotations

import json
import os
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from guestbench.util.errors import UserError
from guestbench.results import limits

_STARTED = time.monotonic()


def suite_started() -> float:
    """The suite's start (monotonic): make test's, which runs pytest twice (GUESTBENCH_TEST_SUITE_STARTED, epoch
    seconds), else this process's."""
    try:
        began = float(os.environ.get("GUESTBENCH_TEST_SUITE_STARTED", ""))
    except ValueError:
        return _STARTED
    ago = time.time() - began
    return time.monotonic() - ago if 0 <= ago < 86400 else _STARTED
_MAX_BYTES = 64 << 20


def results_files(roots: list[Path]) -> Iterator[dict[str, Any]]:
    """Every results document written under `roots` (pytest's temp dirs and the session's own). Tests leave
    hostile files there on purpose (deeply nested, huge, FIFOs): read bounded, anything odd skipped."""
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                if not name.endswith(".json"):
                    continue
                try:
                    doc = limits.loads(limits.read_capped(Path(folder, name), "a results file", _MAX_BYTES),
                                       name, "a results file")
                except Exception:  # noqa: BLE001 - a test's deliberately broken file says nothing of the day
                    continue
                if isinstance(doc, dict) and "schema_version" in doc and isinstance(doc.get("cells"), list):
                    yield doc


# the measurements that launch the standard appliance (E1's four): a cell's first launch is a start-up too
STANDARD = ("startup", "upload", "upload-no-write", "write-no-upload")


def tcg_startups(docs: Iterator[dict[str, Any]], since: float) -> list[float]:
    """tcg start-ups (on the host, not nested) from runs that began after `since` (epoch seconds): start-up
    samples, and the first launch (cold_s) of every cell of the standard appliance that launched for real."""
    seconds: list[float] = []
    for doc in docs:
        try:
            when = datetime.fromisoformat(str(doc.get("started_utc")).replace("Z", "+00:00")).timestamp()
            if when < since:
                continue
            for cell in doc["cells"]:
                if not (isinstance(cell, dict) and cell.get("measurement") in STANDARD
                        and cell.get("backend") == "tcg" and cell.get("placement", "host") == "host"):
                    continue
                real = [s for s in cell.get("samples") or [] if launched(s)]
                if cell["measurement"] == "startup":
                    seconds += [float(s["seconds"]) for s in real]
                if real and cell.get("cold_s") is not None and float(cell["cold_s"]) > 0:
                    seconds.append(float(cell["cold_s"]))
        except (TypeError, ValueError, KeyError, AttributeError):
            continue
    return seconds


def launched(sample: Any) -> bool:
    """A sample a real launch took: tests also write results files by hand (hostile, synthetic, edited ones), whose
    samples have no CPU accounting of a hypervisor that ran (one that did burns a good part of what it took)."""
    try:
        took = float(sample["seconds"])
        programs = sample["resources"]["cpu_by_program"]
        qemu = sum(float(v) for k, v in programs.items() if str(k).startswith("qemu-system"))
    except (TypeError, KeyError, ValueError, AttributeError):
        return False
    return took > 0 and qemu > 0.1 * took  # beside another worker it gets less than a core


def carried(path: Path, samples: list[float]) -> list[float]:
    """make test runs pytest twice on one root: the first run leaves its samples there for the second's figure."""
    try:
        prior = json.loads(limits.read_capped(path, "the suite's samples", 1 << 20)) if path.is_file() else []
        prior = [float(x) for x in prior]
    except (OSError, ValueError, TypeError, UserError):
        prior = []
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(prior + samples))
    os.replace(tmp, path)
    return prior + samples


class SuiteDay:
    """Collects the figures before the session's temp root is removed; prints them in the terminal summary."""

    def __init__(self) -> None:
        self.epoch_started = time.time()
        self.samples: list[float] = []
        self.error: str | None = None

    def collect(self, session: pytest.Session, own_root: Path) -> None:
        roots = [own_root]
        factory = getattr(session.config, "_tmp_path_factory", None)
        base = getattr(factory, "_basetemp", None)  # only if the session made one: none is made at its end
        if base is not None:
            roots.append(Path(base))
        self.samples = carried(own_root / "tcg-startups.json", tcg_startups(results_files(roots),
                                                                             self.epoch_started - 1))

    def line(self) -> str:
        wall = time.monotonic() - suite_started()
        minutes, seconds = divmod(round(wall), 60)  # not wall / 60 rounded: 154 s is 2 min 34 s
        text = f"suite wall time {minutes} min {seconds:02d} s"
        if self.error:
            return f"{text}; the day's tcg start-up could not be read ({self.error})"
        if not self.samples:
            return text + "; no tcg start-up sample was recorded in a results file in this run"
        med = statistics.median(self.samples)
        return (f"{text}; tcg start-up this run (samples and cells' first launches, beside the other workers: "
                "slower than on a quiet machine): "
                f"median {med:.1f} s (n={len(self.samples)}, "
                f"{min(self.samples):.1f}–{max(self.samples):.1f} s), so the suite took {wall / med:.0f} tcg "
                "start-ups (budget: 25 min or 60)")
