"""Checking written documents against the published JSON Schema (schema-v3.json) and the model.

Off unless GUESTBENCH_VALIDATE_RESULTS=1: the test suite sets it (tests/conftest.py), so every results file a
test or a `guestbench scenario` under test writes is checked where it is written. jsonschema is imported only
then, so runs outside the tests do not need it.
"""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from typing import Any

from guestbench.results.model import ModelError, Run

ENV = "GUESTBENCH_VALIDATE_RESULTS"
SCHEMA_FILE = "schema-v3.json"


class SchemaViolation(AssertionError):
    """A written results document that does not match the published format: a bug in its writer."""


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


@functools.cache
def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the version this guestbench writes, shipped as package data."""
    return json.loads(resources.files(__package__).joinpath(SCHEMA_FILE).read_text())


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def field_path(parts: Any) -> str:
    """jsonschema's path deque as the model spells it: cells[3].samples[1].seconds."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def problems(doc: Any) -> list[str]:
    """Every place where `doc` breaks the JSON Schema, as "field.path: message"; empty when it matches."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{field_path(e.absolute_path)}: {e.message}" for e in errors]


def require(doc: Any, where: str) -> None:
    """Raise SchemaViolation naming `where` and the first offending field when `doc` is not a valid document of the
    current version."""
    found = problems(doc)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SchemaViolation(f"{where}: not a valid results document ({SCHEMA_FILE}): {found[0]}{more}")
    try:
        Run.from_dict(doc)
    except ModelError as e:
        raise SchemaViolation(f"{where}: not a valid results document (model): {e}") from None
