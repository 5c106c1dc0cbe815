"""EfficientNet's stem in one kernel (csrc/effnet_stem.cu, its own extension ``perfmodel_effnet_stem``): the
inference form (BatchNorm folded) of torchvision's ``features.0``::

    y = SiLU(conv(x) + b),  conv 3x3, stride 2, pad 1, 3 -> C

for C in {32, 40, 48} (EfficientNet-B0 to B2: 32, B3: 40, B4: 48), NHWC float16, fp32 accumulation; any N, H >= 1
and 1 <= W <= 448. The convolution runs on mma.sync with the ConvFirstNet stem's conv1 weight layout
(``stem.pack_conv1``); the output is written once, SiLU applied (Inductor writes the conv and reads it back for
the activation, or runs cuDNN's implicit GEMM, which spends 147 us on B0's stem at batch 128 in eager).

On by default since session 15 (``CUDA_KERNELS_EFFNET_STEM=0`` keeps the stem in PyTorch): on the H200 it took
EfficientNet-B0 from 1.959 to 1.834 ms end to end (the compiled rest's stem was a cuDNN convolution, 111 us, and a
Triton bias + SiLU, 96 us; this kernel 72 us under Nsight Compute). NOTES.md "EfficientNet's stem".

Version 2, the default since session 16 (``CUDA_KERNELS_EFFNET_STEM_V2=0`` runs version 1), copies the window in
16-byte pieces and stores the output through a staging tile in 16-byte pieces (csrc/effnet_stem.cu): 70.2 -> 54.5 us
under Nsight Compute, B0 1.833 -> 1.813 ms (``examples/measurements/mbconv/s16/call1``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import torch
from torch import nn
from torch.nn import functional as F

from cuda_kernels import _pdl, _switches
from cuda_kernels._checks import check_capability, check_devices, check_out_apart, check_stem_input
from cuda_kernels._fused import OpBlock, fake_nhwc_output
from cuda_kernels.stem import conv_size, pack_conv1

SWITCH = "CUDA_KERNELS_EFFNET_STEM"
V2_SWITCH = "CUDA_KERNELS_EFFNET_STEM_V2"  # csrc/effnet_stem.cu version2_requested: on unless "0" (since session 16)
WIDTHS = (32, 40, 48)
IN_CHANNELS = 3
MAX_WIDTH = 448  # csrc/effnet_stem.h kMaxWidth
BAND_ROWS = 8  # kRows: output rows per CTA
MIN_CAPABILITY = (8, 0)  # mma.sync m16n8k16


def enabled() -> bool:
    """Whether replace_blocks swaps EfficientNet stems: unless ``CUDA_KERNELS_EFFNET_STEM=0`` (on by default since
    session 15's measurement)."""
    return _switches.flag(SWITCH, True)


def window_pitch(width: int) -> int:
    """Halves per row of a band's input window (csrc/effnet_stem.h window_pitch): W + 2 pixels x 3, even."""
    return ((width + 2) * 3 + 1) & ~1


def smem_bytes(width: int) -> int:
    """Shared memory of a CTA: the window of 2 BAND_ROWS + 1 input rows (effnet_stem.h smem_bytes)."""
    return (2 * BAND_ROWS + 1) * window_pitch(width) * 2


WINDOW_OFFSET_V2 = 4  # kWindowOffsetV2: halves before window row r's half 0 (version 2)


def window_pitch_v2(width: int) -> int:
    """Version 2's halves per window row (effnet_stem.h): >= 3 W + 7, a multiple of 8 (16-byte aligned pieces)."""
    return (3 * width + 7 + 7) & ~7


def stage_words(c: int) -> int:
    """32-bit words per pixel row of version 2's staging tile: C / 2 + 4 or + 8, whichever is 4 mod 8."""
    return c // 2 + 4 if (c // 2 + 4) % 8 == 4 else c // 2 + 8


def window_halves_v2(width: int) -> int:
    """Version 2's window in halves: 2 BAND_ROWS + 1 rows and twice the offset (the last row's slack)."""
    return (2 * BAND_ROWS + 1) * window_pitch_v2(width) + 2 * WINDOW_OFFSET_V2


def smem_bytes_v2(width: int, c: int) -> int:
    """Version 2's shared memory: the window, then 8 warps' staging tiles of 16 pixels."""
    return window_halves_v2(width) * 2 + 8 * 16 * stage_words(c) * 4


def _conv(module: nn.Module) -> nn.Conv2d | None:
    """The convolution of a stem-shaped Sequential (Conv2d, BatchNorm2d or Identity, SiLU) taking 3 channels, or
    None: torchvision's Conv2dNormActivation in front of EfficientNet."""
    if not isinstance(module, nn.Sequential) or len(module) != 3:
        return None
    conv, norm, act = module
    if not (isinstance(conv, nn.Conv2d) and isinstance(norm, (nn.BatchNorm2d, nn.Identity))
            and isinstance(act, nn.SiLU) and conv.in_channels == IN_CHANNELS):
        return None
    return conv


def is_stem(module: nn.Module) -> bool:
    """Whether `module` has EfficientNet's stem structure (folded or not): what replace_blocks counts."""
    return _conv(module) is not None


def unsupported(module: nn.Module) -> str | None:
    """Why the kernel cannot run this stem-shaped Sequential, or None if it can."""
    conv = _conv(module)
    if conv is None:
        return "not an EfficientNet stem: Conv 3 -> C, BatchNorm or Identity, SiLU"
    if isinstance(module[1], nn.BatchNorm2d):
        return "not in inference form (fold batchnorm first)"
    if (conv.kernel_size, conv.stride, conv.padding, conv.dilation, conv.groups, conv.padding_mode) != \
            ((3, 3), (2, 2), (1, 1), (1, 1), 1, "zeros"):
        return (f"conv {conv.kernel_size} stride {conv.stride} padding {conv.padding} dilation {conv.dilation} "
                f"groups {conv.groups} ({conv.padding_mode}): the kernel has 3x3, stride 2, padding 1")
    if conv.bias is None:
        return "the conv has no bias (fold batchnorm first)"
    if conv.out_channels not in WIDTHS:
        return f"C 3 -> {conv.out_channels} (the kernel has {WIDTHS})"
    return None


@dataclass(frozen=True)
class KernelWeights:
    """The kernel's operands: the conv as mma B fragments (stem.pack_conv1) and the fp32 bias."""

    wb: torch.Tensor  # [C / 8 * 2 * 32 * 2] int32
    bias: torch.Tensor  # [C] fp32

    @property
    def out_channels(self) -> int:
        return self.bias.numel()


WEIGHT_FIELDS = tuple(f.name for f in fields(KernelWeights))


def prepare_weights(weight: torch.Tensor, bias: torch.Tensor) -> KernelWeights:
    """Validate and convert the folded conv's weight [C, 3, 3, 3] and bias [C] once (ValueError if unsupported)."""
    c = weight.shape[0]
    if tuple(weight.shape) != (c, IN_CHANNELS, 3, 3) or c not in WIDTHS or bias.numel() != c:
        raise ValueError(f"EfficientNet stem weights must be [C, 3, 3, 3] and [C] with C in {WIDTHS}, got "
                         f"{tuple(weight.shape)} and {tuple(bias.shape)}")
    return KernelWeights(pack_conv1(weight), bias.detach().reshape(-1).float().contiguous())


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The stem op by op in x's dtype (float32 / float64 for a reference)."""
    return F.silu(F.conv2d(x, weight.to(x.dtype), bias.to(x.dtype), stride=2, padding=1))


def check_input(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None) -> None:
    """Raise ValueError for an input (or output buffer) the kernel cannot take; the device last, so that every
    other rule can be checked on CPU tensors."""
    shape = check_stem_input(x, weights.out_channels, conv_size)
    if x.shape[3] > MAX_WIDTH:
        raise ValueError(f"x is {x.shape[3]} pixels wide: the kernel's band window holds at most {MAX_WIDTH}")
    check_out_apart(out, x, weights, shape)
    check_devices(x, weights)
    check_capability(x, MIN_CAPABILITY, "the EfficientNet stem kernel")


@functools.lru_cache(maxsize=None)
def _extension():
    """Build (once per process; cached on disk by torch) and import the kernel's own extension."""
    from cuda_kernels import _build

    return _build._load("perfmodel_effnet_stem", ("effnet_stem_bindings.cpp", "effnet_stem.cu"), False)


def run(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch the kernel; returns [N, C, ceil(H / 2), ceil(W / 2)] channels_last (``out`` if given)."""
    check_input(x, weights, out)
    empty = torch.empty(0, device=x.device, dtype=torch.float16)
    return _extension().effnet_stem(x, weights.wb, weights.bias, empty if out is None else out, _pdl.enabled())


@torch.library.custom_op("block_fusion::effnet_stem", mutates_args=())
def effnet_stem_op(x: torch.Tensor, wb: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """`run` as one opaque PyTorch operator, for torch.compile and the profiler."""
    return run(x, KernelWeights(wb, bias))


@effnet_stem_op.register_fake
def _effnet_stem_fake(x, wb, bias):
    return fake_nhwc_output(x, bias.numel(), conv_size)


class FusedEffNetStem(OpBlock):
    """The inference-form EfficientNet stem (3x3 stride-2 convolution 3 -> C + bias, SiLU) in one kernel."""

    WEIGHT_FIELDS, Weights, op = WEIGHT_FIELDS, KernelWeights, effnet_stem_op
    SHAPE_FIELDS = ("out_channels",)

    @staticmethod
    def unsupported(block: nn.Module) -> str | None:
        return unsupported(block)

    @classmethod
    def from_block(cls, block: nn.Module) -> "FusedEffNetStem":
        cls._check(block)
        conv = block[0]
        return cls(prepare_weights(conv.weight, conv.bias))
