"""Scenario files: loading, defaults, and one clear UserError (file, key path, problem, allowed) per mistake."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from guestbench.backends import BACKENDS
from guestbench.util.errors import UserError
from guestbench.measurements import MEASUREMENTS
from guestbench.scenario import (DEFAULT_SAMPLE_TIMEOUT_S, DEFAULT_TIMEOUT_S, MeasurementSpec, Scenario,
                                 apply_overrides, load_scenario, parse_scenario)
from guestbench.scenario.model import DEFAULT_REPETITIONS, DEFAULT_WARMUP, TOP_KEYS
from guestbench.util.units import SIZE_HELP
from helpers.paths import ROOT

# the scenarios the checkout ships (git's list), not a user's own beside them
SHIPPED = sorted(ROOT / p for p in subprocess.run(["git", "ls-files", "scenarios/*.yaml", "scenarios/**/*.yaml"],
                                                   cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
MiB = 2**20
GiB = 2**30
ALL_BACKENDS = ", ".join(BACKENDS)
ALL_MEASUREMENTS = ", ".join(MEASUREMENTS)
ALL_TOP_KEYS = ", ".join(TOP_KEYS)


def write(tmp_path: Path, text: str, name: str = "bad.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def load_error(path: Path) -> UserError:
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    err = exc.value
    msg = str(err)
    assert "\n" not in msg, msg
    assert msg.startswith(f"{path}: "), msg
    assert err.source == str(path)
    assert err.exit_status == 2
    return err


def scenario_from(text: str, tmp_path: Path) -> Scenario:
    return load_scenario(write(tmp_path, text, "ok.yaml"))


# ---------------------------------------------------------------- shipped files


def test_shipped_scenarios_exist() -> None:
    names = {p.name for p in SHIPPED}
    assert {"startup.yaml", "upload.yaml", "uml-vs-kvm.yaml", "durability.yaml"} <= names
    seeds = {p.name for p in SHIPPED if p.parent.name == "seeds"}
    assert seeds == {"loop-vs-direct.yaml", "lvm-vs-file.yaml", "block-layers.yaml", "filesystems.yaml",
                     "api-suite.yaml"}


def test_seed_scenarios_cover_the_issue_dimensions() -> None:
    """E2-E4: every host-side kind, guest layout and filesystem appears in some shipped seed scenario."""
    from guestbench.storage import backing, guest

    seen: dict[str, set[object]] = {"host": set(), "layout": set(), "filesystem": set(), "concurrency": set()}
    for path in SHIPPED:
        if path.parent.name == "seeds":
            for m in load_scenario(path).measurements:
                for k in seen:
                    if k in m.params:
                        seen[k].add(m.params[k])
    assert seen["host"] == set(backing.HOST_KINDS)
    assert seen["layout"] == set(guest.LAYOUTS)
    assert seen["filesystem"] == set(guest.FILESYSTEMS)
    assert 2 in seen["concurrency"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_scenario_loads(path: Path) -> None:
    sc = load_scenario(path)
    assert sc.name == path.stem
    assert sc.source == str(path)
    assert sc.measurements
    assert len({m.label for m in sc.measurements}) == len(sc.measurements)
    for m in sc.measurements:
        assert m.measurement in MEASUREMENTS
        every = {p.name for p in MEASUREMENTS[m.measurement].params}
        assert set(MEASUREMENTS[m.measurement].defaults()) <= set(m.params) <= every  # optional ones when given
        # shipped sizes are the ones a reader can trust: e.g. bonnie++'s file cannot sit in the guest's cache
        assert MEASUREMENTS[m.measurement].caveats(m.params, sc.memsize) == [], m.label
    # the document as recorded in a results file is plain JSON
    assert json.loads(json.dumps(sc.to_dict()))["name"] == sc.name


def test_bonnie_ram_below_the_appliance_memory_is_a_caveat() -> None:
    bonnie = MEASUREMENTS["bonnie"]
    params = {**bonnie.defaults(), "size": 64 * 2**20, "ram": 32 * 2**20}
    assert bonnie.check(params, 256) == []  # allowed (tests use it for speed) ...
    [caveat] = bonnie.caveats(params, 256)  # ... but said
    assert "ram 32 MiB is below appliance.memsize (256 MiB)" in caveat and "64 MiB file" in caveat
    assert bonnie.caveats({**params, "ram": 256 * 2**20, "size": 512 * 2**20}, 256) == []
    assert "default appliance memory (1280 MiB)" in bonnie.caveats(bonnie.defaults(), None)[0]


def test_uml_vs_kvm_has_the_published_sizes() -> None:
    sc = load_scenario(ROOT / "scenarios" / "uml-vs-kvm.yaml")
    assert sc.repetitions == 3
    assert sc.warmup == 1
    assert sc.timeout == 300.0
    assert sc.sample_timeout == 1800.0
    assert sc.memsize == 2048
    assert [m.label for m in sc.measurements] == ["startup", "upload", "upload-no-write", "write-no-upload"]
    by = {m.label: m.params for m in sc.measurements}
    assert by["upload"] == {"size": 500 * 10**6, "disk_size": 10**9, "filesystem": "ext2", "format": "raw",
                            "cache": "writeback"}
    assert by["upload-no-write"] == {"size": 500 * 10**6}
    assert by["write-no-upload"]["size"] == 500 * 10**6
    assert by["write-no-upload"]["disk_size"] == 10**9


def test_upload_scenario_uses_binary_sizes() -> None:
    sc = load_scenario(ROOT / "scenarios" / "upload.yaml")
    assert sc.memsize == 1280
    assert [m.params["size"] for m in sc.measurements] == [100 * MiB, 100 * MiB]
    assert sc.measurements[0].params["disk_size"] == GiB


# ---------------------------------------------------------------- defaults and item forms


def test_defaults_applied(tmp_path: Path) -> None:
    sc = scenario_from("name: minimal\nmeasurements: [startup, upload]\n", tmp_path)
    assert sc.name == "minimal"
    assert sc.description == ""
    assert sc.backends is None
    assert sc.repetitions == DEFAULT_REPETITIONS == 5
    assert sc.warmup == DEFAULT_WARMUP == 1
    assert sc.timeout == DEFAULT_TIMEOUT_S == 300.0
    assert sc.sample_timeout == DEFAULT_SAMPLE_TIMEOUT_S == 1800.0
    assert sc.memsize is None and sc.smp is None
    startup, upload = sc.measurements
    assert startup == MeasurementSpec("startup", "startup", {"disk_size": 64 * MiB, "format": "raw",
                                                             "cache": "writeback"})
    assert upload.params == {"size": 100 * MiB, "disk_size": GiB, "filesystem": "ext2", "format": "raw",
                             "cache": "writeback"}


def test_cold_false_skips_a_start_up_cells_cold_launch_and_says_so(tmp_path: Path) -> None:
    """cold: false saves a start-up cell's first launch (the cold one, reported apart): its iterations, what its
    cells say was timed, the dry run's line, and the file handed to a nested run all say so."""
    from guestbench.plan.cells import plan
    from guestbench.output.tables.dryrun import document
    from guestbench.plan.dryrun import DryRun

    sc = scenario_from("name: c\nwarmup: 1\nrepetitions: 2\nmeasurements: [startup, upload]\n", tmp_path)
    assert sc.cold is True and sc.iterations(True) == ["cold", "warmup", "rep", "rep"]
    warm = scenario_from("name: c\ncold: false\nwarmup: 1\nrepetitions: 2\nmeasurements: [startup, upload]\n",
                         tmp_path)
    assert warm.iterations(True) == ["warmup", "rep", "rep"] and warm.iterations(False) == sc.iterations(False)
    startup, upload = plan(warm, ["uml"])
    assert startup.iterations == ["warmup", "rep", "rep"]
    assert "no cold launch was taken" in startup.cells[0].timed and "reported once as 'cold'" not in \
        startup.cells[0].timed
    assert plan(sc, ["uml"])[1].cells[0].timed == upload.cells[0].timed  # a launch-once measurement: as ever
    assert warm.to_file()["cold"] is False and "cold" not in sc.to_file()
    assert parse_scenario(warm.to_file(), "again.yaml").cold is False
    assert "no cold first launch" in " ".join(p.text for p in document(DryRun(warm, {}, [])).intro)
    with pytest.raises(UserError, match="cold"):
        scenario_from("name: c\ncold: maybe\nmeasurements: [startup]\n", tmp_path)


