"""Reference blocks for block fusion: FFN (eq. 30) and ConvFirst (paper Fig. 6b, 6c).

The training form keeps every BatchNorm beside the convolution it normalises, in a
``ConvBN`` pair. ``fold_batchnorm`` returns the inference form: each ``ConvBN`` becomes one
``nn.Conv2d`` whose weight and bias absorb the BatchNorm's affine transform. The
fused CUDA kernels in ``cuda_kernels/`` compute exactly that inference form.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F


class ConvBN(nn.Module):
    """Convolution without bias, then BatchNorm; ``fold()`` merges them into one convolution."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 1, stride: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size, stride, padding=kernel_size // 2, groups=groups, bias=False
        )
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))

    @torch.no_grad()
    def fold(self) -> nn.Conv2d:
        conv, bn = self.conv, self.bn
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        folded = nn.Conv2d(
            conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
            groups=conv.groups, bias=True,
        ).to(device=conv.weight.device, dtype=conv.weight.dtype)
        folded.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
        folded.bias.copy_(bn.bias - bn.running_mean * scale)
        return folded


class BlurPool(nn.Module):
    """Anti-aliased stride-2 downsampling: a fixed depthwise [1 2 1]⊗[1 2 1]/16 blur, then stride 2."""

    def __init__(self, channels: int):
        super().__init__()
        taps = torch.tensor([1.0, 2.0, 1.0])
        kernel = torch.outer(taps, taps) / 16.0
        self.register_buffer("kernel", kernel.expand(channels, 1, 3, 3).contiguous())
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, (1, 1, 1, 1), mode="reflect")
        return F.conv2d(x, self.kernel.to(x.dtype), stride=2, groups=self.channels)


class FFN(nn.Module):
    """1x1 expand to ``expansion * channels`` + BN, ReLU, 1x1 project + BN (eq. 30), optional shortcut."""

    def __init__(self, channels: int, expansion: int = 4, out_channels: int | None = None, residual: bool = False):
        super().__init__()
        out_channels = channels if out_channels is None else out_channels
        if residual and out_channels != channels:
            raise ValueError(f"a residual FFN needs out_channels == channels, got {out_channels} != {channels}")
        self.channels, self.expansion, self.out_channels, self.residual = channels, expansion, out_channels, residual
        self.expand = ConvBN(channels, expansion * channels)
        self.act = nn.ReLU()
        self.project = ConvBN(expansion * channels, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.act(self.expand(x)))
        return x + y if self.residual else y


class ConvFirstBlock(nn.Module):
    """Grouped k x k conv + BN, then FFN, plus the shortcut.

    Stride 1 (paper Fig. 6b): ``x + FFN(conv(x))``. Stride 2 (Fig. 6c): the conv output and
    the shortcut are both downsampled with ``BlurPool``; a 1x1 conv + BN adapts the shortcut
    when ``out_channels`` differs.
    """

    def __init__(
        self,
        channels: int,
        expansion: int = 4,
        out_channels: int | None = None,
        stride: int = 1,
        group_width: int = 8,
        kernel_size: int = 3,
    ):
        super().__init__()
        out_channels = channels if out_channels is None else out_channels
        if stride not in (1, 2):
            raise ValueError(f"stride must be 1 or 2, got {stride}")
        if channels % group_width:
            raise ValueError(f"channels ({channels}) must be a multiple of group_width ({group_width})")
        self.channels, self.expansion, self.out_channels = channels, expansion, out_channels
        self.stride, self.group_width, self.kernel_size = stride, group_width, kernel_size
        self.conv = ConvBN(channels, channels, kernel_size, groups=channels // group_width)
        self.pool = BlurPool(channels) if stride == 2 else nn.Identity()
        self.ffn = FFN(channels, expansion, out_channels)
        shortcut: list[nn.Module] = []
        if stride == 2:
            shortcut.append(BlurPool(channels))
        if out_channels != channels:
            shortcut.append(ConvBN(channels, out_channels))
        self.shortcut = nn.Sequential(*shortcut)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shortcut(x) + self.ffn(self.pool(self.conv(x)))


@torch.no_grad()
def _fold_into_conv(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> None:
    """Fold an inference BatchNorm into the convolution before it, in place (the conv gains a
    bias). Computed in at least float32; the weight keeps its dtype and memory format."""
    dtype = torch.promote_types(conv.weight.dtype, torch.float32)
    scale = bn.weight.to(dtype) / torch.sqrt(bn.running_var.to(dtype) + bn.eps)
    bias = conv.bias.to(dtype) if conv.bias is not None else torch.zeros_like(scale)
    conv.weight = nn.Parameter((conv.weight.to(dtype) * scale.reshape(-1, 1, 1, 1)).to(conv.weight.dtype))
    conv.bias = nn.Parameter((bn.bias.to(dtype) + (bias - bn.running_mean.to(dtype)) * scale).to(conv.weight.dtype))


def _fold_sequential(seq: nn.Sequential) -> None:
    """A Conv2d followed by a BatchNorm2d inside an nn.Sequential (torchvision's
    Conv2dNormActivation, ResNet's downsample): the BatchNorm folds into the conv and its slot
    becomes an nn.Identity, so that indices and module paths stay."""
    for i in range(len(seq) - 1):
        conv, bn = seq[i], seq[i + 1]
        if (isinstance(conv, nn.Conv2d) and type(bn) is nn.BatchNorm2d and bn.affine
                and bn.track_running_stats and conv.out_channels == bn.num_features):
            _fold_into_conv(conv, bn)
            seq[i + 1] = nn.Identity()


def _fold_children(module: nn.Module) -> None:
    if isinstance(module, nn.Sequential):
        _fold_sequential(module)
    for name, child in module.named_children():
        if isinstance(child, ConvBN):
            setattr(module, name, child.fold())
        else:
            _fold_children(child)


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """Inference form of ``model``: a copy in eval mode with every ``ConvBN`` folded into a conv,
    and every BatchNorm2d that follows a Conv2d in an nn.Sequential (torchvision) folded too."""
    folded = copy.deepcopy(model).eval()
    if isinstance(folded, ConvBN):
        return folded.fold().eval()
    _fold_children(folded)
    return folded
