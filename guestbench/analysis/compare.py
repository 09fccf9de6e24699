"""Compare results files against a baseline: did an update make appliances slower?

Each cell (backend, placement, measurement label) measured in both files gets the ratio of medians, a
bootstrap confidence interval of that ratio and a Mann-Whitney U p-value. Significance and regression are
kept apart on purpose: with the few repetitions guestbench usually runs, the test often *cannot* reach
p < 0.05 (3 vs 3 samples never gets below p = 0.1), so a regression is decided by the ratio against the
user's ``--fail-above`` threshold alone, and the verdict says when the test had too few samples to speak.
"""

from __future__ import annotations
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
import numpy as np
from guestbench.util.errors import UserError
from guestbench.analysis.cells import cores_text, status
from guestbench.results.figures import load_figures
from guestbench.results import figures as cell_figures
from guestbench.results.figures import SECONDS, figures
from guestbench.results.model import Cell, Run
from guestbench.analysis.machines import machine_differences, software_changes
from guestbench.analysis.stats import (RATIO_CI_METHOD, mann_whitney, min_attainable_p, paired_p,
                                      paired_ratio_ci, permutation_p, ratio_ci)
from guestbench.util.units import NONE


ALPHA = 0.05


MIN_N_NOTE = 4


CI_METHOD = RATIO_CI_METHOD


SLOWER, FASTER, NO_CHANGE = "slower", "faster", "no significant change"


HIGHER, LOWER = "higher", "lower"  # the verdicts of a figure that is not seconds (MB/s, IOPS, ms)


WITHIN_NOISE = "no change (within the noise threshold)"


IMPROVEMENT, REGRESSION = "improvement", "regression"


Key = tuple[str, str, str]


@dataclass(frozen=True)
class ComparisonRow:
    """One cell measured in both files. Figures that cannot exist are `math.nan` (shown "–", JSON null)."""

    backend: str
    placement: str
    measurement: str
    n_base: int
    n_other: int
    median_base: float
    median_other: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str  # "exact" or "asymptotic": which Mann-Whitney computation gave p_value
    verdict: str
    note: str | None = None
    differences: tuple[str, ...] = ()  # params that differ between the two cells: ratio may mislead
    figure: str = "seconds"  # what is compared: a sample's seconds, or a workload figure's label
    unit: str = "s"
    higher_better: bool = False  # seconds and latencies: lower is better; MB/s, IOPS: higher
    p_perm: float = math.nan  # the permutation test of the difference of medians (stats.permutation_p)
    gated: bool = True  # False: shown with its verdict, but --fail-above does not act on it (resources by default)

    @property
    def cell(self) -> str:
        return cell_name((self.backend, self.placement, self.measurement))

    @property
    def worse_factor(self) -> float:
        """How many times worse the other side is (below 1: better), whichever direction is better."""
        if math.isnan(self.ratio) or self.ratio <= 0:
            return math.nan
        return 1 / self.ratio if self.higher_better else self.ratio

    @property
    def change(self) -> str | None:
        """improvement or regression for a verdict that found a difference; None otherwise."""
        if self.verdict in (SLOWER, LOWER if self.higher_better else HIGHER):
            return REGRESSION
        if self.verdict in (FASTER, HIGHER if self.higher_better else LOWER):
            return IMPROVEMENT
        return None

    def is_regression(self, fail_above_pct: float | None) -> bool:
        """Worse by more than the threshold, whatever p says: few samples must not hide a slowdown."""
        if fail_above_pct is None or not self.gated or math.isnan(self.worse_factor):
            return False
        return self.worse_factor > 1 + fail_above_pct / 100

    def verdict_text(self) -> str:
        text = f"{self.verdict}, {self.change}" if self.change and self.figure != "seconds" else self.verdict
        return f"{text} ({self.note})" if self.note else text


@dataclass
class Comparison:
    """A baseline against one other file: the matched rows and what could not be matched."""

    base_path: str
    other_path: str
    rows: list[ComparisonRow]
    only_in_base: list[str] = field(default_factory=list)
    only_in_other: list[str] = field(default_factory=list)
    host_differences: list[str] = field(default_factory=list)
    software_changes: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # cells timed while the host was busy, on either side
    noise_pct: float | None = None  # ratios within this many percent of 1 are no change
    by: str = "mann-whitney"  # the verdict's test: "mann-whitney" (compare) or "permutation" (ab)


def cell_name(key: Key) -> str:
    return "/".join(part or NONE for part in key)


def cell_key(cell: Cell) -> Key:
    """(backend, placement, label); a fleet run's cell names its host in the placement (`host@alpha`), so two
    fleet runs are compared host by host."""
    measurement = cell.measurement or "?"
    placement = cell.placement or ""
    if cell.host:
        placement = f"{placement or 'host'}@{cell.host}"
    return (cell.system if cell.backend else "?", placement, cell.label or measurement)


