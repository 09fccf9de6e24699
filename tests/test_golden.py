"""Every output a user reads, byte for byte, against golden files (issue 33: the outputs move to one home and read
the typed model; what they print must not change).

The goldens were written from the code before the move, on the shipped results files (tests/data/) and on a
fresh run's (tests/data/golden/*-fresh*.json, *-ab-*.json: made on this kind of machine, 2026-11-27). Each
case runs the command in this process and compares its stdout, its stderr and its exit status; `report` compares
index.html and report.md whole and every chart by its SHA-256. `doctor` reads this machine, so its case gives it
the facts recorded in tests/data/golden/doctor-facts.json instead of probing; `scenario` and `ab` are given a
finished results file instead of running (run_scenario returns it; their run is tested in test_runner, test_ab). Where
a change is wanted (another issue asks for it), write the goldens again and say why in the commit:
`GOLDEN_WRITE=1 .venv/bin/python -m pytest tests/test_golden.py`.
"""

from __future__ import annotations

import hashlib
import json
import re
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from guestbench import cli
from helpers.paths import ROOT

GOLDEN = ROOT / "tests" / "data" / "golden"
WRITE = os.environ.get("GOLDEN_WRITE") == "1"
FRESH = "tests/data/golden/20261127T055027Z-fresh.json"
AB = "tests/data/golden/20261127T054927Z-ab-cache-ab.json"
FORMATS = {"table": [], "json": ["--json"], "markdown": ["--markdown"], "csv": ["--csv"]}


def _results_files() -> list[str]:
    found = sorted(str(p.relative_to(ROOT)) for d in ("tests/data/results", "tests/data/density",
                                                      "tests/data/workloads", "tests/data/golden")
                   for p in (ROOT / d).glob("*.json") if p.name != "doctor-facts.json")
    return found


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    setup: str = ""  # "doctor", "scenario", "ab", "report", "dryrun"
    extra: dict[str, Any] = field(default_factory=dict)


def _stem(path: str) -> str:
    return Path(path).stem


def cases() -> list[Case]:
    out: list[Case] = []
    files = _results_files()
    for f in files:
        for fmt, flags in FORMATS.items():
            out.append(Case(f"show-{_stem(f)}-{fmt}", ["show", f, *flags]))
        out.append(Case(f"export-{_stem(f)}", ["export", f]))
    pairs = [("tests/data/results/20261121T211449Z-startup.json",
              "tests/data/results/20261121T203509Z-uml-vs-kvm.json"),
             ("tests/data/golden/20261126T105540Z-sig.json", "tests/data/golden/20261126T105858Z-dsig.json"),
             ("tests/data/golden/20261126T110130Z-fleet.json", "tests/data/golden/20261126T110230Z-fleet.json"),
             ("tests/data/density/20261124T104911Z-density.json",
              "tests/data/density/20261124T105408Z-density-upload.json"),
             ("tests/data/golden/20261126T083350Z-startup.json", FRESH)]
    for base, other in pairs:
        for fmt, flags in FORMATS.items():
            out.append(Case(f"compare-{_stem(base)}-{_stem(other)}-{fmt}", ["compare", base, other, *flags]))
        out.append(Case(f"compare-{_stem(base)}-{_stem(other)}-force-gate", ["compare", base, other, "--force",
                                                                             "--fail-above", "5%", "--noise", "2%"]))
    out.append(Case("compare-three-json", ["compare", pairs[0][0], pairs[0][1], pairs[4][0], "--force", "--json"]))
    good = [f for f in files if "hand-edited" not in f and "truncated" not in f]
    out.append(Case("report-all", ["report", *good], setup="report"))
    out.append(Case("report-refused", ["report", FRESH, "tests/data/golden/20261126T120100Z-truncated.json"],
                    setup="report"))
    out.append(Case("report-fresh", ["report", FRESH], setup="report"))
    for fmt, flags in FORMATS.items():
        out.append(Case(f"scenario-fresh-{fmt}", ["scenario", "scenarios/startup.yaml", *flags], setup="scenario"))
        out.append(Case(f"ab-{fmt}", ["ab", "scenarios/startup.yaml", "--a", "cache=writeback", "--b", "cache=unsafe",
                                      *flags], setup="ab"))
    out.append(Case("ab-fail-above", ["ab", "scenarios/startup.yaml", "--a", "cache=writeback", "--b", "cache=unsafe",
                                      "--fail-above", "1%", "--gate-resources"], setup="ab"))
    for name in ("doctor", "doctor-json", "doctor-verbose"):
        out.append(Case(name, ["doctor", *{"doctor": [], "doctor-json": ["--json"],
                                           "doctor-verbose": ["-v"]}[name]], setup="doctor"))
    for sc in sorted((ROOT / "scenarios").glob("*.yaml")):
        if sc.stem in ("soak",):
            continue
        for fmt in ("table", "json", "markdown"):
            out.append(Case(f"dryrun-{sc.stem}-{fmt}", ["scenario", f"scenarios/{sc.name}", "--dry-run",
                                                         "--results", "tests/data/golden", *FORMATS[fmt]],
                            setup="dryrun"))
    return out


