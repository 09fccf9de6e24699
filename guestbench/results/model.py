"""The results document as typed objects: what each field holds, which values can be real, and v1 → v2.

Every reader takes these objects (`load_results` returns a `Run`; the run being written is read through
`ResultsWriter.run()`); the model is the one place that says what a results file may hold, so a doctored or damaged
file, or a snapshot another machine sends back, is refused with one line naming the field
(``cells[3].samples[1].seconds: -1.2 is negative; ...``) instead of being printed as if it were real. The run
writes these objects too, through guestbench.results.writer, which serialises each once.

Two rules keep the round trip lossless (docs/results-format.md):
- keys the model does not know go to ``extra`` and come back from ``to_dict``, so a newer guestbench's fields
  survive an older reader;
- ``source_keys`` remembers which keys the source had, in order: a key present as null or empty comes back as
  it was, and an absent one stays absent. An object built in code (no source) writes its required fields and
  every other field whose value differs from the default (so ``Sample(1, 2.5, utc)`` leaves out its None
  optionals), unless made with ``laid_out``, which writes exactly the keys given.
Raw JSON values (params, host, scenario, ...) are shared with the source, not copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from guestbench.results import fields as parse
from guestbench.results import header
from guestbench.results.fields import SECONDS, ModelError, Parser, Record
from guestbench.results.header import READABLE_VERSIONS, SCHEMA, SCHEMA_VERSION

CELL_STATUSES = ("pending", "running", "done", "skipped", "unavailable", "interrupted")
RUN_STATUSES = ("running", "complete", "interrupted", "failed")
PLACEMENT_STATUSES = ("starting", "running", "complete", "interrupted", "failed")
HOST_STATUSES = (*PLACEMENT_STATUSES, "lost")  # a fleet host whose worker went away (or scheduler went silent) mid-run
ITERATION_KINDS = ("cold", "warmup", "rep")
ORDERS = ("interleaved", "random", "sequential")
PRECISION_STOPS = ("target", "cap", "ended")


HOST_STACK = "host"  # the machine's own software stack


def system_name(backend: str, stack: str = HOST_STACK, mode: str | None = None, drive_path: str | None = None) -> str:
    """A backend as it ran: `uml`, `uml+seccomp`, `tcg@sid`, `uml+ptrace@sid`, `uml+vhost-user-blk` (the machine's
    own stack unnamed, so that runs from before stacks keep their names; UML's mode and drive path where a scenario
    named them)."""
    return (backend + (f"+{mode}" if mode else "") + (f"+{drive_path}" if drive_path else "")
            + (f"@{stack}" if stack != HOST_STACK else ""))


def verdict_name(system: str) -> str:
    """The name of the verdict a system goes by (system_name without the mode: one probe per backend and stack)."""
    backend, at, stack = system.partition("@")
    return backend.partition("+")[0] + at + stack


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
        "rep": parse.count, "seconds": parse.seconds, "utc": parse.nullable(parse.text),
        "phases": parse.nullable(parse.phases),
        "metrics": parse.nullable(parse.figures), "in_step": parse.nullable(parse.flag),
        "waited_s": parse.nullable(parse.seconds),
        "seq": parse.nullable(parse.count), "load": parse.nullable(parse.load),
        "resources": parse.nullable(parse.resources),
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
    FIELDS: ClassVar[dict[str, Parser]] = {"kind": parse.nullable(parse.one_of(ITERATION_KINDS, "kind of iteration")),
                                           "rep": parse.count, "reason": parse.text, "utc": parse.nullable(parse.text),
                                           "seq": parse.nullable(parse.count)}


@dataclass
class BackendVerdict(Record):
    """Whether a backend could be used in the run, and why (see guestbench.backends.Availability)."""

    usable: bool
    reason: str | None = None
    details: dict[str, Any] | None = None

    WHAT: ClassVar[str] = "a backend verdict: an object with usable"
    REQUIRED: ClassVar[dict[str, str]] = {"usable": "true or false"}
    FIELDS: ClassVar[dict[str, Parser]] = {"usable": parse.flag, "reason": parse.nullable(parse.text),
                                           "details": parse.nullable(parse.mapping)}


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
        "target": parse.fraction, "reached": parse.nullable(parse.amount), "n": parse.tally,
        "cap": parse.nullable(parse.count),
        "method": parse.nullable(parse.text), "stopped": parse.nullable(parse.one_of(PRECISION_STOPS,
        "reason to stop")),
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
    density_level: int | None = None  # a density item's appliance: the level (N at once) it belongs to
    software: dict[str, Any] | None = None  # its software stack: "stack" (host or a stack's name), versions, UML's mode
    uml_mode: str | None = None  # the UML userspace mode the scenario asked for (uml cells; None: the fastest offered)
    drive_path: str | None = None  # how the scenario asked drives to reach UML (ubd, vhost-user-blk; None: default)
    drive_paths: list[str] | None = None  # how each of its drives reached UML, in libguestfs's order (uml cells)

    WHAT: ClassVar[str] = "a cell: an object with backend and label"
    REQUIRED: ClassVar[dict[str, str]] = {"backend": "the backend's name, a string",
                                          "label": "the cell's label, a string"}
    FIELDS: ClassVar[dict[str, Parser]] = {
        "backend": parse.text, "label": parse.text, "measurement": parse.nullable(parse.text),
        "placement": parse.nullable(parse.text),
        "host": parse.nullable(parse.text), "group": parse.nullable(parse.text),
        "variant": parse.nullable(parse.mapping), "instance": parse.nullable(parse.count),
        "concurrency": parse.nullable(parse.count), "params": parse.nullable(parse.mapping),
        "timed": parse.nullable(parse.text),
        "cache_mode": parse.nullable(parse.text), "bytes": parse.nullable(parse.amount),
        "what": parse.nullable(parse.text),
        "metrics": parse.nullable(parse.descriptors), "phases": parse.nullable(parse.flag),
        "phase_markers": parse.nullable(parse.text),
        "disk": parse.nullable(parse.text), "disk_describe": parse.nullable(parse.text),
        "stack": parse.nullable(parse.mapping),
        "samples": parse.list_of(Sample), "warmups": parse.list_of(Sample), "failures": parse.list_of(Failure),
        "verification": parse.nullable(parse.mapping), "cold_s": parse.nullable(parse.seconds),
        "status": parse.one_of(CELL_STATUSES, "cell status"), "skip_reason": parse.nullable(parse.text),
        "env": parse.nullable(parse.mapping), "memsize": parse.nullable(parse.count),
        "order": parse.nullable(parse.one_of(ORDERS, "order")), "precision": parse.nullable(Precision.from_dict),
        "density_level": parse.nullable(parse.count),
        "software": parse.nullable(parse.mapping), "uml_mode": parse.nullable(parse.text),
        "drive_path": parse.nullable(parse.text), "drive_paths": parse.nullable(parse.texts),
    }

    @property
    def stack_name(self) -> str:
        """The software stack it ran on: "host" (the machine's own), or a stack's name (guestbench.stacks)."""
        name = (self.software or {}).get("stack")
        return name if isinstance(name, str) and name else HOST_STACK

    @property
    def system(self) -> str:
        """What it ran on, as tables, compare and history name it: the backend, UML's mode where the scenario named
        one, the stack where it is not the host's (system_name)."""
        return system_name(self.backend, self.stack_name, self.uml_mode, self.drive_path)


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
        "host": parse.nullable(parse.mapping), "backends": parse.map_of(BackendVerdict),
        "status": parse.nullable(parse.one_of(PLACEMENT_STATUSES, "placement status")),
        "started_utc": parse.nullable(parse.text),
        "finished_utc": parse.nullable(parse.text), "guestbench": parse.nullable(parse.mapping),
        "level1": parse.nullable(parse.mapping),
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
        "address": parse.nullable(parse.text), "host": parse.nullable(parse.mapping),
        "backends": parse.map_of(BackendVerdict),
        "resources": parse.nullable(parse.mapping), "placements": parse.map_of(Placement),
        "order": parse.nullable(parse.mapping),
        "status": parse.nullable(parse.one_of(HOST_STATUSES, "host status")), "started_utc": parse.nullable(parse.text),
        "finished_utc": parse.nullable(parse.text), "guestbench": parse.nullable(parse.mapping),
        "error": parse.nullable(parse.text),
    }


