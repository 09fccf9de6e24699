"""Per-machine baselines for `guestbench history` (as Kata's checkmetrics keeps them): the expected level of each
series on a machine and how far from it a newest run may be. `--write-baseline` pins the newest segment's level
with the series' noise floor as tolerance; `--baseline` holds the newest runs against it. A baseline file is read
as untrusted YAML (util.bounded) and checked key by key."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from guestbench.analysis.history import History, Series
from guestbench.util.bounded import read_text, safe_yaml
from guestbench.util.errors import UserError

FORMAT = "guestbench-history-baseline"
VERSION = 1
MACHINE_KEYS = ("cpu_model", "cores", "memory_gib", "vm", "kvm_flavour")


@dataclass(frozen=True)
class Expected:
    expected: float
    tolerance_pct: float
    higher_better: bool


def _level(s: Series) -> float:
    """The newest segment's level: where the series stands now."""
    cut = max([st.at for st in s.verdict.steps if not st.newest] + [0])
    return float(statistics.median(p.median for p in s.points[cut:]))


def document(h: History) -> dict[str, Any]:
    """The baseline of `h`: per machine, every series' current level and its noise floor as tolerance."""
    machines = []
    for mi, m in enumerate(h.machines):
        series = {s.key: {"expected": round(_level(s), 6), "unit": s.unit if s.figure != "seconds" else "s",
                          "higher_better": s.higher_better, "tolerance_percent": round(s.verdict.floor_pct, 2)}
                  for s in h.series if s.machine == mi}
        machines.append({"machine": {k: m.key.get(k) for k in MACHINE_KEYS}, "label": m.label, "series": series})
    return {"format": FORMAT, "version": VERSION, "machines": machines}


def dump(h: History) -> str:
    return ("# guestbench history baseline: each machine's expected level per series; a newest run worse than its\n"
            "# expected value by more than tolerance_percent is a regression (guestbench history --baseline)\n"
            + yaml.safe_dump(document(h), sort_keys=False, allow_unicode=True))


def load(path: str) -> list[tuple[dict[str, Any], dict[str, Expected]]]:
    """(machine key, series key → expected) per machine of a baseline file; one line and exit 2 for anything
    else."""
    data = safe_yaml(read_text(path, "baseline file"), path)
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise UserError(f"not a history baseline (keys format: {FORMAT} and version: {VERSION})", source=path)
    machines = data.get("machines")
    if not isinstance(machines, list):
        raise UserError("is not a list; allowed: a list of machines", source=path, key="machines")
    return [_machine(item, path, f"machines[{i}]") for i, item in enumerate(machines)]


def _machine(item: Any, path: str, key: str) -> tuple[dict[str, Any], dict[str, Expected]]:
    if not isinstance(item, dict) or not isinstance(item.get("machine"), dict) or \
            not isinstance(item.get("series"), dict):
        raise UserError("allowed: a mapping with machine (a mapping) and series (a mapping)", source=path, key=key)
    series = {}
    for name, e in item["series"].items():
        where = f"{key}.series.{name}"
        if not isinstance(e, dict) or not _number(e.get("expected")) or e["expected"] <= 0 or \
                not _number(e.get("tolerance_percent")) or not isinstance(e.get("higher_better"), bool):
            raise UserError("allowed: a mapping with expected (a number > 0), tolerance_percent (a number >= 0) "
                            "and higher_better (true or false)", source=path, key=where)
        series[str(name)] = Expected(float(e["expected"]), float(e["tolerance_percent"]), e["higher_better"])
    return {k: item["machine"].get(k) for k in MACHINE_KEYS}, series


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


@dataclass
class Judged:
    """What a baseline said of a history: the series it pins (their gate is the baseline's, not the history's),
    the newest runs that missed it, and what it pins that the history does not have (or the other way round)."""

    pinned: set[tuple[int, str]]  # (machine index, series key)
    missed: list[str]
    notes: list[str]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def judge(h: History, pinned: list[tuple[dict[str, Any], dict[str, Expected]]]) -> Judged:
    """Each pinned series' newest run against its expected level: worse by more than the tolerance is a miss."""
    out = Judged(set(), [], [])
    used = set()
    for mi, m in enumerate(h.machines):
        mine = {k: m.key.get(k) for k in MACHINE_KEYS}
        found = [i for i, (key, _) in enumerate(pinned) if _same(key, mine)]
        if not found:
            out.notes.append(f"the baseline pins nothing for {m.label}: its series are judged by their history")
            continue
        used.add(found[0])
        expected = pinned[found[0]][1]
        for s in (x for x in h.series if x.machine == mi and x.key in expected):
            e = expected[s.key]
            out.pinned.add((mi, s.key))
            change = (s.points[-1].median / e.expected - 1) * 100
            if (-change if e.higher_better else change) > e.tolerance_pct:
                out.missed.append(f"{m.label}: {s.key}: the newest run ({m.runs[s.points[-1].run].path}) is "
                                  f"{abs(change):.1f}% {'below' if e.higher_better else 'above'} its baseline "
                                  f"{e.expected:.4g} (tolerance {e.tolerance_pct:g}%)")
        keys = {s.key for s in h.series if s.machine == mi}
        out.notes += [f"the baseline pins {k} on {m.label}, which no run here measured" for k in expected
                      if k not in keys]
    out.notes += [f"the baseline's machine {i + 1} matches no machine of these runs" for i in range(len(pinned))
                  if i not in used]
    return out


def write(h: History, path: str) -> None:
    """The baseline of `h` to `path`, replacing only a regular file of this user's (results.atomic_write_bytes)."""
    from guestbench.results import atomic_write_bytes

    atomic_write_bytes(Path(path), dump(h).encode(), what="baseline file")