def test_partial_params_keep_other_defaults(tmp_path: Path) -> None:
    sc = scenario_from("name: x\nmeasurements:\n  - measurement: write-no-upload\n    filesystem: xfs\n"
                       "    cache: unsafe\n", tmp_path)
    assert sc.measurements[0].params == {"size": 100 * MiB, "disk_size": GiB, "filesystem": "xfs",
                                         "format": "raw", "cache": "unsafe"}


def test_string_item_equals_mapping_item(tmp_path: Path) -> None:
    a = scenario_from("name: x\nmeasurements:\n  - upload\n", tmp_path)
    b = scenario_from("name: x\nmeasurements:\n  - measurement: upload\n", tmp_path)
    assert a.measurements == b.measurements
    assert a.measurements[0].label == "upload"


def test_every_value_set_explicitly(tmp_path: Path) -> None:
    sc = scenario_from(
        "name: full\ndescription: all keys\nbackends: [kvm, tcg]\nrepetitions: 2\nwarmup: 0\n"
        "timeout: 90s\nsample_timeout: 5min\nappliance:\n  memsize: 2GiB\n  smp: 2\n"
        "measurements:\n  - measurement: upload\n    label: big\n    size: 1.5KiB\n    disk_size: 500MB\n",
        tmp_path)
    assert sc.description == "all keys"
    assert sc.backends == ("kvm", "tcg")
    assert (sc.repetitions, sc.warmup) == (2, 0)
    assert sc.timeout == 90.0
    assert sc.sample_timeout == 300.0
    assert (sc.memsize, sc.smp) == (2048, 2)
    assert sc.measurements[0].label == "big"
    assert sc.measurements[0].params["size"] == 1536
    assert sc.measurements[0].params["disk_size"] == 500 * 10**6


