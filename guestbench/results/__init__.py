"""Versioned results documents: every raw sample, written atomically after each one, read back through a typed
model that refuses what no run can have written.

- ``io``: atomic writers, ``ResultsFile`` (the run's document, rewritten after every change), ``load_results``;
- ``limits``: reading a file nobody vouches for (a regular file under a size cap, numbers of bounded length);
- ``model``: dataclasses for the run, its cells, samples, failures, backend verdicts and placements;
- ``validate`` and ``schema-v3.json``: the published JSON Schema, checked on every save in the tests.
The format, field by field, and its version history: docs/results-format.md.
"""

from __future__ import annotations

from guestbench.results.io import (ResultsFile, atomic_write_bytes, atomic_write_json, load_results, read_json,
                                   results_path, utc_now)
from guestbench.results.model import (CELL_STATUSES, ITERATION_KINDS, PLACEMENT_STATUSES, READABLE_VERSIONS,
                                      RUN_STATUSES, SCHEMA, SCHEMA_VERSION, BackendVerdict, Cell, Failure,
                                      FleetHost, ModelError, Placement, Run, Sample)
from guestbench.results.validate import SchemaViolation

__all__ = ["SCHEMA", "SCHEMA_VERSION", "READABLE_VERSIONS", "CELL_STATUSES", "RUN_STATUSES", "PLACEMENT_STATUSES",
           "ITERATION_KINDS", "ResultsFile", "results_path", "utc_now", "atomic_write_json", "atomic_write_bytes",
           "read_json", "load_results", "Run", "Cell", "Sample", "Failure", "BackendVerdict", "Placement",
           "FleetHost", "ModelError", "SchemaViolation"]
