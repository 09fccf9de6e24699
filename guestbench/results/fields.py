"""How a results file's values are read: one checker per kind of value, each refusal a ModelError that names the
key, and the Record base that reads and writes a JSON object through them (guestbench.results.model declares the
records)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, ClassVar, TypeVar
from collections.abc import Callable

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


def show(value: Any) -> str:
    """A value as the file spells it, shortened: the user finds it in the file by this."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def at(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def refuse(value: Any, key: str, problem: str, allowed: str) -> ModelError:
    return ModelError(key, f"{show(value)} {problem}; allowed: {allowed}")


def finite(value: int | float) -> bool:
    """Whether a number is finite as a float: an integer past float's range (JSON allows any) is not."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise refuse(value, key, "is not a string", "text")
    return value


def flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise refuse(value, key, "is not a boolean", "true or false")
    return value


def count(value: Any, key: str) -> int:
    """Repetition numbers, instances: counted from 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise refuse(value, key, "is not an integer", "an integer >= 1")
    if value < 1:
        raise refuse(value, key, "is below 1", "an integer >= 1")
    return value


def tally(value: Any, key: str) -> int:
    """How many of something: an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise refuse(value, key, "is not a count", "an integer >= 0")
    return value


def amount(value: Any, key: str) -> int | float:
    """A byte count: a number no smaller than zero."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value) or value < 0:
        raise refuse(value, key, "is not a number >= 0", "a number of bytes >= 0")
    return value


def seconds(value: Any, key: str) -> int | float:
    """A duration a clock measured: finite and never negative (kept as written, so 3 stays 3)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refuse(value, key, "is not a number", SECONDS)
    if not finite(value):
        raise refuse(value, key, "is not finite", SECONDS)
    if value < 0:
        raise refuse(value, key, "is negative", SECONDS)
    return value


def figure(value: Any, key: str) -> int | float:
    """A measured figure that cannot be negative (MiB, launches per minute, a percentage): a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value) or value < 0:
        raise refuse(value, key, "is not a number >= 0", "a finite number >= 0")
    return value