def cells_by_key(run: Run, source: str | None = None) -> dict[Key, Cell]:
    """Cells by (backend, placement, label); a key twice in one file is an error, as either could be meant."""
    out: dict[Key, Cell] = {}
    for cell in run.cells:
        key = cell_key(cell)
        if key in out:
            raise UserError(f"cell {cell_name(key)} appears twice; cannot tell which one to compare",
                            source=source, key="cells")
        out[key] = cell
    return out


def _few_samples_note(n_base: int, n_other: int, rounds: int | None = None) -> str | None:
    """`rounds`: the paired test's pairs, whose smallest two-sided p is 2 / 2^rounds (every sign agreeing)."""
    smallest_p = min_attainable_p(n_base, n_other) if rounds is None else min(1.0, 2 / 2 ** rounds)
    few = (min(n_base, n_other) if rounds is None else rounds) < MIN_N_NOTE
    ci = "; a bootstrap CI of so few samples is too narrow" if few else ""
    if smallest_p >= ALPHA:
        return f"too few samples for the test to reach p<{ALPHA:g}: smallest possible p is {smallest_p:.2g}{ci}"
    if few:
        return f"few samples (n<{MIN_N_NOTE}): the test can barely reach p<{ALPHA:g}{ci}"
    return None


def _param_differences(base_cell: Cell, other_cell: Cell) -> tuple[str, ...]:
    """Same label but different size, filesystem or cache mode, or start-up cells whose first sample was the cold
    launch on one side only: the two cells did not time the same thing."""
    out: list[str] = []
    for name in ("params", "cache_mode", "bytes"):
        a, b = getattr(base_cell, name), getattr(other_cell, name)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{name}.{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b), key=str)
                    if a.get(k) != b.get(k)]
        elif a != b:
            out.append(f"{name}: {a!r} vs {b!r}")
    cold = _first_sample_cold(base_cell), _first_sample_cold(other_cell)
    if cold[0] is not None and cold[1] is not None and cold[0] != cold[1]:
        said = {True: "the first launch (cold)", False: "a warm launch"}
        out.append(f"first sample: {said[cold[0]]} vs {said[cold[1]]} (the scenario keys cold and warmup)")
    return tuple(out)


def _first_sample_cold(cell: Cell) -> bool | None:
    """Whether a start-up cell's first sample was its first launch: no cold launch taken apart (the scenario's
    cold: false) and no warm-up before it, or a pytest-benchmark run without warm-up rounds (an import keeps their
    count, not their samples). None for other measurements, whose one launch is never a sample, and where a
    failure's kind is not recorded (files from before kinds were)."""
    if cell.measurement != "startup" or any(f.kind is None for f in cell.failures):
        return None
    rounds = cell.extra.get("warmup_rounds")
    if rounds is not None:
        return rounds == 0 if isinstance(rounds, int) else None
    launched = cell.cold_s is not None or bool(cell.warmups) or any(f.kind in ("cold", "warmup") for f in cell.failures)
    return not launched


def compare_samples(key: Key, base: Sequence[float], other: Sequence[float],
                    differences: tuple[str, ...] = (), *, noise_pct: float | None = None,
                    figure: str = "seconds", unit: str = "s", higher_better: bool = False,
                    by: str = "mann-whitney", gated: bool = True,
                    pairs: tuple[list[float], list[float]] | None = None) -> ComparisonRow:
    """All figures of one row from the raw samples of both sides (each side needs at least one). A ratio within
    the noise threshold is no change whatever p says; otherwise the verdict is the test's, in the figure's
    own words (seconds: slower/faster; other figures: higher/lower). `pairs`: the two sides' samples round by
    round, where they took turns (guestbench ab): the verdict's test is then the paired one."""
    med_b, med_o = float(np.median(base)), float(np.median(other))
    ratio = med_o / med_b if med_b > 0 else math.nan
    low, high = ratio_ci(base, other)
    p, test, other_larger = mann_whitney(base, other)
    p_perm = permutation_p(base, other)
    if by == "permutation":  # the verdict's test (guestbench ab): the permutation test of the medians
        p, test, other_larger = p_perm, "permutation", med_o > med_b
        if pairs is not None and not math.isnan(paired := paired_p(*pairs)):  # rounds as the units
            p, test = paired, "paired"
            other_larger = float(np.mean(np.log(np.asarray(pairs[1]) / np.asarray(pairs[0])))) > 0
            low, high = paired_ratio_ci(*pairs)
    up, down = (HIGHER, LOWER) if figure != "seconds" else (SLOWER, FASTER)
    verdict = NO_CHANGE if not p < ALPHA else up if other_larger else down
    if noise_pct is not None and not math.isnan(ratio) and abs(ratio - 1) < noise_pct / 100:
        verdict = WITHIN_NOISE
    return ComparisonRow(backend=key[0], placement=key[1], measurement=key[2], n_base=len(base),
                         n_other=len(other), median_base=med_b, median_other=med_o, ratio=ratio, ci_low=low,
                         ci_high=high, p_value=p, test=test, verdict=verdict,
                         note=_few_samples_note(len(base), len(other),
                                                len(pairs[0]) if test == "paired" and pairs else None),
                         differences=differences, figure=figure,
                         unit=unit, higher_better=higher_better, p_perm=p_perm, gated=gated)


