"""Charts of a results document for `guestbench report`: one per measurement, one per boot-phase breakdown.

Why these encodings: a bar is the median (what the tables rank on), whiskers are the min–max of the
samples rather than a CI of the mean (a mean's CI need not contain the median, and with n = 1 it does not
exist), and every sample is drawn as a dot, because runs have 3–5 samples and the reader should see them.
Bars start at zero and are horizontal so long backend names and the "n=…" labels never overlap. Every
figure drawn comes from the run's summary (guestbench.analysis.findings: seconds, MB/s, phase medians), as the
tables' figures do, so a chart cannot disagree with its table.

matplotlib runs headless: the "Agg" backend is selected before any other matplotlib module is imported,
and figures are `Figure` objects, never pyplot's global state, so rendering many charts leaks nothing.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402  (after the backend is chosen)
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from guestbench.output.tables import density as density_report
from guestbench.analysis import cells as cellrows
from guestbench.analysis.findings import Findings
from guestbench.output.tables import phases as phase_table
from guestbench.output.tables import timing as timing_table
from guestbench.analysis import phases  # noqa: E402
from guestbench.backends import BACKENDS, Backend  # noqa: E402
from guestbench.util.errors import printable  # noqa: E402
from guestbench.output.document import Chart, slug  # noqa: E402
from guestbench.analysis.cells import Row
from guestbench.results.model import Density
from guestbench.analysis.history import Series
from guestbench.analysis.history_gate import HistoryFindings
from guestbench.output.tables.timing import fmt_mb_per_s  # noqa: E402
from guestbench.util.units import NONE, fmt_seconds

OTHER_COLOUR = Backend.colour  # a backend a results file names that is not registered (any more)
PLACEMENT_HATCHES = ("", "xx", "..", "\\\\")
HOST_SIDE_GREYS = ("#d9d9d9", "#bdbdbd", "#969696", "#737373")
APPLIANCE_COLOURS = ("#dd8452", "#4c72b0", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#ccb974",
                     "#64b5cd", "#2f4b7c")  # no greys: grey means host side
WHISKERS = "whiskers: min–max of the samples"
DPI = 150


def bar_names(group: list[Row]) -> list[str]:
    """Names of one measurement's bars: as in its table, plus the placement when there are several."""
    placements = list(dict.fromkeys(r.placement for r in group))
    if len(placements) == 1:
        return cellrows.backend_names(group)
    names: dict[int, str] = {}
    for placement in placements:  # a backend measured at two placements is not ambiguous: name both
        same = [r for r in group if r.placement == placement]
        for name, r in zip(cellrows.backend_names(same), same):
            names[id(r)] = f"{name} · {placement or NONE}"
    return [names[id(r)] for r in group]


def _placement_order(group: list[Row]) -> list[Row]:
    """Host and nested side by side: each backend's placements next to each other, backends in file order."""
    backends = list(dict.fromkeys(r.backend for r in group))
    return sorted(group, key=lambda r: backends.index(r.backend))


