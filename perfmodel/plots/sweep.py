"""C_max against processor op:byte (paper Fig. 4) and intensity against channels (Fig. 2e)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
from matplotlib.figure import Figure

from . import PALETTE, plain_log_ticks, spread

if TYPE_CHECKING:
    from ..api import Result
    from ..hardware import Hardware
    from ..layer_intensity import IntensityCurve


def _hardware_lines(ax, hardware: "Sequence[Hardware]", dtype: str, vertical: bool) -> None:
    """A dotted line at each processor's op:byte, named outside the axes (above them, or to
    their right) with the names spread apart and a leader line to each."""
    marks = sorted(((hw.op_byte(dtype), hw.name) for hw in hardware))
    notes = []
    for rho, name in marks:
        (ax.axvline if vertical else ax.axhline)(rho, color="grey", linestyle=":", linewidth=0.8)
        xy, coords = ((rho, 1.0), ("data", "axes fraction")) if vertical else \
            ((1.0, rho), ("axes fraction", "data"))
        notes.append(ax.annotate(f"{name} {rho:.0f}", xy=xy, xycoords=coords, xytext=(0, 0),
                                 textcoords="offset points", fontsize=7, color="#555555",
                                 rotation=90 if vertical else 0, annotation_clip=False,
                                 ha="center" if vertical else "left",
                                 va="bottom" if vertical else "center",
                                 arrowprops=dict(arrowstyle="-", color="#999999", linewidth=0.5,
                                                 shrinkA=0, shrinkB=0)))
    for _ in range(2):  # the labels take room from the layout: place, lay out, place again
        ax.figure.draw_without_rendering()
        points = 72 / ax.figure.dpi
        at = [ax.transData.transform((rho, rho))[0 if vertical else 1] * points for rho, _ in marks]
        for note, want, got in zip(notes, at, spread(at, 9)):
            note.xyann = (got - want, 14) if vertical else (14, got - want)


def sweep_figure(results: "list[Result]", op_bytes: np.ndarray,
                 curves: "list[tuple[list[float], list[float]]]",
                 hardware: "Sequence[Hardware]" = ()) -> Figure:
    """Waterline (solid) and mediant-roofline (dashed) C_max of each model against op:byte."""
    fig = Figure(figsize=(6.6, 5.4), layout="constrained")
    ax = fig.add_subplot()
    mixed = len({str(r.plan) for r in results}) > 1
    for color, r, (water, mediant) in zip(PALETTE, results, curves):
        label = f"{r.model} ({r.plan})" if mixed else r.model
        ax.plot(op_bytes, np.array(water) * 100, color=color, linewidth=1.6, label=label)
        ax.plot(op_bytes, np.array(mediant) * 100, color=color, linewidth=1.0, linestyle="--")
    ax.set_xscale("log")
    plain_log_ticks(ax, "x")
    ax.set_ylim(0, 102)
    ax.set_xlabel("processor op:byte ratio R/B (ops/byte)")
    ax.set_ylabel("maximum attainable efficiency C_max (%)")
    ax.grid(which="major", linewidth=0.3, alpha=0.5)
    ax.plot([], [], color="black", label="waterline")
    ax.plot([], [], color="black", linestyle="--", linewidth=1.0, label="mediant roofline")
    fig.legend(fontsize=7.5, loc="outside lower center", ncol=3, frameon=False)
    r0 = results[0]
    plan = "plans as labelled" if mixed else f"plan {r0.plan}"
    fig.suptitle(f"C_max vs op:byte: batch {r0.batch}, {r0.dtype}, {plan}", fontsize=9)
    _hardware_lines(ax, hardware, r0.dtype, vertical=True)
    return fig


def intensity_figure(curves: "list[IntensityCurve]", hardware: "Sequence[Hardware]" = (),
                     *, batch: int, resolution: int, dtype: str) -> Figure:
    fig = Figure(figsize=(6.2, 4.4), layout="constrained")
    ax = fig.add_subplot()
    for color, c in zip(PALETTE, curves):
        ax.plot(c.channels, c.intensity, marker="o", markersize=3, color=color, label=c.name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain_log_ticks(ax)
    ax.set_xlabel("input channels C")
    ax.set_ylabel("operational intensity (ops/byte)")
    ax.grid(which="major", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.set_title(f"Intensity of conv layers: batch {batch}, {resolution}x{resolution}, {dtype}",
                 fontsize=9)
    _hardware_lines(ax, hardware, dtype, vertical=False)
    return fig
