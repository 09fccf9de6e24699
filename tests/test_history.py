"""`guestbench history` on results files written here run by run (issue 34): steps, the run where each starts and
the software that changed there, drift, noise floors, baselines, the CI gate, bad input, and the HTML page as a
browser renders it. The real series (runs of a tcg scenario with a slowed hypervisor) is test_history_real.py."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guestbench.analysis import steps
from guestbench.results import pytest_benchmark as pbj
from guestbench.results import Run
from helpers.browser import Text, chromium
from helpers.history import as_json, history, noisy, results, write_series


def series(doc: dict[str, Any], key: str) -> dict[str, Any]:
    (found,) = [s for s in doc["series"] if s["key"] == key]
    return found


def test_a_step_is_named_at_the_run_where_it_starts_with_its_size_ci_and_the_software_that_changed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_series(tmp_path, [20, 20, 20, 25, 25, 25], run4={"qemu": "8.0.0"})
    status, doc = as_json(capsys, str(tmp_path), "--fail-on-regression")
    assert status == 1
    startup = series(doc, "tcg/host/startup")
    (step,) = startup["steps"]
    assert step["run"] == 3 and step["change"] == steps.REGRESSION  # the fourth run
    low, high = step["diff_ci"]
    assert low < 5 < high and low > 0 and step["diff"] == pytest.approx(5, rel=0.3)
    assert step["software_changes"] == ["qemu 7.2.0 → 8.0.0"]
    assert startup["newest"] == steps.REGRESSION
    assert series(doc, "tcg/host/upload-no-write")["steps"] == []  # its launch is not timed: nothing moved
    assert series(doc, "tcg/host/upload-no-write")["newest"] is None
    (line,) = doc["regressions"]
    assert "tcg/host/startup" in line and "since run 4" in line
    # the table says it too, and the terminal's exit status follows the flag
    status, out, _ = history(capsys, str(tmp_path))
    assert status == 0 and "regression at run 4" in " ".join(out.split()) and "qemu 7.2.0 → 8.0.0" in out


def test_before_the_step_there_is_nothing_to_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_series(tmp_path / "all", [20, 20, 20, 25, 25, 25])
    status, doc = as_json(capsys, *map(str, paths[:3]), "--fail-on-regression")
    assert status == 0 and doc["regressions"] == []
    assert all(s["steps"] == [] and s["drift"] is None for s in doc["series"])


@pytest.mark.parametrize("seed", range(5))
def test_eight_unchanged_runs_raise_no_alarm(tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int) -> None:
    write_series(tmp_path, [20] * 8, seed=seed)
    status, doc = as_json(capsys, str(tmp_path), "--fail-on-regression")
    assert status == 0 and doc["regressions"] == []
    assert all(s["steps"] == [] and s["drift"] is None for s in doc["series"]), doc["series"]


def test_slow_drift_adds_up_to_an_alarm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_series(tmp_path, [20 * 1.025 ** i for i in range(10)])  # 2.5% a run, never a step of its own
    status, doc = as_json(capsys, str(tmp_path), "--fail-on-regression")
    startup = series(doc, "tcg/host/startup")
    assert status == 1 and startup["newest"] == steps.REGRESSION
    found = [*startup["steps"], *([startup["drift"]] if startup["drift"] else [])]
    assert found and all(f["change"] == steps.REGRESSION for f in found)
    assert sum(f["ratio"] - 1 for f in found) > 0.1


def test_a_higher_is_better_figure_that_rises_is_an_improvement(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(3)
    for i, level in enumerate([100, 100, 100, 150, 150, 150]):
        doc = results(f"2026-11-{10 + i:02d}T10:00:00Z", {"uml/fio": [10.0, 10.0, 10.0]})
        cell = doc["cells"][0]
        cell["metrics"] = [{"key": "read_bw", "label": "read bandwidth", "unit": "MB/s", "higher_better": True}]
        for s, v in zip(cell["samples"], noisy(level, rng)):
            s["metrics"] = {"read_bw": v}
        (tmp_path / f"{i}.json").write_text(json.dumps(doc))
    status, doc = as_json(capsys, str(tmp_path), "--fail-on-regression")
    (s,) = doc["series"]
    assert s["key"] == "uml/host/fio read_bw" and s["unit"] == "MB/s" and s["higher_better"] is True
    assert [st["change"] for st in s["steps"]] == [steps.IMPROVEMENT] and status == 0


def test_a_noise_floor_given_for_every_series_or_one_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_series(tmp_path, [20, 20, 20, 25, 25, 25])
    for floor in (["--noise", "30%"], ["--noise", "tcg/host/startup=30"]):
        status, doc = as_json(capsys, str(tmp_path), "--fail-on-regression", *floor)
        startup = series(doc, "tcg/host/startup")
        assert status == 0 and startup["steps"] == [] and startup["floor_percent"] == 30.0
    status, doc = as_json(capsys, str(tmp_path), "--noise", "tcg/host/upload-no-write=30")
    assert series(doc, "tcg/host/startup")["steps"] and series(doc, "tcg/host/upload-no-write")["floor_percent"] == 30


def test_a_baseline_pins_each_series_and_a_newest_run_beyond_its_tolerance_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_series(tmp_path / "runs", [20, 20, 20, 23])
    pinned = tmp_path / "baseline.yaml"
    status, _, _ = history(capsys, *map(str, paths[:3]), "--write-baseline", str(pinned))
    assert status == 0 and "tcg/host/startup" in pinned.read_text()
    status, doc = as_json(capsys, *map(str, paths), "--baseline", str(pinned), "--fail-on-regression")
    assert status == 1
    assert any("tcg/host/startup" in line and "above its baseline" in line for line in doc["regressions"])
    status, doc = as_json(capsys, *map(str, paths[:3]), "--baseline", str(pinned), "--fail-on-regression")
    assert status == 0
    # one run and a baseline: enough to judge
    status, doc = as_json(capsys, str(paths[3]), "--baseline", str(pinned), "--fail-on-regression")
    assert status == 1


def test_pytest_benchmark_saved_runs_are_read_as_a_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    saved.mkdir(parents=True)
    rng = np.random.default_rng(5)
    for i in range(3):
        run = Run.from_dict(results(f"2026-11-{10 + i:02d}T10:00:00Z", {"uml/startup": noisy(6.0, rng)}))
        (saved / f"000{i + 1}_run.json").write_text(json.dumps(pbj.export(run)))
    status, doc = as_json(capsys, str(tmp_path / ".benchmarks"))
    (s,) = doc["series"]
    assert status == 0 and len(s["points"]) == 3 and s["cell"] == "uml/host/startup"


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    machines = tmp_path / "machines"
    machines.mkdir()
    for i, cpu in enumerate(["CPU A", "CPU B"]):
        doc = results(f"2026-11-1{i}T10:00:00Z", {"tcg/startup": [1.0, 1.1]})
        doc["host"]["cpu_model"] = cpu
        (machines / f"{i}.json").write_text(json.dumps(doc))
    bad_baseline = tmp_path / "baseline.yaml"
    bad_baseline.write_text("format: guestbench-history-baseline\nversion: 1\nmachines: [{machine: {}, series: "
                            "{x: {expected: -1}}}]\n")
    write_series(tmp_path / "ok", [20, 20, 20])
    for args, says in (([str(empty)], "no results files"), ([str(other)], "not a guestbench results file"),
                       ([str(tmp_path / "missing")], "no such file or directory"),
                       ([str(machines)], "2 machine(s), and no cell was measured in two runs on one machine"),
                       ([str(tmp_path / "ok"), "--noise", "x=fast"], "is not a positive percentage"),
                       ([str(tmp_path / "ok"), "--baseline", str(bad_baseline)], "series.x"),
                       ([str(tmp_path / "ok"), "--csv"], "is not available with history"),
                       ([str(tmp_path / "ok"), "--noise", "tcg/host/startupp=5"], "which no series has")):
        status, _, err = history(capsys, *args)
        assert status == 2 and says in _one_line(err), (args, err)


def test_the_html_page_has_a_trend_chart_per_series_and_renders_in_a_browser(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_series(tmp_path / "runs", [20, 20, 20, 25, 25, 25], run4={"qemu": "8.0.0"})
    out = tmp_path / "page"
    status, _, err = history(capsys, str(tmp_path / "runs"), "--html", str(out))
    assert status == 0, err
    svgs = sorted(p.name for p in out.glob("*.svg"))
    assert len(svgs) == 2 and all(name.startswith("trend-") for name in svgs)
    dom = chromium(str(tmp_path / "profile"), "--dump-dom", (out / "index.html").as_uri())
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    page = Text()
    page.feed(dom.stdout)
    text = " ".join(" ".join(page.parts).split())
    assert "regression at run 4" in text and "qemu 7.2.0 → 8.0.0" in text
    assert dom.stdout.count("<img") >= 2 and "tcg/host/startup" in (out / "report.md").read_text()


def test_the_step_ci_covers_the_true_step_in_most_series() -> None:
    """The interval is a claim about the step: over many seeded series it should cover the true size (99%
    asked; tested loosely, a CI that covered too rarely would fail)."""
    rng = np.random.default_rng(11)
    covered = found = 0
    for _ in range(60):
        runs = [noisy(20, rng) for _ in range(4)] + [noisy(24, rng) for _ in range(4)]
        v = steps.judge(runs, higher_better=False)
        for st in v.steps:
            if st.at == 4:
                found += 1
                covered += st.shift.diff_ci[0] <= 4 <= st.shift.diff_ci[1]
    assert found >= 50 and covered >= 0.9 * found, (found, covered)
    assert math.isclose(steps.judge([[1.0]], False).floor_pct, steps.DEFAULT_FLOOR_PCT)


def test_one_bad_newest_run_fails_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_series(tmp_path, [20] * 6 + [40])  # the newest run alone, twice as slow
    status, doc = as_json(capsys, str(tmp_path), "--fail-on-regression")
    (step,) = series(doc, "tcg/host/startup")["steps"]
    assert status == 1 and step["newest_only"] and step["run"] == 6 and step["change"] == steps.REGRESSION


def test_the_latest_change_decides_and_a_baseline_accepts_one(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    write_series(tmp_path / "back", [20, 20, 20, 25, 25, 25, 20, 20, 20])  # slower, then fixed
    status, doc = as_json(capsys, str(tmp_path / "back"), "--fail-on-regression")
    assert status == 0 and [s["change"] for s in series(doc, "tcg/host/startup")["steps"]] == [
        steps.REGRESSION, steps.IMPROVEMENT]
    write_series(tmp_path / "again", [25, 25, 25, 20, 20, 20, 25, 25, 25])  # faster, then slower again
    assert as_json(capsys, str(tmp_path / "again"), "--fail-on-regression")[0] == 1
    # a slowdown the team accepts: pinned by a baseline, the gate judges that series by it from then on
    write_series(tmp_path / "kept", [20, 20, 20, 20, 25, 25, 25, 25])
    assert as_json(capsys, str(tmp_path / "kept"), "--fail-on-regression")[0] == 1
    pinned = tmp_path / "accepted.yaml"
    assert history(capsys, str(tmp_path / "kept"), "--write-baseline", str(pinned))[0] == 0
    status, doc = as_json(capsys, str(tmp_path / "kept"), "--baseline", str(pinned), "--fail-on-regression")
    assert status == 0 and doc["regressions"] == [] and series(doc, "tcg/host/startup")["baseline"] is True
    # a baseline of another machine pins nothing here: said, and the history judges
    other = pinned.read_text().replace("Test CPU 9000", "Other CPU")
    (tmp_path / "other.yaml").write_text(other)
    status, doc = as_json(capsys, str(tmp_path / "kept"), "--baseline", str(tmp_path / "other.yaml"),
                          "--fail-on-regression")
    assert status == 1 and any("pins nothing for Test CPU 9000" in n for n in doc["baseline_notes"])


def test_figures_at_zero_are_not_judged_and_json_stays_strict(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    for i, values in enumerate([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]):
        (tmp_path / f"{i}.json").write_text(json.dumps(results(f"2026-11-1{i}T10:00:00Z", {"uml/startup": values})))
    status, out, err = history(capsys, str(tmp_path), "--json")
    (s,) = json.loads(out)["series"]  # strict JSON: json.loads would take NaN, the emitter refuses it
    assert status == 0 and s["steps"] == [] and s["note"].startswith("not judged") and "NaN" not in out


def test_two_machines_keep_their_own_charts_and_untrusted_fingerprints_are_read_as_they_are(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(2)
    for i in range(6):
        for cpu in ("CPU A", "CPU B"):
            doc = results(f"2026-11-1{i}T10:00:00Z", {"tcg/startup": noisy(20 if cpu == "CPU A" else 30, rng)})
            doc["host"]["cpu_model"] = cpu
            if cpu == "CPU B":  # what a hand-edited file may hold: parts that are not mappings, a huge memory
                doc["host"].update(virtualization="kvm", versions="x", memory_bytes=1e308)
            (tmp_path / f"{cpu[-1]}{i}.json").write_text(json.dumps(doc))
    undated = results("not a time", {"tcg/startup": noisy(20, rng)})
    undated["host"]["cpu_model"] = "CPU A"
    (tmp_path / "0-undated.json").write_text(json.dumps(undated))
    out = tmp_path / "page"
    status, doc = as_json(capsys, str(tmp_path), "--html", str(out))
    assert status == 0 and [m["label"].split(" ×")[0] for m in doc["machines"]] == ["CPU A", "CPU B"]
    # no start time: kept apart, never the newest run (issue 46), and named
    assert [r["file"] for r in doc["apart"]] == [str(tmp_path / "0-undated.json")]
    assert not any(r["file"].endswith("0-undated.json") for m in doc["machines"] for r in m["runs"])
    assert len(list(out.glob("trend-*.svg"))) == 2
    page = (out / "report.md").read_text()
    assert page.count("trend-0-tcg-host-startup.png") == 1 and page.count("trend-1-tcg-host-startup.png") == 1


def test_a_results_directory_named_through_a_link_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_series(tmp_path / "data", [20, 20, 20])
    (tmp_path / "results").symlink_to(tmp_path / "data")
    (tmp_path / "data" / "elsewhere.json").symlink_to(tmp_path / "data" / "2026111" "0T100000Z-history.json")
    status, doc = as_json(capsys, str(tmp_path / "results"))
    assert status == 0 and len(doc["machines"][0]["runs"]) == 3  # a link below it is not followed


def test_nine_unchanged_real_runs_here_raise_no_alarm_at_any_point(capsys: pytest.CaptureFixture[str]) -> None:
    """Must-hold 2 on real runs: tests/data/history/unchanged/ are nine runs of unchanged.yaml (tcg and uml,
    start-up and upload-no-write, two repetitions) made one after another on this machine (2026-11-27). Judged as
    a CI gate would after each run from the third on: 4 series × 7 gates, no alarm."""
    from guestbench.analysis import history as series_of
    from guestbench.results import store

    stored = sorted(store.load([str(Path(__file__).parent / "data" / "history" / "unchanged")]),
                    key=lambda s: s.run.started_utc or "")
    assert len(stored) == 9
    gates = 0
    for k in range(3, 10):
        h = series_of.build(stored[:k])
        for s in h.series:
            gates += 1
            assert not s.verdict.steps and s.verdict.drift is None and s.verdict.newest is None, (k, s.key)
    assert gates == 28
    status, doc = as_json(capsys, str(Path(__file__).parent / "data" / "history" / "unchanged"), "--fail-on-regression")
    assert status == 0 and doc["regressions"] == [] and len(doc["series"]) == 4


REAL = Path(__file__).parent / "data" / "history" / "unchanged"


def _real_runs(directory: Path, slower: float) -> list[Path]:
    """Six of the real runs (tests/data/history/unchanged), the newest `slower` times as slow in every cell."""
    directory.mkdir()
    paths = []
    for i, real in enumerate(sorted(REAL.glob("*.json"))[:6]):
        doc = json.loads(real.read_text())
        for cell in doc["cells"] if i == 5 else []:
            for sample in cell["samples"]:
                sample["seconds"] *= slower
        paths.append(directory / real.name)
        paths[-1].write_text(json.dumps(doc))
    return paths


def test_a_run_dated_in_the_future_never_hides_the_newest_regression_and_the_gate_names_its_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 46: "newest" was the file's own start time, so one file dated 9999-12-31 with good figures became
    the newest run of every series and the gate passed a 2× regression. Past now plus history.SKEW a run is kept
    apart, named, and never judged; the gate says which run it judged."""
    runs = _real_runs(tmp_path / "runs", 2.0)
    newest = json.loads(runs[-1].read_text())["started_utc"]
    assert history(capsys, str(tmp_path / "runs"), "--fail-on-regression")[0] == 1
    future = json.loads(runs[0].read_text())  # the first run's good figures, dated at the end of time
    future["started_utc"] = "9999-12-31T00:00:00Z"
    (tmp_path / "runs" / "zz-future.json").write_text(json.dumps(future))
    status, out, err = history(capsys, str(tmp_path / "runs"), "--fail-on-regression")
    assert status == 1, err
    text = " ".join(out.split())
    assert "not followed" in text and f"{tmp_path / 'runs' / 'zz-future.json'}, started 9999-12-31" in text
    # the gate's own line, on stderr whatever the format: the run it judged, by file and date, and not the future
    (judged,) = [line for line in err.splitlines() if "--fail-on-regression judged" in line]
    assert f"{runs[-1]}, started {newest}" in judged and "zz-future" not in judged
    status, doc = as_json(capsys, str(tmp_path / "runs"), "--fail-on-regression")
    assert status == 1 and [r["file"] for r in doc["apart"]] == [str(tmp_path / "runs" / "zz-future.json")]
    assert len(doc["regressions"]) == 4 and all(f"{runs[-1]}, started {newest}" in r for r in doc["regressions"])
    assert all(len(s["points"]) == 6 for s in doc["series"])  # the future run is in no series