@dataclass
class Spread(Record):
    """A density level's figure over its appliances' samples."""

    median: float | None = None
    min: float | None = None
    max: float | None = None
    n: int | None = None

    WHAT: ClassVar[str] = "a figure's spread: an object with median, min, max and n"
    FIELDS: ClassVar[dict[str, Parser]] = {
        "median": parse.nullable(parse.figure), "min": parse.nullable(parse.figure),
        "max": parse.nullable(parse.figure), "n": parse.nullable(parse.tally),
    }


@dataclass
class DensityLevel(Record):
    """N appliances at once: how many launches (or jobs) they made and what each cost."""

    appliances: int
    launches: int | None = None  # job startup: the launches, their rate and their seconds
    launches_per_min: float | None = None
    startup_s: Spread | None = None
    jobs: int | None = None  # any other job (upload ...): the jobs, their rate and their seconds
    jobs_per_min: float | None = None
    job_s: Spread | None = None
    failures: int | None = None
    wall_s: float | None = None
    cpu_s_per_launch: Spread | None = None
    peak_mib_per_appliance: Spread | None = None
    peak_charged_mib_per_appliance: Spread | None = None
    host_used_before_mib: float | None = None
    host_used_peak_mib: float | None = None
    busy_samples: int | None = None

    WHAT: ClassVar[str] = "a density level: an object with appliances"
    REQUIRED: ClassVar[dict[str, str]] = {"appliances": "the level's appliances at once, an integer >= 1"}
    FIELDS: ClassVar[dict[str, Parser]] = {
        "appliances": parse.count, **{k: parse.nullable(parse.tally) for k in ("launches", "jobs", "failures",
                                                                              "busy_samples")},
        **{k: parse.nullable(parse.figure) for k in ("launches_per_min", "jobs_per_min", "host_used_before_mib",
                                                     "host_used_peak_mib")},
        "wall_s": parse.nullable(parse.seconds),
        **{k: parse.nullable(Spread.from_dict) for k in ("startup_s", "job_s", "cpu_s_per_launch",
                                                         "peak_mib_per_appliance", "peak_charged_mib_per_appliance")},
    }