def _render(fig: Figure) -> tuple[bytes, bytes]:
    """PNG and SVG of a figure. Its text comes from results files: drawn as plain text (a "$\\frac$" label would
    be mathtext that fails to parse), control characters removed (else warnings print them on stderr)."""
    for text in fig.findobj(Text):
        text.set_parse_math(False)
        text.set_text(printable(text.get_text()))
    png, svg = io.BytesIO(), io.BytesIO()
    # fixed SVG ids: same results, same files; plain text for the tick labels drawn now
    with matplotlib.rc_context({"svg.hashsalt": "guestbench", "text.parse_math": False}):
        fig.savefig(png, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
        fig.savefig(svg, format="svg", bbox_inches="tight", metadata={"Date": None})
    return png.getvalue(), svg.getvalue()


def _titles(ax: Any, title: str, scenario: str) -> None:
    ax.set_title(title, loc="left", fontweight="bold")
    ax.set_title(f"scenario {scenario}", loc="right", fontsize=8, color="#555555")


def _cache_text(group: list[Row]) -> str:
    modes = list(dict.fromkeys(r.cache_mode or NONE for r in group))
    if len(modes) == 1:
        return f"Cache mode: {modes[0]}."
    return "Cache mode: " + ", ".join(f"{r.backend} {r.cache_mode or NONE}" for r in group) + "."


# ---------------------------------------------------------------------------------------------- measurements


def _bar_text(r: Row) -> str:
    if r.summary is None:
        why = cellrows.no_data_text(r)
        return f"no samples: {why if len(why) <= 70 else why[:69] + '…'}"
    text = f"{fmt_seconds(r.summary.median)} s · n={r.n}"
    if r.mb_per_s is not None:
        text += f" · {fmt_mb_per_s(r.mb_per_s)} MB/s"
    return text


def backend_colour(name: str) -> str:
    """Each backend brings its own colour, so that it is the same in every chart (on every stack and in every mode:
    `uml+seccomp@sid` is uml's)."""
    backend = BACKENDS.get(name.partition("@")[0].partition("+")[0])
    return backend.colour if backend is not None else OTHER_COLOUR


def measurement_chart(scenario: str, label: str, rows: list[Row]) -> Chart:
    """Backends side by side for one measurement label (and placements side by side when several)."""
    group = _placement_order(rows)
    names = bar_names(group)
    placements = list(dict.fromkeys(r.placement for r in group))
    fig = Figure(figsize=(8, 1.4 + 0.5 * len(group)))
    ax = fig.add_subplot()
    top = max((r.summary.max for r in group if r.summary), default=0.0) or 1.0
    for y, r in enumerate(group):
        colour = backend_colour(r.backend)
        hatch = PLACEMENT_HATCHES[placements.index(r.placement) % len(PLACEMENT_HATCHES)]
        s = r.summary
        if s is not None:
            ax.barh(y, s.median, height=0.6, color=colour, alpha=0.85, hatch=hatch, edgecolor="white")
            ax.errorbar(s.median, y, xerr=[[s.median - s.min], [s.max - s.median]], fmt="none",
                        ecolor="black", elinewidth=1, capsize=4)
            samples = r.seconds
            offsets = [0.0] if len(samples) == 1 else [-0.18 + 0.36 * i / (len(samples) - 1)
                                                        for i in range(len(samples))]
            ax.scatter(samples, [y + o for o in offsets], s=9, color="black", zorder=3, linewidths=0)
        ax.text((s.max if s else 0) + top * 0.02, y, _bar_text(r), va="center", fontsize=8)
    ax.set_yticks(range(len(group)), [printable(n) for n in names])
    ax.set_ylim(len(group) - 0.5, -0.5)  # first row on top; rows without a bar keep their room
    ax.set_xlim(0, top * 1.45)
    ax.set_xlabel("seconds (s), lower is faster")
    _titles(ax, label, scenario)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    if len(placements) > 1:
        ax.legend(handles=[Patch(facecolor="#bbbbbb", hatch=PLACEMENT_HATCHES[i % len(PLACEMENT_HATCHES)],
                                 edgecolor="white", label=p or NONE) for i, p in enumerate(placements)],
                  title="placement", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    png, svg = _render(fig)
    encoding = f"{label}: bar = median of the n measured samples, {WHISKERS}, dots = each sample; MB/s from the median."
    return Chart(name=slug(label), title=f"{label}: median seconds per backend", encoding=encoding,
                 context=f"{_cache_text(group)} {timing_table.caption(group)}", png=png, svg=svg)


# ---------------------------------------------------------------------------------------------- boot phases


def _phase_styles(order: list[str]) -> dict[str, tuple[str, str]]:
    """(colour, hatch) per phase: host-side phases grey and hatched, appliance phases in colour."""
    host_side = phases.host_side_names()
    greys = iter(HOST_SIDE_GREYS * 4)
    colours = iter(APPLIANCE_COLOURS * 4)
    return {name: (next(greys), "///") if name in host_side else (next(colours), "") for name in order}


def _phase_bar_name(bp: phases.BackendPhases) -> str:
    """As the phase table's columns name it (phase_table.phase_tables), plus n."""
    name = bp.backend if bp.placement == "host" else f"{bp.backend} ({bp.placement})"
    return f"{name}\nn={bp.n}"


def phase_chart(scenario: str, pt: phase_table.PhaseTable) -> Chart:
    """One stacked bar per backend, one segment per phase (median seconds), left to right in boot order."""
    bps = pt.summaries
    order = phases.phase_order(bps)
    style = _phase_styles(order)
    height = 1.5 + 0.55 * len(bps)
    fig = Figure(figsize=(8, height))
    fig.subplots_adjust(bottom=0.6 / height, top=1 - 0.35 / height)  # room for the x label above the legend
    ax = fig.add_subplot()
    top = max([bp.sum_of_medians for bp in bps] + [bp.median_total for bp in bps] + [1e-9])
    for y, bp in enumerate(bps):
        left = 0.0
        for name in order:
            if name not in bp.phases:
                continue
            median = bp.phases[name].median
            colour, hatch = style[name]
            ax.barh(y, median, left=left, height=0.6, color=colour, hatch=hatch, edgecolor="#555555",
                    linewidth=0.4)
            if median >= top * 0.06:
                ax.text(left + median / 2, y, fmt_seconds(median), ha="center", va="center", fontsize=7,
                        color="black" if hatch else "white")
            left += median
        ax.plot([bp.median_total] * 2, [y - 0.38, y + 0.38], color="black", linewidth=2.2)
    ax.set_yticks(range(len(bps)), [printable(_phase_bar_name(bp)) for bp in bps])
    ax.set_ylim(len(bps) - 0.5, -0.5)
    ax.set_xlim(0, top * 1.04)
    ax.set_xlabel("seconds since launch() was called (s)")
    _titles(ax, pt.title, scenario)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(facecolor=style[name][0], hatch=style[name][1], edgecolor="#555555", linewidth=0.4,
                     label=name + (" (host)" if style[name][1] else "")) for name in order]
    handles.append(Patch(facecolor="black", label="median start-up of the same samples"))
    box = ax.get_position()  # below the figure, as wide as the axes: the saved image grows to include it
    fig.legend(handles=handles, ncol=3, fontsize=7.5, loc="upper left", frameon=False, mode="expand",
               bbox_to_anchor=(box.x0, 0.0, box.width, 0.0))
    png, svg = _render(fig)
    host = ", ".join(n for n in order if n in phases.host_side_names())
    encoding = (f"{pt.title}: each segment is the median of that phase over the n samples recorded with "
                f"phases, left to right in boot order. Hatched grey segments are spent on the host "
                f"({host or 'none here'}), coloured ones in the appliance. The black tick is the median "
                f"start-up of the same samples; medians of phases need not add up to it exactly.")
    return Chart(name=slug(pt.title), title=f"{pt.title} per backend (median s)", encoding=encoding,
                 context=pt.caption, png=png, svg=svg)


# ---------------------------------------------------------------------------------------------- all


def density_chart(scenario: str, rec: Density) -> Chart:
    """A density item on one backend: median start-up (min–max whiskers) and launches per minute per level."""
    f = density_report.level_figures(rec)
    levels = [(lv, sp) for lv in rec.levels if (sp := getattr(lv, f.key)) is not None and sp.median is not None]
    backend = rec.backend
    colour = backend_colour(backend)
    fig = Figure(figsize=(7.5, 3.6))
    ax = fig.subplots()
    xs = [lv.appliances for lv, _ in levels]
    med = [sp.median for _, sp in levels]
    err = [[sp.median - (sp.min if sp.min is not None else sp.median) for _, sp in levels],  # no range: no whisker
           [(sp.max if sp.max is not None else sp.median) - sp.median for _, sp in levels]]
    ax.errorbar(xs, med, yerr=err, color=colour, marker="o", capsize=4, label=f"{backend}: median {f.name} (s)")
    if med:
        bound = med[0] * float(rec.slowdown_pct or 200) / 100
        ax.axhline(bound, color="#999999", linestyle="--", linewidth=1, label=f"bound: {bound:.3g} s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs or [1], [str(x) for x in xs] or ["1"])
    ax.set_xlabel("appliances launched at once")
    ax.set_ylabel(f"{f.name}, s")
    ax.set_ylim(bottom=0)
    rate = ax.twinx()
    rate.plot(xs, [getattr(lv, f.rate_key) or 0 for lv, _ in levels], color="#444444", marker="s", linestyle=":",
              label=f"{f.count} per minute")
    rate.set_ylabel(f"{f.count} per minute")
    rate.set_ylim(bottom=0)
    handles = ax.get_legend_handles_labels()[0] + rate.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper left", fontsize=8)
    _titles(ax, f"density on {backend}", scenario)
    png, svg = _render(fig)
    return Chart(name=slug(f"density-{rec.label}-{backend}-{rec.placement}"),
                 title=f"density: {rec.label} on {backend}",
                 encoding=f"Dots: median {f.name} of all appliances of a level, whiskers min–max; dashed: the "
                          f"slowdown bound; squares: {f.count} per minute of the level (right axis).",
                 context=f"Stopped ({rec.stopped}): {rec.why}. {rec.verdict}.",
                 png=png, svg=svg)


@dataclass(frozen=True)
class DocumentCharts:
    """The charts of one results document: by measurement label, per density item, per boot-phase table (in
    the order of `density_report.tables` and `phase_table.phase_tables`)."""

    measured: dict[str, Chart]
    density: list[Chart]
    phases: list[Chart]


def document_charts(s: Findings) -> DocumentCharts:
    """A chart for each timing table (a workload's figures and a density item's appliances have their own
    tables), each density item and each boot-phase table."""
    return DocumentCharts({label: measurement_chart(s.name, label, group) for label, group in s.timing.items()},
                          [density_chart(s.name, rec) for rec in s.density],
                          [phase_chart(s.name, pt) for pt in phase_table.phase_tables(s.phases)])


def trend_chart(f: HistoryFindings, s: Series) -> Chart:
    """One series of `guestbench history`: each run's median with its samples' range, the steps and drift found,
    and the software that changed, on the run axis."""
    m = f.history.machines[s.machine]
    fig = Figure(figsize=(7.5, 3.4))
    ax = fig.subplots()
    xs = [p.run + 1 for p in s.points]
    med = [p.median for p in s.points]
    err = [[p.median - min(p.values) for p in s.points], [max(p.values) - p.median for p in s.points]]
    ax.errorbar(xs, med, yerr=err, color="#4c72b0", marker="o", capsize=3, linestyle="-", linewidth=1,
                label="median of the run (whiskers: min–max of its samples)")
    marks = sorted([*s.verdict.steps, *([s.verdict.drift] if s.verdict.drift else [])], key=lambda st: st.at)
    cuts = [0, *(st.at for st in marks), len(xs)]
    for i, st in enumerate(marks):  # each level drawn over its own segment, either side of the step
        x = xs[st.at]
        colour = "#c44e52" if st.change == "regression" else "#55a868"
        ax.axvline(x - 0.5, color=colour, linestyle="--", linewidth=1.2, label=f"{st.change} from run {x}")
        ax.hlines([st.shift.before, st.shift.after], [xs[cuts[i]], x - 0.5], [x - 0.5, xs[cuts[i + 2] - 1]],
                  colors=colour, linewidth=0.8)
    for p in s.points:
        changed = f.changes[s.machine][p.run]
        if changed:
            ax.annotate("\n".join(changed), (p.run + 1, p.median), textcoords="offset points", xytext=(4, 10),
                        fontsize=6, color="#555555")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("run (in the order they started)")
    unit = "s" if s.figure == "seconds" else s.unit
    ax.set_ylabel(f"{s.figure}, {unit}")
    if s.figure == "seconds":
        ax.set_ylim(bottom=0)
    ax.legend(loc="lower left", fontsize=7)
    ax.set_title(f"{s.cell}: {s.figure}", loc="left", fontweight="bold")
    ax.set_title(m.label, loc="right", fontsize=8, color="#555555")
    png, svg = _render(fig)
    return Chart(name=slug(f"trend-{s.machine}-{s.key}"), title=f"{s.cell}: {s.figure} on {m.label}",
                 encoding="Dots: each run's median, whiskers: min–max of its samples; dashed lines: where a step "
                          "starts, with the levels on either side; grey notes: the software that changed at that run.",
                 context=f"Noise floor {s.verdict.floor_pct:.1f}%; steps and drift as the table above says.",
                 png=png, svg=svg)
