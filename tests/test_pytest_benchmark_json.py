"""guestbench export / import: results files ↔ pytest-benchmark JSON.

Checked against pytest-benchmark itself: its Stats class for every summary field, its `compare` command
and its `--benchmark-compare` loader for the files we write. The round trip runs on real results files:
those kept in tests/data/results.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.stats import Stats

from guestbench import cli
from guestbench.results import pytest_benchmark as pbj
from guestbench.analysis.compare import cells_by_key
from guestbench.results import Run, load_results
from helpers.cli import main_in_process as _main
from helpers.paths import ROOT

pytest_plugins = ["pytester"]

# real results files written by `guestbench scenario` on this project's machines, kept for tests (not
# results/: what a user's runs leave there, possibly mid-run, must not change what the tests check)
REAL = sorted((ROOT / "tests" / "data" / "results").glob("*.json"))
assert REAL, "no real results files in tests/data/results"
PYTEST_BENCHMARK = str(Path(sys.executable).with_name("pytest-benchmark"))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13])
def test_stats_fields_agree_with_pytest_benchmark(n: int) -> None:
    rng = random.Random(n)
    data = [rng.uniform(1, 20) for _ in range(n)]
    if n > 6:
        data[0] = 80.0  # an outlier, so that the fences and outlier counts matter
    ours = pbj.stats_fields(data)
    theirs = Stats()
    for x in data:
        theirs.update(x)
    for field in Stats.fields:
        expected = getattr(theirs, field)
        assert ours[field] == (pytest.approx(expected) if isinstance(expected, float) else expected), field
    assert ours["data"] == data and ours["iterations"] == 1


@pytest.mark.parametrize("path", REAL, ids=[str(p.relative_to(ROOT)) for p in REAL])
def test_round_trip_of_real_results_is_lossless(path: Path) -> None:
    run = load_results(path)
    doc = run.to_dict()
    exported = json.loads(json.dumps(pbj.export(run)))
    n_samples = sum(1 for c in doc["cells"] if c["samples"])
    assert len(exported["benchmarks"]) == n_samples
    for bench in exported["benchmarks"]:
        cell = next(c for c in doc["cells"] if bench["param"] == (c["backend"] if c["placement"] == "host" else
                                                                  f"{c['backend']}-{c['placement']}") and
                    pbj.bench_name(c["label"]) == bench["name"].split("[")[0])
        assert bench["stats"]["data"] == [s["seconds"] for s in cell["samples"]]
        assert bench["extra_info"]["params"] == cell["params"] and bench["extra_info"]["timed"] == cell["timed"]
    back, warnings = pbj.import_(exported, "exported.json")
    assert warnings == []
    for key in doc:
        if key != "cells":
            assert back[key] == doc[key], key
    def strip(cells: dict[Any, Any]) -> dict[Any, Any]:
        return {k: {f: v for f, v in c.to_dict().items() if f != "pytest_benchmark"} for k, c in cells.items()}

    assert strip(cells_by_key(Run.from_dict(back))) == strip(cells_by_key(run))


def test_export_is_read_by_pytest_benchmark_compare(tmp_path: Path, capsys) -> None:
    storage = tmp_path / "store" / "Linux-CPython-3.11-64bit"
    storage.mkdir(parents=True)
    for i, path in enumerate(REAL[:3], 1):
        rc, _, err = _main(capsys, "export", str(path), "-o", str(storage / f"{i:04d}_{path.stem}.json"))
        assert rc == 0, err
    proc = subprocess.run([PYTEST_BENCHMARK, "--storage", f"file://{tmp_path / 'store'}", "compare",
                           "--columns=min,median,max,rounds", "--group-by=group"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Failed to load" not in proc.stdout + proc.stderr
    assert "benchmark 'startup'" in proc.stdout and "test_startup[uml]" in proc.stdout
    # the same runs, side by side by name across files
    between = subprocess.run([PYTEST_BENCHMARK, "--storage", f"file://{tmp_path / 'store'}", "compare",
                              "--between=median"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert between.returncode == 0, between.stderr
    assert "test_startup[uml]" in between.stdout


def test_export_is_read_by_benchmark_compare(pytester: pytest.Pytester, capsys) -> None:
    """`pytest --benchmark-compare` loads an exported file from its storage without complaint."""
    storage = pytester.path / "store"
    (storage / "Linux-CPython-3.11-64bit").mkdir(parents=True)
    rc, _, err = _main(capsys, "export", str(REAL[0]), "-o",
                       str(storage / "Linux-CPython-3.11-64bit" / "0001_exported.json"))
    assert rc == 0, err
    pytester.makepyfile("def test_startup(benchmark):\n    benchmark(lambda: None)\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--benchmark-storage=file://{storage}",
                                           "--benchmark-compare=0001", "--benchmark-columns=min,median")
    result.assert_outcomes(passed=1)
    text = result.stdout.str() + result.stderr.str()
    assert "Comparing against benchmarks from" in text and "0001_exported.json" in text
    assert "Failed to load" not in text and "Can't compare" not in text


def test_cli_import_gives_a_file_show_and_compare_accept(tmp_path: Path, capsys) -> None:
    original = REAL[0]
    bench, results = tmp_path / "bench.json", tmp_path / "results.json"
    assert _main(capsys, "export", "--format", "pytest-benchmark", str(original), "-o", str(bench))[0] == 0
    rc, out, err = _main(capsys, "import", str(bench), "-o", str(results))
    assert (rc, out) == (0, "") and "wrote" in err
    assert _main(capsys, "show", str(results), "--csv")[0] == 0
    rc, out, err = _main(capsys, "compare", str(original), str(results), "--csv", "--fail-above", "1%")
    assert rc == 0, err
    rows = [row.split(",") for row in out.splitlines()[1:] if row]
    assert rows and all(float(row[7]) == 1.0 for row in rows), out  # identical samples


def _bench(data: list[float] | None, **extra: Any) -> dict[str, Any]:
    stats = {"min": 1.0, "max": 3.0, "mean": 2.0, "median": 2.0, "rounds": 3, "iterations": 1}
    if data is not None:
        stats["data"] = data
    return {"group": None, "name": "test_foo[x]", "fullname": "t.py::test_foo[x]", "param": "x",
            "params": {"p": "x"}, "extra_info": extra, "options": {}, "stats": stats}


def _file(tmp_path: Path, *benches: dict[str, Any], **top: Any) -> Path:
    doc = {"machine_info": {"node": "h", "release": "6.1", "machine": "x86_64", "python_version": "3.11.2",
                            "cpu": {"brand_raw": "Some CPU", "count": 2}},
           "commit_info": {"id": "abc", "dirty": True}, "benchmarks": list(benches),
           "datetime": "2026-11-21T20:00:00.123456+00:00", "version": "5.3.1", **top}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    return path


def test_import_of_a_plain_pytest_benchmark_file(tmp_path: Path, capsys) -> None:
    """No guestbench section, no extra_info: what can be mapped is, and the host says where it came from."""
    path = _file(tmp_path, _bench([1.0, 2.0, 3.0]))
    rc, out, err = _main(capsys, "import", str(path))
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert doc["host"]["cpu_model"] == "Some CPU" and doc["host"]["cores"] == 2 and doc["host"]["memory_bytes"] is None
    assert doc["guestbench"]["git_commit"] == "abc+dirty" and doc["started_utc"] == "2026-11-21T20:00:00.123456Z"
    (cell,) = doc["cells"]
    assert (cell["backend"], cell["measurement"], cell["label"]) == ("x", "test_foo", "test_foo")
    assert [s["seconds"] for s in cell["samples"]] == [1.0, 2.0, 3.0]
    results = tmp_path / "r.json"
    results.write_text(out)
    assert _main(capsys, "show", str(results))[0] == 0


def test_import_without_raw_samples_says_so(tmp_path: Path, capsys) -> None:
    path = _file(tmp_path, _bench([4.0, 5.0]), _bench(None, backend="uml", label="upload"))
    rc, out, err = _main(capsys, "import", str(path))
    assert rc == 0
    assert err.count("\n") == 1 and "warning: uml/upload: pytest-benchmark saved no raw samples" in err
    assert "--benchmark-save-data" in err
    skipped = json.loads(out)["cells"][1]
    assert skipped["samples"] == [] and skipped["status"] == "skipped" and "median was 2 s" in skipped["skip_reason"]

    path = _file(tmp_path, _bench(None))
    rc, out, err = _main(capsys, "import", str(path))
    assert (rc, out) == (2, "") and err.count("\n") == 1 and "no benchmark has raw samples" in err


@pytest.mark.parametrize("command,content,message", [
    ("import", None, "no such pytest-benchmark file"),
    ("import", "{not json", "not valid JSON (line 1"),
    ("import", '{"schema": "guestbench-results"}', "not a pytest-benchmark JSON file"),
    ("import", '{"benchmarks": [{"name": "x"}]}', "benchmarks[0]: key 'stats' is missing"),
    ("import", '{"benchmarks": [{"stats": {"data": ["a"]}}]}', "stats.data must be a list of numbers"),
    ("import", '{"benchmarks": [{"stats": {"data": [1.0]}, "extra_info": {"status": "weird"}}]}',
     "cells[0].status"),
    ("export", '{"benchmarks": []}', "not a guestbench results file"),
    ("export", None, "no such results file"),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys, command: str, content: str | None,
                                      message: str) -> None:
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    rc, out, err = _main(capsys, command, str(path))
    assert (rc, out) == (2, "")
    assert err.startswith("guestbench: ") and err.count("\n") == 1 and message in err, err


def test_unwritable_output_and_bad_format_are_exit_2(tmp_path: Path, capsys) -> None:
    rc, _, err = _main(capsys, "export", str(REAL[0]), "-o", "/proc/guestbench/x.json")
    assert rc == 2 and err.count("\n") == 1 and "cannot make directory /proc/guestbench" in err
    with pytest.raises(SystemExit) as exc:
        cli.main(["export", "--format", "csv", str(REAL[0])])
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1


CRASHES = {  # issue 46: each was "internal error" (exit 70) in import, and in history over a .benchmarks/ directory
    "commit-id-integer": "commit_info.id: 1234567 is not a string; allowed: a commit id",
    "timed-not-text": "cells[0].timed: 5 is not a string; allowed: text",
}


def _crashing(tmp_path: Path, case: str) -> Path:
    """An integer commit id of a dirty tree; a timed that is no text, of samples of several iterations each."""
    if case == "commit-id-integer":
        return _file(tmp_path, _bench([1.0, 2.0, 3.0]), commit_info={"id": 1234567, "dirty": True})
    bench = _bench([1.0, 2.0, 3.0], timed=5)
    bench["stats"]["iterations"] = 3
    return _file(tmp_path, bench)


@pytest.mark.parametrize("case", list(CRASHES))
def test_import_of_what_crashed_is_one_line(tmp_path: Path, capsys, case: str) -> None:
    path = _crashing(tmp_path, case)
    rc, out, err = _main(capsys, "import", str(path), "-o", str(tmp_path / "out.json"))
    assert (rc, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"guestbench: {path}: ") and CRASHES[case] in err, err
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("case", list(CRASHES))
def test_history_over_a_benchmarks_directory_holding_what_crashed_names_the_file(tmp_path: Path, capsys,
                                                                              case: str) -> None:
    """As for any file history cannot read: one line naming it, exit 2."""
    saved = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    saved.mkdir(parents=True)
    good = _file(tmp_path, _bench([1.0, 2.0, 3.0])).rename(saved / "0001_good.json")
    bad = _crashing(tmp_path, case).rename(saved / "0002_bad.json")
    assert _main(capsys, "history", "--json", str(good), str(good))[0] == 0  # the rest of the file is a run
    rc, out, err = _main(capsys, "history", "--json", str(tmp_path / ".benchmarks"))
    assert (rc, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"guestbench: {bad}: ") and CRASHES[case] in err, err


def test_a_string_commit_id_and_iterations_still_import() -> None:
    bench = _bench([1.0, 2.0], timed="the call")
    bench["stats"]["iterations"] = 4
    doc, _ = pbj.import_({"commit_info": {"id": "abc", "dirty": True}, "benchmarks": [bench]}, "b.json")
    assert doc["guestbench"]["git_commit"] == "abc+dirty"
    assert doc["cells"][0]["timed"] == "the call (each sample: the mean of 4 iterations)"
    doc, _ = pbj.import_({"commit_info": {"id": "unversioned"}, "benchmarks": [bench]}, "b.json")
    assert doc["guestbench"]["git_commit"] is None


@pytest.mark.parametrize("seconds,past", [(1.7e308, "q1, q3, iqr, total"), (5e-324, "ops")])
def test_export_of_seconds_whose_stats_overflow_is_one_line(tmp_path: Path, capsys, seconds: float,
                                                            past: str) -> None:
    """Issue 46: samples of 1.7e308 s (finite: the model reads them) made fsum overflow, exit 70; 5e-324 s made
    ops infinite, written as Infinity, which is not JSON. Refused, naming the cell and the fields."""
    doc = json.loads(REAL[0].read_text())
    index = next(i for i, c in enumerate(doc["cells"]) if len(c["samples"]) > 1)
    for s in doc["cells"][index]["samples"]:
        s["seconds"] = seconds
    path = tmp_path / "extreme.json"
    path.write_text(json.dumps(doc))
    rc, out, err = _main(capsys, "export", str(path), "-o", str(tmp_path / "out.json"))
    assert (rc, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"guestbench: {path}: cells[{index}].samples: samples of {seconds:.3g} to {seconds:.3g} s "
                          f"make pytest-benchmark's {past} past the largest float"), err
    assert not (tmp_path / "out.json").exists()


def test_a_benchmark_parametrised_with_infinity_imports_its_param_as_text(tmp_path: Path, capsys) -> None:
    """pytest-benchmark writes params and extra_info with Python's json, so a benchmark parametrised with
    float("inf") is saved with "timeout": Infinity: the file imports (the value as text, never a float every
    writer after would refuse), in `import` and in `history` of .benchmarks/; a figure of Infinity is refused."""
    bench = _bench([1.0, 2.0, 3.0])
    bench["params"] = {"timeout": float("inf")}
    bench["extra_info"] = {"note": float("nan")}
    path = _file(tmp_path, bench)
    assert "Infinity" in path.read_text()
    rc, out, err = _main(capsys, "import", str(path))
    assert rc == 0 and err == "", err
    assert "Infinity" not in out.replace('"Infinity"', "") and "NaN" not in out.replace('"NaN"', "")
    saved = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    saved.mkdir(parents=True)
    (saved / "0001_inf.json").write_text(path.read_text())
    path.rename(saved / "0002_inf.json")  # two runs: a history
    assert _main(capsys, "history", "--json", str(tmp_path / ".benchmarks"))[0] == 0
    bench["stats"]["data"] = [1.0, float("inf")]
    rc, out, err = _main(capsys, "import", str(_file(tmp_path, bench)))
    assert rc == 2 and err.count("\n") == 1 and "stats.data must be a list of numbers" in err, err