def compare_docs(base: Run, other: Run, noise_pct: float | None = None,
                 by: str = "mann-whitney", gate_resources: bool = False) -> list[ComparisonRow]:
    """One row per cell key and figure with samples in both documents, in the baseline's order.

    What the launches used (CPU s, peak MiB) is compared beside what was timed but gated only on request: it moves
    against the timing on a contended host (waits pass in wall time without burning CPU), so a faster run would
    otherwise fail a time gate for using more CPU."""
    base_cells, other_cells = cells_by_key(base), cells_by_key(other)
    out: list[ComparisonRow] = []
    for key, base_cell in base_cells.items():
        other_cell = other_cells.get(key)
        if other_cell is None:
            continue
        ours, theirs = figures(base_cell), {f.key: f for f in figures(other_cell)}
        if not any(f.key in theirs for f in ours):  # one side has no workload figures (an older file): seconds
            ours, theirs = [cell_figures.seconds(base_cell)], {SECONDS: cell_figures.seconds(other_cell)}
        timed = {f.key for f in ours}
        ours = [*ours, *cell_figures.resources(base_cell)]
        theirs.update({f.key: f for f in cell_figures.resources(other_cell)})
        for f in ours:
            o = theirs[f.key].values if f.key in theirs else []
            if f.values and o:
                row_key = key if f.key == SECONDS else (key[0], key[1], f"{key[2]} {f.key}")
                out.append(compare_samples(row_key, f.values, o, _param_differences(base_cell, other_cell),
                                           noise_pct=noise_pct, figure=f.label, unit=f.unit,
                                           higher_better=f.higher_better, by=by,
                                           gated=f.key in timed or gate_resources,
                                           pairs=_pairs(base_cell, other_cell, f.key) if by == "permutation"
                                           else None))
    return out


def _pairs(base: Cell, other: Cell, key: str) -> tuple[list[float], list[float]] | None:
    """The two cells' figure round by round, where both took turns (one run interleaved them): None else."""
    if not (cell_figures.took_turns(base) and cell_figures.took_turns(other)):
        return None
    a, b = cell_figures.by_rep(base, key), cell_figures.by_rep(other, key)
    rounds = sorted(set(a) & set(b))
    return ([a[r] for r in rounds], [b[r] for r in rounds]) if len(rounds) >= 2 else None


def _absence(cell: Cell | None) -> str:
    if cell is None:
        return "no such cell"
    reason = cell.skip_reason
    return f"no samples, {status(cell) or 'unknown'}" + (f": {reason}" if reason else "")


def _sampled(cell: Cell | None) -> bool:
    return cell is not None and bool(cell.samples)


def unmatched(base: Run, other: Run) -> tuple[list[str], list[str]]:
    """Cells with samples on one side only (`uml/host/upload`, plus why the other side has none): not errors."""
    base_cells, other_cells = cells_by_key(base), cells_by_key(other)
    only_base = [f"{cell_name(k)} (other: {_absence(other_cells.get(k))})"
                 for k, c in base_cells.items() if _sampled(c) and not _sampled(other_cells.get(k))]
    only_other = [f"{cell_name(k)} (baseline: {_absence(base_cells.get(k))})"
                  for k, c in other_cells.items() if _sampled(c) and not _sampled(base_cells.get(k))]
    return only_base, only_other


def build_comparison(base: Run, other: Run, base_path: str,
                     other_path: str, noise_pct: float | None = None, by: str = "mann-whitney",
                     gate_resources: bool = False) -> Comparison:
    cells_by_key(base, base_path)  # name the file in the error if a key is duplicated
    cells_by_key(other, other_path)
    only_base, only_other = unmatched(base, other)
    rows = compare_docs(base, other, noise_pct, by, gate_resources)
    return Comparison(base_path=base_path, other_path=other_path, rows=rows,
                      only_in_base=only_base, only_in_other=only_other,
                      host_differences=machine_differences(base, other),
                      software_changes=software_changes(base, other),
                      busy=busy_cells(base, "baseline") + busy_cells(other, "other"), noise_pct=noise_pct,
                      by=by)


def busy_cells(doc: Run, side: str) -> list[str]:
    """The cells of one side with samples timed while the host was busy (guestbench.instruments.load): their ratio may
    measure the machine, not the change."""
    out = []
    for key, cell in cells_by_key(doc).items():
        load = load_figures(cell)
        if load["busy"]:
            out.append(f"{side}: {cell_name(key)}: the host was busy during {load['busy']} of {load['judged']} "
                       f"samples (other processes up to {cores_text(load['busiest'])} cores)")
    return out


def regressed(comparisons: Iterable[Comparison],
              fail_above_pct: float | None) -> list[tuple[Comparison, ComparisonRow]]:
    """The rows past the threshold, with their comparison: the exit status of `compare` and `ab`."""
    return [(c, r) for c in comparisons for r in c.rows if r.is_regression(fail_above_pct)]
