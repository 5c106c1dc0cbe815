"""EfficientNet's head with its pool fused (csrc/effnet_head.cu, its own extension ``perfmodel_effnet_head``): the
inference form (BatchNorm folded) of torchvision's last ``features`` layer and ``avgpool``::

    pooled = mean over the pixels of SiLU(conv1x1(x) + b)        [N, C, 1, 1]

as cuBLAS's product of the pixels' rows with the weight (``torch.mm``, no bias) and one kernel that adds the bias,
applies SiLU and averages each image's rows in fp32 (the product's output is read once, from L2). Under
torch.compile, Inductor runs the same product and then a Triton reduction for bias + SiLU + mean, 19.3 us at
EfficientNet-B0's batch 128 (``examples/measurements/mbconv/s19/call2``) for 16 MB it could read in ~4 us; the
model's ``avgpool`` then averages one pixel. On by default since session 21 (B0 -12.5 us measured in
``examples/measurements/mbconv/s20/call4``); ``CUDA_KERNELS_EFFNET_HEAD=0`` turns it off (NOTES.md "Session 19:
EfficientNet's head").
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from cuda_kernels import _switches

SWITCH = "CUDA_KERNELS_EFFNET_HEAD"
NOT_A_HEAD = "no EfficientNet head (features[-1] a 1x1 convolution + SiLU, then avgpool to 1 x 1)"


def enabled() -> bool:
    """Whether replace_blocks fuses EfficientNet's head: unless ``CUDA_KERNELS_EFFNET_HEAD=0``."""
    return _switches.flag(SWITCH, True)


def _conv(module: nn.Module) -> nn.Conv2d | None:
    """The 1x1 convolution of a head-shaped Sequential (Conv2d 1x1, BatchNorm2d or Identity, SiLU), or None."""
    if not isinstance(module, nn.Sequential) or len(module) != 3:
        return None
    conv, norm, act = module
    if not (isinstance(conv, nn.Conv2d) and isinstance(norm, (nn.BatchNorm2d, nn.Identity))
            and isinstance(act, nn.SiLU) and conv.kernel_size == (1, 1)):
        return None
    return conv


def head_path(model: nn.Module) -> str | None:
    """``features.K`` of a model laid out as torchvision's EfficientNet (``features`` ending in a head-shaped layer,
    ``avgpool`` an AdaptiveAvgPool2d to 1 x 1), or None."""
    features, pool = getattr(model, "features", None), getattr(model, "avgpool", None)
    if not isinstance(features, nn.Sequential) or len(features) == 0 or _conv(features[-1]) is None:
        return None
    if not isinstance(pool, nn.AdaptiveAvgPool2d) or pool.output_size not in (1, (1, 1)):
        return None
    return f"features.{len(features) - 1}"


def unsupported(module: nn.Module) -> str | None:
    """Why the kernel cannot run this head-shaped layer, or None if it can."""
    conv = _conv(module)
    if conv is None:
        return NOT_A_HEAD
    if isinstance(module[1], nn.BatchNorm2d):
        return "not in inference form (fold batchnorm first)"
    if (conv.stride, conv.padding, conv.dilation, conv.groups) != ((1, 1), (0, 0), (1, 1), 1):
        return (f"conv 1x1 stride {conv.stride} padding {conv.padding} dilation {conv.dilation} groups "
                f"{conv.groups}: the head is a plain 1x1 convolution")
    if conv.bias is None:
        return "the conv has no bias (fold batchnorm first)"
    if conv.out_channels % 2:
        return f"C {conv.out_channels} is odd (the kernel reads channel pairs)"
    return None


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The head op by op in x's dtype: [N, C, 1, 1]."""
    y = torch.nn.functional.silu(torch.nn.functional.conv2d(x, weight.to(x.dtype), bias.to(x.dtype)))
    return y.mean(dim=(2, 3), keepdim=True)


@functools.lru_cache(maxsize=None)
def _extension():
    """Build (once per process; cached on disk by torch) and import the kernel's own extension."""
    from cuda_kernels import _build

    return _build._load("perfmodel_effnet_head", ("effnet_head_bindings.cpp", "effnet_head.cu"), False)


def check_pool_input(y: torch.Tensor, bias: torch.Tensor, n: int) -> None:
    """ValueError for what the pool kernel cannot take (the device last, so CPU tensors check every other rule)."""
    if y.dtype != torch.float16 or y.dim() != 2 or not y.is_contiguous():
        raise ValueError(f"y must be [N * HW, C] contiguous float16, got {tuple(y.shape)} {y.dtype}")
    rows, c = y.shape
    if not 1 <= n <= 65535 or rows % n or rows == 0:
        raise ValueError(f"y's {rows} rows are not N * HW for N = {n} (1 <= N <= 65535)")
    if c % 2:
        raise ValueError(f"C = {c} must be even (the kernel reads channel pairs)")
    if bias.dtype != torch.float32 or bias.numel() != c or not bias.is_contiguous():
        raise ValueError(f"bias must be [{c}] contiguous float32, got {tuple(bias.shape)} {bias.dtype}")
    if not (y.is_cuda and bias.device == y.device):
        raise ValueError("y and bias must be on one CUDA device")


@torch.library.custom_op("block_fusion::effnet_head_pool", mutates_args=())
def head_pool_op(y: torch.Tensor, bias: torch.Tensor, n: int) -> torch.Tensor:
    """[N, C]: the mean over each image's rows of y of SiLU(y + bias), one opaque operator."""
    check_pool_input(y, bias, n)
    return _extension().effnet_head_pool(y, bias, n)


@head_pool_op.register_fake
def _head_pool_fake(y, bias, n):
    return y.new_empty((n, y.shape[1]))


class FusedEffNetHead(nn.Module):
    """EfficientNet's last layer (1x1 convolution + bias, SiLU) and its global average pool: [N, C, 1, 1]. It stands
    where the layer was; the model's avgpool then averages one pixel. `reference_paths` names the two PyTorch modules
    it replaces, for the check before timing (perfmodel.bench.check_blocks)."""

    def __init__(self, conv: nn.Conv2d, reference_paths: tuple[str, str]):
        super().__init__()
        self.register_buffer("weight", conv.weight.detach().reshape(conv.out_channels, conv.in_channels).contiguous(),
                             persistent=False)
        self.register_buffer("bias", conv.bias.detach().float().contiguous(), persistent=False)
        self.reference_paths = reference_paths

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c_in, h, w = x.shape
        if x.dtype != torch.float16 or self.weight.dtype != torch.float16:
            raise ValueError(f"the fused EfficientNet head runs in float16, got x {x.dtype}, weight {self.weight.dtype}")
        rows = x.permute(0, 2, 3, 1).reshape(n * h * w, c_in)  # a view of a channels-last x
        pooled = head_pool_op(torch.mm(rows, self.weight.t()), self.bias, n)
        return pooled.view(n, -1, 1, 1)


def swap(model: nn.Module) -> tuple[str | None, str | None]:
    """Replace an EfficientNet head in place (its layer -> FusedEffNetHead); returns (its path, why it stays or None).
    A model without one: (None, NOT_A_HEAD)."""
    path = head_path(model)
    if path is None:
        return None, NOT_A_HEAD
    layer = model.features[-1]
    reason = unsupported(layer)
    if reason is None:
        model.features[-1] = FusedEffNetHead(layer[0], (path, "avgpool"))
    return path, reason
