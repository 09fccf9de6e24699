"""Hostile scenario files and flags (issue 31, "small files exhaust memory or time"): each is given to the real CLI
in its own process and must end within seconds with exit status 2 and one short line on stderr that quotes at
most a short prefix of the value and no control character; no traceback, no internal error, nothing left.

Before bounds existed these took 24 s of CPU then "internal error: MemoryError" (an alias bomb), printed an 8 MB
line (a smaller one), allocated 12 GB (`repetitions: 1000000000`), hung (a 14 KB matrix, a FIFO,
/dev/urandom), ended in exit 70 (a 5000-digit number) or printed ESC sequences raw. Each process runs with a
3 GiB address-space limit, so that old code fails fast here instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from guestbench.results import limits as results_limits
from guestbench.results import load_results
from guestbench.results import pytest_benchmark as pbj
from guestbench.execute.remote import KEPT_BELOW
from guestbench.scenario import limits
from guestbench.util import bounded
from guestbench.util.errors import UserError, clip, one_line
from guestbench.scenario import load_scenario, parse_scenario
from helpers.cli import guestbench
from helpers.paths import ROOT

MIN = "measurements: [startup]\n"
LINE_MAX = 300  # characters of the one stderr line
DEADLINE_S = 20.0  # per process, on a loaded 2-core machine; each takes a second or two alone


def _bomb(levels: int, width: int, where: str) -> str:
    """The billion laughs: each anchor a list of `width` aliases of the one before; `where` is the key that
    gets the last one (a name that must be a string, so old code quoted the whole expansion)."""
    items = [f"&a0 [{', '.join(['lol'] * width)}]"]
    items += [f"&a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return f"{where}: [{', '.join(items)}]\n" + MIN


def _sizes(first: int, n: int, unit: str) -> str:
    return "[" + ", ".join(f"{first + i}{unit}" for i in range(n)) + "]"


FILES: dict[str, str] = {
    "alias-bomb": _bomb(9, 9, "name"),  # 9^9 'lol's from 300 bytes
    "alias-bomb-under-cap": _bomb(7, 4, "name"),  # 29,000 values: loads, and the message quotes it
    "alias-self": "name: &a [x, *a]\n" + MIN,
    "deep": "name: x\n" + MIN + "description: " + "[" * 10_000 + "]" * 10_000 + "\n",
    "repetitions-1e9": "name: x\nrepetitions: 1000000000\n" + MIN,
    "max-repetitions-huge": "name: x\nprecision: 5%\nmax_repetitions: 10000000000\n" + MIN,
    "warmup-huge": "name: x\nwarmup: 99999999\n" + MIN,
    "samples": "name: x\nrepetitions: 100000\nmeasurements: [" + ", ".join(
        f"{{measurement: startup, label: s{i}}}" for i in range(11)) + "]\n",
    "matrix-14k": "name: x\nmeasurements:\n  - measurement: fio\n    matrix:\n"
                  f"      bs: {_sizes(1, 400, 'KiB')}\n      size: {_sizes(1000, 400, 'MiB')}\n"
                  f"      disk_size: {_sizes(100000, 500, 'MiB')}\n",
    "cells": "name: x\nmeasurements: [" + ", ".join(
        f"{{measurement: startup, label: s{i}}}" for i in range(limits.MAX_CELLS + 1)) + "]\n",
    "digits-5000": f"name: x\nrepetitions: {'1' * 5000}\n" + MIN,
    "hex-5000": f"name: x\nrepetitions: 0x{'f' * 5000}\n" + MIN,
    "base60": f"name: x\nrepetitions: {':'.join(['59'] * 3000)}\n" + MIN,
    "size-5000-digits": f"name: x\nmeasurements:\n  - measurement: upload\n    size: '{'9' * 5000}MiB'\n",
    "size-4000-digits": f"name: x\nmeasurements:\n  - measurement: upload\n    size: {'9' * 4000}\n",
    "int-param-huge": "name: x\nmeasurements:\n  - measurement: bonnie\n    files: 102400000000000000000000\n",
    "smp-huge": "name: x\nappliance: {smp: 99999999999999999999}\n" + MIN,
    "memsize-huge": "name: x\nappliance: {memsize: 99999999999999999999}\n" + MIN,
    "name-300": "name: " + "n" * 300 + "\n" + MIN,
    "name-900k": "name: " + "n" * 900_000 + "\n" + MIN,
    "name-esc": 'name: "\\e]0;owned\\a\\e[2J\\e[31mred"\n' + MIN,
    "key-esc": 'name: x\n"\\e[2Jkey\\e[0m": 1\n' + MIN,
    "label-300": "name: x\nmeasurements: [{measurement: startup, label: " + "l" * 300 + "}]\n",
    "value-1m": f"name: x\nrepetitions: '{'r' * 1_000_000}'\n" + MIN,
    "not-utf8": "",  # written as bytes below
}
NEEDLES: dict[str, str] = {
    "alias-bomb": "more than 100000 values", "alias-bomb-under-cap": "name: [", "alias-self": "inside the node",
    "deep": "nested more than 50 levels", "repetitions-1e9": "repetitions: 1000000000 is too large",
    "max-repetitions-huge": "max_repetitions: 10000000000 is too large", "warmup-huge": "warmup: 99999999 is too large",
    "samples": "more than 1000000 per backend", "matrix-14k": "80000000 combinations; allowed: at most 1000",
    "cells": f"measurements[{limits.MAX_CELLS}]: makes more than {limits.MAX_CELLS} cells",
    "digits-5000": "a number of 5000 characters", "hex-5000": "a number of 5002 characters",
    "base60": "a number of 8999 characters", "size-5000-digits": "too large",
    "size-4000-digits": "a number of 4000 characters",
    "int-param-huge": "too large", "smp-huge": "too large", "memsize-huge": "too large",
    "name-300": "has 300 characters; allowed: at most 100", "name-900k": "has 900000 characters",
    "name-esc": "holds a control character", "key-esc": "unknown key", "label-300": "at most 64",
    "value-1m": "is not an integer", "not-utf8": "is not UTF-8",
}


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]  # {d}: the case directory
    needle: str


def _file_case(name: str) -> Case:
    return Case(("scenario", f"{{d}}/{name}.yaml", "--dry-run"), NEEDLES[name])


def _flag_case(flag: str, value: str, needle: str, scenario: str = "scenarios/startup.yaml") -> Case:
    return Case(("scenario", scenario, flag, value, "--dry-run"), needle)


CASES: dict[str, Case] = {
    **{f"file-{name}": _file_case(name) for name in FILES},
    "file-fifo": Case(("scenario", "{d}/fifo.yaml", "--dry-run"), "is a FIFO, not a regular file"),
    "file-dev-urandom": Case(("scenario", "/dev/urandom", "--dry-run"), "is a character device"),
    "file-dev-zero": Case(("scenario", "/dev/zero", "--dry-run"), "is a character device"),
    "file-sparse-100g": Case(("scenario", "{d}/sparse.yaml", "--dry-run"), "allowed: at most 1MiB"),
    "file-symlink-to-fifo": Case(("scenario", "{d}/link.yaml", "--dry-run"), "is a FIFO"),
    "file-path-5000": Case(("scenario", "x" * 5000, "--dry-run"), "cannot read scenario file: File name too long"),
    "flag-results-path-5000": _flag_case("--results", "r" * 5000, "File name too long: rrrr"),
    "flag-repetitions-4000-digits": _flag_case("--repetitions", "9" * 4000, "--repetitions: <an integer of about"),
    "flag-repetitions-5000-digits": _flag_case("--repetitions", "9" * 5000, "invalid int value"),
    "flag-repetitions-1e9": _flag_case("--repetitions", "1000000000", "--repetitions: 1000000000 is too large"),
    "flag-warmup-huge": _flag_case("--warmup", "99999999", "--warmup: 99999999 is too large"),
    "flag-seed-huge": Case(("scenario", "scenarios/startup.yaml", "--order", "random", "--seed", "9" * 100,
                            "--dry-run"), "--seed: <an integer of about 101 digits> is too large"),
    "flag-max-repetitions-huge": Case(("scenario", "scenarios/startup.yaml", "--precision", "5%",
                                       "--max-repetitions", "9" * 50, "--dry-run"), "--max-repetitions: "),
    "flag-memsize-5000-digits": _flag_case("--memsize", "9" * 5000, "--memsize: "),
    "flag-size-5000-digits": _flag_case("--size", "9" * 5000 + "MiB", "--size: bad size", "scenarios/upload.yaml"),
    "flag-timeout-5000-digits": _flag_case("--timeout", "9" * 5000, "--timeout: "),
    "flag-measurement-esc": _flag_case("--measurement", "\x1b[2J" + "m" * 5000, "--measurement: "),
    # ab has no --dry-run: a results "directory" that is a file stops it should its sides ever pass
    "ab-raw-esc": Case(("ab", "scenarios/upload.yaml", "--b", "cache=\x1b[2J", "--results", "{d}/fifo.yaml"),
                       "command line: --b cache: '\\x1b[2J' is not allowed"),
    "ab-size-5000-digits": Case(("ab", "scenarios/upload.yaml", "--b", "size=" + "9" * 5000, "--results",
                                 "{d}/fifo.yaml"), "command line: --b size: bad size"),
}


def _prepare(d: Path) -> None:
    for name, text in FILES.items():
        (d / f"{name}.yaml").write_text(text)
    (d / "not-utf8.yaml").write_bytes(b"name: \xff\xfe\x1b[2J\n")
    os.mkfifo(d / "fifo.yaml")
    os.symlink(d / "fifo.yaml", d / "link.yaml")
    with open(d / "sparse.yaml", "wb") as f:
        f.truncate(100 * 2**30)  # 100 GiB of holes: refused from its size, never read


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


def _run(argv: tuple[str, ...], d: Path, env: dict[str, str]) -> tuple[int | None, str, str, float]:
    """(status or None when it did not end in time, stdout, stderr, seconds); a late process is killed."""
    start = time.monotonic()
    with subprocess.Popen([sys.executable, "-m", "guestbench", *[a.replace("{d}", str(d)) for a in argv]], cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          preexec_fn=_limit_memory) as p:
        try:
            out, err = p.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            return None, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - start
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - start


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    _prepare(d)
    return d


@pytest.fixture(scope="module")
def runs(case_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int | None, str, str, float]]:
    """Every case as a process, two at a time; the state directory each used is checked afterwards."""
    state = tmp_path_factory.mktemp("state")
    env = {**os.environ, "GUESTBENCH_TMPDIR": str(state), "GUESTBENCH_CACHE": str(state / "cache")}
    before = sorted(p.name for p in case_dir.iterdir())
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(_run, c.argv, case_dir, env) for k, c in CASES.items()}
        done = {k: f.result() for k, f in futures.items()}
    assert sorted(p.name for p in case_dir.iterdir()) == before  # nothing written beside the inputs
    assert not list(state.rglob("guestbench-run-*")), list(state.rglob("*"))
    return done


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input_is_exit_2_in_one_short_line(name: str, runs: dict[str, tuple[int | None, str, str, float]],
                                                   case_dir: Path) -> None:
    status, out, err, seconds = runs[name]
    assert status is not None, f"still running after {DEADLINE_S:.0f} s; stderr: {err[:300]!r}"
    assert "Traceback" not in out + err
    assert status == 2, (status, err[:500])
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err[:500]
    line = lines[0]
    assert len(line) <= LINE_MAX, (len(line), line[:500])
    assert "internal error" not in line
    assert not any(ord(ch) < 32 or ord(ch) == 127 for ch in line), repr(line)  # no ESC, BEL: nothing for the tty
    assert CASES[name].needle.replace("{d}", str(case_dir)) in line, line


# ---- the bounds themselves, in-process


def test_a_scenario_at_the_cell_cap_reads_back_through_the_file_a_nested_or_fleet_run_writes(tmp_path: Path) -> None:
    """The inner guestbench of a nested or fleet run reads the scenario from a file: at the cap on cells (each
    with every parameter, an env and an appliance written out) that file stays within bounded's caps."""
    axes = {"bs": [f"{i}KiB" for i in range(1, 11)], "iodepth": list(range(1, 11)),
            "size": [f"{i}GiB" for i in range(1, 11)]}
    doc = {"name": "x", "measurements": [{"measurement": "fio", "label": "f", "rw": "randrw", "disk_size": "100GiB",
                                          "env": {"A": "b", "C": "d"}, "appliance": {"memsize": 2048}, "matrix": axes}]}
    sc = parse_scenario(doc, "x")
    assert len(sc.measurements) == limits.MAX_CELLS
    path = tmp_path / "inner.yaml"
    path.write_text(yaml.safe_dump(sc.to_file(placement=["host"]), sort_keys=False))
    assert path.stat().st_size < bounded.MAX_FILE_BYTES
    assert load_scenario(path).measurements == sc.measurements


