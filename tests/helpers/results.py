"""Hand-written results documents, read as guestbench reads a results file: through the typed model
(guestbench.results.model), which every reader takes."""

from __future__ import annotations

from typing import Any

from guestbench.results import SCHEMA, SCHEMA_VERSION, Run


def run_of(doc: dict[str, Any]) -> Run:
    """A run from the keys a test cares about; the header every file has is filled in."""
    return Run.from_dict({"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "cells": [], **doc})
