"""Roofline of one processor with a model's kernels, and Amdahl's roofline."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..analysis import amdahl_roofline
from . import ACCENT_COLOR, COMPUTE_COLOR, MEMORY_COLOR, PALETTE
from .waterline import title

if TYPE_CHECKING:
    from ..api import Result


def _roof(ax, peak: float, bandwidth: float, lo: float, hi: float) -> np.ndarray:
    intensity = np.logspace(np.log10(lo), np.log10(hi), 400)
    ax.plot(intensity, np.minimum(peak, bandwidth * intensity) / 1e12, color="black",
            linewidth=1.5, label="roofline min(R, B I)")
    ax.axvline(peak / bandwidth, color="grey", linestyle=":", linewidth=1)
    ax.text(peak / bandwidth * 1.08, peak / 1e12 * 0.04, f"op:byte {peak / bandwidth:.0f}",
            rotation=90, fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (ops/byte)")
    ax.set_ylabel("attainable throughput (TFLOP/s)")
    ax.grid(which="major", linewidth=0.3, alpha=0.5)
    return intensity


def roofline_figure(result: "Result") -> Figure:
    """Kernels as points (area ~ share of T_min) under the roofline, with the model's mediant
    point on the roof and its waterline throughput N/T_min at the same intensity."""
    t = result.totals
    peak, bw = t.peak_ops, t.dram_bytes_per_s
    ks = [k for k in result.kernels if k.intensity > 0]
    intensity = np.array([k.intensity for k in ks])
    achieved = np.array([k.kernel.flops / k.t_min_s for k in ks]) / 1e12
    share = np.array([k.t_min_s for k in ks]) / t.t_min_s
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.add_subplot()
    med = t.mediant_intensity if 0 < t.mediant_intensity < float("inf") else t.op_byte
    lo = min(intensity.min(initial=t.op_byte), med) / 3
    hi = max(intensity.max(initial=t.op_byte), med) * 3
    _roof(ax, peak, bw, lo, hi)
    colors = [MEMORY_COLOR if k.memory_bound else COMPUTE_COLOR for k in ks]
    ax.scatter(intensity, achieved, s=2000 * share + 4, c=colors, alpha=0.6, edgecolors="white",
               linewidths=0.5)
    mediant_roof = min(peak, bw * t.mediant_intensity) / 1e12
    waterline = t.flops / t.t_min_s / 1e12
    ax.plot([t.mediant_intensity], [mediant_roof], marker="*", markersize=14, color=ACCENT_COLOR,
            linestyle="none")
    ax.plot([t.mediant_intensity], [waterline], marker="D", markersize=8, color="black",
            linestyle="none")
    ax.annotate("", xy=(t.mediant_intensity, waterline), xytext=(t.mediant_intensity, mediant_roof),
                arrowprops=dict(arrowstyle="->", color="black", linewidth=1))
    ax.legend(handles=[
        Line2D([], [], color="black", label="roofline min(R, B I)"),
        Line2D([], [], marker="o", color=COMPUTE_COLOR, linestyle="none", label="compute-bound kernel"),
        Line2D([], [], marker="o", color=MEMORY_COLOR, linestyle="none", label="memory-bound kernel"),
        Line2D([], [], marker="*", color=ACCENT_COLOR, linestyle="none", markersize=12,
               label=f"mediant roofline: C_max {100 * t.mediant_c_max:.0f}%"),
        Line2D([], [], marker="D", color="black", linestyle="none",
               label=f"waterline N/T_min: C_max {100 * t.c_max:.0f}%"),
    ], loc="lower right", fontsize=8, framealpha=0.9)
    ax.set_title(title(result) + "\npoint area: share of T_min", fontsize=9)
    return fig


def amdahl_figure(results: "list[Result]", fuse_to: float | None = None,
                  fractions=(0.1, 0.25, 0.5, 0.75, 0.9)) -> Figure:
    """Amdahl's roofline: R/((1-f) + f max(1, rho/I)) for a family of f; each model at
    (I_mem, R C_max) on its own curve and at its mediant point on the classic roof."""
    t0 = results[0].totals
    peak, bw, rho = t0.peak_ops, t0.dram_bytes_per_s, t0.op_byte
    fig = Figure(figsize=(6.6, 4.8), layout="constrained")
    ax = fig.add_subplot()
    lo = min([i for i in (r.totals.memory_intensity for r in results) if i > 0] + [rho]) / 10
    hi = rho * 20
    grid = _roof(ax, peak, bw, lo, hi)
    for f in fractions:
        ax.plot(grid, [amdahl_roofline(i, f, peak, rho) / 1e12 for i in grid], color="grey",
                linewidth=0.7, alpha=0.7)
        ax.text(grid[0], amdahl_roofline(grid[0], f, peak, rho) / 1e12, f"f={f:g}", fontsize=7,
                color="grey", ha="left", va="bottom")
    for color, r in zip(PALETTE, results):
        t = r.totals
        f, i_mem = t.memory_fraction, t.memory_intensity
        ax.plot(grid, [amdahl_roofline(i, f, peak, rho) / 1e12 for i in grid], color=color,
                linewidth=1.4, label=f"{r.model}: f={f:.2f}, C_max {100 * t.c_max:.0f}%")
        if 0 < i_mem < float("inf"):  # a model with memory-bound matrix ops
            ax.plot([i_mem], [peak * t.c_max / 1e12], marker="o", color=color, markersize=8)
        ax.plot([t.mediant_intensity], [min(peak, bw * t.mediant_intensity) / 1e12], marker="*",
                color=color, markersize=12, markeredgecolor="black", markeredgewidth=0.5)
        if fuse_to and 0 < i_mem < float("inf"):
            gain = t.fusion_speedup(fuse_to)
            ax.annotate(f"x{gain:.2f}", xy=(fuse_to, peak * t.c_max * gain / 1e12),
                        xytext=(i_mem, peak * t.c_max / 1e12), fontsize=8, color=color,
                        arrowprops=dict(arrowstyle="->", color=color))
    ax.legend(fontsize=7.5, loc="lower right", title="o at (I_mem, R C_max);  * mediant on the roof",
              title_fontsize=7.5)
    r0 = results[0]
    ax.set_title(f"Amdahl's roofline on {r0.hardware.name}: batch {r0.batch}, {r0.dtype}, "
                 f"plan {r0.plan}", fontsize=9)
    return fig
