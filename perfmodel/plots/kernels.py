"""Measured block kernels beside the block- and layer-plan bounds, per shape."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from . import PALETTE

if TYPE_CHECKING:
    from ..kernel_results import KernelCase

SERIES = (("block-plan T_min", None), ("layer-plan T_min", None), ("fused kernel", "cuda_kernels"),
          ("torch.compile", "inductor"), ("eager", "eager"))


def kernels_figure(cases: "list[KernelCase]", hardware_name: str) -> Figure:
    fig = Figure(figsize=(7.5, 0.75 * len(cases) + 1.6), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(cases))
    height = 0.8 / len(SERIES)
    for i, (label, backend) in enumerate(SERIES):
        if backend is None:
            values = [c.block_t_min_us if i == 0 else c.layer_t_min_us for c in cases]
        else:
            values = [c.median_us.get(backend, np.nan) for c in cases]
        ax.barh(y + (i - len(SERIES) / 2 + 0.5) * height, values, height=height,
                color=PALETTE[i], label=label, hatch="//" if backend is None else None,
                edgecolor="white", linewidth=0.3)
    ax.set_yticks(y, [f"{c.block} C={c.channels} a={c.expansion} {c.size}x{c.size}"
                      for c in cases], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("latency (us), batch 128, float16")
    ax.grid(axis="x", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(SERIES))
    ax.set_title(f"Block-fusion kernels against perfmodel's bounds ({hardware_name})", fontsize=9)
    return fig
