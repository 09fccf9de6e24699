"""Placement nested's results without a level-1 guest: the host run's results file the guest's are merged into,
and a results document as the guest sends it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guestbench.results import SCHEMA, SCHEMA_VERSION, ResultsFile


def host_results(tmp_path: Path) -> ResultsFile:
    """The host run's results file (r.json in `tmp_path`), one host cell of uml start-ups in it."""
    rf = ResultsFile.create(tmp_path / "r.json", scenario={}, host={"cpu_model": "host cpu"}, command=[],
                            guestbench={})
    rf.add_cell({"backend": "uml", "placement": "host", "measurement": "startup", "label": "startup",
                 "samples": [{"rep": 1, "seconds": 6.0}]})
    return rf


def guest_doc(samples: int, status: str = "running") -> dict[str, Any]:
    """The level-1 guest's results as it sends them: one uml start-up cell with `samples` samples so far."""
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "status": status, "host": {"cpu_model": "QEMU TCG CPU"}, "backends": {"uml": {"usable": True}},
            "cells": [{"backend": "uml", "placement": "host", "measurement": "startup", "label": "startup",
                       "cold_s": 130.0, "samples": [{"rep": i + 1, "seconds": 107.0} for i in range(samples)],
                       "warmups": [{"rep": 1, "seconds": 110.0}], "failures": [], "status": status}]}