def fraction(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise refuse(value, key, "is not a fraction", "a number between 0 and 1")
    return value


def load(value: Any, key: str) -> dict[str, Any]:
    """A sample's host load: other processes' cores and the steal share are numbers >= 0, busy a boolean, the other
    guestbench runs active meanwhile a count."""
    mapping(value, key)
    for name in ("other_cores", "steal", "load1"):
        if name in value and value[name] is not None:
            amount(value[name], at(key, name))
    if value.get("busy") is not None:
        flag(value["busy"], at(key, "busy"))
    if value.get("other_runs") is not None:
        count(value["other_runs"], at(key, "other_runs"))
    return value


def resources(value: Any, key: str) -> dict[str, Any]:
    """What a sample's processes used: CPU seconds, peak memory and the sampling interval are numbers >= 0 (the
    peak PSS may be null: not readable), and CPU by program maps names to seconds."""
    mapping(value, key)
    for name in ("cpu_s", "peak_rss_mib", "peak_pss_mib", "peak_charged_mib", "interval_s", "meter_cpu_s"):
        if value.get(name) is not None:
            amount(value[name], at(key, name))
    if value.get("cpu_method") not in (None, "cgroup", "proc"):
        raise refuse(value["cpu_method"], at(key, "cpu_method"), "is not a known method", '"cgroup" or "proc"')
    by_program = value.get("cpu_by_program")
    if by_program is not None:
        mapping(by_program, at(key, "cpu_by_program"))
        for name, seconds in by_program.items():
            amount(seconds, at(at(key, "cpu_by_program"), str(name)))
    return value


def mapping(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise refuse(value, key, "is not an object", "a JSON object")
    return value


def array(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise refuse(value, key, "is not a list", "a JSON array")
    return value


def texts(value: Any, key: str) -> list[str]:
    return [text(item, f"{key}[{i}]") for i, item in enumerate(array(value, key))]


def objects(value: Any, key: str) -> list[dict[str, Any]]:
    return [mapping(item, f"{key}[{i}]") for i, item in enumerate(array(value, key))]


def phases(value: Any, key: str) -> list[dict[str, Any]]:
    """A start-up sample's boot phases: each a name and the seconds it took."""
    out = objects(value, key)
    for i, phase in enumerate(out):
        text(phase.get("name"), at(f"{key}[{i}]", "name"))
        seconds(phase.get("s"), at(f"{key}[{i}]", "s"))
    return out


def figures(value: Any, key: str) -> dict[str, Any]:
    """A sample's metrics: key → number or string (a verdict, a unit-bearing figure)."""
    for name, figure in mapping(value, key).items():
        if figure is not None and (isinstance(figure, bool) or not isinstance(figure, (int, float, str))):
            raise refuse(figure, at(key, name), "is not a number or a string", "a number or a string")
        if isinstance(figure, (int, float)) and not finite(figure):
            raise refuse(figure, at(key, name), "is not finite", "a finite number or a string")
    return value


def descriptors(value: Any, key: str) -> list[dict[str, Any]]:
    """A workload cell's figures as its tables head them: each a key, a label and a unit (which way is better)."""
    out = objects(value, key)
    for i, d in enumerate(out):
        for name in ("key", "label", "unit"):
            text(d.get(name), at(f"{key}[{i}]", name))
        if d.get("higher_better") is not None:
            flag(d["higher_better"], at(f"{key}[{i}]", "higher_better"))
    return out


def one_of(allowed: tuple[str, ...], what: str) -> Parser:
    def parse(value: Any, key: str) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise refuse(value, key, f"is not a {what}", ", ".join(allowed))
        return value
    return parse


def nullable(parse: Parser) -> Parser:
    """Optional fields may be null, which means the same as absent."""
    def nullable(value: Any, key: str) -> Any:
        return None if value is None else parse(value, key)
    return nullable


def list_of(cls: type[Record]) -> Parser:
    def parse(value: Any, key: str) -> list[Any]:
        return [cls.from_dict(item, f"{key}[{i}]") for i, item in enumerate(array(value, key))]
    return parse


def map_of(cls: type[Record]) -> Parser:
    def parse(value: Any, key: str) -> dict[str, Any]:
        return {name: cls.from_dict(item, at(key, name)) for name, item in mapping(value, key).items()}
    return parse


# ---------------------------------------------------------------------------------------------- records


def default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [plain(item) for item in value] if any(isinstance(i, Record) for i in value) else value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()} if any(isinstance(v, Record) for v in value.values()) \
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
            raise refuse(value, key, "is not an object", cls.WHAT)
        for name, what in cls.REQUIRED.items():
            if name not in value:
                raise ModelError(at(key, name), f"missing; required: {what}")
        kwargs = {name: parse(value[name], at(key, name)) for name, parse in cls.FIELDS.items() if name in value}
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

    @classmethod
    def checked(cls: type[R], **values: Any) -> R:
        """A record made in code, each value read as a file's would be (a ModelError names the field): what a run
        records is refused where it is made, never where it is read back. Written as any record built in code."""
        for name, what in cls.REQUIRED.items():
            if name not in values:
                raise ModelError(name, f"missing; required: {what}")
        return cls(**{name: cls.FIELDS[name](value, name) if name in cls.FIELDS else value
                      for name, value in values.items()})

    @classmethod
    def laid_out(cls: type[R], **values: Any) -> R:
        """A record made in code that writes exactly the keys given, in their order, null and empty ones too, as one
        read from a file that had them would: the layout docs/results-format.md gives a record a run writes."""
        return cls(**values, source_keys=tuple(values))

    def replaced(self: R, **changes: Any) -> R:
        """A copy with `changes`, its lists and objects its own; a key it did not have goes after the others, as a
        dict merge ({**d, **changes}) puts it."""
        own = {f.name: copy.copy(getattr(self, f.name)) for f in fields(self)
               if f.init and isinstance(getattr(self, f.name), (list, dict))}
        keys = self.source_keys + tuple(name for name in changes if name not in self.source_keys)
        return dataclasses.replace(self, **{**own, **changes, "source_keys": keys})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: source keys in their order (known and unknown), then new non-default fields."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name not in self.FIELDS:
                continue
            value = getattr(self, f.name)
            if f.name in self.REQUIRED or f.name in self.source_keys or value != default(f):
                out[f.name] = plain(value)
        out.update(self.extra)
        rank = {k: i for i, k in enumerate(self.source_keys)}
        return dict(sorted(out.items(), key=lambda item: rank.get(item[0], len(rank))))
