"""Plots: functions that take analysis results and return matplotlib Figures.

No analysis happens here, and every ceiling comes from the hardware in the results.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import LogFormatter  # noqa: E402

from ..errors import InputError  # noqa: E402
from ..outputs import prepare_output  # noqa: E402

FORMATS = (".png", ".svg", ".pdf")

# Okabe-Ito: distinguishable under the common forms of colour blindness.
COMPUTE_COLOR = "#0072B2"  # blue
MEMORY_COLOR = "#E69F00"  # orange
WATER_COLOR = "#56B4E9"  # sky blue
ACCENT_COLOR = "#D55E00"  # vermillion
LOW_COLOR = "#F5D9A0"  # pale orange: kernels drawn at the intensity floor
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")

# Kernels with (almost) no matrix ops (pooling, scaling) have intensity ~0, which a log axis
# cannot show: bars are drawn up to this intensity, and the legend says so.
INTENSITY_FLOOR = 1.5


class PlainLogFormatter(LogFormatter):
    """Log-axis tick labels as plain numbers (60, 0.001), never 6x10^1."""

    def __call__(self, x, pos=None):
        return plain_number(x) if super().__call__(x, pos) else ""


def plain_number(x: float) -> str:
    return np.format_float_positional(float(x), precision=6, trim="-")


def plain_log_ticks(ax, axes: str = "xy") -> None:
    """Plain-number tick labels on the log axes of `ax`; minor ticks labelled on short ranges."""
    for name in axes:
        axis = ax.xaxis if name == "x" else ax.yaxis
        base = axis.get_transform().base
        axis.set_major_formatter(PlainLogFormatter(base))
        axis.set_minor_formatter(PlainLogFormatter(base, minor_thresholds=(2, 0.5)))


def spread(positions, gap: float) -> list[float]:
    """Positions moved as little as possible (clusters centred on their wishes) so that
    neighbours are at least `gap` apart; order is kept. For labels that must not overprint."""
    order = sorted(range(len(positions)), key=lambda i: positions[i])
    clusters: list[list[int]] = []  # runs of labels set edge to edge, each with its start
    starts: list[float] = []
    for i in order:
        clusters.append([i])
        starts.append(positions[i])
        while len(clusters) > 1 and starts[-2] + len(clusters[-2]) * gap > starts[-1]:
            merged = clusters[-2] + clusters.pop()
            starts.pop()
            clusters[-1] = merged
            starts[-1] = sum(positions[j] - k * gap for k, j in enumerate(merged)) / len(merged)
    out = [0.0] * len(positions)
    for members, start in zip(clusters, starts):
        for k, j in enumerate(members):
            out[j] = start + k * gap
    return out


def ellipsize(path: str, limit: int) -> str:
    """A dotted module path cut to `limit` characters in the middle: its first component (with
    the index after it) and as many trailing components as fit, e.g. 'blocks.0…conv_a.0'."""
    if len(path) <= limit:
        return path
    parts = path.split(".")
    if len(parts) < 2:
        return "…" + path[-(limit - 1):]
    head = parts[0] + (f".{parts[1]}" if len(parts) > 2 and parts[1].isdigit() else "")
    rest = parts[head.count(".") + 1:]
    tail = rest.pop()
    while rest and (tail.replace(".", "").isdigit()  # a bare index says nothing alone
                    or len(head) + len(rest[-1]) + len(tail) + 2 <= limit):
        tail = f"{rest.pop()}.{tail}"
    short = f"{head}…{tail}" if len(head) + len(tail) + 1 <= limit else f"…{tail}"
    return short if len(short) <= limit else "…" + path[-(limit - 1):]


def check_output(path: str | Path) -> Path:
    """Validate a figure path before any work is done: its suffix, and that its folder
    exists (or can be made) and can be written to."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"unsupported figure format '{path.suffix or path.name}' "
                         f"(use {', '.join(FORMATS)})", field="--output")
    return prepare_output(path, "--output")


def save(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG, SVG or PDF by the file's suffix."""
    path = check_output(path)
    try:
        fig.savefig(path, dpi=200, bbox_inches="tight")
    except OSError as exc:
        raise InputError(f"cannot write the figure: {exc.strerror or exc}", file=str(path),
                         field="--output") from exc
    return path
