"""`guestbench ab`'s verdict: B against A from the one run that measured both (its scenario is
guestbench.scenario.ab's). Per backend and figure: the ratio B/A with its bootstrap CI, a permutation test, a
noise threshold, and which way is better (guestbench.analysis.compare).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from guestbench.results.model import Run
from guestbench.scenario.model import SIDE

if TYPE_CHECKING:
    from guestbench.analysis import compare

DEFAULT_NOISE_PCT = 5.0


def _side(run: Run, side: str) -> Run:
    """The run's cells of one side, labelled as the scenario's item (so that A and B cells match by key)."""
    cells = [dataclasses.replace(c, label=c.label[: -len(f".{side}")]) for c in run.cells
             if (c.variant or {}).get(SIDE) == side]
    return dataclasses.replace(run, cells=cells)


def comparison(run: Run, a: dict[str, str], b: dict[str, str], noise_pct: float | None,
               source: str, gate_resources: bool = False) -> compare.Comparison:
    """B against A from one run's document: the permutation test decides, within the noise nothing changed."""
    name = {"A": " ".join(f"{k}={v}" for k, v in a.items()) or "the scenario as written",
            "B": " ".join(f"{k}={v}" for k, v in b.items()) or "the scenario as written"}
    from guestbench.analysis import compare  # here: numpy and the reports, which a run needs only at its end

    return compare.build_comparison(_side(run, "A"), _side(run, "B"), f"A ({name['A']})",
                                    f"B ({name['B']}) in {source}", noise_pct, by="permutation",
                                    gate_resources=gate_resources)