@pytest.mark.parametrize(("value", "seconds"), [("300", 300.0), (2.5, 2.5), ("1h", 3600.0), ("1.5m", 90.0),
                                                ("45 s", 45.0), (7, 7.0)])
def test_timeout_forms(tmp_path: Path, value: object, seconds: float) -> None:
    sc = scenario_from(f"name: x\nmeasurements: [startup]\ntimeout: {json.dumps(value)}\n", tmp_path)
    assert sc.timeout == seconds


@pytest.mark.parametrize(("value", "mib"), [(2048, 2048), ('"2048"', 2048), ("2GiB", 2048), ("1.5GiB", 1536),
                                            ("256MiB", 256)])
def test_memsize_forms(tmp_path: Path, value: object, mib: int) -> None:
    sc = scenario_from(f"name: x\nmeasurements: [startup]\nappliance:\n  memsize: {value}\n", tmp_path)
    assert sc.memsize == mib


def test_backends_as_comma_string(tmp_path: Path) -> None:
    sc = scenario_from("name: x\nmeasurements: [startup]\nbackends: tcg, libvirt-kvm\n", tmp_path)
    assert sc.backends == ("tcg", "libvirt-kvm")


def test_same_measurement_twice_with_distinct_labels(tmp_path: Path) -> None:
    sc = scenario_from("name: x\nmeasurements:\n  - measurement: upload\n    label: ext2\n"
                       "  - measurement: upload\n    label: xfs\n    filesystem: xfs\n", tmp_path)
    assert [m.label for m in sc.measurements] == ["ext2", "xfs"]
    assert [m.params["filesystem"] for m in sc.measurements] == ["ext2", "xfs"]


def test_label_must_be_unique(tmp_path: Path) -> None:
    p = write(tmp_path, "name: x\nmeasurements:\n  - upload\n  - measurement: upload\n    filesystem: xfs\n")
    err = load_error(p)
    assert err.key == "measurements[1].label"
    assert "'upload' is used twice" in str(err)
    assert "distinct 'label'" in str(err)


def test_label_must_be_unique_even_across_measurements(tmp_path: Path) -> None:
    p = write(tmp_path, "name: x\nmeasurements:\n  - startup\n  - measurement: upload\n    label: startup\n")
    err = load_error(p)
    assert err.key == "measurements[1].label"
    assert "used twice" in str(err)


def test_bad_label(tmp_path: Path) -> None:
    p = write(tmp_path, "name: x\nmeasurements:\n  - measurement: upload\n    label: 'a b'\n")
    err = load_error(p)
    assert err.key == "measurements[0].label"
    assert "'a b' is not allowed" in str(err)
    assert "letters, digits" in str(err)


# ---------------------------------------------------------------- bad files: each names file, key, allowed

MIN = "name: x\nmeasurements: [startup]\n"


