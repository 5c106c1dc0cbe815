"""Roofline of one processor with a model's kernels, and Amdahl's roofline."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..analysis import amdahl_roofline
from . import ACCENT_COLOR, COMPUTE_COLOR, MEMORY_COLOR, PALETTE, plain_log_ticks
from .waterline import title

if TYPE_CHECKING:
    from ..api import Result


def _roof(ax, peak: float, bandwidth: float, lo: float, hi: float,
          slope_label_at: float | None = None) -> np.ndarray:
    """The roofline min(R, B I) from intensity `lo` to `hi`, both roofs labelled (the sloped
    one at `slope_label_at`, by default half way along it)."""
    intensity = np.logspace(np.log10(lo), np.log10(hi), 400)
    ax.plot(intensity, np.minimum(peak, bandwidth * intensity) / 1e12, color="black",
            linewidth=1.5, label="roofline min(R, B I)")
    ridge = peak / bandwidth
    ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    ax.text(ridge / 1.06, 0.02, f"op:byte {ridge:.0f}", rotation=90, fontsize=8, color="grey",
            ha="right", va="bottom", transform=ax.get_xaxis_transform())
    ax.annotate(f"R = {peak / 1e12:.0f} TFLOP/s", xy=(ridge, peak / 1e12), xytext=(-4, 4),
                textcoords="offset points", ha="right", va="bottom", fontsize=8)
    # along the sloped roof; the angle is that of (1, B) in data space, turned by the axes
    at = slope_label_at or (np.sqrt(lo * ridge) if lo < ridge else ridge / 2)
    ax.text(at * 1.1, bandwidth * at / 1e12, f"B I,  B = {bandwidth / 1e12:.2f} TB/s",
            rotation=np.degrees(np.arctan2(bandwidth / 1e12, 1.0)), transform_rotates_text=True,
            rotation_mode="anchor", ha="center", va="top", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo / 1.5, hi * 1.5)
    bottom = bandwidth * lo / 1e12 / 1.5
    ax.set_ylim(bottom, peak / 1e12 * (peak / 1e12 / bottom) ** 0.12)  # room to label R
    plain_log_ticks(ax)
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
    hidden = [k for k in result.kernels if k.intensity <= 0]  # no ops: no point on log axes
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
    fig.legend(handles=[
        Line2D([], [], color="black", label="roofline min(R, B I)"),
        Line2D([], [], marker="o", color=COMPUTE_COLOR, linestyle="none", label="compute-bound kernel"),
        Line2D([], [], marker="o", color=MEMORY_COLOR, linestyle="none", label="memory-bound kernel"),
        Line2D([], [], marker="*", color=ACCENT_COLOR, linestyle="none", markersize=12,
               label=f"mediant roofline: C_max {100 * t.mediant_c_max:.0f}%"),
        Line2D([], [], marker="D", color="black", linestyle="none",
               label=f"waterline N/T_min: C_max {100 * t.c_max:.0f}%"),
    ] + ([Line2D([], [], linestyle="none", label=f"not shown: {len(hidden)} kernels with 0 ops "
                 f"({100 * sum(k.t_min_s for k in hidden) / t.t_min_s:.1f}% of T_min)")]
         if hidden else []), loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    ax.set_title(title(result) + "\npoint area: share of T_min", fontsize=9)
    return fig


def amdahl_figure(results: "list[Result]", fuse_to: float | None = None,
                  fractions=(0.1, 0.25, 0.5, 0.75, 0.9)) -> Figure:
    """Amdahl's roofline: R/((1-f) + f max(1, rho/I)) for a family of f; each model at
    (I_mem, R C_max) on its own curve and at its mediant point on the classic roof."""
    t0 = results[0].totals
    peak, bw, rho = t0.peak_ops, t0.dram_bytes_per_s, t0.op_byte
    fig = Figure(figsize=(6.6, 5.6), layout="constrained")
    ax = fig.add_subplot()
    lo = min([i for i in (r.totals.memory_intensity for r in results) if i > 0] + [rho]) / 10
    grid = _roof(ax, peak, bw, lo, rho * 20, slope_label_at=lo * 4)  # left of every model

    def curve(f: float) -> np.ndarray:
        return np.array([amdahl_roofline(i, f, peak, rho) for i in grid]) / 1e12

    family = [(f, curve(f)) for f in fractions]
    for _, values in family:
        ax.plot(grid, values, color="grey", linewidth=0.7, alpha=0.7)
    handles = [Line2D([], [], color="grey", linewidth=0.7,
                      label=f"Amdahl's roofline, f = {', '.join(f'{f:g}' for f in fractions)}"),
               Line2D([], [], color="black", linewidth=1.5, label="roofline min(R, B I): f = 1")]
    arrows = []
    for color, r in zip(PALETTE, results):
        t = r.totals
        f, i_mem = t.memory_fraction, t.memory_intensity
        label = f"{r.model}: f = {f:.2f}, C_max {100 * t.c_max:.0f}%"
        ax.plot(grid, curve(f), color=color, linewidth=1.4)
        dot = (i_mem, peak * t.c_max / 1e12)
        if 0 < i_mem < float("inf"):  # a model with memory-bound matrix ops
            ax.plot(*dot, marker="o", color=color, markersize=8, linestyle="none", zorder=3)
            if fuse_to:
                gain = t.fusion_speedup(fuse_to)
                label += f", x{gain:.2f} at I' = {fuse_to:g}"
                arrows.append((dot, (fuse_to, dot[1] * gain), f"x{gain:.2f}", color))
        ax.plot([t.mediant_intensity], [min(peak, bw * t.mediant_intensity) / 1e12], marker="*",
                color=color, markersize=12, markeredgecolor="black", markeredgewidth=0.5,
                linestyle="none", zorder=3)
        handles.append(Line2D([], [], color=color, linewidth=1.4, label=label))
    handles += [Line2D([], [], marker="o", color="grey", linestyle="none", markersize=7,
                       label="memory-bound kernels: (I_mem, R C_max) on the model's curve"),
                Line2D([], [], marker="*", color="grey", markeredgecolor="black",
                       markeredgewidth=0.5, linestyle="none", markersize=10,
                       label="whole model at its mediant intensity, on the roofline")]
    if arrows:
        handles.append(Line2D([], [], color="grey", marker=">", markevery=[1], markersize=5,
                              label=f"speedup if fusion raised I_mem to I' = {fuse_to:g}"))
    fig.legend(handles=handles, loc="outside lower center", ncol=1, fontsize=7.5, frameon=False)
    r0 = results[0]
    ax.set_title(f"Amdahl's roofline on {r0.hardware.name}: batch {r0.batch}, {r0.dtype}, "
                 f"plan {r0.plan}", fontsize=9)
    fig.draw_without_rendering()  # the labels below are spaced in points, on the final axes
    _family_labels(ax, grid, family)
    _speedup_arrows(ax, arrows)
    return fig


def _family_labels(ax, grid, curves) -> None:
    """Label each grey curve f=... at the left edge unless the label would crowd the one above
    it or another label (the legend lists every f)."""
    last = None
    for f, values in curves:
        y = ax.transData.transform((grid[0], values[0]))[1]
        if last is not None and last - y < 10 * ax.figure.dpi / 72:
            continue
        text = ax.text(grid[0], values[0], f" f={f:g}", fontsize=7, color="grey", ha="left",
                       va="bottom")
        box = text.get_window_extent()
        if any(box.overlaps(t.get_window_extent()) for t in ax.texts if t is not text):
            text.remove()
        else:
            last = y


def _speedup_arrows(ax, arrows) -> None:
    """Arrows from each model's dot to its fused point; the speedups are stacked to the right of
    the heads, in the order of the heads, so that none covers another or a marker."""
    step = 11  # points between stacked labels
    placed = None
    for start, end, text, color in sorted(arrows, key=lambda a: -a[1][1]):
        ax.annotate("", xy=end, xytext=start, arrowprops=dict(
            arrowstyle="-|>", color=color, linewidth=1.1, shrinkA=4, shrinkB=0), zorder=2)
        head = ax.transData.transform(end)[1] * 72 / ax.figure.dpi  # points
        y = head - 6 if placed is None else min(head - 6, placed - step)
        ax.annotate(text, xy=end, xytext=(6, y - head), textcoords="offset points", ha="left",
                    va="top", fontsize=8, color=color, fontweight="bold")
        placed = y