def test_aliases_are_counted_as_what_they_repeat() -> None:
    shared = "[" + ", ".join(["1"] * 1000) + "]"
    text = f"a: &x {shared}\nb: [" + ", ".join(["*x"] * 99) + "]\n"  # 99 aliases of 1,001 values each
    with pytest.raises(UserError, match="more than 100000 values"):
        bounded.safe_yaml(text, "src")
    small = f"a: &x {shared}\nb: [" + ", ".join(["*x"] * 50) + "]\n"
    assert len(bounded.safe_yaml(small, "src")["b"]) == 50


def test_alias_count_depth_through_aliases_and_ordinary_anchors() -> None:
    many = "a: &x 1\nb: [" + ", ".join(["*x"] * 101) + "]\n"
    with pytest.raises(UserError, match="more than 100 aliases"):
        bounded.safe_yaml(many, "src")
    deep = "a: &x " + "[" * 30 + "]" * 30 + "\nb: " + "[" * 30 + "*x" + "]" * 30 + "\n"  # 30 + 31 levels
    with pytest.raises(UserError, match="nested more than 50 levels"):
        bounded.safe_yaml(deep, "src")
    beside = "a: " + "[" * 45 + "]" * 45 + "\nb: &x 1\nc: " + "[" * 45 + "*x" + "]" * 45 + "\n"  # x is 1 high
    assert bounded.safe_yaml(beside, "src")["b"] == 1
    merged = "defaults: &d {size: 1GiB, cache: unsafe}\nitem: {<<: *d, label: x}\n"
    assert bounded.safe_yaml(merged, "src")["item"] == {"size": "1GiB", "cache": "unsafe", "label": "x"}


