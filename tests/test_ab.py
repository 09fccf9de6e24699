"""`guestbench ab` (issue 15): two configurations of a scenario in one interleaved run, and their verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guestbench.analysis import ab
from guestbench.output.export.json import comparison_summary
from guestbench.backends.base import HandleConfig
from guestbench.util.errors import UserError
from guestbench.scenario import ab as scenario_ab, parse_scenario

from helpers.cli import guestbench, write_scenario
from guestbench.results import Run

SC = {"name": "s", "repetitions": 3, "measurements": ["startup", {"measurement": "upload-no-write", "size": "1MiB"}]}


def test_every_item_becomes_an_a_and_a_b_cell_of_one_item_that_take_turns() -> None:
    sc = scenario_ab.ab_scenario(parse_scenario(SC, "s.yaml"), {}, {"cache": "unsafe", "LIBGUESTFS_HV": "/opt/qemu",
                                                          "memsize": "768"})
    assert sc.order == "interleaved" and sc.name == "s-ab"
    labels = [(s.label, s.group, s.variant) for s in sc.measurements]
    assert labels == [("startup.A", "startup", {"ab": "A"}), ("startup.B", "startup", {"ab": "B"}),
                      ("upload-no-write.A", "upload-no-write", {"ab": "A"}),
                      ("upload-no-write.B", "upload-no-write", {"ab": "B"})]
    a, b = sc.measurements[0], sc.measurements[1]
    assert (a.params["cache"], b.params["cache"]) == ("writeback", "unsafe")
    assert (a.env, b.env) == ({}, {"LIBGUESTFS_HV": "/opt/qemu"}) and (a.memsize, b.memsize) == (None, 768)
    assert "cache" not in sc.measurements[3].params  # a parameter goes only where the measurement has it


@pytest.mark.parametrize("a, b, problem", [
    ({}, {}, "both sides are the same configuration"),
    ({}, {"cache": "fast"}, "--b cache: 'fast' is not allowed"),
    ({"fs": "ext4"}, {}, "--a fs: is neither a parameter"),
    ({}, {"memsize": "12"}, "--b memsize: 12 MiB is too small"),
    ({}, {"size": "2MiB"}, "--b size: is a matrix axis of item 'upload-no-write'"),
])
def test_bad_sides_are_refused_in_one_line(a: dict, b: dict, problem: str) -> None:
    sc = {**SC, "measurements": ["startup", {"measurement": "upload-no-write", "matrix": {"size": ["1MiB", "4MiB"]}}]}
    with pytest.raises(UserError) as e:
        scenario_ab.ab_scenario(parse_scenario(sc, "s.yaml"), a, b)
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_the_sides_survive_the_file_handed_to_the_level1_guest() -> None:
    """A nested run hands the scenario to guestbench inside as a file: A and B come back as the same cells
    (labels, variants, parameters, environment, memory), matrix axes included."""
    sc = scenario_ab.ab_scenario(parse_scenario({**SC, "placement": ["host", "nested"], "measurements": [
        "startup", {"measurement": "upload-no-write", "matrix": {"size": ["1MiB", "4MiB"]}}]}, "s.yaml"),
        {}, {"cache": "unsafe", "LIBGUESTFS_HV": "/opt/qemu", "memsize": "768"})
    back = parse_scenario(sc.to_file(placement=["host"]), "inside.yaml")
    assert [s.to_dict() for s in back.measurements] == [s.to_dict() for s in sc.measurements]
    assert [s.label for s in back.measurements][2:] == ["upload-no-write.1MiB.A", "upload-no-write.1MiB.B",
                                                        "upload-no-write.4MiB.A", "upload-no-write.4MiB.B"]
    assert back.order == "interleaved"
    with pytest.raises(UserError, match=r"measurements\[0\]\.ab: 'C' is not allowed; allowed: A or B"):
        parse_scenario({**SC, "measurements": [{"measurement": "startup", "ab": "C"}]}, "s.yaml")


def test_a_side_is_key_value_words() -> None:
    assert scenario_ab.parse_side(["cache=unsafe", "LIBGUESTFS_HV=/a=b"], "--b") == {"cache": "unsafe",
                                                                                     "LIBGUESTFS_HV": "/a=b"}
    for words in (["cache"], ["=x"], ["cache=a", "cache=b"]):
        with pytest.raises(UserError, match="--b"):
            scenario_ab.parse_side(words, "--b")


def test_an_environment_replaces_the_backends_libguestfs_settings_and_adds_the_rest() -> None:
    base = HandleConfig("direct", ["force_tcg"], "/usr/bin/qemu", {"GB": "1"})
    got = base.with_environment({"LIBGUESTFS_HV": "/opt/qemu", "LIBGUESTFS_BACKEND_SETTINGS": "force_tcg:x",
                                 "LIBGUESTFS_PATH": "/opt/appliance"})
    assert (got.hv, got.settings, got.env) == ("/opt/qemu", ["force_tcg", "x"],
                                               {"GB": "1", "LIBGUESTFS_PATH": "/opt/appliance"})
    assert base.with_environment({}) == base


@pytest.mark.launch
@pytest.mark.timeout(600)
def test_ab_on_uml_with_a_changed_memsize_prints_a_verdict_with_p_ci_and_noise(tmp_path: Path, no_leftovers) -> None:
    sc = write_scenario(tmp_path / "ab.yaml", """
