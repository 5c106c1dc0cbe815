"""Operational intensity of conv layer types against channel count (paper Fig. 2e).

Each layer type is a tiny module analysed by the same trace, cost and plan code as any
model (not the approximations of eqs. 25-27); the block-fused FFN is the module under
the ``block`` plan, so its hidden tensor stays on chip.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .api import analyze


def _ffn(c: int, alpha: int = 4) -> nn.Module:
    return nn.Sequential(nn.Conv2d(c, alpha * c, 1), nn.ReLU(), nn.Conv2d(alpha * c, c, 1))


# name -> (module factory of C, plan, smallest C it is defined for)
LAYER_TYPES = {
    "conv 3x3": (lambda c: nn.Conv2d(c, c, 3, padding=1), "op", 1),
    "pointwise K/C=4": (lambda c: nn.Conv2d(c, 4 * c, 1), "op", 1),
    "grouped 3x3 T=32": (lambda c: nn.Conv2d(c, c, 3, padding=1, groups=c // 32), "op", 32),
    "grouped 3x3 T=8": (lambda c: nn.Conv2d(c, c, 3, padding=1, groups=c // 8), "op", 8),
    "depthwise 3x3": (lambda c: nn.Conv2d(c, c, 3, padding=1, groups=c), "op", 1),
    "FFN block-fused a=4": (_ffn, "block:Sequential", 1),
}


@dataclass(frozen=True)
class IntensityCurve:
    name: str
    channels: tuple[int, ...]
    intensity: tuple[float, ...]


def layer_intensity(name: str, channels: int, *, batch: int = 128, resolution: int = 56,
                    dtype: str = "float16") -> float:
    """Operational intensity (ops/byte) of one layer type at `channels` input channels."""
    factory, plan, _ = LAYER_TYPES[name]
    result = analyze(factory(channels), (channels, resolution, resolution), batch=batch,
                     dtype=dtype, plan=plan, hardware="a5000-paper")
    return result.totals.mediant_intensity  # one kernel: its own intensity


def intensity_curves(channels: list[int], *, batch: int = 128, resolution: int = 56,
                     dtype: str = "float16") -> list[IntensityCurve]:
    curves = []
    for name, (_, _, minimum) in LAYER_TYPES.items():
        cs = [c for c in channels if c >= minimum and c % minimum == 0]
        curves.append(IntensityCurve(name, tuple(cs), tuple(
            layer_intensity(name, c, batch=batch, resolution=resolution, dtype=dtype) for c in cs)))
    return curves
