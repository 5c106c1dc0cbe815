"""The efficiency-gap plot (paper Figure 1, panels a-d) with the waterline decomposition."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from matplotlib.figure import Figure

from . import PALETTE

if TYPE_CHECKING:
    from ..gap import GapPoint

PANELS = ("a", "b", "c", "d")


def _families(points: "Sequence[GapPoint]"):
    fams: dict[str, list] = {}
    for p in points:
        fams.setdefault(f"{p.family} ({p.backend})" if _many_backends(points) else p.family,
                        []).append(p)
    for i, (name, members) in enumerate(fams.items()):
        yield name, sorted(members, key=lambda p: p.gmacs_per_image), PALETTE[i % len(PALETTE)]


def _many_backends(points) -> bool:
    return len({p.backend for p in points}) > 1


def _panel_a(ax, points, peak_ops: float, batch: int):
    for name, members, color in _families(points):
        ax.plot([p.gmacs_per_image for p in members], [p.accuracy for p in members], marker="o",
                color=color, label=name)
    ax.set_xlabel("GMACs per image")
    ax.set_ylabel("ImageNet top-1 (%)")
    ax.set_title("(a) accuracy vs arithmetic complexity", fontsize=9)
    # ideal latency N/R of a batch is proportional to MACs: a second axis on the same scale
    scale = 2e9 * batch / peak_ops * 1e3
    twin = ax.secondary_xaxis("top", functions=(lambda g: g * scale, lambda t: t / scale))
    twin.set_xlabel(f"ideal latency N/R (ms, batch {batch})", fontsize=8)


def _panel_b(ax, points):
    for name, members, color in _families(points):
        ax.plot([p.t_actual_ms for p in members], [p.accuracy for p in members], marker="s",
                color=color, label=name)
    ax.set_xlabel("measured latency (ms)")
    ax.set_title("(b) accuracy vs measured latency", fontsize=9)


def _panel_cd(ax, points, log: bool):
    for name, members, color in _families(points):
        for p in members:
            ax.plot([p.t_ideal_ms, p.t_actual_ms], [p.accuracy] * 2, color=color, linewidth=1.2,
                    alpha=0.8)
            ax.plot([p.t_min_ms], [p.accuracy], marker="|", markersize=10, color="black")
            if log:
                ax.text((p.t_ideal_ms * p.t_actual_ms) ** 0.5, p.accuracy, f"{100 * p.c:.0f}%",
                        fontsize=6.5, ha="center", va="bottom", color=color)
        ax.plot([p.t_ideal_ms for p in members], [p.accuracy for p in members], marker="o",
                markerfacecolor="white", color=color, linestyle="--", linewidth=0.8)
        ax.plot([p.t_actual_ms for p in members], [p.accuracy for p in members], marker="o",
                color=color, label=name, linewidth=1.2)
    ax.set_xlabel("latency (ms): ideal ○, waterline T_min |, actual ●")
    if log:
        ax.set_xscale("log")
        ax.set_title("(d) efficiency gap, log latency; label: C = t_ideal / t_actual", fontsize=9)
    else:
        ax.set_title("(c) ideal and actual latency", fontsize=9)


def gap_figure(points: "Sequence[GapPoint]", *, peak_ops: float, batch: int, title: str,
               panels: Sequence[str] = PANELS) -> Figure:
    n = len(panels)
    cols = 2 if n > 1 else 1
    rows = (n + 1) // 2 if n > 1 else 1
    fig = Figure(figsize=(5.2 * cols, 3.9 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, panel in zip(axes, panels):
        if panel == "a":
            _panel_a(ax, points, peak_ops, batch)
        elif panel == "b":
            _panel_b(ax, points)
        else:
            _panel_cd(ax, points, log=panel == "d")
        ax.set_ylabel("ImageNet top-1 (%)")
        ax.grid(linewidth=0.3, alpha=0.5)
    for ax in axes[n:]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return fig
