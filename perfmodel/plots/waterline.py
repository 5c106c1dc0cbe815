"""The waterline plot (paper Figure 3): kernels side by side on a time axis.

Each kernel is a bar as wide as its minimum latency and as tall as its operational
intensity (log axis); the processor's op:byte ratio is the waterline. Bars under water are
memory-bound.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from . import (COMPUTE_COLOR, INTENSITY_FLOOR, LOW_COLOR, MEMORY_COLOR, WATER_COLOR, ellipsize,
               plain_log_ticks)

if TYPE_CHECKING:
    from ..api import Result

AXIS_FLOOR = 1.0  # ops/byte: the bottom of the intensity axis
LABEL_CHARS = 28  # longest kernel label before it is ellipsized


def title(result: "Result") -> str:
    return (f"{result.model} on {result.hardware.name}: batch {result.batch}, "
            f"{result.dtype}, plan {result.plan}")


def summary(result: "Result", estimate_ms: float | None = None) -> str:
    t = result.totals
    text = (f"$T_{{min}}$ {t.t_min_s * 1e3:.2f} ms,  $C_{{max}}$ {100 * t.c_max:.1f}%,  "
            f"mediant roofline $C_{{max}}$ {100 * t.mediant_c_max:.1f}%")
    return text + (f",  estimate {estimate_ms:.2f} ms" if estimate_ms is not None else "")


def estimate_line(ax, t_min_ms: float, estimate_ms: float) -> None:
    """The calibrated estimate beyond the waterline's end: the time the kernels would take at
    the efficiencies their kinds attained in microbenchmarks."""
    ax.set_xlim(0, max(t_min_ms, estimate_ms) * 1.03)
    ax.axvline(t_min_ms, color="#555555", linewidth=0.8)
    ax.axvline(estimate_ms, color="black", linewidth=1.2, linestyle="--")
    ax.text(estimate_ms, 0.98, " estimate", transform=ax.get_xaxis_transform(), ha="right",
            va="top", rotation=90, fontsize=7.5)


def intensity_top(results: "list[Result]") -> float:
    """A decade boundary above every kernel and waterline: one y range for stacked panels."""
    peak = max(max([k.intensity for k in r.kernels] + [r.totals.op_byte]) for r in results)
    return 10 ** np.ceil(np.log10(peak * 2))


def intensity_bars(ax, start, widths, intensity, memory, color=None, **style) -> None:
    """Bars from the axis floor, coloured by bound (or all `color`); kernels under
    INTENSITY_FLOOR are drawn up to it, paler."""
    low = intensity < INTENSITY_FLOOR
    colors = color or np.where(low, LOW_COLOR, np.where(memory, MEMORY_COLOR, COMPUTE_COLOR))
    heights = np.maximum(intensity, INTENSITY_FLOOR) - AXIS_FLOOR
    ax.bar(start, heights, width=widths, bottom=AXIS_FLOOR, align="edge", color=colors,
           **({"edgecolor": "white", "linewidth": 0.3} | style))


def waterline_line(ax, op_byte: float) -> None:
    """The water (shaded up to op:byte) and its level, labelled at the right of the axes."""
    ax.axhspan(AXIS_FLOOR, op_byte, color=WATER_COLOR, alpha=0.15, zorder=0)
    ax.axhline(op_byte, color=WATER_COLOR, linewidth=1.5)
    ax.text(1.005, op_byte, f"op:byte\n{op_byte:.0f}", ha="left", va="center",
            transform=ax.get_yaxis_transform(), fontsize=8, color="#1f5f8b")


def legend_handles(low: bool = True) -> list[Patch]:
    handles = [Patch(color=COMPUTE_COLOR, label="compute-bound"),
               Patch(color=MEMORY_COLOR, label="memory-bound")]
    if low:
        handles.append(Patch(color=LOW_COLOR, label=f"under {INTENSITY_FLOOR:g} ops/byte "
                             f"(pooling, scaling), drawn at {INTENSITY_FLOOR:g}"))
    return handles


def draw_waterline(ax, result: "Result", *, label_widest: int = 3, top: float | None = None):
    """Draw one model's waterline on `ax`; returns the kernel labels, placed by fit_labels."""
    totals = result.totals
    t_ms = np.array([k.t_min_ms for k in result.kernels])
    intensity = np.array([k.intensity for k in result.kernels])
    memory = np.array([k.memory_bound for k in result.kernels], dtype=bool)
    start = np.concatenate([[0.0], np.cumsum(t_ms)[:-1]])
    intensity_bars(ax, start, t_ms, intensity, memory)
    ax.set_yscale("log")
    ax.set_ylim(AXIS_FLOOR, top or intensity_top([result]))
    ax.set_xlim(0, totals.t_min_s * 1e3)
    plain_log_ticks(ax, "y")
    waterline_line(ax, totals.op_byte)
    labels = []
    for i in np.argsort(-t_ms)[:label_widest]:
        if t_ms[i] > 0.02 * totals.t_min_s * 1e3:
            text = ax.text(start[i] + t_ms[i] / 2, max(intensity[i], INTENSITY_FLOOR) * 1.1,
                           ellipsize(result.kernels[i].kernel.name or "(root)", LABEL_CHARS),
                           rotation=90, ha="center", va="bottom", fontsize=6.5, color="#333333")
            text.set_in_layout(False)  # placed after layout, inside the axes
            labels.append((text, result.kernels[i].kernel.name or "(root)"))
    ax.set_xlabel("minimum attainable latency (ms)")
    ax.set_ylabel("operational intensity (ops/byte)")
    ax.grid(axis="y", which="major", linewidth=0.3, alpha=0.5)
    return labels