@pytest.mark.parametrize(
    ("text", "key", "needles"),
    [
        pytest.param(MIN + "repetition: 3\n", "repetition", ["unknown key", " ".join(TOP_KEYS)], id="unknown-top-key"),
        pytest.param(MIN + "appliance:\n  memsize: 2048\n  cpus: 2\n", "appliance.cpus",
                     ["unknown key", "memsize, smp"], id="unknown-appliance-key"),
        pytest.param(MIN + "appliance: 2048\n", "appliance", ["not a mapping", "memsize, smp"],
                     id="appliance-not-mapping"),
        pytest.param(MIN + "appliance:\n  memsize: 12XB\n", "appliance.memsize",
                     ["'12XB'", SIZE_HELP, "integer number of MiB"], id="memsize-bad-size"),
        pytest.param(MIN + "appliance:\n  memsize: 128\n", "appliance.memsize",
                     ["128 MiB is too small", "at least 256"], id="memsize-too-small"),
        pytest.param(MIN + "appliance:\n  memsize: 1000MB\n", "appliance.memsize",
                     ["'1000MB' is not a whole number of MiB"], id="memsize-not-whole-mib"),
        pytest.param(MIN + "appliance:\n  smp: 0\n", "appliance.smp", ["too small", "integer >= 1"],
                     id="smp-zero"),
        pytest.param(MIN + "repetitions: three\n", "repetitions", ["'three' is not an integer", "integer >= 1"],
                     id="repetitions-word"),
        pytest.param(MIN + "repetitions: 0\n", "repetitions", ["0 is too small", "integer >= 1"],
                     id="repetitions-zero"),
        pytest.param(MIN + "repetitions: true\n", "repetitions", ["True is not an integer", "integer >= 1"],
                     id="repetitions-bool"),
        pytest.param(MIN + "repetitions: 2.5\n", "repetitions", ["2.5 is not an integer", "integer >= 1"],
                     id="repetitions-float"),
        pytest.param(MIN + "warmup: -1\n", "warmup", ["-1 is too small", "integer >= 0"], id="warmup-negative"),
        pytest.param(MIN + "timeout: 0\n", "timeout", ["not a duration", "seconds > 0"], id="timeout-zero"),
        pytest.param(MIN + "timeout: -5\n", "timeout", ["-5 is not a duration", "seconds > 0"],
                     id="timeout-negative"),
        pytest.param(MIN + "timeout: soon\n", "timeout", ["'soon' is not a duration", "5min"], id="timeout-word"),
        pytest.param(MIN + "timeout: .nan\n", "timeout", ["not a duration", "seconds > 0"], id="timeout-nan"),
        pytest.param(MIN + "timeout: .inf\n", "timeout", ["not a duration", "seconds > 0"], id="timeout-inf"),
        pytest.param(MIN + "timeout: true\n", "timeout", ["True is not a duration"], id="timeout-bool"),
        pytest.param(MIN + "sample_timeout: 0s\n", "sample_timeout", ["'0s' is not a duration"],
                     id="sample-timeout-zero"),
        pytest.param("name: x\nmeasurements:\n  - startup\n  - measurement: upload\n    size: 12XB\n",
                     "measurements[1].size", ["'12XB'", SIZE_HELP], id="bad-size"),
        pytest.param("name: x\nmeasurements:\n  - measurement: upload\n    disk_size: 0\n",
                     "measurements[0].disk_size", ["bad size 0", SIZE_HELP], id="zero-disk-size"),
        pytest.param(MIN + "backends: [tcg, vmware]\n", "backends[1]", ["unknown backend 'vmware'", ALL_BACKENDS],
                     id="unknown-backend"),
        pytest.param(MIN + "backends: [kvm, kvm]\n", "backends[1]", ["'kvm' is listed twice"],
                     id="backend-twice"),
        pytest.param(MIN + "backends: []\n", "backends", ["the list is empty", ALL_BACKENDS], id="empty-backends"),
        pytest.param(MIN + "backends: 3\n", "backends", ["3 is not a list", ALL_BACKENDS], id="backends-int"),
        pytest.param("name: x\nmeasurements: [startup, bogus]\n", "measurements[1].measurement",
                     ["unknown measurement 'bogus'", ALL_MEASUREMENTS], id="unknown-measurement"),
        pytest.param("name: x\nmeasurements:\n  - measurement: bogus\n", "measurements[0].measurement",
                     ["unknown measurement 'bogus'", ALL_MEASUREMENTS], id="unknown-measurement-mapping"),
        pytest.param("name: x\nmeasurements:\n  - size: 1GiB\n", "measurements[0]",
                     ["missing key 'measurement'", ALL_MEASUREMENTS], id="item-without-measurement"),
        pytest.param("name: x\nmeasurements:\n  - [startup]\n", "measurements[0]",
                     ["neither a measurement name nor a mapping", ALL_MEASUREMENTS], id="item-is-list"),
        pytest.param("name: x\nmeasurements:\n  - measurement: upload\n    fs: ext4\n", "measurements[0].fs",
                     ["unknown parameter for upload", "label, matrix, cache, disk_size, filesystem, format, size"],
                     id="unknown-parameter"),
        pytest.param("name: x\nmeasurements:\n  - measurement: startup\n    size: 1GiB\n", "measurements[0].size",
                     ["unknown parameter for startup", "label, matrix, cache, disk_size, format"],
                     id="parameter-of-another-measurement"),
        pytest.param("name: x\nmeasurements:\n  - measurement: upload\n    filesystem: ntfs\n",
                     "measurements[0].filesystem", ["'ntfs' is not allowed", "ext2, ext3, ext4, xfs, btrfs"],
                     id="bad-filesystem"),
        pytest.param("name: x\nmeasurements:\n  - measurement: upload\n    cache: none\n",
                     "measurements[0].cache", ["'none' is not allowed", "writeback, unsafe"], id="bad-cache"),
        pytest.param("name: x\nmeasurements:\n  - measurement: upload\n    format: vmdk\n",
                     "measurements[0].format", ["'vmdk' is not allowed", "raw, qcow2"], id="bad-format"),
        pytest.param("name: x\nmeasurements: []\n", "measurements", ["the list is empty", ALL_MEASUREMENTS],
                     id="empty-measurements"),
        pytest.param("name: x\nmeasurements: startup\n", "measurements", ["str is not a list", ALL_MEASUREMENTS],
                     id="measurements-not-list"),
        pytest.param("name: x\nmeasurements:\n  startup: {}\n", "measurements",
                     ["dict is not a list", ALL_MEASUREMENTS], id="measurements-mapping"),
        pytest.param("name: x\n", "measurements", ["missing", ALL_MEASUREMENTS], id="missing-measurements"),
        pytest.param("measurements: [startup]\n", "name", ["missing", "non-empty string"], id="missing-name"),
        pytest.param("name: ''\nmeasurements: [startup]\n", "name", ["'' is not a non-empty string"],
                     id="empty-name"),
        pytest.param("name: [a]\nmeasurements: [startup]\n", "name", ["['a'] is not a non-empty string"],
                     id="name-list"),
        pytest.param("name: x\nmeasurements:\n  - measurement: upload\n    size: 1GiB\n    disk_size: 1GiB\n",
                     "measurements[0].disk_size",
                     ["1GiB is too small for size 1GiB", "at least size + 10% + 64MiB"], id="disk-too-small"),
        pytest.param("name: x\nmeasurements:\n  - measurement: write-no-upload\n    size: 1GiB\n",
                     "measurements[0].disk_size", ["1GiB is too small for size 1GiB"],
                     id="disk-too-small-by-default"),
        pytest.param("name: x\nappliance:\n  memsize: 512\nmeasurements:\n  - measurement: upload-no-write\n"
                     "    size: 200MiB\n", "measurements[0].size",
                     ["200MiB does not fit in the appliance's RAM (memsize 512MiB)",
                      "set appliance.memsize to at least 584 (MiB)"], id="upload-no-write-too-big"),
        pytest.param("name: x\nmeasurements:\n  - measurement: upload-no-write\n    size: 1GiB\n",
                     "measurements[0].size", ["memsize 1280MiB", "at least 1408 (MiB)"],
                     id="upload-no-write-too-big-default-memsize"),
        pytest.param(MIN + "placement: [host, cloud]\n", "placement[1]", ["unknown placement 'cloud'", "host, nested"],
                     id="unknown-placement"),
        pytest.param(MIN + "placement: [nested, nested]\n", "placement[1]", ["'nested' is listed twice"],
                     id="placement-twice"),
        pytest.param(MIN + "placement: []\n", "placement", ["the list is empty", "host, nested"],
                     id="empty-placement"),
        pytest.param(MIN + "placement: {host: 1}\n", "placement", ["is not a list", "host, nested"],
                     id="placement-mapping"),
        pytest.param(MIN + "nested: 4096\n", "nested", ["not a mapping", "memory, vcpus, timeout_scale, timeout"],
                     id="nested-not-mapping"),
        pytest.param(MIN + "nested: {cpus: 2}\n", "nested.cpus", ["unknown key", "memory, vcpus"],
                     id="nested-unknown-key"),
        pytest.param(MIN + "nested: {memory: 512}\n", "nested.memory", ["512 MiB is too small", "at least 1024"],
                     id="nested-memory-too-small"),
        pytest.param(MIN + "nested: {vcpus: 0}\n", "nested.vcpus", ["0 is too small", "integer >= 1"],
                     id="nested-vcpus-zero"),
        pytest.param(MIN + "nested: {timeout_scale: -2}\n", "nested.timeout_scale", ["-2 is not a number > 0"],
                     id="nested-scale-negative"),
        pytest.param(MIN + "nested: {timeout_scale: .inf}\n", "nested.timeout_scale", ["not a number > 0"],
                     id="nested-scale-inf"),
        pytest.param(MIN + "nested: {timeout: never}\n", "nested.timeout", ["'never' is not a duration"],
                     id="nested-timeout-word"),
    ],
)
def test_bad_scenario(tmp_path: Path, text: str, key: str, needles: list[str]) -> None:
    p = write(tmp_path, text)
    err = load_error(p)
    assert err.key == key
    assert str(err).startswith(f"{p}: {key}: ")
    for n in needles:
        assert n in str(err), (n, str(err))


