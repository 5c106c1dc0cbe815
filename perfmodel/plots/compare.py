"""Predicted against measured: the waterline on the measured time axis, and a scatter."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from . import COMPUTE_COLOR, INTENSITY_FLOOR, MEMORY_COLOR, plain_log_ticks
from .waterline import AXIS_FLOOR, intensity_bars, legend_handles, waterline_line

if TYPE_CHECKING:
    from ..compare import Comparison

LOST_COLOR = "#cfcfcf"  # the grey part of a bar: measured time beyond the predicted t_min


def compare_figure(cmp: "Comparison") -> Figure:
    r, m = cmp.result, cmp.measurement
    mods = cmp.modules
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax, sc = fig.subplots(1, 2, width_ratios=(1.8, 1))
    measured = np.array([x.measured_ms for x in mods])
    predicted = np.array([x.predicted_ms for x in mods])
    intensity = np.array([x.intensity for x in mods])
    memory = np.array([x.memory_bound for x in mods], dtype=bool)
    start = np.concatenate([[0.0], np.cumsum(measured)[:-1]])
    # each module: a grey bar as wide as its measured time, coloured over its predicted t_min
    intensity_bars(ax, start, measured, intensity, memory, color=LOST_COLOR, linewidth=0)
    intensity_bars(ax, start, predicted, intensity, memory, linewidth=0)
    rho = r.totals.op_byte
    ax.set_yscale("log")
    ax.set_ylim(AXIS_FLOOR, max(intensity.max(initial=rho), rho) * 3)
    ax.set_xlim(0, measured.sum() if mods else 1)
    plain_log_ticks(ax, "y")
    waterline_line(ax, rho)
    if not mods:
        ax.text(0.5, 0.5, "no per-kernel rows in this file:\nonly the totals can be compared",
                transform=ax.transAxes, ha="center", va="center", fontsize=9, color="#555555")
    ax.set_xlabel("measured time per module (ms)")
    ax.set_ylabel("operational intensity (ops/byte)")
    low = legend_handles(low=True)[2:] if (intensity < INTENSITY_FLOOR).any() else []
    ax.legend(handles=[Patch(color=COMPUTE_COLOR, label="predicted t_min, compute-bound"),
                       Patch(color=MEMORY_COLOR, label="predicted t_min, memory-bound"),
                       Patch(color=LOST_COLOR, label="measured time beyond t_min")] + low,
              fontsize=7.5, loc="upper left", framealpha=0.9)
    ax.set_title(f"{r.model} on {m.environment.get('gpu', 'GPU')} ({m.backend}) vs "
                 f"{r.hardware.name}, plan {r.plan}\nT_min {cmp.gap.t_min_ms:.2f} ms, "
                 f"measured {cmp.gap.t_actual_ms:.2f} ms", fontsize=9)
    _scatter(sc, predicted, measured, memory)
    g = cmp.gap
    sc.set_title(f"per module\nC = {100 * g.c:.1f}% = C_max {100 * g.c_max:.1f}% x "
                 f"C_impl {100 * g.c_impl:.1f}%", fontsize=9)
    return fig


def _scatter(sc, predicted, measured, memory) -> None:
    """Measured against predicted per module, on axes that start a little under the fastest
    measured kernel: modules predicted faster than that sit on the left edge, counted."""
    lo = measured.min(initial=1e-3) / 2
    hi = max(predicted.max(initial=1.0), measured.max(initial=1.0)) * 1.5
    colors = np.where(memory, MEMORY_COLOR, COMPUTE_COLOR)
    under = predicted < lo
    sc.scatter(predicted[~under], measured[~under], c=colors[~under], s=14, alpha=0.8)
    sc.scatter(np.full(under.sum(), lo), measured[under], c=colors[under], s=22, marker="<",
               alpha=0.8, clip_on=False)
    sc.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
    sc.set_xscale("log")
    sc.set_yscale("log")
    sc.set_xlim(lo, hi)
    sc.set_ylim(lo, hi)
    plain_log_ticks(sc)
    sc.set_xlabel("predicted t_min (ms)")
    sc.set_ylabel("measured (ms)")
    sc.grid(linewidth=0.3, alpha=0.5)
    handles = [Line2D([], [], color="black", label="y = x (the bound)"),
               Line2D([], [], marker="o", linestyle="none", color=COMPUTE_COLOR,
                      label="compute-bound"),
               Line2D([], [], marker="o", linestyle="none", color=MEMORY_COLOR,
                      label="memory-bound")]
    if under.any():
        handles.append(Line2D([], [], marker="<", linestyle="none", color="#777777",
                              label=f"{under.sum()} predicted under {lo * 1e3:.2g} us, "
                                    f"drawn at the edge"))
    sc.legend(handles=handles, fontsize=7.5, loc="lower right")  # under y = x: few points
