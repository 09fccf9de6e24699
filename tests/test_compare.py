"""`guestbench compare`: ratios, bootstrap CIs, Mann-Whitney verdicts, thresholds and host checks.

Results files are written with the real `ResultsFile` and this host's real fingerprint; nothing launches an
appliance. Most CLI cases run in-process through `cli.main`; one runs `python -m guestbench` as a user would.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from guestbench.analysis import compare
from guestbench.host.fingerprint import fingerprint as this_host
from guestbench.analysis import machines, stats
from guestbench.cli.common import percent
from guestbench.analysis.compare import CI_METHOD
from guestbench.analysis.stats import TEST_METHOD
from guestbench.output.export.csv import COMPARISON_HEADER as CSV_HEADER
from guestbench.util.errors import UserError
from guestbench.output.render import terminal
from guestbench.output.compare_doc import compare_document
from guestbench.results import ResultsFile, load_results
from guestbench.results import Run
from helpers.cli import guestbench, main_in_process

BASE8 = [10.0, 10.05, 9.95, 10.1, 9.9, 10.02, 9.98, 9.97]  # median 9.99, no ties
SLOWER8 = [x * 1.2 for x in BASE8]  # median 12.0, no overlap with BASE8
OVERLAP8 = [10.1, 9.85, 10.2, 9.9, 10.05, 9.96, 10.12, 9.92]  # interleaved with BASE8

Cells = dict[tuple[str, str], list[float]]  # (backend, label) -> samples


@pytest.fixture(scope="module")
def fingerprint() -> dict[str, Any]:
    """One real fingerprint for the module: it runs a few `--version` commands, no appliance."""
    return this_host()


def write_results(path: Path, cells: Cells, fp: dict[str, Any], *,
                  params: dict[str, Any] | None = None, skipped: list[tuple[str, str]] = ()) -> Path:
    """A complete results file as `guestbench scenario` writes it, placement "host"."""
    rf = ResultsFile.create(path, scenario={"name": "compare-test", "repetitions": 8}, host=fp,
                            command=["guestbench", "scenario", "x.yaml"],
                            guestbench={"version": "0.1.0", "git_commit": None})
    for (backend, label), seconds in cells.items():
        rf.add_cell({"backend": backend, "placement": "host", "measurement": label, "label": label,
                     "params": dict(params or {}), "timed": "guestfs launch() until the daemon answered",
                     "cache_mode": None, "bytes": None, "status": "done",
                     "samples": [{"rep": i + 1, "seconds": s, "utc": "2026-11-21T19:40:00Z"}
                                 for i, s in enumerate(seconds)]})
    for backend, label in skipped:
        rf.add_cell({"backend": backend, "placement": "host", "measurement": label, "label": label,
                     "params": {}, "timed": "", "status": "skipped", "skip_reason": "backend not usable"})
    rf.finish("complete")
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    return main_in_process(capsys, "compare", *args)


def flat(text: str) -> str:
    """Rich wraps long captions; compare text with whitespace runs collapsed."""
    return " ".join(text.split())


@pytest.fixture
def pair(tmp_path: Path, fingerprint: dict[str, Any]) -> tuple[Path, Path]:
    """Baseline and a 20%-slower other file, n=8 each, clearly separated."""
    base = write_results(tmp_path / "base.json", {("tcg", "startup"): BASE8}, fingerprint)
    other = write_results(tmp_path / "other.json", {("tcg", "startup"): SLOWER8}, fingerprint)
    return base, other


# ---------------------------------------------------------------------------------------------- functions


def test_identical_files_ratio_one(tmp_path: Path, fingerprint: dict[str, Any], capsys) -> None:
    base = write_results(tmp_path / "base.json", {("tcg", "startup"): BASE8, ("uml", "startup"): [3.0, 3.1, 2.9]},
                         fingerprint)
    doc = load_results(base)
    rows = compare.compare_docs(doc, doc)
    assert [r.cell for r in rows] == ["tcg/host/startup", "uml/host/startup"]
    for r in rows:
        assert r.ratio == 1.0
        assert r.ci_low <= 1.0 <= r.ci_high
        assert r.p_value == 1.0
        assert r.verdict == "no significant change"
        assert not r.is_regression(10)
    assert machines.machine_differences(doc, doc) == []
    status, out, err = run(capsys, base, base, "--fail-above", "10%")
    assert (status, err) == (0, "")
    assert "1.00×" in out and "REGRESSION" not in out


def test_twenty_percent_slower_is_significant(pair: tuple[Path, Path]) -> None:
    base, other = (load_results(p) for p in pair)
    [r] = compare.compare_docs(base, other)
    assert (r.n_base, r.n_other) == (8, 8)
    assert r.median_base == pytest.approx(9.99) and r.median_other == pytest.approx(9.99 * 1.2)
    assert r.ratio == pytest.approx(1.2)
    assert r.test == "exact"
    assert r.p_value == pytest.approx(2 / math.comb(16, 8))  # total separation, exact two-sided
    assert r.p_value < 0.05
    assert r.verdict == "slower" and r.note is None
    assert 1.0 < r.ci_low <= 1.2 <= r.ci_high < 1.3
    assert r.is_regression(10) and not r.is_regression(30)
    [back] = compare.compare_docs(other, base)
    assert back.verdict == "faster" and back.ratio == pytest.approx(1 / 1.2)


def test_bootstrap_is_seeded_and_reproducible() -> None:
    a = stats.ratio_ci(BASE8, OVERLAP8)
    assert a == stats.ratio_ci(BASE8, OVERLAP8)
    assert a[0] < 1.0 < a[1]
    assert all(math.isnan(x) for x in stats.ratio_ci([1.0], BASE8))  # one sample: no spread, no interval


def test_overlapping_samples_no_significant_change(tmp_path: Path, fingerprint: dict[str, Any]) -> None:
    base = write_results(tmp_path / "b.json", {("tcg", "startup"): BASE8}, fingerprint)
    other = write_results(tmp_path / "o.json", {("tcg", "startup"): OVERLAP8}, fingerprint)
    [r] = compare.compare_docs(load_results(base), load_results(other))
    assert r.p_value > 0.05
    assert r.verdict == "no significant change" and r.note is None


def test_three_vs_three_notes_too_few_samples_but_threshold_still_fails(tmp_path: Path, fingerprint, capsys) -> None:
    base = write_results(tmp_path / "b.json", {("tcg", "startup"): [10.0, 10.1, 9.9]}, fingerprint)
    other = write_results(tmp_path / "o.json", {("tcg", "startup"): [12.0, 12.1, 11.9]}, fingerprint)
    [r] = compare.compare_docs(load_results(base), load_results(other))
    assert stats.min_attainable_p(3, 3) == pytest.approx(0.1)
    assert r.p_value == pytest.approx(0.1)  # as separated as 3 vs 3 can be
    assert r.verdict == "no significant change"
    assert r.note is not None and "too few samples for the test to reach p<0.05" in r.note
    status, out, _ = run(capsys, base, other, "--fail-above", "10", "--markdown")
    assert status == 1  # significance alone never decides a regression
    assert "too few samples for the test to reach p<0.05" in out
    wide = Console(file=io.StringIO(), width=400)
    comparison = compare.build_comparison(load_results(base), load_results(other), str(base), str(other))
    terminal.render(compare_document([comparison], 10.0), wide)
    table = wide.file.getvalue()
    assert "REGRESSION: no significant change (too few samples for the test to reach p<0.05" in table
    assert "REGRESSION: tcg/host/startup" in table


def test_small_n_against_many_gets_a_milder_note() -> None:
    r = compare.compare_samples(("tcg", "host", "startup"), [10.0, 10.1, 9.9], SLOWER8)
    assert stats.min_attainable_p(3, 8) < 0.05
    assert r.verdict == "slower" and r.note is not None and "few samples" in r.note
    assert "too few" not in r.note


def test_ties_use_the_normal_approximation() -> None:
    assert stats.mann_whitney([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])[:2] == (pytest.approx(0.1), "exact")
    p, method, other_larger = stats.mann_whitney([1.0, 2.0, 3.0], [3.0, 5.0, 6.0])
    assert method == "asymptotic" and other_larger and 0.05 < p < 1


def test_parse_fail_above() -> None:
    assert percent("10%") == percent("10") == 10.0
    assert percent("0.1") == 0.1  # a bare number is percent, always
    for bad in ("abc", "-5", "0", "nan", "inf", "", "%"):
        with pytest.raises(UserError, match="--fail-above"):
            percent(bad)


def test_param_differences_are_reported(tmp_path: Path, fingerprint: dict[str, Any]) -> None:
    base = write_results(tmp_path / "b.json", {("tcg", "upload"): BASE8}, fingerprint, params={"size": 1000})
    other = write_results(tmp_path / "o.json", {("tcg", "upload"): BASE8}, fingerprint, params={"size": 2000})
    [r] = compare.compare_docs(load_results(base), load_results(other))
    assert r.differences == ("params.size: 1000 vs 2000",)


def test_start_up_cells_whose_first_sample_was_the_cold_launch_on_one_side_only_are_said_to_differ(
        tmp_path: Path, fingerprint: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """cold: false without a warm-up makes a start-up cell's first sample its first launch: not the same timing as
    a cell whose first launch was taken apart (as its cold launch, a warm-up, or one that failed), or a
    pytest-benchmark run with warm-up rounds."""
    warm = {"rep": 1, "seconds": 9.0, "utc": "2026-11-21T19:40:00Z"}
    sides = {"cold-first": {}, "cold-apart": {"cold_s": 9.5}, "warmup": {"warmups": [warm]},
             "failed-cold": {"failures": [{"kind": "cold", "rep": 1, "reason": "launch failed"}]},
             "kindless": {"failures": [{"rep": 1, "reason": "launch failed"}]},
             "bench-warm": {"warmup_rounds": 1}, "bench-cold": {"warmup_rounds": 0}}
    runs = {}
    for name, change in sides.items():
        path = write_results(tmp_path / f"{name}.json", {("uml", "startup"): BASE8}, fingerprint)
        doc = json.loads(path.read_text())
        doc["cells"][0].update(change)
        path.write_text(json.dumps(doc))
        runs[name] = (path, load_results(path))

    def differences(a: str, b: str) -> list[tuple[str, ...]]:
        return [r.differences for r in compare.compare_docs(runs[a][1], runs[b][1])]

    said = "first sample: the first launch (cold) vs a warm launch (the scenario keys cold and warmup)"
    for other in ("cold-apart", "warmup", "failed-cold", "bench-warm"):
        assert differences("cold-first", other) == [(said,)], other
        assert differences("cold-apart", other) == [()], other
    assert differences("cold-first", "bench-cold") == [()] and differences("cold-first", "kindless") == [()]
    status, out, _ = run(capsys, runs["cold-first"][0], runs["warmup"][0])
    assert status == 0 and f"uml/host/startup: the two cells differ, the ratio may compare different work: {said}" \
        in flat(out)


# ---------------------------------------------------------------------------------------------- CLI


def test_fail_above_thresholds_set_exit_status(pair: tuple[Path, Path], capsys) -> None:
    status, out, err = run(capsys, *pair, "--fail-above", "10%")
    assert status == 1 and err == ""
    text = flat(out)
    assert "REGRESSION: tcg/host/startup: median 1.20× baseline" in text
    assert "Mann-Whitney U" in text and "percentile bootstrap" in text and "ratio > 1.1" in text
    assert str(pair[0]) in text and str(pair[1]) in text
    status, out, _ = run(capsys, *pair, "--fail-above", "30")
    assert status == 0 and "REGRESSION" not in out and "slower" in out
    status, out, _ = run(capsys, *pair)  # no threshold: never a regression
    assert status == 0 and "nothing is flagged as a regression" in flat(out)


def test_cell_on_one_side_only_is_listed(tmp_path: Path, fingerprint: dict[str, Any], capsys) -> None:
    base = write_results(tmp_path / "b.json", {("tcg", "startup"): BASE8, ("uml", "upload"): BASE8}, fingerprint)
    other = write_results(tmp_path / "o.json", {("tcg", "startup"): BASE8, ("libvirt-tcg", "startup"): BASE8},
                          fingerprint, skipped=[("uml", "upload")])
    status, out, err = run(capsys, base, other)
    assert (status, err) == (0, "")
    text = flat(out)
    assert "only in baseline: uml/host/upload (other: no samples, skipped: backend not usable)" in text
    assert "only in other: libvirt-tcg/host/startup (baseline: no such cell)" in text
    status, out, _ = run(capsys, base, other, "--json")
    [c] = json.loads(out)["comparisons"]
    assert [r["backend"] for r in c["rows"]] == ["tcg"]
    assert c["only_in_baseline"][0].startswith("uml/host/upload")
    assert c["only_in_other"][0].startswith("libvirt-tcg/host/startup")


def test_software_update_is_compared_and_named(tmp_path: Path, fingerprint: dict[str, Any], capsys) -> None:
    """A kernel or qemu update is what a regression run looks for: compared, and shown as what changed."""
    base = write_results(tmp_path / "b.json", {("tcg", "startup"): BASE8}, fingerprint)
    changed = copy.deepcopy(fingerprint)
    changed["kernel"] = "9.9.9-test"
    changed["versions"]["qemu"] = "99.0.0"
    other = write_results(tmp_path / "o.json", {("tcg", "startup"): SLOWER8}, changed)
    assert machines.machine_differences(load_results(base), load_results(other)) == []
    assert machines.software_changes(load_results(base), load_results(other)) == [
        f"kernel: {fingerprint['kernel']!r} vs '9.9.9-test'",
        f"qemu: {fingerprint['versions']['qemu']!r} vs '99.0.0'"]
    status, out, err = run(capsys, base, other, "--fail-above", "10")
    assert status == 1 and "9.9.9-test" in flat(out) and "99.0.0" in flat(out)


def test_different_machine_refused_then_forced(tmp_path: Path, fingerprint: dict[str, Any], capsys) -> None:
    base = write_results(tmp_path / "b.json", {("tcg", "startup"): BASE8}, fingerprint)
    changed = copy.deepcopy(fingerprint)
    changed["cores"] = 64
    other = write_results(tmp_path / "o.json", {("tcg", "startup"): SLOWER8}, changed)
    assert machines.machine_differences(load_results(base), load_results(other)) == [
        f"cores: {fingerprint['cores']!r} vs 64"]
    status, out, err = run(capsys, base, other, "--fail-above", "10")
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1
    assert "cores" in err and "64" in err and "--force" in err
    status, out, err = run(capsys, base, other, "--fail-above", "10", "--force")
    assert status == 1
    assert len(err.splitlines()) == 1 and err.startswith("guestbench: warning:") and "cores" in err
    assert "cores" in flat(out)  # the difference is shown with the results too
    status, _, err = run(capsys, base, other, "--fail-above", "30", "--force")
    assert status == 0 and "warning" in err


@pytest.mark.parametrize("value", ["abc", "-5", "0", "nan"])
def test_bad_fail_above_is_one_line_exit_2(pair: tuple[Path, Path], value: str, capsys) -> None:
    status, out, err = run(capsys, *pair, f"--fail-above={value}")
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1 and "--fail-above" in err and repr(value) in err
    status, _, err2 = run(capsys, *pair, "--fail-above", value)  # "-5" as a separate word too
    assert status == 2 and err2 == err


def test_bad_input_files_are_one_line_exit_2(tmp_path: Path, pair: tuple[Path, Path], fingerprint, capsys) -> None:
    status, _, err = run(capsys, pair[0], tmp_path / "missing.json")
    assert status == 2 and len(err.splitlines()) == 1 and "no such results file" in err
    dup = write_results(tmp_path / "dup.json", {("tcg", "startup"): BASE8}, fingerprint)
    doc = json.loads(dup.read_text())
    doc["cells"].append(doc["cells"][0])
    dup.write_text(json.dumps(doc))
    status, _, err = run(capsys, pair[0], dup)
    assert status == 2 and len(err.splitlines()) == 1 and "tcg/host/startup appears twice" in err
    status, _, err = run(capsys, pair[0], pair[1], pair[1], "--csv")
    assert status == 2 and len(err.splitlines()) == 1 and "--csv" in err


def test_csv_header_and_rows(pair: tuple[Path, Path], capsys) -> None:
    status, out, _ = run(capsys, *pair, "--csv", "--fail-above", "10%")
    assert status == 1
    lines = out.splitlines()
    assert lines[0] == ("backend,placement,measurement,n_base,n_other,median_base_s,median_other_s,ratio,"
                        "ratio_ci_low,ratio_ci_high,p_value,verdict,regression")
    assert lines[0] == CSV_HEADER
    [row] = list(csv.DictReader(io.StringIO(out)))
    assert (row["backend"], row["placement"], row["measurement"]) == ("tcg", "host", "startup")
    assert (row["n_base"], row["n_other"]) == ("8", "8")
    assert float(row["ratio"]) == pytest.approx(1.2)
    assert float(row["p_value"]) < 0.05
    assert (row["verdict"], row["regression"]) == ("slower", "true")


def test_json_is_strict_and_names_methods(tmp_path: Path, pair: tuple[Path, Path], fingerprint, capsys) -> None:
    single = write_results(tmp_path / "one.json", {("tcg", "startup"): [12.0]}, fingerprint)  # n=1: no CI
    status, out, _ = run(capsys, pair[0], pair[1], single, "--json", "--fail-above", "10")
    assert status == 1
    summary = json.loads(out)
    json.dumps(summary, allow_nan=False)
    assert "NaN" not in out
    assert summary["methods"]["test"] == TEST_METHOD and summary["methods"]["ci"] == CI_METHOD
    assert summary["fail_above_percent"] == 10.0
    first, second = summary["comparisons"]
    assert first["rows"][0]["regression"] is True and first["rows"][0]["verdict"] == "slower"
    row = second["rows"][0]
    assert row["ratio_ci_low"] is None and row["ratio_ci_high"] is None
    assert "too few samples" in row["note"]
    assert len(summary["regressions"]) == 2


def test_markdown_names_methods_and_regressions(pair: tuple[Path, Path], capsys) -> None:
    status, out, _ = run(capsys, *pair, "--markdown", "--fail-above", "10")
    assert status == 1
    assert "| backend | placement | measurement | n base | n other |" in out
    assert TEST_METHOD in out and CI_METHOD in out
    assert "## Regressions" in out and "- **REGRESSION** tcg/host/startup" in out


def test_subprocess_compare(pair: tuple[Path, Path]) -> None:
    proc = guestbench("compare", *map(str, pair), "--fail-above", "10%", timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "REGRESSION: tcg/host/startup" in flat(proc.stdout)
    assert proc.stderr == ""


# ---------------------------------------------------------------------------------------------- A/B style (issue 15)


def test_permutation_p_is_small_for_separated_samples_and_one_for_identical_ones() -> None:
    assert stats.permutation_p(BASE8, SLOWER8) < 0.01
    assert stats.permutation_p(BASE8, BASE8) == 1.0
    assert stats.permutation_p(BASE8, OVERLAP8) > 0.05
    assert stats.permutation_p(BASE8, SLOWER8) == stats.permutation_p(BASE8, SLOWER8)  # seeded
    assert math.isnan(stats.permutation_p([], SLOWER8))


def test_a_change_within_the_noise_threshold_is_no_change_whatever_p_says() -> None:
    slightly = [x * 1.03 for x in BASE8]  # 3% slower, fully separated: significant, but under 5% noise
    key = ("tcg", "host", "startup")
    assert compare.compare_samples(key, BASE8, slightly).verdict == compare.SLOWER
    r = compare.compare_samples(key, BASE8, slightly, noise_pct=5)
    assert r.verdict == compare.WITHIN_NOISE and r.change is None
    assert compare.compare_samples(key, BASE8, SLOWER8, noise_pct=5).verdict == compare.SLOWER  # 20% is not noise


@pytest.mark.parametrize("unit, higher_better, factor, verdict, change", [
    ("s", False, 1.2, "slower", compare.REGRESSION),  # seconds: more is worse
    ("s", False, 1 / 1.2, "faster", compare.IMPROVEMENT),
    ("MB/s", True, 1.2, "higher", compare.IMPROVEMENT),  # throughput: more is better
    ("MB/s", True, 1 / 1.2, "lower", compare.REGRESSION),
    ("IOPS", True, 1.2, "higher", compare.IMPROVEMENT),
    ("IOPS", True, 1 / 1.2, "lower", compare.REGRESSION),
    ("ms", False, 1.2, "higher", compare.REGRESSION),  # latency: more is worse
    ("ms", False, 1 / 1.2, "lower", compare.IMPROVEMENT),
    ("%CPU", False, 1.2, "higher", compare.REGRESSION),
])
def test_every_figure_kind_knows_which_way_is_better(unit: str, higher_better: bool, factor: float, verdict: str,
                                                     change: str) -> None:
    figure = "seconds" if unit == "s" else f"a figure in {unit}"
    r = compare.compare_samples(("uml", "host", "fio"), BASE8, [x * factor for x in BASE8], figure=figure, unit=unit,
                                higher_better=higher_better)
    assert (r.verdict, r.change) == (verdict, change)
    assert r.is_regression(10) == (change == compare.REGRESSION)  # an improvement is never a regression


def test_a_workload_cell_is_compared_on_its_own_figures_with_their_direction(tmp_path: Path, fingerprint) -> None:
    def doc(bw: list[float], lat: list[float]) -> Run:
        rf = ResultsFile.create(tmp_path / f"{bw[0]}.json", scenario={"name": "w"}, host=fingerprint, command=[],
                                guestbench={"version": "0.1.0", "git_commit": None})
        rf.add_cell({"backend": "uml", "placement": "host", "measurement": "fio", "label": "fio", "status": "done",
                     "metrics": [{"key": "read_bw", "label": "fio read bandwidth", "unit": "MB/s",
                                  "higher_better": True},
                                 {"key": "read_lat_p99", "label": "fio read p99", "unit": "ms",
                                  "higher_better": False}],
                     "samples": [{"rep": i + 1, "seconds": 10.0, "metrics": {"read_bw": b, "read_lat_p99": la}}
                                 for i, (b, la) in enumerate(zip(bw, lat))]})
        return rf.run()
    base = doc(BASE8, BASE8)
    better = doc([x * 1.5 for x in BASE8], [x / 1.5 for x in BASE8])  # more bandwidth, less latency
    rows = {r.measurement: r for r in compare.compare_docs(base, better)}
    assert set(rows) == {"fio read_bw", "fio read_lat_p99"}  # the fixed wall time is not compared
    assert rows["fio read_bw"].change == rows["fio read_lat_p99"].change == compare.IMPROVEMENT
    assert not any(r.is_regression(10) for r in rows.values())
    assert "higher, improvement" in rows["fio read_bw"].verdict_text()


def test_compare_prints_the_permutation_p_and_the_noise_rule(tmp_path: Path, capsys, fingerprint) -> None:
    base = write_results(tmp_path / "b.json", {("tcg", "startup"): BASE8}, fingerprint)
    other = write_results(tmp_path / "o.json", {("tcg", "startup"): [x * 1.03 for x in BASE8]}, fingerprint)
    status, out, err = run(capsys, base, other, "--noise", "5%", "--json")
    assert status == 0, err
    data = json.loads(out)
    (row,) = data["comparisons"][0]["rows"]
    assert row["verdict"] == compare.WITHIN_NOISE and row["p_permutation"] < 0.01 and row["change"] is None
    assert data["methods"]["noise_percent"] == 5 and "permutation" in data["methods"]["permutation"]
    status, out, _ = run(capsys, base, other, "--noise", "5")
    assert "p (perm.)" in out and "within ±5% (--noise)" in flat(out)
    status, _, err = run(capsys, base, other, "--noise", "-1")
    assert status == 2 and "--noise" in err and len(err.splitlines()) == 1


def test_resources_are_compared_but_gated_only_with_gate_resources(tmp_path: Path, fingerprint, capsys) -> None:
    """Faster but hungrier (as a quiet host is beside a contended one): the seconds improve, CPU s and peak MiB
    regress; --fail-above acts on them only with --gate-resources."""
    def write(name: str, seconds: list[float], cpu: list[float], mib: list[float]) -> Path:
        path = write_results(tmp_path / name, {("uml", "startup"): seconds}, fingerprint)
        doc = json.loads(path.read_text())
        for s, c, m in zip(doc["cells"][0]["samples"], cpu, mib):
            s["resources"] = {"cpu_s": c, "peak_pss_mib": m}
        path.write_text(json.dumps(doc))
        return path
    base = write("base.json", SLOWER8, BASE8, [300.0 + i for i in range(8)])
    other = write("other.json", BASE8, SLOWER8, [360.0 + i for i in range(8)])
    status, out, err = run(capsys, base, other, "--fail-above", "10%", "--json")
    assert status == 0, err
    rows = {r["figure"]: r for r in json.loads(out)["comparisons"][0]["rows"]}
    assert (rows["seconds"]["change"], rows["seconds"]["verdict"]) == (compare.IMPROVEMENT, compare.FASTER)
    assert {k: (r["regression"], r["gated"], r["change"]) for k, r in rows.items() if k != "seconds"} == {
        "CPU s": (False, False, compare.REGRESSION), "peak MiB": (False, False, compare.REGRESSION)}
    status, out, _ = run(capsys, base, other, "--fail-above", "10%")
    assert "CPU s and peak MiB are compared but not gated" in flat(out)
    status, out, _ = run(capsys, base, other, "--fail-above", "10%", "--gate-resources")
    assert status == 1 and "REGRESSION: uml/host/startup cpu_s" in flat(out) and "peak_mib" in flat(out)
    assert "startup: median" not in flat(out)  # the faster seconds are not a regression


def test_sides_that_took_turns_are_judged_round_by_round() -> None:
    """In one interleaved run (guestbench ab) a round's two samples share the moment's load: the paired test sees
    a 5% slowdown that the round-to-round swings hide from a test of the pooled samples."""
    a = [10.0, 20.0, 15.0, 30.0, 12.0, 25.0, 18.0]
    b = [x * 1.05 for x in a]
    key = ("uml", "host", "startup")
    pooled = compare.compare_samples(key, a, b, by="permutation")
    paired = compare.compare_samples(key, a, b, by="permutation", pairs=(a, b))
    assert pooled.test == "permutation" and pooled.verdict == compare.NO_CHANGE and pooled.p_value > 0.5
    assert paired.test == "paired" and paired.verdict == compare.SLOWER and paired.p_value < 0.05
    assert paired.ci_low == pytest.approx(1.05) and paired.ci_high == pytest.approx(1.05)  # every round: 1.05
    assert paired.p_perm == pooled.p_perm  # the pooled permutation p is still shown beside it
    # a regression within the noise threshold stays no change, whichever test decided
    assert compare.compare_samples(key, a, b, by="permutation", pairs=(a, b), noise_pct=10).verdict == \
        compare.WITHIN_NOISE