def test_placement_and_nested_keys(tmp_path: Path) -> None:
    sc = scenario_from(MIN + "placement: [nested, host]\nnested:\n  memory: 2GiB\n  vcpus: 1\n"
                       "  timeout_scale: 10\n  timeout: 2h\n", tmp_path)
    assert sc.placements == ("host", "nested")  # host first: the reference for nested/host ratios
    nested = sc.nested
    assert (nested.memory_mib, nested.vcpus, nested.timeout_scale, nested.timeout) == (2048, 1, 10.0, 7200.0)
    assert scenario_from(MIN, tmp_path).placements == ("host",)
    assert apply_overrides(sc, placement="nested").placements == ("nested",)
    assert scenario_from(MIN + "placement: nested, host\n", tmp_path).placements == ("host", "nested")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_to_file_reads_back_to_the_same_scenario(path: Path) -> None:
    """A nested run hands the guest its scenario as a file: nothing may change on the way."""
    sc = load_scenario(path)
    assert parse_scenario(json.loads(json.dumps(sc.to_file())), str(path)) == sc
    assert parse_scenario(sc.to_file(placement=["host"]), str(path)).placements == ("host",)


def test_document_is_a_list(tmp_path: Path) -> None:
    p = write(tmp_path, "- name: x\n- measurements: [startup]\n")
    err = load_error(p)
    assert "the document is a list, not a mapping" in str(err)
    assert ALL_TOP_KEYS in str(err)