def test_syntax_errors_keep_pyyaml_words_and_position() -> None:
    with pytest.raises(UserError, match=r"src: not valid YAML at line 1, column 6: expected ',' or '\]'"):
        bounded.safe_yaml("a: [b", "src")


def test_raw_control_characters_and_lone_surrogates_are_refused_in_words() -> None:
    with pytest.raises(UserError, match=r"src: not valid YAML: control characters are not allowed \(#x1b at"):
        bounded.safe_yaml("name: a\x1bb\n", "src")
    with pytest.raises(UserError, match="src: not valid YAML: character 6 is not UTF-8"):
        bounded.safe_yaml("name: \udcff\n", "src")  # how Python hands on a command-line byte that is not UTF-8


def test_clip_quotes_a_short_prefix_without_building_the_whole_repr() -> None:
    assert clip("x" * 10**6) == repr("x" * 60) + "..."
    assert clip(10**5000) == "<an integer of about 5001 digits>"
    nested: list[object] = ["lol"] * 9
    for _ in range(12):  # 9^13 leaves: a full repr would never end
        nested = [nested] * 9
    assert len(clip(nested)) <= 70
    assert clip({"b": 1, "a": 2}) == "{'b': 1, 'a': 2}"  # a mapping keeps its order


def test_one_line_escapes_control_characters_and_can_be_limited() -> None:
    assert one_line("a\x1b[2Jb\x07c\nd") == "a\\x1b[2Jb\\x07c\\nd"
    assert one_line("x" * 50, limit=10) == "x" * 10 + "... (40 more characters)"


