"""`guestbench ab`: the scenario of two configurations measured in one run, interleaved (compared by
guestbench.analysis.ab).

Every item of the scenario becomes two cells per backend, `<label>.A` and `<label>.B`, variants of one item, so
they take turns sample by sample (guestbench.plan.schedule) and see the same stretch of the machine's time; with
placement nested the level-1 guest gets the items with their `ab` key and interleaves them the same way. A
side is a list of KEY=VALUE: a measurement parameter (cache=unsafe, size=64MiB), `memsize` (the appliance's
MiB), or an environment variable in capitals (LIBGUESTFS_HV=/opt/qemu/bin/qemu-system-x86_64, LIBGUESTFS_PATH=
another appliance), which the cells' workers and the libguestfs programs they run get. The verdict per
backend and figure: the ratio B/A with its bootstrap CI, a permutation test, a noise threshold, and which way
is better (guestbench.analysis.compare).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from guestbench.measurements import MEASUREMENTS
from guestbench.scenario.checker import Checker
from guestbench.scenario.model import ENV_NAME, SIDE, SIDES, MeasurementSpec, Scenario
from guestbench.util.bounded import safe_yaml
from guestbench.util.errors import UserError, clip


def parse_side(words: list[str], flag: str) -> dict[str, str]:
    """KEY=VALUE words; the same key twice or a word without '=' is refused."""
    out: dict[str, str] = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise UserError(f"{clip(word)} is not KEY=VALUE; allowed: a measurement parameter (cache=unsafe), "
                            "memsize=MiB, or an environment variable (LIBGUESTFS_HV=/path)", source="command line",
                            key=flag)
        if key in out:
            raise UserError(f"{key} is given twice", source="command line", key=flag)
        out[key] = value
    return out


def _value(text: str) -> Any:
    """A command-line value typed as YAML would type it (3 → int, true → bool), so parameters parse as in a file
    (within the bounds of a file's YAML)."""
    try:
        return safe_yaml(text, "command line")
    except UserError:
        return text


def _side(c: Checker, spec: MeasurementSpec, side: dict[str, str], name: str,
          scenario_memsize: int | None) -> MeasurementSpec:
    flag = f"--{name.lower()}"
    m = MEASUREMENTS[spec.measurement]
    params, env, memsize = dict(spec.params), dict(spec.env), spec.memsize
    for key, text in side.items():
        if key in spec.variant:
            raise c.fail(f"{flag} {key}", f"is a matrix axis of item {clip(spec.group)}, whose cells already differ in "
                         "it; give a side a key the matrix does not vary")
        if key == "memsize":
            memsize = c.memsize(f"{flag} memsize", text)
        elif key in {p.name for p in m.params}:
            try:
                params[key] = m.param(key).parse(_value(text))
            except ValueError as e:
                raise c.fail(f"{flag} {key}", str(e)) from None
        elif key.isupper() and ENV_NAME.fullmatch(key):
            env[key] = text
    for pkey, problem in m.check(params, memsize or scenario_memsize):
        raise c.fail(f"{flag} ({spec.label}.{pkey})", problem)
    return dataclasses.replace(spec, label=f"{spec.label}.{name}", params=params, env=env, memsize=memsize,
                               variant={**spec.variant, SIDE: name})


def ab_scenario(sc: Scenario, a: dict[str, str], b: dict[str, str]) -> Scenario:
    """The scenario with every item split into its A and B cells (interleaved unless the order says random)."""
    c = Checker("command line")
    if a == b:
        raise c.fail("--a/--b", "both sides are the same configuration; give B at least one different KEY=VALUE")
    known = {"memsize"} | {p.name for s in sc.measurements for p in MEASUREMENTS[s.measurement].params}
    for flag, side in (("--a", a), ("--b", b)):
        for key in side:
            if key not in known and not (key.isupper() and ENV_NAME.fullmatch(key)):
                raise c.fail(f"{flag} {key}", f"is neither a parameter of this scenario's measurements nor memsize "
                             f"nor an environment variable in capitals; allowed: {', '.join(sorted(known))}, NAME")
    specs = [_side(c, spec, side, name, sc.memsize) for spec in sc.measurements for name, side in zip(SIDES, (a, b))]
    return dataclasses.replace(sc, name=f"{sc.name}-ab", measurements=tuple(specs),
                               order=sc.order if sc.order == "random" else "interleaved")