def test_document_is_a_scalar(tmp_path: Path) -> None:
    err = load_error(write(tmp_path, "just some words\n"))
    assert "the document is a str, not a mapping" in str(err)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    err = load_error(write(tmp_path, text))
    assert "the file is empty" in str(err)
    assert ALL_TOP_KEYS in str(err)


@pytest.mark.parametrize("text", ["a: [b", "name: x\n  measurements: [startup]\n bad", "a: b: c\n", "\tname: x\n"])
def test_not_yaml(tmp_path: Path, text: str) -> None:
    err = load_error(write(tmp_path, text))
    assert "not valid YAML at line " in str(err)
    assert ", column " in str(err)


def test_not_yaml_reports_the_position(tmp_path: Path) -> None:
    err = load_error(write(tmp_path, "name: x\nmeasurements: [startup\n"))
    assert "not valid YAML at line 3, column 1: expected ',' or ']'" in str(err)


def test_deeply_nested_yaml_is_a_user_error(tmp_path: Path) -> None:
    err = load_error(write(tmp_path, "[" * 50000))
    assert "not valid YAML" in str(err)


def test_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "binary.yaml"
    p.write_bytes(b"name: \xff\xfe\x00\x01\n")
    err = load_error(p)
    assert "cannot read" in str(err)


def test_python_tags_are_refused(tmp_path: Path) -> None:
    err = load_error(write(tmp_path, "name: !!python/object/apply:os.system ['true']\nmeasurements: [startup]\n"))
    assert "not valid YAML" in str(err)


def test_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "missing.yaml"
    err = load_error(p)
    assert "no such scenario file" in str(err)
    assert "scenarios/startup.yaml" in str(err)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    d = tmp_path / "dir.yaml"
    d.mkdir()
    err = load_error(d)
    assert "is a directory" in str(err)


def test_parse_scenario_names_the_source() -> None:
    with pytest.raises(UserError) as exc:
        parse_scenario(["a"], "inline")
    assert str(exc.value).startswith("inline: the document is a list")


# ---------------------------------------------------------------- command-line overrides


@pytest.fixture
def uml_vs_kvm() -> Scenario:
    return load_scenario(ROOT / "scenarios" / "uml-vs-kvm.yaml")


@pytest.fixture
def upload_sc() -> Scenario:
    return load_scenario(ROOT / "scenarios" / "upload.yaml")


@pytest.fixture
def startup_sc() -> Scenario:
    return load_scenario(ROOT / "scenarios" / "startup.yaml")


def override_error(sc: Scenario, key: str, **kw: object) -> str:
    with pytest.raises(UserError) as exc:
        apply_overrides(sc, **kw)
    err = exc.value
    assert err.source == "command line"
    assert err.key == key
    msg = str(err)
    assert msg.startswith(f"command line: {key}: "), msg
    assert "\n" not in msg
    return msg


