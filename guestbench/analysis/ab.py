"""`guestbench ab`'s verdict: B against A from the one run that measured both (its scenario is
guestbench.scenario.ab's). Per backend and figure: the ratio B/A with its bootstrap CI, a permutation test, a
noise threshold, and which way is better (guestbench.analysis.compare).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guestbench.scenario.model import SIDE

if TYPE_CHECKING:
    from guestbench.analysis import compare

DEFAULT_NOISE_PCT = 5.0


def _side_doc(doc: dict[str, Any], side: str) -> dict[str, Any]:
    """The run's cells of one side, labelled as the scenario's item (so that A and B cells match by key)."""
    cells = []
    for cell in doc.get("cells", []):
        if (cell.get("variant") or {}).get(SIDE) == side:
            cells.append({**cell, "label": str(cell["label"])[: -len(f".{side}")]})
    return {**doc, "cells": cells}


def comparison(doc: dict[str, Any], a: dict[str, str], b: dict[str, str], noise_pct: float | None,
               source: str, gate_resources: bool = False) -> compare.Comparison:
    """B against A from one run's document: the permutation test decides, within the noise nothing changed."""
    name = {"A": " ".join(f"{k}={v}" for k, v in a.items()) or "the scenario as written",
            "B": " ".join(f"{k}={v}" for k, v in b.items()) or "the scenario as written"}
    from guestbench.analysis import compare  # here: numpy and the reports, which a run needs only at its end

    return compare.build_comparison(_side_doc(doc, "A"), _side_doc(doc, "B"), f"A ({name['A']})",
                                    f"B ({name['B']}) in {source}", noise_pct, by="permutation",
                                    gate_resources=gate_resources)
