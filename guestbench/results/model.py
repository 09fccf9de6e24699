"""The results document as typed objects: what each field holds, which values can be real, and v1 → v2.

Readers keep working on plain dicts (`load_results` returns ``Run.from_dict(doc).to_dict()``); the model is the
one place that says what a results file may hold, so a doctored or damaged file is refused with one line naming
the field (``cells[3].samples[1].seconds: -1.2 is negative; ...``) instead of being printed as if it were real.

Two rules keep the round trip lossless (docs/results-format.md):
- keys the model does not know go to ``extra`` and come back from ``to_dict``, so a newer guestbench's fields
  survive an older reader;
- ``source_keys`` remembers which keys the source had, in order: a key present as null or empty comes back as
  it was, and an absent one stays absent. An object built in code (no source) writes its required fields and
  every other field whose value differs from the default (so ``Sample(1, 2.5, utc)`` leaves out its None
  optionals).
Raw JSON values (params, host, scenario, ...) are shared with the source, not copied.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Callable, ClassVar, TypeVar

SCHEMA = "guestbench-results"
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
CELL_STATUSES = ("pending", "running", "done", "skipped", "unavailable", "interrupted")
RUN_STATUSES = ("running", "complete", "interrupted", "failed")
PLACEMENT_STATUSES = ("starting", "running", "complete", "interrupted", "failed")
HOST_STATUSES = (*PLACEMENT_STATUSES, "lost")  # a fleet host whose worker went away (or scheduler went silent) mid-run
ITERATION_KINDS = ("cold", "warmup", "rep")
ORDERS = ("interleaved", "random", "sequential")
PRECISION_STOPS = ("target", "cap", "ended")
SECONDS = "a finite number of seconds >= 0"

Parser = Callable[[Any, str], Any]
R = TypeVar("R", bound="Record")


class ModelError(ValueError):
    """A value no run can have written; `key` is its path in the document, e.g. cells[3].samples[1].seconds."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key
        self.message = message


# ---------------------------------------------------------------------------------------------- value parsers


def _show(value: Any) -> str:
    """A value as the file spells it, shortened: the user finds it in the file by this."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _at(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _refuse(value: Any, key: str, problem: str, allowed: str) -> ModelError:
    return ModelError(key, f"{_show(value)} {problem}; allowed: {allowed}")


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise _refuse(value, key, "is not a string", "text")
    return value


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise _refuse(value, key, "is not a boolean", "true or false")
    return value


def _count(value: Any, key: str) -> int:
    """Repetition numbers, instances: counted from 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(value, key, "is not an integer", "an integer >= 1")
    if value < 1:
        raise _refuse(value, key, "is below 1", "an integer >= 1")
    return value


def _tally(value: Any, key: str) -> int:
    """How many of something: an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _refuse(value, key, "is not a count", "an integer >= 0")
    return value


def _amount(value: Any, key: str) -> int | float:
    """A byte count: a number no smaller than zero."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _refuse(value, key, "is not a number >= 0", "a number of bytes >= 0")
    return value