def test_no_overrides_changes_nothing(uml_vs_kvm: Scenario) -> None:
    sc = apply_overrides(uml_vs_kvm, backend=None, repetitions=None, size=None, measurement=None)
    assert sc == uml_vs_kvm
    assert sc.overrides == {}


def test_backend_override(startup_sc: Scenario) -> None:
    sc = apply_overrides(startup_sc, backend="tcg,kvm")
    assert sc.backends == ("tcg", "kvm")
    assert apply_overrides(startup_sc, backend=" libvirt-tcg , tcg ").backends == ("libvirt-tcg", "tcg")
    assert sc.overrides == {"backend": "tcg,kvm"}


def test_repetitions_and_timeouts_override(startup_sc: Scenario) -> None:
    sc = apply_overrides(startup_sc, repetitions=7, warmup=0, timeout="5min", sample_timeout="90")
    assert (sc.repetitions, sc.warmup, sc.timeout, sc.sample_timeout) == (7, 0, 300.0, 90.0)
    assert sc.overrides == {"repetitions": 7, "warmup": 0, "timeout": "5min", "sample_timeout": "90"}
    # the scenario itself is unchanged
    assert startup_sc.repetitions == 5


def test_memsize_override(upload_sc: Scenario) -> None:
    assert apply_overrides(upload_sc, memsize="2048").memsize == 2048  # a bare number is MiB, as in the file
    assert apply_overrides(upload_sc, memsize="3GiB").memsize == 3072


def test_size_override_applies_to_sized_measurements(upload_sc: Scenario) -> None:
    sc = apply_overrides(upload_sc, size="64MiB")
    assert [m.params["size"] for m in sc.measurements] == [64 * MiB, 64 * MiB]
    assert sc.measurements[0].params["disk_size"] == GiB  # big enough already: unchanged
    assert sc.measurements[0].params["filesystem"] == "ext2"


def test_size_override_skips_startup_and_grows_disk(uml_vs_kvm: Scenario) -> None:
    sc = apply_overrides(uml_vs_kvm, measurement="startup,upload,write-no-upload", size="2GiB")
    startup, upload, wnu = sc.measurements
    assert startup == uml_vs_kvm.measurements[0]
    assert "size" not in startup.params
    need = 2 * GiB + 2 * GiB // 10 + 64 * MiB
    for m in (upload, wnu):
        assert m.params["size"] == 2 * GiB
        assert m.params["disk_size"] == need
    # and the grown disk passes the same check a file would get
    for m in sc.measurements:
        assert MEASUREMENTS[m.measurement].check(m.params, sc.memsize) == []


def test_size_override_decimal(uml_vs_kvm: Scenario) -> None:
    sc = apply_overrides(uml_vs_kvm, size="4096")
    assert [m.params.get("size") for m in sc.measurements] == [None, 4096, 4096, 4096]
    assert sc.measurements[1].params["disk_size"] == 10**9


def test_measurement_filter(uml_vs_kvm: Scenario) -> None:
    sc = apply_overrides(uml_vs_kvm, measurement="upload")
    assert [m.label for m in sc.measurements] == ["upload"]
    sc = apply_overrides(uml_vs_kvm, measurement=" write-no-upload, startup ")
    # the scenario's order is kept
    assert [m.label for m in sc.measurements] == ["startup", "write-no-upload"]