def _doctor_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Doctor's four readers of this machine answer what doctor-facts.json recorded."""
    from guestbench.backends import appliance
    from guestbench.host import fingerprint
    from guestbench.backends.base import Availability
    from guestbench.nested import image
    from guestbench.execute import probe

    facts = json.loads((GOLDEN / "doctor-facts.json").read_text())
    monkeypatch.setattr(fingerprint, "fingerprint", lambda: facts["host"])

    def verdicts(names: list[str], **_: Any) -> dict[str, Availability]:
        return {n: Availability(**facts["backends"][n]) for n in names if n in facts["backends"]}

    monkeypatch.setattr(probe, "verdicts", verdicts)
    monkeypatch.setattr(image, "status", lambda kvm_usable: facts["nested"])
    monkeypatch.setattr(appliance, "state", lambda f, v="standard": facts["appliances"][f"{f}-{v}"])


def _finished_run(monkeypatch: pytest.MonkeyPatch, tmp: Path, source: str) -> None:
    """`scenario` and `ab` are given a copy of a finished run's results file instead of running."""
    from guestbench.results import ResultsFile
    from guestbench.run import runner

    copy = tmp / Path(source).name
    shutil.copyfile(ROOT / source, copy)
    doc = json.loads(copy.read_text())
    doc.pop("ab", None)  # the command writes it
    monkeypatch.setattr(runner, "run_scenario", lambda sc, opts, console=None, executor=None: ResultsFile(copy, doc))


def _run(case: Case, tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """The case's outputs, by file name: NAME.out (stdout), NAME.err (exit status, stderr), and a report's files."""
    monkeypatch.chdir(ROOT)
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GUESTBENCH_CACHE", str(tmp / "cache"))
    argv = list(case.argv)
    if case.setup == "doctor":
        _doctor_facts(monkeypatch)
    elif case.setup in ("scenario", "ab"):
        _finished_run(monkeypatch, tmp, FRESH if case.setup == "scenario" else AB)
    elif case.setup == "report":
        argv += ["-o", str(tmp / "report")]
    rc = cli.main(argv)
    got = capsys.readouterr()
    outs = {f"{case.name}.out": got.out, f"{case.name}.err": f"rc={rc}\n{got.err}"}
    if case.setup == "report" and rc == 0:
        d = tmp / "report"
        outs[f"{case.name}.index.html"] = (d / "index.html").read_text()
        outs[f"{case.name}.report.md"] = (d / "report.md").read_text()
        outs[f"{case.name}.charts"] = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
                                              for p in sorted(d.iterdir()) if p.suffix in (".png", ".svg"))
    # the temp dir also as Markdown escapes it: each "_" of its random name may be "\_" (gbgold-\_zpvacak, and
    # gbgold-11_mecs\_ where only the last was escaped: CI D8), so the name is matched with or without each backslash
    tmp_text = re.compile("".join(r"\\?_" if ch == "_" else re.escape(ch) for ch in str(tmp)))
    return {k: tmp_text.sub("<tmp>", v) for k, v in outs.items()}


CASES = cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_output_is_unchanged(case: Case, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gbgold-", dir="/tmp"))  # one length: rich wraps a line quoting it alike
    try:
        outs = _run(case, tmp, monkeypatch, capsys)
    finally:
        shutil.rmtree(tmp)
    for name, text in outs.items():
        path = GOLDEN / "out" / name
        if WRITE:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            continue
        assert path.exists(), f"no golden {path.name}: write it (see the module's docstring)"
        assert text == path.read_text(), f"{name} differs from its golden"


def test_every_case_has_its_goldens_and_no_golden_is_orphaned() -> None:
    if WRITE:
        pytest.skip("writing goldens")
    wanted = {c.name for c in CASES}
    names = {p.name.split(".")[0] for p in (GOLDEN / "out").iterdir()}
    assert names == wanted