def _seconds(value: Any, key: str) -> int | float:
    """A duration a clock measured: finite and never negative (kept as written, so 3 stays 3)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _refuse(value, key, "is not a number", SECONDS)
    if not math.isfinite(value):
        raise _refuse(value, key, "is not finite", SECONDS)
    if value < 0:
        raise _refuse(value, key, "is negative", SECONDS)
    return value


def _fraction(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise _refuse(value, key, "is not a fraction", "a number between 0 and 1")
    return value


def _load(value: Any, key: str) -> dict[str, Any]:
    """A sample's host load: other processes' cores and the steal share are numbers >= 0, busy a boolean, the other
    guestbench runs active meanwhile a count."""
    _mapping(value, key)
    for name in ("other_cores", "steal", "load1"):
        if name in value and value[name] is not None:
            _amount(value[name], _at(key, name))
    if value.get("busy") is not None:
        _flag(value["busy"], _at(key, "busy"))
    if value.get("other_runs") is not None:
        _count(value["other_runs"], _at(key, "other_runs"))
    return value  # type: ignore[no-any-return]


def _resources(value: Any, key: str) -> dict[str, Any]:
    """What a sample's processes used: CPU seconds, peak memory and the sampling interval are numbers >= 0 (the
    peak PSS may be null: not readable), and CPU by program maps names to seconds."""
    _mapping(value, key)
    for name in ("cpu_s", "peak_rss_mib", "peak_pss_mib", "peak_charged_mib", "interval_s", "meter_cpu_s"):
        if value.get(name) is not None:
            _amount(value[name], _at(key, name))
    if value.get("cpu_method") not in (None, "cgroup", "proc"):
        raise _refuse(value["cpu_method"], _at(key, "cpu_method"), "is not a known method", '"cgroup" or "proc"')
    by_program = value.get("cpu_by_program")
    if by_program is not None:
        _mapping(by_program, _at(key, "cpu_by_program"))
        for name, seconds in by_program.items():
            _amount(seconds, _at(_at(key, "cpu_by_program"), str(name)))
    return value  # type: ignore[no-any-return]


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(value, key, "is not an object", "a JSON object")
    return value


def _array(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise _refuse(value, key, "is not a list", "a JSON array")
    return value


def _texts(value: Any, key: str) -> list[str]:
    return [_text(item, f"{key}[{i}]") for i, item in enumerate(_array(value, key))]


def _objects(value: Any, key: str) -> list[dict[str, Any]]:
    return [_mapping(item, f"{key}[{i}]") for i, item in enumerate(_array(value, key))]


def _figures(value: Any, key: str) -> dict[str, Any]:
    """A sample's metrics: key → number or string (a verdict, a unit-bearing figure)."""
    for name, figure in _mapping(value, key).items():
        if figure is not None and (isinstance(figure, bool) or not isinstance(figure, (int, float, str))):
            raise _refuse(figure, _at(key, name), "is not a number or a string", "a number or a string")
    return value  # type: ignore[no-any-return]


def _one_of(allowed: tuple[str, ...], what: str) -> Parser:
    def parse(value: Any, key: str) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise _refuse(value, key, f"is not a {what}", ", ".join(allowed))
        return value
    return parse


def _nullable(parse: Parser) -> Parser:
    """Optional fields may be null, which means the same as absent."""
    def nullable(value: Any, key: str) -> Any:
        return None if value is None else parse(value, key)
    return nullable


def _list_of(cls: type[Record]) -> Parser:
    def parse(value: Any, key: str) -> list[Any]:
        return [cls.from_dict(item, f"{key}[{i}]") for i, item in enumerate(_array(value, key))]
    return parse


def _map_of(cls: type[Record]) -> Parser:
    def parse(value: Any, key: str) -> dict[str, Any]:
        return {name: cls.from_dict(item, _at(key, name)) for name, item in _mapping(value, key).items()}
    return parse


# ---------------------------------------------------------------------------------------------- records


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(item) for item in value] if any(isinstance(i, Record) for i in value) else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()} if any(isinstance(v, Record) for v in value.values()) \
            else value
    return value


@dataclass
class Record:
    """Shared from_dict/to_dict: FIELDS says how each known key is read, REQUIRED which must be there (and why)."""

    FIELDS: ClassVar[dict[str, Parser]] = {}
    REQUIRED: ClassVar[dict[str, str]] = {}  # key → what it must hold, for the "missing" message
    WHAT: ClassVar[str] = "an object"

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)  # unknown keys, written back as they were
    source_keys: tuple[str, ...] = field(default=(), kw_only=True, repr=False, compare=False)

    @classmethod
    def parse_fields(cls, value: Any, key: str) -> dict[str, Any]:
        """Keyword arguments for the constructor from one JSON object, or a ModelError naming the field."""
        if not isinstance(value, dict):
            raise _refuse(value, key, "is not an object", cls.WHAT)
        for name, what in cls.REQUIRED.items():
            if name not in value:
                raise ModelError(_at(key, name), f"missing; required: {what}")
        kwargs = {name: parse(value[name], _at(key, name)) for name, parse in cls.FIELDS.items() if name in value}
        for f in fields(cls):  # required-looking positional fields that the source may lack (v1: failure kind)
            if f.init and not f.kw_only and f.name not in kwargs and f.default is MISSING \
                    and f.default_factory is MISSING:
                kwargs[f.name] = None
        kwargs["extra"] = {k: v for k, v in value.items() if k not in cls.FIELDS}
        kwargs["source_keys"] = tuple(value)
        return kwargs

    @classmethod
    def from_dict(cls: type[R], value: Any, key: str = "") -> R:
        return cls(**cls.parse_fields(value, key))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: source keys in their order (known and unknown), then new non-default fields."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name not in self.FIELDS:
                continue
            value = getattr(self, f.name)
            if f.name in self.REQUIRED or f.name in self.source_keys or value != _default(f):
                out[f.name] = _plain(value)
        out.update(self.extra)
        rank = {k: i for i, k in enumerate(self.source_keys)}
        return dict(sorted(out.items(), key=lambda item: rank.get(item[0], len(rank))))