@pytest.mark.parametrize(
    ("kw", "key", "needles"),
    [
        ({"backend": "nosuch"}, "--backend[0]", ["unknown backend 'nosuch'", ALL_BACKENDS]),
        ({"backend": "tcg,nosuch"}, "--backend[1]", ["unknown backend 'nosuch'", ALL_BACKENDS]),
        ({"backend": "tcg,tcg"}, "--backend[1]", ["listed twice"]),
        ({"backend": "tcg,"}, "--backend[1]", ["unknown backend ''", ALL_BACKENDS]),
        ({"repetitions": 0}, "--repetitions", ["0 is too small", "integer >= 1"]),
        ({"repetitions": "abc"}, "--repetitions", ["'abc' is not an integer", "integer >= 1"]),
        ({"warmup": -1}, "--warmup", ["-1 is too small", "integer >= 0"]),
        ({"timeout": "-5"}, "--timeout", ["'-5' is not a duration", "seconds > 0"]),
        ({"timeout": "0"}, "--timeout", ["'0' is not a duration"]),
        ({"sample_timeout": "forever"}, "--sample-timeout", ["'forever' is not a duration"]),
        ({"memsize": "12XB"}, "--memsize", ["'12XB'", SIZE_HELP]),
        ({"memsize": "100"}, "--memsize", ["100 MiB is too small", "at least 256"]),
        ({"size": "12XB"}, "--size", ["bad size '12XB'", SIZE_HELP]),
        ({"size": "0"}, "--size", ["positive whole number"]),
        ({"measurement": "nosuch"}, "--measurement",
         ["'nosuch' is not in this scenario", "startup, upload, upload-no-write, write-no-upload"]),
        ({"measurement": ","}, "--measurement", ["empty", "startup, upload"]),
        ({"measurement": "startup", "size": "1GiB"}, "--size", ["no measurement in this scenario takes a size"]),
        ({"placement": "host,moon"}, "--placement[1]", ["unknown placement 'moon'", "host, nested"]),
        ({"placement": "nested,nested"}, "--placement[1]", ["listed twice"]),
    ],
)
def test_bad_override(uml_vs_kvm: Scenario, kw: dict[str, object], key: str, needles: list[str]) -> None:
    msg = override_error(uml_vs_kvm, key, **kw)
    for n in needles:
        assert n in msg, (n, msg)


def test_size_override_on_startup_only(startup_sc: Scenario) -> None:
    msg = override_error(startup_sc, "--size", size="1GiB")
    assert "no measurement in this scenario takes a size" in msg


def test_size_override_too_big_for_ram(upload_sc: Scenario) -> None:
    msg = override_error(upload_sc, "--size (upload-no-write.size)", size="1GiB")
    assert "1GiB does not fit in the appliance's RAM (memsize 1280MiB)" in msg
    assert "at least 1408" in msg


def test_memsize_override_too_small_for_upload_no_write(upload_sc: Scenario) -> None:
    msg = override_error(upload_sc, "upload-no-write.size", memsize="256")
    assert "memsize 256MiB" in msg
    assert "at least 484" in msg


# ---------------------------------------------------------------- matrix

MATRIX = """name: m
measurements:
  - measurement: upload
    label: up
    size: 8MiB
    matrix:
      filesystem: [ext2, xfs]
      format: [raw, qcow2]
"""


def test_matrix_expands_every_combination_in_order(tmp_path: Path) -> None:
    sc = scenario_from(MATRIX, tmp_path)
    assert [m.label for m in sc.measurements] == ["up.ext2.raw", "up.ext2.qcow2", "up.xfs.raw", "up.xfs.qcow2"]
    assert {m.group for m in sc.measurements} == {"up"}
    last = sc.measurements[-1]
    assert last.variant == {"filesystem": "xfs", "format": "qcow2"}
    assert last.params["filesystem"] == "xfs" and last.params["format"] == "qcow2" and last.params["size"] == 8 * MiB
    assert parse_scenario(json.loads(json.dumps(sc.to_file())), sc.source) == sc  # one-value matrices read back


def test_plain_item_is_its_own_group(tmp_path: Path) -> None:
    (m,) = scenario_from("name: x\nmeasurements: [upload]\n", tmp_path).measurements
    assert m.group == "upload" and m.variant == {}


@pytest.mark.parametrize("matrix, key, needle", [
    ("{fs: [ext2]}", "measurements[0].matrix.fs", "unknown parameter for upload"),
    ("{filesystem: ext2}", "measurements[0].matrix.filesystem", "not a non-empty list"),
    ("{filesystem: []}", "measurements[0].matrix.filesystem", "not a non-empty list"),
    ("{filesystem: [ext2, zfs]}", "measurements[0].matrix.filesystem[1]", "'zfs' is not allowed"),
    ("{filesystem: [ext2, ext2]}", "measurements[0].matrix.filesystem[1]", "listed twice"),
    ("{size: [8MiB]}", "measurements[0].matrix.size", "also given as a fixed parameter"),
    ("[ext2]", "measurements[0].matrix", "not a non-empty mapping"),
])
def test_bad_matrix(tmp_path: Path, matrix: str, key: str, needle: str) -> None:
    err = load_error(write(tmp_path, f"name: x\nmeasurements:\n  - measurement: upload\n    size: 8MiB\n"
                                     f"    matrix: {matrix}\n"))
    assert err.key == key and needle in str(err), str(err)


def test_matrix_labels_must_not_collide(tmp_path: Path) -> None:
    err = load_error(write(tmp_path, "name: x\nmeasurements:\n  - {measurement: upload, label: a.ext2}\n"
                                     "  - {measurement: upload, label: a, matrix: {filesystem: [ext2]}}\n"))
    assert "used twice" in str(err)