def test_a_symlink_to_a_scenario_is_read(tmp_path: Path) -> None:
    """The user names the path; reading through a link changes nothing, and the file read is checked."""
    real = tmp_path / "real.yaml"
    real.write_text("name: x\n" + MIN)
    (tmp_path / "link.yaml").symlink_to(real)
    assert load_scenario(tmp_path / "link.yaml").name == "x"


def test_a_command_matrix_value_with_escape_sequences_labels_its_cell_escaped() -> None:
    """A matrix of commands labels each cell with its words; an ESC among them is shown, never sent raw."""
    doc = {"name": "x",
           "measurements": [{"measurement": "command", "matrix": {"argv": [["echo", "\x1b[2J"], ["true"]]}}]}
    labels = [m.label for m in parse_scenario(doc, "src").measurements]
    assert labels == ["command.echo '\\x1b[2J'", "command.true"]


def test_a_lone_surrogate_escape_is_refused_wherever_it_stands(tmp_path: Path) -> None:
    """"\\ud800" in YAML decodes to a lone surrogate, which no terminal or program can take (it was exit 70 from
    the name's title, and from argv and env in the dry run's table)."""
    for body in ('name: "\\ud800"\nmeasurements: [startup]\n',
                 'name: s\nmeasurements: [{measurement: command, argv: ["true", "a\\ud800"], env: {A: "\\udc00"}}]\n'):
        sc = tmp_path / "s.yaml"
        sc.write_text(body)
        done = guestbench("scenario", str(sc), "--dry-run", "--results", str(tmp_path), timeout=60)
        line = done.stderr.rstrip("\n")
        assert done.returncode == 2 and "\n" not in line and "lone surrogate" in line, done.stderr[-2000:]