@dataclass
class Sample(Record):
    """One timed iteration (a measured repetition, or a warm-up in a cell's ``warmups``)."""

    rep: int
    seconds: float
    utc: str | None = None  # when it ended; absent in samples imported from pytest-benchmark
    phases: list[dict[str, Any]] | None = None  # start-up cells run with phases: [{"name", "s"}, ...]
    metrics: dict[str, float | str] | None = None  # a workload's figures: key → number or text
    in_step: bool | None = None  # concurrent guests: whether the peers started the timed step together
    waited_s: float | None = None  # ... and how long this guest waited for them
    seq: int | None = None  # its place among every iteration that ended in the run (placement), from 1
    load: dict[str, Any] | None = None  # the rest of the machine during the timed step (guestbench.instruments.load)
    resources: dict[str, Any] | None = None  # what the cell's processes used in it (guestbench.instruments.usage)

    WHAT: ClassVar[str] = "a sample: an object with rep and seconds"
    REQUIRED: ClassVar[dict[str, str]] = {"rep": "the repetition's number, an integer >= 1", "seconds": SECONDS}
    FIELDS: ClassVar[dict[str, Parser]] = {
        "rep": _count, "seconds": _seconds, "utc": _nullable(_text), "phases": _nullable(_objects),
        "metrics": _nullable(_figures), "in_step": _nullable(_flag), "waited_s": _nullable(_seconds),
        "seq": _nullable(_count), "load": _nullable(_load), "resources": _nullable(_resources),
    }


@dataclass
class Failure(Record):
    """One iteration that produced no sample, and why."""

    kind: str | None  # "cold" | "warmup" | "rep"; absent in files written before kinds were recorded
    rep: int
    reason: str
    utc: str | None = None
    seq: int | None = None  # as a sample's

    WHAT: ClassVar[str] = "a failure: an object with rep and reason"
    REQUIRED: ClassVar[dict[str, str]] = {"rep": "the iteration's number among its kind, an integer >= 1",
                                          "reason": "why the iteration failed, a string"}
    FIELDS: ClassVar[dict[str, Parser]] = {"kind": _nullable(_one_of(ITERATION_KINDS, "kind of iteration")),
                                           "rep": _count, "reason": _text, "utc": _nullable(_text),
                                           "seq": _nullable(_count)}


@dataclass
class BackendVerdict(Record):
    """Whether a backend could be used in the run, and why (see guestbench.backends.Availability)."""

    usable: bool
    reason: str | None = None
    details: dict[str, Any] | None = None

    WHAT: ClassVar[str] = "a backend verdict: an object with usable"
    REQUIRED: ClassVar[dict[str, str]] = {"usable": "true or false"}
    FIELDS: ClassVar[dict[str, Parser]] = {"usable": _flag, "reason": _nullable(_text),
                                           "details": _nullable(_mapping)}


@dataclass
class Precision(Record):
    """A cell that sampled towards a precision target: the target, what its samples reached, its cap, and why it
    stopped ("target": reached; "cap": took the most samples allowed; "ended": failures, a skip or a signal)."""

    target: float
    reached: float | None = None  # the CI half-width / median of its samples (None below two samples)
    n: int = 0
    cap: int | None = None
    method: str | None = None
    stopped: str | None = None  # absent while the cell runs

    WHAT: ClassVar[str] = "a precision record: an object with target"
    REQUIRED: ClassVar[dict[str, str]] = {"target": "the target relative half-width, a number between 0 and 1"}
    FIELDS: ClassVar[dict[str, Parser]] = {
        "target": _fraction, "reached": _nullable(_amount), "n": _tally, "cap": _nullable(_count),
        "method": _nullable(_text), "stopped": _nullable(_one_of(PRECISION_STOPS, "reason to stop")),
    }