def test_clock_skew_within_a_day_is_followed_and_an_undated_run_is_kept_apart(tmp_path: Path) -> None:
    """A run dated a few hours ahead (a clock off, or set to local time and called UTC) is an ordinary run; one
    dated past now plus history.SKEW, or with no start time that can be read, is not followed."""
    from guestbench.analysis import history as series_of
    from guestbench.results import store

    paths = write_series(tmp_path, [20, 20, 20])
    now = json.loads(paths[-1].read_text())["started_utc"]
    when = series_of._when(now)
    assert when is not None
    for name, started in (("ahead.json", "2026-11-13T09:00:00+00:00"), ("later.json", "2026-11-13T10:00:01Z"),
                          ("undated.json", "yesterday")):
        doc = json.loads(paths[0].read_text())
        doc["started_utc"] = started
        (tmp_path / name).write_text(json.dumps(doc))
    h = series_of.build(store.load([str(tmp_path)]), now=when)  # "now": the third run's start, 2026-11-12 10:00
    assert [Path(r.path).name for r in h.machines[0].runs][-1] == "ahead.json"  # 23 hours ahead: followed
    assert sorted(Path(r.path).name for r in h.apart) == ["later.json", "undated.json"]
    assert h.until == "2026-11-13T10:00:00Z" and len(h.machines[0].runs) == 4
