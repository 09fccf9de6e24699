"""The checks of every scenario value: each says where (file, key path), what is wrong and what is allowed."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import unicodedata
from typing import Any

from guestbench.scenario import limits
from guestbench.scenario import prices as cost
from guestbench.backends import BACKENDS
from guestbench.backends.uml.channel import MODES
from guestbench.backends.uml.drives import DRIVE_PATHS
from guestbench.stacks.store import HOST, NAME_RE
from guestbench.util.errors import UserError, clip
from guestbench.scenario.limits import INT64_MAX, MAX_COUNT, MAX_LABEL, MAX_MIB, MAX_TEXT
from guestbench.measurements import MEASUREMENTS
from guestbench.results.model import ORDERS
from guestbench.util.units import parse_size
from guestbench.scenario.model import (ENV_NAME, ITEM_KEYS, LABEL, MeasurementSpec, NESTED_KEYS, NestedSpec, PLACEMENTS,
                                       SIDE, SIDES)


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

    def stacks(self, key: str, value: object) -> tuple[str, ...]:
        """Software stacks by name: host, or a stack's (built or not: the dry run and the run say which are not)."""
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",")]
        if not isinstance(value, list) or not value:
            raise self.fail(key, f"{clip(value)} is not a non-empty list; allowed: host and stack names (guestbench "
                            "stack list)")
        out: list[str] = []
        for i, name in enumerate(value):
            if not isinstance(name, str) or not (name == HOST or NAME_RE.fullmatch(name)):
                raise self.fail(f"{key}[{i}]", f"{clip(name)} is not a stack name; allowed: host, or a lower-case "
                                "letter then lower-case letters, digits or '-' (guestbench stack list)")
            if name in out:
                raise self.fail(f"{key}[{i}]", f"stack {clip(name)} is listed twice")
            out.append(name)
        return tuple(out)

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
        modes = self.names(f"{key}.uml_mode", item["uml_mode"], "UML mode", MODES) if "uml_mode" in item else ()
        drive_paths = self.names(f"{key}.drive_path", item["drive_path"], "drive path", DRIVE_PATHS) \
            if "drive_path" in item else ()
        for k, v in item.items():
            if k in ITEM_KEYS:
                continue
            if k not in known:
                ok = ", ".join(["label", "matrix", *sorted(known), "env", "appliance", "uml_mode", "drive_path"])
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
                                         memsize=item_memsize, uml_modes=modes,
                                         drive_paths=drive_paths))
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