@dataclass
class Cell(Record):
    """One measurement on one backend in one placement: its set-up and every raw sample, warm-up and failure."""

    backend: str
    label: str
    measurement: str | None = None
    placement: str | None = None  # "host" or "nested"
    host: str | None = None  # a fleet run: the host (a key of Run.hosts) that ran it
    group: str | None = None  # the scenario item's label (cells of one matrix item share it)
    variant: dict[str, Any] | None = None  # the matrix values of this cell (and "guest" with concurrency)
    instance: int | None = None  # concurrency: N — which of the N guests, from 1
    concurrency: int | None = None
    params: dict[str, Any] | None = None
    timed: str | None = None  # what exactly the clock covers
    cache_mode: str | None = None
    bytes: int | float | None = None  # bytes moved per sample (MB/s), for measurements that move bytes
    what: str | None = None  # the measurement with its parameters, one line
    metrics: list[dict[str, Any]] | None = None  # descriptors of a workload's figures: key, label, unit, ...
    phases: bool | None = None  # start-up samples carry phases
    phase_markers: str | None = None  # "qemu" | "uml": which boot markers cut them
    disk: str | None = None  # durability: "file" or "NBD"
    disk_describe: str | None = None
    stack: dict[str, Any] | None = None  # a workload's storage stack, from the worker's set-up record
    samples: list[Sample] = field(default_factory=list)
    warmups: list[Sample] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    verification: dict[str, Any] | None = None  # {"what", "host", "guest", "ok", ...}
    cold_s: float | None = None  # the cell's first launch, reported apart
    status: str = "pending"
    skip_reason: str | None = None
    env: dict[str, Any] | None = None  # the scenario item's environment for this cell's workers
    memsize: int | None = None  # the item's appliance memory (MiB), over the scenario's
    order: str | None = None  # "interleaved" | "random": it took turns with its item's other cells; "sequential"
    precision: Precision | None = None  # sampling towards a precision target: where it got and why it stopped

    WHAT: ClassVar[str] = "a cell: an object with backend and label"
    REQUIRED: ClassVar[dict[str, str]] = {"backend": "the backend's name, a string",
                                          "label": "the cell's label, a string"}
    FIELDS: ClassVar[dict[str, Parser]] = {
        "backend": _text, "label": _text, "measurement": _nullable(_text), "placement": _nullable(_text),
        "host": _nullable(_text), "group": _nullable(_text), "variant": _nullable(_mapping), "instance": _nullable(_count),
        "concurrency": _nullable(_count), "params": _nullable(_mapping), "timed": _nullable(_text),
        "cache_mode": _nullable(_text), "bytes": _nullable(_amount), "what": _nullable(_text),
        "metrics": _nullable(_objects), "phases": _nullable(_flag), "phase_markers": _nullable(_text),
        "disk": _nullable(_text), "disk_describe": _nullable(_text), "stack": _nullable(_mapping),
        "samples": _list_of(Sample), "warmups": _list_of(Sample), "failures": _list_of(Failure),
        "verification": _nullable(_mapping), "cold_s": _nullable(_seconds),
        "status": _one_of(CELL_STATUSES, "cell status"), "skip_reason": _nullable(_text),
        "env": _nullable(_mapping), "memsize": _nullable(_count),
        "order": _nullable(_one_of(ORDERS, "order")), "precision": _nullable(Precision.from_dict),
    }


@dataclass
class Placement(Record):
    """A placement other than the host (today "nested"): the level-1 guest's fingerprint, verdicts and set-up."""

    host: dict[str, Any] | None = None  # the guest's fingerprint
    backends: dict[str, BackendVerdict] = field(default_factory=dict)
    status: str | None = None  # "starting", then the guest run's own status
    started_utc: str | None = None
    finished_utc: str | None = None
    guestbench: dict[str, Any] | None = None
    level1: dict[str, Any] | None = None  # guestbench.nested Level1 + image, seconds, error

    FIELDS: ClassVar[dict[str, Parser]] = {
        "host": _nullable(_mapping), "backends": _map_of(BackendVerdict),
        "status": _nullable(_one_of(PLACEMENT_STATUSES, "placement status")), "started_utc": _nullable(_text),
        "finished_utc": _nullable(_text), "guestbench": _nullable(_mapping), "level1": _nullable(_mapping),
    }


