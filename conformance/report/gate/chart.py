"""timing.png of a gate: per streaming moment (first byte, first reasoning, first content, first tool
name, tool call complete) the distribution over the streamed case runs of both servers, box plus
points, and the per-case delay of the first visible tool name (candidate minus baseline)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from conformance.report.gate import view

COLORS = {"baseline": "#4c72b0", "candidate": "#dd8452"}
DELAY_COLOR = "#55a868"
COLUMNS = 3


def _safe(label: str) -> str:
    """A label matplotlib shows as written (a `$` would start mathtext)."""
    return label.replace("$", r"\$")


def _ms(value: Any) -> float | None:
    return value * 1000.0 if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def side_values(cases: Sequence[Mapping[str, Any]], side: str, metric: str) -> list[float]:
    """Milliseconds of `metric` under `side` over the case runs where it happened."""
    values = (_ms((case.get(side) or {}).get(metric)) for case in cases)
    return [v for v in values if v is not None]


def tool_name_delays(cases: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per case run with a tool name on both sides: candidate minus baseline, in milliseconds."""
    delays = []
    for case in cases:
        base, cand = (_ms((case.get(side) or {}).get("first_tool_name")) for side in view.SIDES)
        if base is not None and cand is not None:
            delays.append(cand - base)
    return delays


def _strip(axes: Any, position: int, values: Sequence[float], color: str, rng: np.random.Generator) -> None:
    """A box of `values` at `position` with every value drawn on it as a jittered point."""
    axes.boxplot([values], positions=[position], widths=0.5, showfliers=False, patch_artist=True,
                 boxprops={"facecolor": color, "alpha": 0.25, "edgecolor": color},
                 medianprops={"color": color, "linewidth": 2}, whiskerprops={"color": color},
                 capprops={"color": color})
    jitter = rng.uniform(-0.15, 0.15, len(values))
    axes.scatter(position + jitter, values, s=14, color=color, alpha=0.8, zorder=3, edgecolors="none")


def _empty(axes: Any, message: str) -> None:
    axes.text(0.5, 0.5, message, ha="center", va="center", transform=axes.transAxes, color="#57606a")
    axes.set_xticks([])
    axes.set_yticks([])


def _metric_panel(axes: Any, cases: Sequence[Mapping[str, Any]], metric: str, tick_labels: Sequence[str],
                  rng: np.random.Generator) -> None:
    per_side = {side: side_values(cases, side, metric) for side in view.SIDES}
    counts = ", ".join(f"n={len(v)}" for v in per_side.values())
    axes.set_title(f"{view.METRIC_TITLES.get(metric, _safe(metric))} ({counts})", fontsize=11)
    if not any(per_side.values()):
        _empty(axes, "not seen under either server")
        return
    for position, (side, values) in enumerate(per_side.items()):
        if values:
            _strip(axes, position, values, COLORS[side], rng)
        else:
            axes.text(position, 0.5, "not seen", ha="center", va="center", color="#57606a",
                      transform=axes.get_xaxis_transform())
    axes.set_xticks(range(len(view.SIDES)), tick_labels)
    axes.set_xlim(-0.6, 1.6)
    everything = [v for values in per_side.values() for v in values]
    if min(everything) > 0 and max(everything) / min(everything) > 20:  # a few slow runs would flatten the boxes
        axes.set_yscale("log")
        axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axes.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        axes.yaxis.set_minor_formatter(NullFormatter())
        axes.set_ylabel("ms since the request started (log scale)")
    else:
        axes.set_ylim(bottom=0)
        axes.set_ylabel("ms since the request started")
    axes.grid(axis="y", alpha=0.3)


def _delay_panel(axes: Any, gate: Mapping[str, Any], cases: Sequence[Mapping[str, Any]], candidate: str,
                 baseline: str, rng: np.random.Generator) -> None:
    """Per case run, how much later (above 0) the candidate shows the first tool name; runs far
    outside the middle 80% are drawn as arrows at the edge so they do not flatten the rest."""
    delays = tool_name_delays(cases)
    axes.set_title(f"first tool name visible: {candidate} minus {baseline} (n={len(delays)})", fontsize=11)
    if not delays:
        _empty(axes, "no case showed a tool name under both servers")
        return
    low, high = np.percentile(delays, [10, 90])
    margin = max(high - low, 20.0)
    pad = 0.08 * (max(delays) - min(delays)) + 5.0
    bottom = min(max(low - margin, min(delays) - pad), -10.0)
    top = max(min(high + margin, max(delays) + pad), 10.0)
    inside = [d for d in delays if bottom <= d <= top]
    if inside:
        _strip(axes, 0, inside, DELAY_COLOR, rng)
    span = top - bottom
    for edge, marker, chosen in ((top - 0.03 * span, "^", [d for d in delays if d > top]),
                                 (bottom + 0.03 * span, "v", [d for d in delays if d < bottom])):
        if chosen:
            axes.scatter(rng.uniform(-0.15, 0.15, len(chosen)), [edge] * len(chosen), marker=marker, s=40,
                         color=DELAY_COLOR, zorder=4)
            axes.annotate(f"{len(chosen)} off the scale, up to {max(chosen, key=abs):.0f} ms", xy=(0.22, edge),
                          fontsize=9, va="center", color="#57606a")
    axes.set_ylim(bottom, top)
    axes.axhline(0, color="#57606a", linewidth=1, linestyle="--")
    summary = ((gate.get("timing") or {}).get("summary") or {}).get("first_tool_name_delay") or {}
    figures = {q: summary.get(q) if isinstance(summary.get(q), (int, float)) else float(np.percentile(delays, p)) / 1000
               for q, p in (("p50", 50), ("p90", 90))}
    axes.set_xticks([0], [f"per streamed case run (above 0: {candidate} later)\n"
                          f"median {view.delay_phrase(figures['p50'])}, p90 {view.delay_phrase(figures['p90'])}"])
    axes.set_xlim(-0.6, 1.2)
    axes.set_ylabel("ms")
    axes.grid(axis="y", alpha=0.3)


def render(gate: Mapping[str, Any]) -> bytes:
    """The chart as PNG bytes (no display, no global pyplot state)."""
    labels = {side: _safe(view.shorten(label, 28)) for side, label in view.labels(gate).items()}
    timing = gate.get("timing") or {}
    cases = [c for c in timing.get("cases") or [] if isinstance(c, Mapping)]
    metrics = [str(m) for m in timing.get("metrics") or []]
    rng = np.random.default_rng(0)  # same picture for the same gate
    panels = len(metrics) + 1
    rows = math.ceil(panels / COLUMNS)
    figure = Figure(figsize=(4.6 * COLUMNS, 3.9 * rows + 0.8), dpi=100, layout="constrained")
    figure.suptitle(f"Streaming timing: {labels['baseline']} (baseline) vs {labels['candidate']} (candidate), "
                    f"{len(cases)} streamed case runs", fontsize=14, fontweight="bold")
    grid = figure.subplots(rows, COLUMNS, squeeze=False).ravel()
    tick_labels = [f"{labels[side]}\n({side})" for side in view.SIDES]
    _delay_panel(grid[0], gate, cases, labels["candidate"], labels["baseline"], rng)  # the figure clients ask about
    for axes, metric in zip(grid[1:], metrics):
        _metric_panel(axes, cases, metric, tick_labels, rng)
    for axes in grid[panels:]:
        axes.set_visible(False)
    buffer = io.BytesIO()
    FigureCanvasAgg(figure).print_png(buffer)
    return buffer.getvalue()
