"""The documentation stays true: the scenario reference is what the validator accepts, the README stays short,
and every relative link in README.md and docs/ points at a file that exists."""

from __future__ import annotations

import re

from guestbench.output import scenario_reference
from helpers.paths import ROOT

README_MAX_LINES = 300
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_scenario_reference_is_current() -> None:
    path = ROOT / "docs" / "scenario-reference.md"
    assert path.read_text() == scenario_reference.markdown(), "docs/scenario-reference.md is stale: run make docs"


def test_every_measurement_parameter_and_key_is_in_the_reference() -> None:
    from guestbench.measurements import MEASUREMENTS
    from guestbench.scenario.model import TOP_KEYS

    text = (ROOT / "docs" / "scenario-reference.md").read_text()
    assert all(f"| `{k}` |" in text for k in TOP_KEYS)
    assert all(f"### `{m.name}`" in text and all(f"| `{p.name}` |" in text for p in m.params)
               for m in MEASUREMENTS.values())


def test_the_readme_is_short_and_links_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    for page in ("docs/architecture.md", "docs/scenario-reference.md", "docs/results-format.md"):
        assert page in readme, page


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_every_test_the_capability_table_names_exists() -> None:
    """docs/development.md names, per capability, the end-to-end test that proves it: each is a real test."""
    text = (ROOT / "docs" / "development.md").read_text()
    table = text[text.index("| capability | end-to-end test"):]
    table = table[:table.index("\n\n")]
    named = re.findall(r"(test_\w+)::(test_\w+)", table)
    assert len(named) >= 25, named
    missing = [f"{f}::{t}" for f, t in named
               if not (ROOT / "tests" / f"{f}.py").exists()
               or not re.search(rf"^def {t}\(", (ROOT / "tests" / f"{f}.py").read_text(), re.M)]
    assert missing == [], f"docs/development.md names tests that do not exist: {missing}"
