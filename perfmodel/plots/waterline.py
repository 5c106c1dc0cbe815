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

from . import COMPUTE_COLOR, MEMORY_COLOR, WATER_COLOR

if TYPE_CHECKING:
    from ..api import Result


def title(result: "Result") -> str:
    return (f"{result.model} on {result.hardware.name}: batch {result.batch}, "
            f"{result.dtype}, plan {result.plan}")


def draw_waterline(ax, result: "Result", *, label_widest: int = 3) -> None:
    """Draw one model's waterline on `ax`."""
    totals = result.totals
    t_ms = np.array([k.t_min_ms for k in result.kernels])
    intensity = np.array([k.intensity for k in result.kernels])
    memory = np.array([k.memory_bound for k in result.kernels])
    start = np.concatenate([[0.0], np.cumsum(t_ms)[:-1]])
    floor = 1.0  # ops/byte; kernels below it (pooling, SE scaling) are drawn at the floor
    top = 10 ** np.ceil(np.log10(max(intensity.max(initial=1.0), totals.op_byte) * 2))
    # Kernels with (almost) no matrix ops have intensity ~0: draw them as low bars at the
    # floor so that their time still shows.
    heights = np.maximum(intensity, floor * 1.5) - floor
    colors = np.where(memory, MEMORY_COLOR, COMPUTE_COLOR)
    ax.bar(start, heights, width=t_ms, bottom=floor, align="edge", color=colors,
           edgecolor="white", linewidth=0.3)
    ax.set_yscale("log")
    ax.set_ylim(floor, top)
    ax.set_xlim(0, totals.t_min_s * 1e3)
    ax.axhspan(floor, totals.op_byte, color=WATER_COLOR, alpha=0.15, zorder=0)
    ax.axhline(totals.op_byte, color=WATER_COLOR, linewidth=1.5)
    ax.text(1.005, totals.op_byte, f"op:byte\n{totals.op_byte:.0f}", ha="left",
            va="center", transform=ax.get_yaxis_transform(), fontsize=8, color="#1f5f8b")
    ax.text(0.01, 0.97, f"$T_{{min}}$ = {totals.t_min_s * 1e3:.2f} ms\n"
                        f"$C_{{max}}$ = {100 * totals.c_max:.1f}%\n"
                        f"mediant roofline $C_{{max}}$ = {100 * totals.mediant_c_max:.1f}%",
            transform=ax.transAxes, va="top", fontsize=9,
            bbox=dict(boxstyle="round,pad=0.3", facecolor="white", alpha=0.85, linewidth=0.5))
    for i in np.argsort(-t_ms)[:label_widest]:
        if t_ms[i] > 0.02 * totals.t_min_s * 1e3:
            ax.text(start[i] + t_ms[i] / 2, max(intensity[i], floor) * 1.1,
                    result.kernels[i].kernel.name or "(root)", rotation=90, ha="center",
                    va="bottom", fontsize=6.5, color="#333333")
    ax.set_xlabel("minimum attainable latency (ms)")
    ax.set_ylabel("operational intensity (ops/byte)")
    ax.grid(axis="y", which="major", linewidth=0.3, alpha=0.5)


def waterline_figure(results: "list[Result] | Result", *, label_widest: int = 3) -> Figure:
    """Waterline plot of one model, or several stacked for comparison."""
    results = results if isinstance(results, list) else [results]
    fig = Figure(figsize=(7.0, 2.9 * len(results) + 0.4), layout="constrained")
    axes = fig.subplots(len(results), 1, squeeze=False)[:, 0]
    for ax, result in zip(axes, results):
        draw_waterline(ax, result, label_widest=label_widest)
        ax.set_title(title(result), fontsize=10)
    axes[0].legend(handles=[Patch(color=COMPUTE_COLOR, label="compute-bound"),
                            Patch(color=MEMORY_COLOR, label="memory-bound")],
                   loc="upper right", fontsize=8, framealpha=0.85)
    return fig
