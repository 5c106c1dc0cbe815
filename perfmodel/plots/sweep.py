"""C_max against processor op:byte (paper Fig. 4) and intensity against channels (Fig. 2e)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
from matplotlib.figure import Figure

from . import PALETTE

if TYPE_CHECKING:
    from ..api import Result
    from ..hardware import Hardware
    from ..layer_intensity import IntensityCurve


def _hardware_lines(ax, hardware: "Sequence[Hardware]", dtype: str, vertical: bool) -> None:
    for i, hw in enumerate(sorted(hardware, key=lambda h: h.op_byte(dtype))):
        rho = hw.op_byte(dtype)
        (ax.axvline if vertical else ax.axhline)(rho, color="grey", linestyle=":", linewidth=0.8)
        if vertical:  # staggered so that close ratios stay readable
            ax.text(rho, 0.99 - 0.1 * (i % 3), f"{hw.name} ", rotation=90, fontsize=7,
                    color="#555555", va="top", ha="right", transform=ax.get_xaxis_transform())
        else:
            ax.text(1.0, rho, f"{hw.name} ", fontsize=7, color="#555555", va="bottom", ha="right",
                    transform=ax.get_yaxis_transform())


def sweep_figure(results: "list[Result]", op_bytes: np.ndarray,
                 curves: "list[tuple[list[float], list[float]]]",
                 hardware: "Sequence[Hardware]" = ()) -> Figure:
    """Waterline (solid) and mediant-roofline (dashed) C_max of each model against op:byte."""
    fig = Figure(figsize=(6.6, 4.4), layout="constrained")
    ax = fig.add_subplot()
    mixed = len({str(r.plan) for r in results}) > 1
    for color, r, (water, mediant) in zip(PALETTE, results, curves):
        label = f"{r.model} ({r.plan})" if mixed else r.model
        ax.plot(op_bytes, np.array(water) * 100, color=color, linewidth=1.6, label=label)
        ax.plot(op_bytes, np.array(mediant) * 100, color=color, linewidth=1.0, linestyle="--")
    _hardware_lines(ax, hardware, results[0].dtype, vertical=True)
    ax.set_xscale("log")
    ax.set_ylim(0, 102)
    ax.set_xlabel("processor op:byte ratio R/B (ops/byte)")
    ax.set_ylabel("maximum attainable efficiency C_max (%)")
    ax.grid(which="major", linewidth=0.3, alpha=0.5)
    ax.plot([], [], color="black", label="waterline")
    ax.plot([], [], color="black", linestyle="--", linewidth=1.0, label="mediant roofline")
    ax.legend(fontsize=7.5, loc="lower left", ncol=2)
    r0 = results[0]
    plan = "plans as labelled" if mixed else f"plan {r0.plan}"
    ax.set_title(f"C_max vs op:byte: batch {r0.batch}, {r0.dtype}, {plan}", fontsize=9)
    return fig


def intensity_figure(curves: "list[IntensityCurve]", hardware: "Sequence[Hardware]" = (),
                     *, batch: int, resolution: int, dtype: str) -> Figure:
    fig = Figure(figsize=(6.2, 4.4), layout="constrained")
    ax = fig.add_subplot()
    for color, c in zip(PALETTE, curves):
        ax.plot(c.channels, c.intensity, marker="o", markersize=3, color=color, label=c.name)
    _hardware_lines(ax, hardware, dtype, vertical=False)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("input channels C")
    ax.set_ylabel("operational intensity (ops/byte)")
    ax.grid(which="major", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.set_title(f"Intensity of conv layers: batch {batch}, {resolution}x{resolution}, {dtype}",
                 fontsize=9)
    return fig