# ---- JSON nobody vouches for (results.limits): depth counted before parsing, NaN and Infinity refused


def _random_json(rng: random.Random, level: int) -> Any:
    """A value whose strings hold what could fool a bracket count: brackets, escaped quotes and backslashes."""
    if level > 8 or rng.random() < 0.3:
        return rng.choice(["[", "]", "{}", '"', '\\"[', "\\", "\\\\", 'a"]"b', "", "x", 1, 2.5, None, True])
    if rng.random() < 0.5:
        return [_random_json(rng, level + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["[", "k", '"}', "\\"]) + str(i): _random_json(rng, level + 1) for i in range(rng.randint(0, 3))}


def test_the_depth_counted_over_the_text_is_the_parsed_depth() -> None:
    rng = random.Random(46)
    for _ in range(2000):
        value = _random_json(rng, 1)
        text = json.dumps(value, indent=rng.choice([None, 1])).encode()
        depth = results_limits.deepest(value)
        assert not results_limits.nests_deeper(text, depth), text
        assert results_limits.nests_deeper(text, depth - 1) == (depth > 0), text


def test_json_nested_past_the_limit_is_refused_before_it_is_parsed() -> None:
    limit = results_limits.MAX_DEPTH
    assert results_limits.loads(("[" * limit + "]" * limit).encode(), "src", "x") is not None
    with pytest.raises(UserError, match=f"src: arrays and objects nested more than {limit} levels deep"):
        results_limits.loads(("[" * (limit + 1) + "]" * (limit + 1)).encode(), "src", "x")
    with pytest.raises(UserError, match="nested more than"):  # 64 MiB of '[': refused at the first brackets
        results_limits.loads(b"[" * results_limits.MAX_BYTES, "src", "x")
    assert results_limits.loads(b'["' + b"[" * 1000 + b'"]', "src", "x") == ["[" * 1000]  # text, not nesting


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999", "-1E+400"])
def test_nan_and_infinity_are_refused_by_the_json_parser(token: str) -> None:
    with pytest.raises(UserError, match=f"src: line 2: {re.escape(token)} is not a finite number; allowed: finite"):
        results_limits.loads(f'{{"a": "NaN",\n "b": [1, {token}]}}'.encode(), "src", "x")
    assert results_limits.loads(b'{"a": "NaN", "b": 1.7e308}', "src", "x") == {"a": "NaN", "b": 1.7e308}


def test_the_deepest_files_guestbench_writes_leave_the_depth_limit_room() -> None:
    """MAX_DEPTH's docstring: guestbench's files nest at most about ten levels, and a document from elsewhere
    is kept KEPT_BELOW levels further down; the shipped results files (a fleet run's, a nested placement's) and
    their pytest-benchmark exports say how deep that is."""
    deepest = 0
    for path in sorted((ROOT / "tests" / "data").rglob("*.json")):
        try:
            run = load_results(path)
        except UserError:
            continue  # not a results file (a figure's data, a baseline)
        deepest = max(deepest, results_limits.deepest(run.to_dict()), results_limits.deepest(pbj.export(run)))
    assert 7 <= deepest <= 10
    assert deepest + KEPT_BELOW + KEPT_BELOW <= results_limits.MAX_DEPTH // 4  # a fleet host's nested placement