name: abtest
backends: [uml]
repetitions: 4
warmup: 0
measurements:
  - {measurement: upload-no-write, size: 1MiB}
""")
    # one run (UML launches are what cost here): its printed comparison, then the JSON summary `ab --json`
    # prints, built from the results file the run wrote with the calls cmd_ab makes
    proc = guestbench("ab", str(sc), "--a", "memsize=512", "--b", "memsize=768", "--noise", "3%",
                      "--results", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    flat = " ".join(proc.stdout.split())
    assert "B (memsize=768)" in flat and "vs baseline A (memsize=512)" in flat
    assert "Changes within ±3% (--noise) are no change" in flat and "p (perm.)" in flat
    [path] = (tmp_path / "r").glob("*-abtest-ab.json")
    doc = json.loads(path.read_text())
    out = comparison_summary([ab.comparison(Run.from_dict(doc), {"memsize": "512"}, {"memsize": "768"}, 3, str(path))],
                             None)
    out = json.loads(json.dumps(out, allow_nan=False))
    rows = {r["figure"]: r for r in out["comparisons"][0]["rows"]}
    assert set(rows) == {"seconds", "CPU s", "peak MiB"}  # what the samples used is judged like their seconds
    row = rows["seconds"]
    assert rows["peak MiB"]["higher_better"] is False and rows["peak MiB"]["n_base"] == 4
    # A and B took turns round by round: the paired test of the 4 rounds decides (its smallest p is 2/2^4)
    assert row["n_base"] == row["n_other"] == 4 and row["test"] == "paired" and "paired" in out["methods"]
    assert 0.12 <= row["p_value"] <= 1 and 0 < row["p_permutation"] <= 1
    assert row["ratio_ci_low"] <= row["ratio"] <= row["ratio_ci_high"]
    assert out["methods"]["noise_percent"] == 3
    assert row["verdict"] in ("no change (within the noise threshold)", "no significant change", "slower", "faster")
    if abs(row["ratio"] - 1) < 0.03:
        assert row["verdict"].startswith("no change")
    assert doc["ab"] == {"a": {"memsize": "512"}, "b": {"memsize": "768"}, "noise_percent": 3}
    cells = {c["label"]: c for c in doc["cells"]}
    assert (cells["upload-no-write.A"]["memsize"], cells["upload-no-write.B"]["memsize"]) == (512, 768)
    seqs = sorted((s["seq"], c["label"]) for c in doc["cells"] for s in c["samples"])
    assert [label[-1] for _, label in seqs] == ["A", "B"] * 4  # A and B took turns
