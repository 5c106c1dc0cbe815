"""Predicted against measured: the waterline on the measured time axis, and a scatter."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from . import COMPUTE_COLOR, MEMORY_COLOR, WATER_COLOR

if TYPE_CHECKING:
    from ..compare import Comparison


def compare_figure(cmp: "Comparison") -> Figure:
    r, m = cmp.result, cmp.measurement
    mods = cmp.modules
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax, sc = fig.subplots(1, 2, width_ratios=(1.8, 1))
    measured = np.array([x.measured_ms for x in mods])
    predicted = np.array([x.predicted_ms for x in mods])
    intensity = np.maximum(np.array([x.intensity for x in mods]), 1.5)
    colors = [MEMORY_COLOR if x.memory_bound else COMPUTE_COLOR for x in mods]
    start = np.concatenate([[0.0], np.cumsum(measured)[:-1]])
    # outline: measured time; filled from the same start: predicted t_min
    ax.bar(start, intensity - 1, width=measured, bottom=1, align="edge", fill=False,
           edgecolor="#555555", linewidth=0.4)
    ax.bar(start, intensity - 1, width=predicted, bottom=1, align="edge", color=colors,
           linewidth=0)
    rho = r.totals.op_byte
    ax.axhspan(1, rho, color=WATER_COLOR, alpha=0.12, zorder=0)
    ax.axhline(rho, color=WATER_COLOR, linewidth=1.2)
    ax.set_yscale("log")
    ax.set_ylim(1, max(intensity.max(initial=rho), rho) * 3)
    ax.set_xlim(0, measured.sum() if mods else 1)
    if not mods:
        ax.text(0.5, 0.5, "no per-kernel rows in this file:\nonly the totals can be compared",
                transform=ax.transAxes, ha="center", va="center", fontsize=9, color="#555555")
    ax.set_xlabel("measured time per module (ms)")
    ax.set_ylabel("operational intensity (ops/byte)")
    ax.legend(handles=[Patch(color=COMPUTE_COLOR, label="predicted t_min, compute-bound"),
                       Patch(color=MEMORY_COLOR, label="predicted t_min, memory-bound"),
                       Patch(fill=False, edgecolor="#555555", label="measured")],
              fontsize=7.5, loc="upper left")
    ax.set_title(f"{r.model} on {m.environment.get('gpu', 'GPU')} ({m.backend}) vs "
                 f"{r.hardware.name}, plan {r.plan}: T_min {cmp.gap.t_min_ms:.2f} ms, "
                 f"measured {cmp.gap.t_actual_ms:.2f} ms", fontsize=9)
    sc.scatter(predicted, measured, c=colors, s=14, alpha=0.8)
    lo = min(predicted.min(initial=1e-3), measured.min(initial=1e-3)) / 1.5
    hi = max(predicted.max(initial=1.0), measured.max(initial=1.0)) * 1.5
    sc.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
    sc.set_xscale("log")
    sc.set_yscale("log")
    sc.set_xlim(lo, hi)
    sc.set_ylim(lo, hi)
    sc.set_xlabel("predicted t_min (ms)")
    sc.set_ylabel("measured (ms)")
    sc.grid(linewidth=0.3, alpha=0.5)
    sc.legend(handles=[Line2D([], [], color="black", label="y = x (the bound)"),
                       Line2D([], [], marker="o", linestyle="none", color=COMPUTE_COLOR,
                              label="compute-bound"),
                       Line2D([], [], marker="o", linestyle="none", color=MEMORY_COLOR,
                              label="memory-bound")], fontsize=7.5, loc="upper left")
    g = cmp.gap
    sc.set_title(f"per module: C = {100 * g.c:.1f}% = C_max {100 * g.c_max:.1f}% x "
                 f"C_impl {100 * g.c_impl:.1f}%", fontsize=9)
    return fig