@dataclass
class Density(Record):
    """A density item on one backend: its levels, the rule that stopped it, and how many appliances fit."""

    backend: str
    label: str
    placement: str | None = None
    max_appliances: int | None = None
    slowdown_pct: float | None = None
    memory_budget_pct: float | None = None
    job: str | None = None  # what each appliance did: startup, upload ...
    timed: str | None = None
    levels: list[DensityLevel] = field(default_factory=list)
    stopped: str | None = None  # failures, slowdown, cap, memory
    why: str | None = None
    fits: int | None = None
    verdict: str | None = None

    WHAT: ClassVar[str] = "a density record: an object with backend and label"
    REQUIRED: ClassVar[dict[str, str]] = {"backend": "the backend's name, a string",
                                          "label": "the density item's label, a string"}
    FIELDS: ClassVar[dict[str, Parser]] = {
        "backend": parse.text, "label": parse.text, "placement": parse.nullable(parse.text),
        "max_appliances": parse.nullable(parse.count), "slowdown_pct": parse.nullable(parse.figure),
        "memory_budget_pct": parse.nullable(parse.figure), "job": parse.nullable(parse.text),
        "timed": parse.nullable(parse.text), "levels": parse.list_of(DensityLevel),
        "stopped": parse.nullable(parse.text), "why": parse.nullable(parse.text), "fits": parse.nullable(parse.tally),
        "verdict": parse.nullable(parse.text),
    }


@dataclass
class AbSides(Record):
    """`guestbench ab`'s two configurations (KEY=VALUE each) and its noise threshold."""

    a: dict[str, Any] = field(default_factory=dict)
    b: dict[str, Any] = field(default_factory=dict)
    noise_percent: float | None = None

    WHAT: ClassVar[str] = "guestbench ab's sides: an object with a, b and noise_percent"
    FIELDS: ClassVar[dict[str, Parser]] = {"a": parse.mapping, "b": parse.mapping,
                                           "noise_percent": parse.nullable(parse.figure)}