def fit_labels(fig: Figure, ax, labels) -> None:
    """Keep each kernel label inside `ax`: above its bar, else inside it, shortened as needed;
    a label that fits nowhere, or would cover one already placed, is dropped."""
    fig.draw_without_rendering()
    box = ax.get_window_extent()
    placed = []
    for text, name in labels:
        x, y_above = text.get_position()
        for limit in range(LABEL_CHARS, 7, -3):
            text.set_text(ellipsize(name, limit))
            if _fits(text, box, placed):
                break
            text.set(y=y_above / 1.1 / 1.08, va="top", color="white")  # inside the bar
            if _fits(text, box, placed, floor=ax.transData.transform((x, INTENSITY_FLOOR))[1]):
                break
            text.set(y=y_above, va="bottom", color="#333333")
        else:
            text.remove()
            continue
        placed.append(text.get_window_extent())


def _fits(text, box, placed, floor: float | None = None) -> bool:
    ext = text.get_window_extent()
    inside = (ext.x0 >= box.x0 and ext.x1 <= box.x1 and ext.y1 <= box.y1 - 2
              and ext.y0 >= (box.y0 if floor is None else floor))
    return inside and not any(ext.overlaps(p) for p in placed)


def waterline_figure(results: "list[Result] | Result", *, label_widest: int = 3,
                     estimates_ms: "list[float | None] | None" = None) -> Figure:
    """Waterline plot of one model, or several stacked on one intensity range; with
    `estimates_ms` (per result, None where there is none), the calibrated estimate as a
    dashed line beyond T_min."""
    results = results if isinstance(results, list) else [results]
    estimates_ms = estimates_ms or [None] * len(results)
    fig = Figure(figsize=(7.0, 2.9 * len(results) + 0.7), layout="constrained")
    axes = fig.subplots(len(results), 1, squeeze=False)[:, 0]
    top = intensity_top(results)
    placed = []
    for ax, result, est in zip(axes, results, estimates_ms):
        placed.append((ax, draw_waterline(ax, result, label_widest=label_widest, top=top)))
        if est is not None:
            estimate_line(ax, result.totals.t_min_s * 1e3, est)
        ax.set_title(f"{title(result)}\n{summary(result, est)}", fontsize=9)
    low = any(k.intensity < INTENSITY_FLOOR for r in results for k in r.kernels)
    fig.legend(handles=legend_handles(low), loc="outside upper center", ncol=3, fontsize=7.5,
               frameon=False)
    for ax, labels in placed:
        fit_labels(fig, ax, labels)
    return fig
