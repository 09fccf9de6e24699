"""Adding an output format is one module with an `emit(Printable)` and one line in output.formats.FORMATS: the
command line gets its flag, and every command that prints a results file, a comparison or a dry run offers it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from guestbench import cli
from guestbench.output import formats
from helpers.cli import main_in_process
from helpers.paths import ROOT

FRESH = "tests/data/golden/20261127T055027Z-fresh.json"
OTHER = "tests/data/golden/20261126T083350Z-startup.json"


@pytest.fixture
def yaml_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gbtest_yaml_export.py").write_text(
        "import sys, yaml\n"
        "def emit(p):\n"
        "    sys.stdout.write(yaml.safe_dump(p.summary(), sort_keys=False))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(formats.FORMATS, "yaml", formats.Format("--yaml", "print YAML", "gbtest_yaml_export",
                                                                whole=True))
    monkeypatch.chdir(ROOT)
    yield
    sys.modules.pop("gbtest_yaml_export", None)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc, out, _ = main_in_process(capsys, *argv)
    return rc, out


def test_a_new_format_is_one_module_and_one_registry_line(yaml_format: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(["show", FRESH, "--yaml"], capsys)
    assert rc == 0
    rc_json, summary = _run(["show", FRESH, "--json"], capsys)
    assert yaml.safe_load(out) == json.loads(summary)
    rc, out = _run(["compare", OTHER, FRESH, "--force", "--yaml"], capsys)
    assert rc in (0, 1) and yaml.safe_load(out) == json.loads(_run(["compare", OTHER, FRESH, "--force", "--json"],
                                                                     capsys)[1])
    rc, out = _run(["scenario", "scenarios/startup.yaml", "--dry-run", "--results", "tests/data/golden", "--yaml"],
                   capsys)
    assert rc == 0 and yaml.safe_load(out)["scenario"]


def test_the_new_format_is_in_the_help_and_excludes_the_others(yaml_format: None,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["show", "--help"])
    assert "--yaml" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli.main(["show", FRESH, "--yaml", "--json"])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