def _order(value: Any, key: str) -> dict[str, Any]:
    parse.mapping(value, key)
    parse.one_of(ORDERS, "order")(value.get("mode"), parse.at(key, "mode"))
    if value.get("seed") is not None and (isinstance(value["seed"], bool) or not isinstance(value["seed"], int)
                                          or value["seed"] < 0):
        raise parse.refuse(value["seed"], parse.at(key, "seed"), "is not a seed", "an integer >= 0")
    cells = value.get("block_cells")
    if cells is not None and (type(cells) is not int or cells < 1):
        raise parse.refuse(cells, parse.at(key, "block_cells"), "is not a number of cells", "an integer >= 1")
    return value


PRICE_SETS = (("vcpu_hour", "gib_hour"), ("instance_hour", "vcpus", "memory_mib"))


def _scenario(value: Any, key: str) -> dict[str, Any]:
    """The scenario as run: free-form but for its prices, which the cost table multiplies by."""
    parse.mapping(value, key)
    cost = value.get("cost")
    if cost is None or cost == {}:  # no prices given
        return value
    where = parse.at(key, "cost")
    parse.mapping(cost, where)
    for name in ("vcpu_hour", "gib_hour", "instance_hour", "vcpus", "memory_mib"):
        if cost.get(name) is not None:  # a run writes the form it did not use as nulls
            parse.figure(cost[name], parse.at(where, name))
            if name in ("vcpus", "memory_mib") and not cost[name]:
                raise parse.refuse(cost[name], parse.at(where, name), "is zero", "a number > 0")
    needed = PRICE_SETS[1] if cost.get("instance_hour") is not None else PRICE_SETS[0]  # as Prices.per_sample reads
    if any(cost.get(k) is None for k in needed):
        raise parse.refuse(cost, where, "is not a complete set of prices",
                           "vcpu_hour and gib_hour, or instance_hour, vcpus and memory_mib")
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
    density: list[Density] = field(default_factory=list)  # density items: their levels, as they end
    ab: AbSides | None = None  # a run of guestbench ab: its two sides

    WHAT: ClassVar[str] = "a guestbench results document"
    REQUIRED: ClassVar[dict[str, str]] = {"schema": repr(SCHEMA), "schema_version": header.readable(),
                                          "cells": "a list of cells"}
    FIELDS: ClassVar[dict[str, Parser]] = {
        "schema": header.schema, "schema_version": header.version,
        "guestbench": parse.nullable(parse.mapping), "status": parse.nullable(parse.one_of(RUN_STATUSES, "run status")),
        "started_utc": parse.nullable(parse.text), "finished_utc": parse.nullable(parse.text),
        "command": parse.nullable(parse.texts),
        "scenario": parse.nullable(_scenario), "host": parse.nullable(parse.mapping),
        "backends": parse.map_of(BackendVerdict),
        "cells": parse.list_of(Cell), "placements": parse.map_of(Placement), "order": parse.nullable(_order),
        "hosts": parse.map_of(FleetHost), "density": parse.list_of(Density), "ab": parse.nullable(AbSides.from_dict),
    }

    @classmethod
    def from_dict(cls, value: Any, key: str = "") -> Run:
        """Older documents are version 3 documents with fewer fields (version 2 added nothing a reader must know;
        version 3 added hosts, which a version 2 reader would have mixed into one machine's figures): only the
        number changes. The header first (guestbench.results.header), as every reader checks it."""
        header.require(value, key)
        run = cls(**cls.parse_fields(value, key))
        run.schema_version = SCHEMA_VERSION
        return run


__all__ = ["SCHEMA", "SCHEMA_VERSION", "READABLE_VERSIONS", "CELL_STATUSES", "RUN_STATUSES", "PLACEMENT_STATUSES",
           "ITERATION_KINDS", "ORDERS", "PRECISION_STOPS", "ModelError", "Record", "Run", "Cell", "Sample", "Failure",
           "BackendVerdict", "Placement", "Precision", "FleetHost", "HOST_STATUSES", "Density", "DensityLevel",
           "Spread", "AbSides"]
