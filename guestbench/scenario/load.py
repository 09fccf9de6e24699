"""Scenario files: read and parse YAML (bounded), expand the items, apply command-line overrides."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from guestbench.scenario import limits
from guestbench.util.bounded import read_text, safe_yaml
from guestbench.util.errors import UserError, clip
from guestbench.scenario.limits import MAX_COUNT, MAX_REPETITIONS, MAX_WARMUP
from guestbench.measurements import MEASUREMENTS
from guestbench.measurements.base import min_disk_size
from guestbench.util.units import parse_size
from guestbench.scenario.checker import Checker
from guestbench.backends.uml.channel import MODES
from guestbench.scenario.model import (APPLIANCE_KEYS, DEFAULT_REPETITIONS, DEFAULT_SAMPLE_TIMEOUT_S, DEFAULT_TIMEOUT_S,
                                       DEFAULT_WARMUP, NestedSpec, Scenario, TOP_KEYS)


def parse_scenario(data: object, source: str) -> Scenario:
    c = Checker(source)
    if not isinstance(data, dict):
        raise UserError(f"the document is a {type(data).__name__}, not a mapping; allowed keys: "
                        f"{', '.join(TOP_KEYS)}", source=source)
    for k in data:
        if k not in TOP_KEYS:
            raise c.fail(str(k), f"unknown key; allowed: {' '.join(TOP_KEYS)}")  # one short line: 19 keys
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
        cold=c.boolean("cold", data.get("cold", True)),
        placements=c.placements("placement", data["placement"]) if "placement" in data else ("host",),
        stacks=c.stacks("stacks", data["stacks"]) if "stacks" in data else ("host",),
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
    if "stack" in given:
        changes["stacks"] = c.stacks("--stack", given["stack"])
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
    if "uml_mode" in given:
        modes = c.names("--uml-mode", given["uml_mode"], "UML mode", MODES)
        measurements = tuple(dataclasses.replace(m, uml_modes=modes) for m in measurements)
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
