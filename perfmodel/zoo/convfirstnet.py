"""ConvFirstNet: a stem, four stages of ConvFirst blocks, stride-2 ConvFirst blocks between
stages, and a classifier head.

Variants are registered by name (timm-style: each is a short function that only sets its
arguments) and each has a model spec in ``configs/models``.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from .blocks import ConvBN, ConvFirstBlock

MODELS: dict[str, Callable[..., nn.Module]] = {}


def register_model(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    if fn.__name__ in MODELS:
        raise ValueError(f"model {fn.__name__} registered twice")
    MODELS[fn.__name__] = fn
    return fn


class ConvFirstNet(nn.Module):
    def __init__(self, widths: Sequence[int] = (32, 64, 128, 256),
                 depths: Sequence[int] = (2, 2, 6, 2), expansion: int = 4,
                 num_classes: int = 1000, head_width: int = 1280):
        super().__init__()
        if len(widths) != 4 or len(depths) != 4:
            raise ValueError(f"expected 4 stage widths and depths, got {widths} and {depths}")
        self.widths, self.depths, self.expansion = tuple(widths), tuple(depths), expansion
        c0 = widths[0]
        # 224 -> 112 -> 56: two strided full convolutions
        self.stem = nn.Sequential(ConvBN(3, c0 // 2, 3, stride=2), nn.ReLU(),
                                  ConvBN(c0 // 2, c0, 3, stride=2), nn.ReLU())
        stages = []
        for i, (width, depth) in enumerate(zip(widths, depths)):
            blocks = []
            if i > 0:  # stride-2 ConvFirst block between stages
                blocks.append(ConvFirstBlock(widths[i - 1], expansion, width, stride=2))
            blocks += [ConvFirstBlock(width, expansion) for _ in range(depth)]
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(ConvBN(widths[-1], head_width), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(head_width, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


@register_model
def convfirstnet_s(**kwargs) -> ConvFirstNet:
    """1.05 GMACs per image at 224 px; every block within the fused kernels' shapes."""
    return ConvFirstNet(widths=(32, 64, 128, 256), depths=(3, 4, 12, 4), expansion=6, **kwargs)


@register_model
def convfirstnet_m(**kwargs) -> ConvFirstNet:
    """2.65 GMACs per image at 224 px."""
    return ConvFirstNet(widths=(64, 128, 256, 512), depths=(3, 4, 12, 3), expansion=4, **kwargs)


@register_model
def convfirstnet_l(**kwargs) -> ConvFirstNet:
    """9.19 GMACs per image at 224 px."""
    return ConvFirstNet(widths=(96, 192, 384, 768), depths=(3, 4, 14, 3), expansion=6,
                        **kwargs)


@register_model
def convfirstnet_h200(**kwargs) -> ConvFirstNet:
    """The configuration examples/convfirstnet_search.py chose: the largest block-plan C_max
    on h200-sxm with no more MACs than ConvNeXt-T (4.15 GMACs)."""
    return ConvFirstNet(widths=(64, 128, 256, 512), depths=(3, 4, 14, 3), expansion=6,
                        **kwargs)
