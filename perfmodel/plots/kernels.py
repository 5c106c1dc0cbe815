"""Measured block kernels beside the block- and layer-plan bounds, per shape, and whole
networks measured end to end (each backend's fastest setting) beside theirs.

A dot plot on a log time axis: bars on a log axis would start at an arbitrary floor, markers
do not. Open markers are perfmodel's bounds, filled ones measurements."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from . import PALETTE, plain_log_ticks

if TYPE_CHECKING:
    from ..kernel_results import KernelCase

# label, backend (None: a bound), marker, colour
SERIES = (("block-plan T_min", None, "D", "#000000"), ("layer-plan T_min", None, "s", "#777777"),
          ("fused kernel", "cuda_kernels", "o", PALETTE[2]),
          ("torch.compile", "inductor", "P", PALETTE[3]), ("eager", "eager", "^", PALETTE[4]))


def _values(case: "KernelCase", label: str, backend: str | None) -> float:
    if backend is None:
        return case.block_t_min_us if label.startswith("block") else case.layer_t_min_us
    return case.median_us.get(backend, np.nan)


def kernels_figure(cases: "list[KernelCase]", hardware_name: str) -> Figure:
    fig = Figure(figsize=(7.5, 0.42 * len(cases) + 1.9), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(cases))
    table = np.array([[_values(c, label, backend) for c in cases]
                      for label, backend, _, _ in SERIES])
    ax.hlines(y, np.nanmin(table, axis=0), np.nanmax(table, axis=0), color="#cccccc",
              linewidth=1.0, zorder=1)
    for (label, backend, marker, color), values in zip(SERIES, table):
        bound = backend is None
        ax.plot(values, y, linestyle="none", marker=marker, markersize=6.5, color=color,
                markerfacecolor="none" if bound else color, markeredgewidth=1.2, label=label,
                zorder=3 if bound else 2)
    for row, c in zip(y, cases):
        if "cuda_kernels" in c.median_us:
            ax.annotate(f"{100 * c.fraction_of_bound():.0f}%", xy=(1.0, row),
                        xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=7, color=PALETTE[2])
    ax.set_yticks(y, [c.label for c in cases], fontsize=8)
    ax.set_ylim(len(cases) - 0.5, -0.5)
    ax.set_xscale("log")
    plain_log_ticks(ax, "x")
    ax.tick_params(axis="x", which="minor", labelsize=7)  # 300 / 400 / 600 ... beside the decades, not touching
    batches = sorted({c.batch for c in cases})
    ax.set_xlabel(f"latency (us, log), batch {', '.join(map(str, batches))}, float16; "
                  f"right: fused kernel at % of the block-plan bound", fontsize=8.5)
    ax.grid(axis="x", which="both", linewidth=0.3, alpha=0.5)
    fig.legend(fontsize=7.5, loc="outside lower center", ncol=len(SERIES), frameon=False)
    ax.set_title(f"Block-fusion kernels against perfmodel's bounds ({hardware_name})", fontsize=9)
    return fig