@dataclass
class FleetHost(Record):
    """A host of a fleet run (scenario --cluster): what its own run said of itself, less its cells (those are in
    Run.cells, each naming the host)."""

    address: str | None = None  # its Dask worker's address
    host: dict[str, Any] | None = None  # its fingerprint
    backends: dict[str, BackendVerdict] = field(default_factory=dict)
    resources: dict[str, Any] | None = None  # what its worker advertised to the scheduler
    placements: dict[str, Placement] = field(default_factory=dict)
    order: dict[str, Any] | None = None
    status: str | None = None  # "starting", its run's status, or "lost" (its worker went away)
    started_utc: str | None = None
    finished_utc: str | None = None
    guestbench: dict[str, Any] | None = None
    error: str | None = None  # why it ended early

    FIELDS: ClassVar[dict[str, Parser]] = {
        "address": _nullable(_text), "host": _nullable(_mapping), "backends": _map_of(BackendVerdict),
        "resources": _nullable(_mapping), "placements": _map_of(Placement), "order": _nullable(_mapping),
        "status": _nullable(_one_of(HOST_STATUSES, "host status")), "started_utc": _nullable(_text),
        "finished_utc": _nullable(_text), "guestbench": _nullable(_mapping), "error": _nullable(_text),
    }


def _order(value: Any, key: str) -> dict[str, Any]:
    _mapping(value, key)
    _one_of(ORDERS, "order")(value.get("mode"), _at(key, "mode"))
    if value.get("seed") is not None and (isinstance(value["seed"], bool) or not isinstance(value["seed"], int)
                                          or value["seed"] < 0):
        raise _refuse(value["seed"], _at(key, "seed"), "is not a seed", "an integer >= 0")
    cells = value.get("block_cells")
    if cells is not None and (type(cells) is not int or cells < 1):
        raise _refuse(cells, _at(key, "block_cells"), "is not a number of cells", "an integer >= 1")
    return value  # type: ignore[no-any-return]


def _version(value: Any, key: str) -> int:
    if type(value) is not int or value not in READABLE_VERSIONS:
        raise _refuse(value, key, "is not supported", " or ".join(map(str, READABLE_VERSIONS)))
    return value


@dataclass
class Run(Record):
    """The whole results document of one run. from_dict reads versions 1 to 3; the object is always version 3."""

    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION
    guestbench: dict[str, Any] | None = None  # {"version", "git_commit"}
    status: str | None = None
    started_utc: str | None = None
    finished_utc: str | None = None
    command: list[str] | None = None
    scenario: dict[str, Any] | None = None  # the scenario as run (Scenario.to_dict())
    host: dict[str, Any] | None = None  # the host's fingerprint (host.fingerprint())
    backends: dict[str, BackendVerdict] = field(default_factory=dict)
    cells: list[Cell] = field(default_factory=list)
    placements: dict[str, Placement] = field(default_factory=dict)
    order: dict[str, Any] | None = None  # {"mode": interleaved | random | sequential, "seed": for random}
    hosts: dict[str, FleetHost] = field(default_factory=dict)  # a fleet run: its hosts by name

    WHAT: ClassVar[str] = "a guestbench results document"
    REQUIRED: ClassVar[dict[str, str]] = {"schema": repr(SCHEMA), "schema_version": "1, 2 or 3",
                                          "cells": "a list of cells"}
    FIELDS: ClassVar[dict[str, Parser]] = {
        "schema": _one_of((SCHEMA,), "guestbench results file"), "schema_version": _version,
        "guestbench": _nullable(_mapping), "status": _nullable(_one_of(RUN_STATUSES, "run status")),
        "started_utc": _nullable(_text), "finished_utc": _nullable(_text), "command": _nullable(_texts),
        "scenario": _nullable(_mapping), "host": _nullable(_mapping), "backends": _map_of(BackendVerdict),
        "cells": _list_of(Cell), "placements": _map_of(Placement), "order": _nullable(_order),
        "hosts": _map_of(FleetHost),
    }

    @classmethod
    def from_dict(cls, value: Any, key: str = "") -> Run:
        """Older documents are version 3 documents with fewer fields (version 2 added nothing a reader must know;
        version 3 added hosts, which a version 2 reader would have mixed into one machine's figures): only the
        number changes."""
        run = cls(**cls.parse_fields(value, key))
        run.schema_version = SCHEMA_VERSION
        return run


__all__ = ["SCHEMA", "SCHEMA_VERSION", "READABLE_VERSIONS", "CELL_STATUSES", "RUN_STATUSES", "PLACEMENT_STATUSES",
           "ITERATION_KINDS", "ORDERS", "PRECISION_STOPS", "ModelError", "Record", "Run", "Cell", "Sample", "Failure",
           "BackendVerdict", "Placement", "Precision", "FleetHost", "HOST_STATUSES"]
