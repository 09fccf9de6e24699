"""Versioned results documents: every raw sample, written atomically after each one, read back through a typed
model that refuses what no run can have written.

- ``writer``: ``ResultsWriter`` (long known as ``ResultsFile``), the one way a run's document changes: typed records
  in, the file rewritten atomically after every change;
- ``io``: atomic writers, ``parse_document`` (the one parse every reader shares: ``load_results``, the store);
- ``header``: what makes a JSON value a results document this guestbench reads;
- ``limits``: reading a file nobody vouches for (a regular file under a size cap, numbers of bounded length);
- ``model``: dataclasses for the run, its cells, samples, failures, backend verdicts and placements;
- ``validate`` and ``schema-v3.json``: the published JSON Schema, checked on every save in the tests.
The format, field by field, and its version history: docs/results-format.md.
"""

from __future__ import annotations

from guestbench.results.io import (atomic_write_bytes, atomic_write_json, load_results, parse_document, read_json,
                                   results_path, utc_now)
from guestbench.results.model import (CELL_STATUSES, ITERATION_KINDS, PLACEMENT_STATUSES, READABLE_VERSIONS,
                                      RUN_STATUSES, SCHEMA, SCHEMA_VERSION, AbSides, BackendVerdict, Cell, Density,
                                      DensityLevel, Failure, FleetHost, ModelError, Placement, Precision, Run, Sample,
                                      Spread)
from guestbench.results.validate import SchemaViolation
from guestbench.results.writer import ResultsFile, ResultsWriter

__all__ = ["SCHEMA", "SCHEMA_VERSION", "READABLE_VERSIONS", "CELL_STATUSES", "RUN_STATUSES", "PLACEMENT_STATUSES",
           "ITERATION_KINDS", "ResultsWriter", "ResultsFile", "results_path", "utc_now", "atomic_write_json",
           "atomic_write_bytes", "read_json", "load_results", "parse_document", "Run", "Cell", "Sample", "Failure",
           "BackendVerdict", "Placement", "FleetHost", "Precision", "Density", "DensityLevel", "Spread", "AbSides",
           "ModelError", "SchemaViolation"]
