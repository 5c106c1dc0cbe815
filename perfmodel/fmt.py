"""How numbers are printed: significant digits, so a small value never reads as zero.

``sig(0.000123)`` is ``0.0001230``, ``sig(1046.8)`` is ``1047``; below 1e-4 (or at 1e15
and above) numbers switch to scientific notation. ``si`` adds a k to E prefix to a unit
(``si(7.053e9, "B")`` is ``7.053 GB``); ``pct`` prints a fraction as a percentage.
"""
from __future__ import annotations

import math

_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def sig(x: float, digits: int = 4) -> str:
    """`x` to `digits` significant digits, in fixed notation where that stays readable."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    exponent = math.floor(math.log10(abs(x)))
    if exponent < -4 or exponent >= 15:
        return f"{x:.{digits - 1}e}"
    text = f"{x:.{max(0, digits - 1 - exponent)}f}"
    if len(text.lstrip("-").replace(".", "").lstrip("0")) > digits and "." in text:
        text = f"{x:.{max(0, digits - 2 - exponent)}f}"  # rounding carried a digit: 9.9996
    return text


def si(x: float, unit: str = "", digits: int = 4) -> str:
    """`x` with an SI prefix from k to E (``118.0 M``, ``7.053 GB``, ``512 B``)."""
    for scale, prefix in _PREFIXES:
        if abs(x) >= scale * (1 - 0.5 * 10 ** -(digits - 1)):
            return f"{sig(x / scale, digits)} {prefix}{unit}"
    whole = float(x).is_integer()  # counts below 1000 (bytes, MACs) print as they are
    return f"{int(x) if whole else sig(x, digits)} {unit}".rstrip()


def pct(fraction: float | None, digits: int = 3) -> str:
    """A fraction as a percentage: ``pct(0.584)`` is ``58.4 %``; ``-`` where there is none."""
    return "-" if fraction is None else f"{sig(100 * fraction, digits)} %"
