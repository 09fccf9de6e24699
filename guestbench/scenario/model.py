"""A scenario: what to measure, where and how often (frozen, checked by scenario.checker, made by scenario.load)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from guestbench.scenario import prices as cost
from guestbench.backends import BACKENDS
from guestbench.scenario.limits import MAX_LABEL
from guestbench.measurements import MEASUREMENTS

DEFAULT_REPETITIONS = 5
DEFAULT_WARMUP = 1
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_SAMPLE_TIMEOUT_S = 1800.0
PLACEMENTS = ("host", "nested")
DEFAULT_MAX_REPETITIONS = 20
DEFAULT_NESTED_MEMORY_MIB = 4096
DEFAULT_NESTED_VCPUS = 2

TOP_KEYS: dict[str, str] = {
    "name": "string: the scenario's name, used in the results file name",
    "description": "string: what the scenario is for",
    "backends": f"list of backends to measure (default: every usable one): {', '.join(BACKENDS)}",
    "repetitions": f"integer >= 1: measured samples per backend and measurement (default {DEFAULT_REPETITIONS})",
    "warmup": f"integer >= 0: samples taken first and discarded (default {DEFAULT_WARMUP})",
    "cold": "true or false: whether a start-up cell's first launch (appliance cache check, cold host caches) is "
            "taken and reported apart as its cold launch before the warm-ups and samples; false saves that launch "
            "where the cold figure is not wanted (default true)",
    "timeout": f"seconds > 0: limit for one appliance launch; past it the hypervisor is killed "
               f"(default {DEFAULT_TIMEOUT_S:g})",
    "sample_timeout": f"seconds > 0: limit for one timed operation and its set-up (default "
                      f"{DEFAULT_SAMPLE_TIMEOUT_S:g})",
    "phases": "true or false: break every start-up sample into boot phases (the appliance then boots with "
              "a verbose console, which itself costs time; default false)",
    "appliance": "mapping: memsize (MiB or a size such as 2GiB), smp (vCPUs)",
    "placement": "list of where to measure: host (this machine), nested (inside a level-1 VM that guestbench "
                 "builds and starts through libvirt; see 'nested'); default [host]",
    "stacks": "list of software stacks to measure each backend on: host (the machine's own software) and stacks "
              "built with `guestbench stack build NAME` (another Debian suite's libguestfs, qemu, libvirt, UML and "
              "Python: docs/stacks.md); each backend's cells on each stack take turns like any other cells; default "
              "[host]",
    "nested": "mapping for placement nested: memory (the level-1 VM's RAM, MiB or a size; default "
              f"{DEFAULT_NESTED_MEMORY_MIB}), vcpus (default {DEFAULT_NESTED_VCPUS}), "
              "timeout_scale (factor > 0 applied "
              "to every time-out inside it; default 3 when the level-1 VM runs on KVM, 25 on TCG), timeout "
              "(limit for the whole level-1 run; default: the worst case of all time-outs inside)",
    "order": "interleaved (round-robin over one measurement's cells, one repetition at a time, so every backend "
             "and variant sees the same stretch of time), random (each round in a seeded random order) or sequential "
             "(every sample of a cell, then the next cell); default interleaved when a measurement has two or more "
             "cells",
    "seed": "integer >= 0: the seed of order random (default: drawn at random and recorded in the results)",
    "precision": "the 95% CI half-width (Student t, of the mean) relative to the median at which a cell stops "
                 "sampling, e.g. 5% or 0.05; repetitions is then the minimum and max_repetitions the cap "
                 "(default: no target, exactly repetitions samples)",
    "cost": f"optional prices for the cost table: {cost.FORMS}; currency names them "
            "(e.g. {vcpu_hour: 0.04, gib_hour: 0.005, currency: USD}); without it the table shows core-seconds and "
            "GiB-seconds",
    "max_repetitions": f"integer >= repetitions: with precision, the most samples a cell takes (default "
                       f"{DEFAULT_MAX_REPETITIONS}, or repetitions if larger)",
    "measurements": f"non-empty list; each item a measurement name or a mapping with key 'measurement' "
                    f"({', '.join(MEASUREMENTS)}), an optional 'label', that measurement's parameters, an "
                    "optional 'matrix' (parameter: [values...]; one cell per combination, labelled "
                    "label.value1.value2...), an optional 'env' (NAME: value for its workers and the programs "
                    "they run; LIBGUESTFS_HV, LIBGUESTFS_BACKEND_SETTINGS replace the backend's), an optional "
                    "'appliance' ({memsize: ...} over the scenario's), an optional 'uml_mode' "
                    "(UML's userspace mode or a list of "
                    "them, seccomp or ptrace: one uml cell each; default the fastest each UML offers), an optional "
                    "'drive_path' (how libguestfs's drives reach UML, ubd or vhost-user-blk, or a list: one uml cell "
                    "each; default vhost-user-blk, docs/backends.md) and an optional "
                    "'ab' (A or B: the item is that "
                    "side of guestbench ab, labelled label...A or ...B; guestbench ab writes it for a nested run)",
}
NESTED_KEYS = {"memory": "the level-1 VM's RAM: an integer in MiB or a size (e.g. 4GiB), at least 1024 MiB",
               "vcpus": "integer >= 1: the level-1 VM's vCPUs",
               "timeout_scale": "number > 0: factor for every time-out inside the level-1 VM",
               "timeout": "seconds > 0: limit for the whole level-1 run (boot, probes, every sample)"}
LABEL = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_LABEL - 1}}}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SIDE = "ab"  # the variant key and item key of `guestbench ab`'s two configurations (A and B of one item)
SIDES = ("A", "B")
# an item's keys that are not parameters
ITEM_KEYS = ("measurement", "label", "matrix", "env", "appliance", "uml_mode", "drive_path", SIDE)
APPLIANCE_KEYS = {"memsize": "appliance RAM: an integer in MiB or a size (e.g. 2GiB)",
                  "smp": "integer >= 1: appliance vCPUs"}


@dataclass(frozen=True)
class MeasurementSpec:
    """One cell row of the scenario. A `matrix` item expands into one spec per combination: they share
    `group` (the item's label) and each has `variant` (the matrix keys with this combination's values)."""

    measurement: str
    label: str
    params: dict[str, Any]
    group: str = ""
    variant: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the item's environment for its workers and programs
    memsize: int | None = None  # the item's appliance memory (MiB), over the scenario's
    uml_modes: tuple[str, ...] = ()  # UML userspace modes, one uml cell each; () = the fastest each UML offers
    drive_paths: tuple[str, ...] = ()  # how drives reach UML, one uml cell each; () = the default (vhost-user-blk)

    def __post_init__(self) -> None:
        if not self.group:
            object.__setattr__(self, "group", self.label)

    def to_dict(self) -> dict[str, Any]:
        return {"measurement": self.measurement, "label": self.label, "params": dict(self.params),
                "group": self.group, "variant": dict(self.variant),
                **({"env": dict(self.env)} if self.env else {}),
                **({"memsize": self.memsize} if self.memsize is not None else {}),
                **({"uml_modes": list(self.uml_modes)} if self.uml_modes else {}),
                **({"drive_paths": list(self.drive_paths)} if self.drive_paths else {})}

    def file_keys(self) -> dict[str, Any]:
        """The item keys that are not parameters: env, appliance, uml_mode and drive_path."""
        return {**({"env": dict(self.env)} if self.env else {}),
                **({"appliance": {"memsize": self.memsize}} if self.memsize is not None else {}),
                **({"uml_mode": list(self.uml_modes)} if self.uml_modes else {}),
                **({"drive_path": list(self.drive_paths)} if self.drive_paths else {})}

    def to_item(self) -> dict[str, Any]:
        """This spec as a scenario-file item; a matrix combination becomes a one-value matrix, so it reads
        back to the same spec (label, group and variant included). A parameter left unset (None: no value is
        its default, as a command's argv when it has a guestfish script) is left out, as a file would."""
        given = {k: v for k, v in self.params.items() if v is not None}
        if not self.variant:
            return {"measurement": self.measurement, "label": self.label, **given, **self.file_keys()}
        axes = {k: v for k, v in self.variant.items() if k != SIDE}
        fixed = {k: v for k, v in given.items() if k not in axes}
        side = {SIDE: self.variant[SIDE]} if SIDE in self.variant else {}
        return {"measurement": self.measurement, "label": self.group, **fixed, **self.file_keys(), **side,
                **({"matrix": {k: [v] for k, v in axes.items()}} if axes else {})}


@dataclass(frozen=True)
class NestedSpec:
    """How the level-1 VM of placement 'nested' is sized; None = decided at run time (see TOP_KEYS)."""

    memory_mib: int = DEFAULT_NESTED_MEMORY_MIB
    vcpus: int = DEFAULT_NESTED_VCPUS
    timeout_scale: float | None = None
    timeout: float | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    description: str = ""
    backends: tuple[str, ...] | None = None
    repetitions: int = DEFAULT_REPETITIONS
    warmup: int = DEFAULT_WARMUP
    timeout: float = DEFAULT_TIMEOUT_S
    sample_timeout: float = DEFAULT_SAMPLE_TIMEOUT_S
    memsize: int | None = None  # MiB; None = libguestfs's default
    smp: int | None = None
    phases: bool = False
    cold: bool = True  # a start-up cell's first launch, reported apart (TOP_KEYS)
    placements: tuple[str, ...] = ("host",)
    stacks: tuple[str, ...] = ("host",)  # software stacks (guestbench.stacks): host is the machine's own
    nested: NestedSpec = field(default_factory=NestedSpec)
    measurements: tuple[MeasurementSpec, ...] = field(default_factory=tuple)
    order: str | None = None  # None: interleaved where a measurement has two or more cells (plan.cells)
    seed: int | None = None  # order random: None = drawn when the run starts (and recorded)
    precision: float | None = None  # target 95% CI half-width / median; None = fixed repetitions
    max_repetitions: int | None = None  # the cap with precision (None: DEFAULT_MAX_REPETITIONS)
    cost: cost.Prices | None = None  # prices for the cost table (guestbench.analysis.cost)
    overrides: dict[str, Any] = field(default_factory=dict)

    def iterations(self, times_launch: bool) -> list[str]:
        """A cell's iterations in order: 'cold' (start-up only, unless the scenario says cold: false: the first
        launch, reported apart), then the warm-ups, then the measured repetitions (with a precision target: as many
        as the cap allows; the cell stops once the target is reached)."""
        return (["cold"] if times_launch and self.cold else []) + ["warmup"] * self.warmup + ["rep"] * self.rep_cap

    @property
    def rep_cap(self) -> int:
        """The most measured repetitions a cell takes: repetitions, or with precision the cap."""
        if self.precision is None:
            return self.repetitions
        return max(self.repetitions, self.max_repetitions or DEFAULT_MAX_REPETITIONS)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["backends"] = list(self.backends) if self.backends is not None else None
        d["placements"] = list(self.placements)
        d["stacks"] = list(self.stacks)
        d["measurements"] = [m.to_dict() for m in self.measurements]
        return d

    def to_file(self, **changes: Any) -> dict[str, Any]:
        """This scenario as a scenario file (what parse_scenario reads back to the same Scenario), with
        `changes` (file keys) applied: how a nested run hands the scenario to the guestbench inside."""
        doc: dict[str, Any] = {
            "name": self.name, "repetitions": self.repetitions, "warmup": self.warmup, "timeout": self.timeout,
            "sample_timeout": self.sample_timeout, "phases": self.phases, "placement": list(self.placements),
            "measurements": [m.to_item() for m in self.measurements],
        }
        if self.description:
            doc["description"] = self.description
        if not self.cold:
            doc["cold"] = False
        if self.backends is not None:
            doc["backends"] = list(self.backends)
        if self.stacks != ("host",):
            doc["stacks"] = list(self.stacks)
        appliance = {k: v for k, v in (("memsize", self.memsize), ("smp", self.smp)) if v is not None}
        if appliance:
            doc["appliance"] = appliance
        nested = {k: v for k, v in (("memory", self.nested.memory_mib), ("vcpus", self.nested.vcpus),
                                    ("timeout_scale", self.nested.timeout_scale), ("timeout", self.nested.timeout))
                  if v is not None}
        doc["nested"] = nested
        for key in ("order", "seed", "precision", "max_repetitions"):
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        if self.cost is not None:
            doc["cost"] = self.cost.to_file()
        doc.update(changes)
        return doc
