"""The header every results document has: guestbench's schema, a version this guestbench reads, a list of cells.

Checked here once for every reader: the model checks it first whenever it parses a run (guestbench.results.model:
a snapshot from a level-1 guest or a fleet host, a file being validated), and parse_document (guestbench.results.io:
`load_results`, the store behind `guestbench history`) tells a user about a whole file from the same check.
"""

from __future__ import annotations

from typing import Any

from guestbench.results import fields as parse
from guestbench.results.fields import ModelError

SCHEMA = "guestbench-results"
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
NOT_RESULTS = f"not a guestbench results file (key 'schema' must be {SCHEMA!r})"
NO_CELLS = "key 'cells' is missing or not a list"


class HeaderError(ModelError):
    """A value that is no results document this guestbench reads. Its message names the key, as every refusal of
    the model does; `plain` says it of the whole file, as a reader tells its user; `whole`: it is no results
    document at all (not an object, or another schema), rather than one this guestbench cannot read."""

    def __init__(self, key: str, message: str, plain: str, whole: bool = False) -> None:
        super().__init__(key, message)
        self.plain = plain
        self.whole = whole


def readable() -> str:
    """The versions read, as a sentence says them: "1, 2 or 3"."""
    return f"{', '.join(map(str, READABLE_VERSIONS[:-1]))} or {READABLE_VERSIONS[-1]}"


def schema(value: Any, key: str) -> str:
    """The `schema` key: guestbench's, or the file is something else."""
    if not isinstance(value, str) or value != SCHEMA:
        raise HeaderError(key, parse.refuse(value, key, "is not a guestbench results file", SCHEMA).message,
                          NOT_RESULTS, whole=True)
    return value


def version(value: Any, key: str) -> int:
    """The `schema_version` key: a version this guestbench reads (an older one is read as the current one)."""
    if type(value) is not int or value not in READABLE_VERSIONS:
        raise HeaderError(key, parse.refuse(value, key, "is not supported", " or ".join(map(str, READABLE_VERSIONS)))
                          .message, f"schema_version {value!r} is not supported; this guestbench reads version "
                                    f"{readable()}")
    return value


def require(value: Any, key: str = "") -> None:
    """The header of a results document (`key`: where it sits, "" for a whole file), in the order a reader says
    what is wrong: not a guestbench results file, a version this guestbench cannot read, no list of cells."""
    if not isinstance(value, dict):
        raise HeaderError(key, parse.refuse(value, key, "is not an object", "a guestbench results document").message,
                          NOT_RESULTS, whole=True)
    if "schema" not in value:
        raise HeaderError(parse.at(key, "schema"), f"missing; required: {SCHEMA!r}", NOT_RESULTS, whole=True)
    schema(value["schema"], parse.at(key, "schema"))
    if "schema_version" not in value:
        raise HeaderError(parse.at(key, "schema_version"), f"missing; required: {readable()}",
                          f"schema_version None is not supported; this guestbench reads version {readable()}")
    version(value["schema_version"], parse.at(key, "schema_version"))
    if "cells" not in value:
        raise HeaderError(parse.at(key, "cells"), "missing; required: a list of cells", NO_CELLS)
    if not isinstance(value["cells"], list):
        raise HeaderError(parse.at(key, "cells"), parse.refuse(value["cells"], parse.at(key, "cells"), "is not a list",
                                                               "a JSON array").message, NO_CELLS)
