"""Plots: functions that take analysis results and return matplotlib Figures.

No analysis happens here, and every ceiling comes from the hardware in the results.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed

from matplotlib.figure import Figure  # noqa: E402

from ..errors import InputError  # noqa: E402

FORMATS = (".png", ".svg", ".pdf")

# Okabe-Ito: distinguishable under the common forms of colour blindness.
COMPUTE_COLOR = "#0072B2"  # blue
MEMORY_COLOR = "#E69F00"  # orange
WATER_COLOR = "#56B4E9"  # sky blue
ACCENT_COLOR = "#D55E00"  # vermillion
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")


def check_output(path: str | Path) -> Path:
    """Validate a figure path's suffix before any work is done."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"unsupported figure format '{path.suffix or path.name}' "
                         f"(use {', '.join(FORMATS)})", field="--output")
    return path


def save(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG, SVG or PDF by the file's suffix."""
    path = check_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=200, bbox_inches="tight")
    return path
