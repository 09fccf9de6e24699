"""Scenario files: load YAML, validate every key before anything runs, apply command-line overrides.

Every problem is a UserError naming the file, the key path, what is wrong and what is allowed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guestbench import limits
from guestbench.analysis import cost
from guestbench.backends import BACKENDS
from guestbench.util.bounded import read_text, safe_yaml
from guestbench.util.errors import UserError, clip
from guestbench.limits import INT64_MAX, MAX_COUNT, MAX_LABEL, MAX_MIB, MAX_REPETITIONS, MAX_TEXT, MAX_WARMUP
from guestbench.measurements import MEASUREMENTS
from guestbench.measurements.base import min_disk_size
from guestbench.results.model import ORDERS
from guestbench.util.units import parse_size

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
    "timeout": f"seconds > 0: limit for one appliance launch; past it the hypervisor is killed "
               f"(default {DEFAULT_TIMEOUT_S:g})",
    "sample_timeout": f"seconds > 0: limit for one timed operation and its set-up (default "
                      f"{DEFAULT_SAMPLE_TIMEOUT_S:g})",
    "phases": "true or false: break every start-up sample into boot phases (the appliance then boots with "
              "a verbose console, which itself costs time; default false)",
    "appliance": "mapping: memsize (MiB or a size such as 2GiB), smp (vCPUs)",
    "placement": "list of where to measure: host (this machine), nested (inside a level-1 VM that guestbench "
                 "builds and starts through libvirt; see 'nested'); default [host]",
    "nested": "mapping for placement nested: memory (the level-1 VM's RAM, MiB or a size; default "
              f"{DEFAULT_NESTED_MEMORY_MIB}), vcpus (default {DEFAULT_NESTED_VCPUS}), timeout_scale (factor > 0 applied "
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
                    "'appliance' ({memsize: ...} over the scenario's) and an optional 'ab' (A or B: the item is that "
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
ITEM_KEYS = ("measurement", "label", "matrix", "env", "appliance", SIDE)  # an item's keys that are not parameters
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

    def __post_init__(self) -> None:
        if not self.group:
            object.__setattr__(self, "group", self.label)

    def to_dict(self) -> dict[str, Any]:
        return {"measurement": self.measurement, "label": self.label, "params": dict(self.params),
                "group": self.group, "variant": dict(self.variant),
                **({"env": dict(self.env)} if self.env else {}),
                **({"memsize": self.memsize} if self.memsize is not None else {})}

    def file_keys(self) -> dict[str, Any]:
        """The item keys that are not parameters: env and appliance."""
        return {**({"env": dict(self.env)} if self.env else {}),
                **({"appliance": {"memsize": self.memsize}} if self.memsize is not None else {})}

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
    placements: tuple[str, ...] = ("host",)
    nested: NestedSpec = field(default_factory=NestedSpec)
    measurements: tuple[MeasurementSpec, ...] = field(default_factory=tuple)
    order: str | None = None  # None: interleaved where a measurement has two or more cells (run.plan)
    seed: int | None = None  # order random: None = drawn when the run starts (and recorded)
    precision: float | None = None  # target 95% CI half-width / median; None = fixed repetitions
    max_repetitions: int | None = None  # the cap with precision (None: DEFAULT_MAX_REPETITIONS)
    cost: cost.Prices | None = None  # prices for the cost table (guestbench.analysis.cost)
    overrides: dict[str, Any] = field(default_factory=dict)

    def iterations(self, times_launch: bool) -> list[str]:
        """A cell's iterations in order: 'cold' (start-up only: the first launch, reported apart), then the
        warm-ups, then the measured repetitions (with a precision target: as many as the cap allows; the cell
        stops once the target is reached)."""
        return (["cold"] if times_launch else []) + ["warmup"] * self.warmup + ["rep"] * self.rep_cap

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
        if self.backends is not None:
            doc["backends"] = list(self.backends)
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


class Checker:
    """Carries the source name so that every error says where it comes from."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, message: str) -> UserError:
        return UserError(message, source=self.source, key=key)

    def integer(self, key: str, value: object, minimum: int, maximum: int = INT64_MAX) -> int:
        allowed = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum < INT64_MAX else "")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"{clip(value)} is not an integer; allowed: {allowed}")
        if value > maximum:
            raise self.fail(key, f"{clip(value)} is too large; allowed: an integer >= {minimum} and <= {maximum}")
        if value < minimum:
            raise self.fail(key, f"{clip(value)} is too small; allowed: {allowed}")
        return value

    def seconds(self, key: str, value: object) -> float:
        given = value
        if isinstance(value, str):
            m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*", value)
            if m:
                value = float(m.group(1)) * {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                secs = float(value)
            except OverflowError:
                secs = math.inf
            if 0 < secs < math.inf:  # not NaN, not infinite
                return secs
        raise self.fail(key, f"{clip(given)} is not a duration; allowed: seconds > 0, e.g. 300, 90s, 5min")

    def boolean(self, key: str, value: object) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"{clip(value)} is not a boolean; allowed: true, false")
        return value

    def string(self, key: str, value: object, most: int = MAX_TEXT) -> str:
        """Text: it may break lines but holds no other control character (no terminal escape sequence)."""
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"{clip(value)} is not a non-empty string")
        if len(value) > most:
            raise self.fail(key, f"{clip(value)} has {len(value)} characters; allowed: at most {most}")
        if any(unicodedata.category(ch) == "Cc" for ch in value if ch not in "\n\t"):
            raise self.fail(key, f"{clip(value)} holds a control character; allowed: text without them")
        return value

    def names(self, key: str, value: object, what: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
        """A list (or comma-separated string) of distinct names out of `allowed`, in the given order."""
        choices = ", ".join(allowed)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",")]
        if not isinstance(value, list):
            raise self.fail(key, f"{clip(value)} is not a list; allowed: a list of {choices}")
        if not value:
            raise self.fail(key, f"the list is empty; allowed: one or more of {choices}")
        out: list[str] = []
        for i, name in enumerate(value):
            if not isinstance(name, str) or name not in allowed:
                raise self.fail(f"{key}[{i}]", f"unknown {what} {clip(name)}; allowed: {choices}")
            if name in out:
                raise self.fail(f"{key}[{i}]", f"{what} {clip(name)} is listed twice")
            out.append(name)
        return tuple(out)

    def backends(self, key: str, value: object) -> tuple[str, ...]:
        return self.names(key, value, "backend", tuple(BACKENDS))

    def placements(self, key: str, value: object) -> tuple[str, ...]:
        given = self.names(key, value, "placement", PLACEMENTS)
        return tuple(p for p in PLACEMENTS if p in given)  # host first: its figures are the reference

    def env(self, key: str, value: object) -> dict[str, str]:
        """An item's environment: NAME: value, names as the shell spells them; values are strings (or numbers)."""
        if not isinstance(value, dict) or not value:
            raise self.fail(key, f"{clip(value)} is not a mapping; allowed: NAME: value, e.g. LIBGUESTFS_HV: "
                            "/usr/bin/qemu")
        out = {}
        for name, v in value.items():
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                raise self.fail(f"{key}.{name}", "is not an environment variable name; allowed: letters, digits and "
                                "_ (not first a digit), e.g. LIBGUESTFS_HV")
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise self.fail(f"{key}.{name}", f"{clip(v)} is not a value; allowed: a string or a number")
            out[name] = str(v)
        return out

    def order(self, key: str, value: object) -> str:
        if not isinstance(value, str) or value not in ORDERS:
            raise self.fail(key, f"{clip(value)} is not an order; allowed: {', '.join(ORDERS)}")
        return value

    def fraction(self, key: str, value: object) -> float:
        """A precision target: '5%', '5 %', 0.05 (a number below 1 is a fraction; 5 alone is refused as ambiguous)."""
        given = value
        if isinstance(value, str):
            m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", value)
            value = float(m.group(1)) / 100 if m else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1:
            return float(value)
        raise self.fail(key, f"{clip(given)} is not a precision; allowed: a percentage above 0% and below 100% "
                        "(e.g. 5%) or a fraction between 0 and 1 (e.g. 0.05)")

    def positive(self, key: str, value: object) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf:
            return float(value)
        raise self.fail(key, f"{clip(value)} is not a number > 0")

    def cost(self, key: str, value: object) -> cost.Prices:
        """Prices in one of cost.FORMS; every amount a number >= 0."""
        if not isinstance(value, dict) or not value:
            raise self.fail(key, f"{clip(value)} is not a mapping; allowed: {cost.FORMS}")
        fields: dict[str, Any] = {}
        for k, v in value.items():
            if k not in cost.KEYS:
                raise self.fail(f"{key}.{k}", f"unknown key; allowed: {', '.join(cost.KEYS)}")
            if k == "currency":
                fields[k] = self.string(f"{key}.{k}", v)
            elif k == "vcpus":
                fields[k] = self.integer(f"{key}.{k}", v, 1, MAX_COUNT)
            elif k == "memory":
                fields["memory_mib"] = self.memsize(f"{key}.{k}", v)
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise self.fail(f"{key}.{k}", f"{clip(v)} is not a price; allowed: a number >= 0")
            else:
                fields[k] = float(v)
        units = {"vcpu_hour", "gib_hour"} & set(fields)
        instance = {"instance_hour", "vcpus", "memory_mib"} & set(fields)
        if units and instance or (units and len(units) != 2) or (instance and len(instance) != 3) \
                or not (units or instance):
            raise self.fail(key, f"{', '.join(sorted(value))} is not a complete set of prices; allowed: {cost.FORMS}")
        return cost.Prices(**fields)

    def nested(self, key: str, value: object) -> NestedSpec:
        if not isinstance(value, dict):
            raise self.fail(key, f"{clip(value)} is not a mapping; allowed keys: {', '.join(NESTED_KEYS)}")
        spec = NestedSpec()
        for k, v in value.items():
            if k == "memory":
                mib = self.memsize(f"{key}.memory", v)
                if mib < 1024:
                    raise self.fail(f"{key}.memory", f"{mib} MiB is too small; allowed: at least 1024 (MiB)")
                spec = dataclasses.replace(spec, memory_mib=mib)
            elif k == "vcpus":
                spec = dataclasses.replace(spec, vcpus=self.integer(f"{key}.vcpus", v, 1, MAX_COUNT))
            elif k == "timeout_scale":
                spec = dataclasses.replace(spec, timeout_scale=self.positive(f"{key}.timeout_scale", v))
            elif k == "timeout":
                spec = dataclasses.replace(spec, timeout=self.seconds(f"{key}.timeout", v))
            else:
                raise self.fail(f"{key}.{k}", f"unknown key; allowed: {', '.join(NESTED_KEYS)}")
        return spec

    def memsize(self, key: str, value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            mib = value
        elif isinstance(value, str) and re.fullmatch(r"\s*\d{1,30}\s*", value, re.ASCII):
            mib = int(value)  # a bare number is MiB, as in the file (e.g. --memsize 2048)
        else:
            try:
                nbytes = parse_size(value)
            except ValueError as e:
                raise self.fail(key, f"{e}; or an integer number of MiB") from None
            if nbytes % 2**20:
                raise self.fail(key, f"{clip(value)} is not a whole number of MiB")
            mib = nbytes // 2**20
        if not 256 <= mib <= MAX_MIB:
            raise self.fail(key, f"{clip(mib)} MiB is too {'small' if mib < 256 else 'large'}; allowed: at least 256 "
                            f"and at most {MAX_MIB} (MiB)")
        return mib

    def measurement(self, key: str, item: object, memsize: int | None) -> list[MeasurementSpec]:
        """One item: a single spec, or one per combination of its `matrix` (in the order written)."""
        allowed = ", ".join(MEASUREMENTS)
        if isinstance(item, str):
            item = {"measurement": item}
        if not isinstance(item, dict):
            raise self.fail(key, f"{clip(item)} is neither a measurement name nor a mapping; allowed: {allowed}")
        name = item.get("measurement")
        if name is None:
            raise self.fail(key, f"missing key 'measurement'; allowed: {allowed}")
        if not isinstance(name, str) or name not in MEASUREMENTS:
            raise self.fail(f"{key}.measurement", f"unknown measurement {clip(name)}; allowed: {allowed}")
        m = MEASUREMENTS[name]
        params = m.defaults()
        known = {p.name for p in m.params}
        env = self.env(f"{key}.env", item["env"]) if "env" in item else {}
        if "appliance" in item:
            own = item["appliance"]
            if not isinstance(own, dict) or set(own) - {"memsize"} or not own:
                raise self.fail(f"{key}.appliance", f"{clip(own)} is not allowed; allowed: a mapping with memsize "
                                "(this item's appliance memory, over the scenario's)")
            memsize = self.memsize(f"{key}.appliance.memsize", own["memsize"])
        item_memsize = memsize if "appliance" in item else None
        for k, v in item.items():
            if k in ITEM_KEYS:
                continue
            if k not in known:
                ok = ", ".join(["label", "matrix", *sorted(known), "env", "appliance"])
                raise self.fail(f"{key}.{k}", f"unknown parameter for {name}; allowed: {ok}")
            try:
                params[k] = m.param(k).parse(v)
            except ValueError as e:
                raise self.fail(f"{key}.{k}", str(e)) from None
            if m.param(k).optional and params[k] == m.param(k).default:
                del params[k]
        side = item.get(SIDE)
        if SIDE in item and side not in SIDES:
            raise self.fail(f"{key}.{SIDE}", f"{clip(side)} is not allowed; allowed: {' or '.join(SIDES)} (which side "
                            "of guestbench ab the item is)")
        label = item.get("label", name)
        if not isinstance(label, str) or not LABEL.fullmatch(label):
            raise self.fail(f"{key}.label", f"{clip(label)} is not allowed; allowed: letters, digits, . _ - "
                            f"(starting with a letter or digit), at most {MAX_LABEL}")
        axes = self.matrix(f"{key}.matrix", item["matrix"], m, set(item) - set(ITEM_KEYS)) \
            if "matrix" in item else []
        specs = []
        for combo in itertools.product(*[values for _, values in axes]):
            variant = {k: v for (k, _), v in zip(axes, combo)}
            cell_params = {**params, **variant}
            where = key
            if variant:
                where = f"{key}.matrix ({', '.join(f'{k}={m.param(k).show(v)}' for k, v in variant.items())})"
            for pkey, problem in m.check(cell_params, memsize):
                raise self.fail(f"{where}.{pkey}" if not variant else f"{where}: {pkey}", problem)
            cell_label = label + "".join(f".{m.param(k).show(v)}" for k, v in variant.items())
            if side is not None:
                variant, cell_label = {**variant, SIDE: side}, f"{cell_label}.{side}"
            limits.cell_label(self.source, where, cell_label)
            specs.append(MeasurementSpec(name, cell_label, cell_params, group=label, variant=variant, env=env,
                                         memsize=item_memsize))
        return specs

    def matrix(self, key: str, value: object, m: Any, fixed: set[str]) -> list[tuple[str, list[Any]]]:
        """`matrix:` maps parameter names to lists of values; every combination becomes a cell."""
        names = ", ".join(sorted(p.name for p in m.params))
        if not isinstance(value, dict) or not value:
            raise self.fail(key, f"{clip(value)} is not a non-empty mapping; allowed: parameter: [values...] with "
                            f"parameters of {m.name}: {names}")
        limits.combinations(self.source, key, value)
        axes: list[tuple[str, list[Any]]] = []
        for k, values in value.items():
            if k not in {p.name for p in m.params}:
                raise self.fail(f"{key}.{k}", f"unknown parameter for {m.name}; allowed: {names}")
            if k in fixed:
                raise self.fail(f"{key}.{k}", "is also given as a fixed parameter; give it in one place")
            if not isinstance(values, list) or not values:
                raise self.fail(f"{key}.{k}", f"{clip(values)} is not a non-empty list; allowed: a list of values, "
                                f"each {m.param(k).allowed()}")
            parsed = []
            for i, v in enumerate(values):
                try:
                    parsed.append(m.param(k).parse(v))
                except ValueError as e:
                    raise self.fail(f"{key}.{k}[{i}]", str(e)) from None
                if parsed[-1] in parsed[:-1]:
                    raise self.fail(f"{key}.{k}[{i}]", f"{clip(v)} is listed twice")
            axes.append((k, parsed))
        return axes

    def measurements(self, key: str, value: object, memsize: int | None) -> tuple[MeasurementSpec, ...]:
        if not isinstance(value, list):
            raise self.fail(key, f"{type(value).__name__} is not a list; allowed: a non-empty list of "
                            f"measurements ({', '.join(MEASUREMENTS)})")
        if not value:
            raise self.fail(key, f"the list is empty; allowed: one or more of {', '.join(MEASUREMENTS)}")
        specs: list[tuple[int, MeasurementSpec]] = []
        for i, item in enumerate(value):
            specs += [(i, s) for s in self.measurement(f"{key}[{i}]", item, memsize)]
            limits.cells(self.source, f"{key}[{i}]", len(specs))
        seen: set[str] = set()
        for i, s in specs:
            if s.label in seen:
                raise self.fail(f"{key}[{i}].label", f"label {s.label!r} is used twice; give each item a "
                                "distinct 'label'")
            seen.add(s.label)
        return tuple(s for _, s in specs)


def parse_scenario(data: object, source: str) -> Scenario:
    c = Checker(source)
    if not isinstance(data, dict):
        raise UserError(f"the document is a {type(data).__name__}, not a mapping; allowed keys: "
                        f"{', '.join(TOP_KEYS)}", source=source)
    for k in data:
        if k not in TOP_KEYS:
            raise c.fail(str(k), f"unknown key; allowed: {', '.join(TOP_KEYS)}")
    if "name" not in data:
        raise c.fail("name", "missing; allowed: a non-empty string")
    if "measurements" not in data:
        raise c.fail("measurements", "missing; " + TOP_KEYS["measurements"])
    memsize = smp = None
    appliance = data.get("appliance")
    if appliance is not None:
        if not isinstance(appliance, dict):
            raise c.fail("appliance", f"{clip(appliance)} is not a mapping; allowed keys: {', '.join(APPLIANCE_KEYS)}")
        for k, v in appliance.items():
            if k == "memsize":
                memsize = c.memsize("appliance.memsize", v)
            elif k == "smp":
                smp = c.integer("appliance.smp", v, 1, MAX_COUNT)
            else:
                raise c.fail(f"appliance.{k}", f"unknown key; allowed: {', '.join(APPLIANCE_KEYS)}")
    return _check_sampling(c, Scenario(
        name=c.string("name", data["name"], limits.MAX_NAME),
        source=source,
        description=c.string("description", data["description"]) if "description" in data else "",
        backends=c.backends("backends", data["backends"]) if "backends" in data else None,
        repetitions=c.integer("repetitions", data.get("repetitions", DEFAULT_REPETITIONS), 1, MAX_REPETITIONS),
        warmup=c.integer("warmup", data.get("warmup", DEFAULT_WARMUP), 0, MAX_WARMUP),
        timeout=c.seconds("timeout", data.get("timeout", DEFAULT_TIMEOUT_S)),
        sample_timeout=c.seconds("sample_timeout", data.get("sample_timeout", DEFAULT_SAMPLE_TIMEOUT_S)),
        memsize=memsize,
        smp=smp,
        phases=c.boolean("phases", data.get("phases", False)),
        placements=c.placements("placement", data["placement"]) if "placement" in data else ("host",),
        nested=c.nested("nested", data["nested"]) if "nested" in data else NestedSpec(),
        measurements=c.measurements("measurements", data["measurements"], memsize),
        cost=c.cost("cost", data["cost"]) if "cost" in data else None,
        **_sampling(c, data, "", "_"),
    ), "", "_")


def _sampling(c: Checker, given: dict[str, Any], prefix: str, sep: str) -> dict[str, Any]:
    """order, seed, precision and max_repetitions from a scenario file (keys with "_") or the command line
    ("--" and "-"), checked the same way; the Scenario fields that are given."""
    def name(key: str) -> str:
        return prefix + key.replace("_", sep)

    out: dict[str, Any] = {}
    if given.get("order") is not None:
        out["order"] = c.order(name("order"), given["order"])
    if given.get("seed") is not None:
        out["seed"] = c.integer(name("seed"), given["seed"], 0)
    if given.get("precision") is not None:
        out["precision"] = c.fraction(name("precision"), given["precision"])
    if given.get("max_repetitions") is not None:
        out["max_repetitions"] = c.integer(name("max_repetitions"), given["max_repetitions"], 1, MAX_REPETITIONS)
    return out


def _check_sampling(c: Checker, sc: Scenario, prefix: str, sep: str) -> Scenario:
    """The combinations a key alone cannot refuse: a cap needs a target and may not be below repetitions;
    a seed needs order random; and the samples a run would plan are capped."""
    def name(key: str) -> str:
        return prefix + key.replace("_", sep)

    if sc.max_repetitions is not None:
        if sc.precision is None:
            raise c.fail(name("max_repetitions"), "needs precision (a cap on sampling towards a target); "
                         "without precision give repetitions")
        if sc.max_repetitions < sc.repetitions:
            raise c.fail(name("max_repetitions"), f"{sc.max_repetitions} is below repetitions ({sc.repetitions}); "
                         "allowed: an integer >= repetitions")
    limits.samples(c.source, name("repetitions"), len(sc.measurements), 1 + sc.warmup + sc.rep_cap)
    if sc.seed is not None and sc.order != "random":
        raise c.fail(name("seed"), "is only used by order random; give order: random (or --order random)")
    return sc


def load_scenario(path: str | Path) -> Scenario:
    """A scenario file: a regular file of at most 1 MiB, YAML within guestbench.util.bounded's limits, then checked."""
    source = str(path)
    text = read_text(path, "scenario file", hint="give the path of a YAML file, e.g. scenarios/startup.yaml")
    data = safe_yaml(text, source)
    if data is None:
        raise UserError(f"the file is empty; allowed keys: {', '.join(TOP_KEYS)}", source=source)
    return parse_scenario(data, source)


def apply_overrides(sc: Scenario, **overrides: Any) -> Scenario:
    """Command-line values replace the file's, validated the same way (source: 'command line')."""
    c = Checker("command line")
    changes: dict[str, Any] = {}
    given = {k: v for k, v in overrides.items() if v is not None}
    if "backend" in given:
        changes["backends"] = c.backends("--backend", given["backend"])
    if "repetitions" in given:
        changes["repetitions"] = c.integer("--repetitions", given["repetitions"], 1, MAX_REPETITIONS)
    if "warmup" in given:
        changes["warmup"] = c.integer("--warmup", given["warmup"], 0, MAX_WARMUP)
    if "timeout" in given:
        changes["timeout"] = c.seconds("--timeout", given["timeout"])
    if "sample_timeout" in given:
        changes["sample_timeout"] = c.seconds("--sample-timeout", given["sample_timeout"])
    if "memsize" in given:
        changes["memsize"] = c.memsize("--memsize", given["memsize"])
    if given.get("phases"):
        changes["phases"] = True
    if "placement" in given:
        changes["placements"] = c.placements("--placement", given["placement"])
    changes.update(_sampling(c, given, "--", "-"))
    if changes.get("order") not in (None, "random") and "seed" not in changes:
        changes["seed"] = None  # the file's seed belongs to its random order, which the command line replaced
    measurements = sc.measurements
    if "measurement" in given:
        wanted = [w.strip() for w in str(given["measurement"]).split(",") if w.strip()]
        labels = [m.label for m in measurements]
        for w in wanted:
            if w not in labels:
                raise c.fail("--measurement", f"{clip(w)} is not in this scenario; allowed: {', '.join(labels)}")
        if not wanted:
            raise c.fail("--measurement", f"empty; allowed: {', '.join(labels)}")
        measurements = tuple(m for m in measurements if m.label in wanted)
    memsize = changes.get("memsize", sc.memsize)
    if "size" in given:
        try:
            size = parse_size(given["size"])
        except ValueError as e:
            raise c.fail("--size", str(e)) from None
        sized = [m for m in measurements if "size" in m.params]
        if not sized:
            raise c.fail("--size", "no measurement in this scenario takes a size")
        new = []
        for m in measurements:
            params = dict(m.params)
            if "size" in params:
                params["size"] = size
                if "disk_size" in params:
                    # grow the image with the payload so that a bigger --size still fits
                    params["disk_size"] = max(params["disk_size"], min_disk_size(size))
            new.append(dataclasses.replace(m, params=params))
        measurements = tuple(new)
    for m in measurements:
        for pkey, problem in MEASUREMENTS[m.measurement].check(m.params, m.memsize or memsize):
            raise c.fail(f"--size ({m.label}.{pkey})" if "size" in given else f"{m.label}.{pkey}", problem)
    changes["measurements"] = measurements
    changes["overrides"] = {**sc.overrides, **given}
    return _check_sampling(c, dataclasses.replace(sc, **changes), "--", "-")


def help_text() -> str:
    """The scenario file format, for `guestbench scenario --help`."""
    lines = ["scenario file keys:"]
    lines += [f"  {k}: {v}" for k, v in TOP_KEYS.items()]
    lines += ["", "measurements and their parameters:"]
    for m in MEASUREMENTS.values():
        lines.append(f"  {m.name}: {m.summary}")
        lines.append(f"    timed: {m.timed}")
        for p in m.params:
            lines.append(f"    {p.name} (default {p.show(p.default)}): {p.help}; {p.allowed()}")
    return "\n".join(lines)
