"""MBConv (MobileNetV2 / EfficientNet) and FusedMBConv blocks, with their batchnorm layers.

MBConv: 1x1 expand + SiLU -> depthwise k x k + SiLU -> squeeze-excitation -> 1x1 project
-> + input. FusedMBConv: full k x k expand + SiLU -> 1x1 project -> + input. Both use the
zoo's ``ConvBN`` pairs, so ``fold_batchnorm`` gives their inference form.
"""
from __future__ import annotations

import torch
from torch import nn

from .blocks import ConvBN


class SqueezeExcite(nn.Module):
    """Global average pool -> FC -> SiLU -> FC -> sigmoid -> channel scale."""

    def __init__(self, channels: int, squeeze_channels: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeeze_channels, 1)
        self.act = nn.SiLU()
        self.expand = nn.Conv2d(squeeze_channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(self.act(self.reduce(s))))


class MBConv(nn.Module):
    def __init__(self, channels: int, expansion: int = 4, kernel_size: int = 3,
                 se_ratio: float = 0.25):
        super().__init__()
        hidden = channels * expansion
        self.expand = ConvBN(channels, hidden)
        self.act1 = nn.SiLU()
        self.depthwise = ConvBN(hidden, hidden, kernel_size, groups=hidden)
        self.act2 = nn.SiLU()
        self.se = SqueezeExcite(hidden, max(1, int(channels * se_ratio)))
        self.project = ConvBN(hidden, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act2(self.depthwise(self.act1(self.expand(x))))
        return x + self.project(self.se(y))


class FusedMBConv(nn.Module):
    def __init__(self, channels: int, expansion: int = 4, kernel_size: int = 3):
        super().__init__()
        self.expand = ConvBN(channels, channels * expansion, kernel_size)
        self.act = nn.SiLU()
        self.project = ConvBN(channels * expansion, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(self.act(self.expand(x)))
