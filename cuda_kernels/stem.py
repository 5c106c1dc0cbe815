"""The ConvFirstNet stem in one kernel (csrc/stem.cu, its own extension ``perfmodel_stem``):
reference, weight packing, host checks, the ``convfirst_stem::stem`` operator and the drop-in
module.

The stem is the inference form (BatchNorm folded) of ``perfmodel.zoo.ConvFirstNet.stem``::

    y = ReLU(conv2(ReLU(conv1(x) + b1)) + b2)

conv1: 3x3, stride 2, pad 1, 3 -> C1; conv2: 3x3, stride 2, pad 1, C1 -> C2 = 2 C1. Activations are
``N x C x H x W`` float16 in ``torch.channels_last`` memory; the input has 3 channels, so a pixel is
6 bytes (the kernel reads it by halves, no 16-byte rule on x). C1 in {16, 32, 48} (ConvFirstNet-S: 16 -> 32;
-M and -H200: 32 -> 64; -L: 48 -> 96, version 2 only: NOTES.md "Fused stem C1 = 48"). Any N >= 1, H >= 1, W >= 1;
at C1 = 48 x must also be 16-byte aligned with W % 8 == 0 (``v2_applies``): `run` refuses other inputs with a
ValueError, and the module (the ``convfirst_stem::stem`` operator) computes them with PyTorch's fp16 convolutions
from the same prepared weights, warning once with the reason.

On by default since its GPU tests passed on the H200 (12/12; 3 -> 32 -> 64 at 224x224, batch 128: 115.3 us
against torch.compile's 242.2 with freezing, examples/measurements/stem/): ``replace_blocks`` swaps stems
unless ``CUDA_KERNELS_STEM=0``.

Version 2 of the kernel (NOTES.md "Fused stem v2": the input window by 16-byte cp.async, conv1 without
the row table) is the default (88.1 vs 115.3 us at C1 = 32, 46.2 vs 77.9 at C1 = 16, 224x224, batch 128 on
the H200, examples/measurements/stem/v2/); ``CUDA_KERNELS_STEM_V2=0`` or ``run(..., version=1)`` runs
version 1. It takes the same weights and needs x 16-byte aligned with W % 8 == 0 (``v2_applies``), else
version 1 runs (C1 = 48 has version 2 only: see above). ``CUDA_KERNELS_STEM48=0`` leaves C1 = 48 stems in PyTorch
(``replace_blocks`` lists them with that reason); C1 = 48 is on by default (written and CPU-emulated in session 7
before its first GPU run: cuda_kernels/device_run_stem48.sh).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, fields

import torch
from torch import nn
from torch.nn import functional as F

from cuda_kernels import _pdl, _switches
from cuda_kernels._checks import check_capability, check_devices, check_out_apart, check_stem_input
from cuda_kernels._fused import OpBlock, fake_nhwc_output

SWITCH = "CUDA_KERNELS_STEM"
SWITCH_V2 = "CUDA_KERNELS_STEM_V2"
SWITCH_48 = "CUDA_KERNELS_STEM48"
SUPPORTED_WIDTHS = ((16, 32), (32, 64), (48, 96))  # (C1, C2)
V1_WIDTHS = ((16, 32), (32, 64))  # version 1's; (48, 96) runs version 2 only (no fallback to version 1 there)
IN_CHANNELS = 3
MIN_CAPABILITY = (8, 0)  # mma.sync m16n8k16, ldmatrix
K1_PADDED = 32  # conv1's K = 27, ordered (ky, kx, ci) with each ky row padded to 10, then to 32


def enabled() -> bool:
    """Whether replace_blocks swaps stems: unless ``CUDA_KERNELS_STEM`` is 0 (or off/false/no/none)."""
    return _switches.flag(SWITCH, True)


def v2_enabled() -> bool:
    """Whether `run` launches version 2 by default: unless ``CUDA_KERNELS_STEM_V2`` is 0 (or off/false/no/none,
    or empty)."""
    return _switches.flag(SWITCH_V2, True)


def stem48_enabled() -> bool:
    """Whether C1 = 48 stems (ConvFirstNet-L) are fused: unless ``CUDA_KERNELS_STEM48`` is 0 (or off/false/no/none,
    or empty)."""
    return _switches.flag(SWITCH_48, True)


def v2_applies(x: torch.Tensor) -> bool:
    """Whether version 2 runs for x (else version 2's launcher runs version 1): a 16-byte aligned x whose
    image rows are whole 16-byte chunks (W % 8 == 0; W < 2^28), as csrc/stem.cu's v2_applies."""
    return x.data_ptr() % 16 == 0 and x.shape[3] % 8 == 0 and x.shape[3] < 2**28


def v2_only_reason(x: torch.Tensor, weights) -> str | None:
    """Why the fused stem cannot take x with these weights (C1 = 48 has no version 1 for what version 2 cannot
    take: x not 16-byte aligned, or W % 8 != 0), or None."""
    b1 = getattr(weights, "b1", None)
    if b1 is None or (b1.numel(), 2 * b1.numel()) in V1_WIDTHS or v2_applies(x):
        return None
    return (f"the fused stem runs C1 = {b1.numel()} in version 2 only, which needs x 16-byte aligned with W % 8 == 0 "
            f"(W = {x.shape[3]}, x at byte {x.data_ptr() % 16} mod 16)")


def conv_size(size: int) -> int:
    """Output size of a 3x3 stride-2 pad-1 convolution: ceil(size / 2)."""
    return (size + 1) // 2


def output_size(size: int) -> int:
    """Height or width of the stem's output: two stride-2 convolutions."""
    return conv_size(conv_size(size))


@dataclass(frozen=True)
class FoldedStem:
    """The inference-form stem's tensors in PyTorch layouts: w1 [C1, 3, 3, 3], w2 [C2, C1, 3, 3],
    biases 1-D."""

    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor

    @classmethod
    def from_stem(cls, stem: nn.Module) -> "FoldedStem":
        conv1, conv2 = stem[0], stem[2]
        return cls(conv1.weight, conv1.bias, conv2.weight, conv2.bias)


def reference(x: torch.Tensor, w: FoldedStem) -> torch.Tensor:
    """The stem op by op in x's dtype (float32 / float64 for a reference)."""
    cast = {f.name: getattr(w, f.name).to(x.dtype) for f in fields(w)}
    y = F.relu(F.conv2d(x, cast["w1"], cast["b1"], stride=2, padding=1))
    return F.relu(F.conv2d(y, cast["w2"], cast["b2"], stride=2, padding=1))


def _stem_convs(stem: nn.Module):
    """The two convolutions of a stem-shaped Sequential (ConvBN or Conv2d, ReLU, ConvBN or Conv2d,
    ReLU) whose first takes 3 channels with a 3x3 kernel at stride 2, or None."""
    from perfmodel.zoo.blocks import ConvBN

    if not isinstance(stem, nn.Sequential) or len(stem) != 4:
        return None
    kinds = (nn.Conv2d, ConvBN)
    if not (isinstance(stem[0], kinds) and isinstance(stem[1], nn.ReLU) and isinstance(stem[2], kinds)
            and isinstance(stem[3], nn.ReLU)):
        return None
    convs = [m.conv if isinstance(m, ConvBN) else m for m in (stem[0], stem[2])]
    if convs[0].in_channels != IN_CHANNELS or any(c.kernel_size != (3, 3) or c.stride != (2, 2) for c in convs):
        return None
    return convs


def is_stem(module: nn.Module) -> bool:
    """Whether `module` has the ConvFirstNet stem's structure (folded or not): what replace_blocks
    counts as a stem."""
    return _stem_convs(module) is not None


def unsupported(stem: nn.Module) -> str | None:
    """Why the kernel cannot run this stem-shaped Sequential, or None if it can."""
    convs = _stem_convs(stem)
    if convs is None:
        return "not a stem: Conv 3x3 s2 (3 -> C1), ReLU, Conv 3x3 s2, ReLU"
    if not all(isinstance(m, nn.Conv2d) for m in (stem[0], stem[2])):
        return "not in inference form (fold batchnorm first)"
    for i, c in enumerate(convs):
        if c.padding != (1, 1) or c.dilation != (1, 1) or c.groups != 1 or c.padding_mode != "zeros":
            return f"conv {i + 1}: padding {c.padding}, dilation {c.dilation}, groups {c.groups}, {c.padding_mode}"
        if c.bias is None:
            return f"conv {i + 1} has no bias (fold batchnorm first)"
    c1, c2 = convs[0].out_channels, convs[1].out_channels
    if convs[1].in_channels != c1 or (c1, c2) not in SUPPORTED_WIDTHS:
        return f"C 3 -> {c1} -> {c2} (the stem kernel has {SUPPORTED_WIDTHS})"
    if (c1, c2) not in V1_WIDTHS and not stem48_enabled():
        return f"C 3 -> {c1} -> {c2}: off ({SWITCH_48}=0)"
    return None


@dataclass(frozen=True)
class KernelWeights:
    """The kernel's operands: conv1 as mma B fragments, conv2 [C2, 9 C1] fp16, fp32 biases."""

    w1: torch.Tensor  # [C1 / 8 * 2 * 32 * 2] int32
    b1: torch.Tensor  # [C1] fp32
    w2: torch.Tensor  # [C2, 9 * C1] fp16, k = (dy * 3 + dx) * C1 + ci
    b2: torch.Tensor  # [C2] fp32

    @property
    def mid_channels(self) -> int:
        return self.b1.numel()

    @property
    def out_channels(self) -> int:
        return self.w2.shape[0]


def conv1_matrix(w1: torch.Tensor) -> torch.Tensor:
    """conv1's weights as the kernel's [C1, 32] fp16 B matrix: k = ky * 10 + kx * 3 + ci for
    kx * 3 + ci < 9; k = ky * 10 + 9 and k = 30, 31 are zero."""
    c1 = w1.shape[0]
    m = torch.zeros(c1, 3, 10, dtype=torch.float16, device=w1.device)
    m[:, :, :9] = w1.detach().permute(0, 2, 3, 1).reshape(c1, 3, 9).to(torch.float16)  # [n, ky, (kx, ci)]
    return torch.cat([m.reshape(c1, 30), torch.zeros(c1, 2, dtype=torch.float16, device=w1.device)], dim=1)


def pack_conv1(w1: torch.Tensor) -> torch.Tensor:
    """conv1's mma.m16n8k16 B fragments: [nt][k step s][lane][r] int32 words, word r of lane (g, t)
    = the k pair (16 s + 2 t + 8 r, +1) of output channel 8 nt + g, the lower k in the low half."""
    c1 = w1.shape[0]
    pairs = conv1_matrix(w1).cpu().contiguous().view(torch.int32)  # [C1, 16]: pair p = k 2p, 2p + 1
    nt = torch.arange(c1 // 8).view(-1, 1, 1, 1)
    s = torch.arange(2).view(1, -1, 1, 1)
    lane = torch.arange(32).view(1, 1, -1, 1)
    r = torch.arange(2).view(1, 1, 1, -1)
    rows = nt * 8 + lane // 4
    cols = s * 8 + lane % 4 + 4 * r
    return pairs[rows, cols].reshape(-1).contiguous().to(w1.device)


def prepare_weights(w: FoldedStem) -> KernelWeights:
    """Validate the widths and convert the weights once (raises ValueError if unsupported)."""
    c1, c2 = w.w1.shape[0], w.w2.shape[0]
    if tuple(w.w1.shape) != (c1, IN_CHANNELS, 3, 3) or tuple(w.w2.shape) != (c2, c1, 3, 3):
        raise ValueError(f"stem weights must be [C1, 3, 3, 3] and [C2, C1, 3, 3], got {tuple(w.w1.shape)} "
                         f"and {tuple(w.w2.shape)}")
    if (c1, c2) not in SUPPORTED_WIDTHS:
        raise ValueError(f"stem kernel cannot run C 3 -> {c1} -> {c2} (it has {SUPPORTED_WIDTHS})")
    if w.b1.numel() != c1 or w.b2.numel() != c2:
        raise ValueError(f"biases must have {c1} and {c2} elements")
    w2 = w.w2.detach().permute(0, 2, 3, 1).reshape(c2, 9 * c1).to(torch.float16).contiguous()
    return KernelWeights(pack_conv1(w.w1), w.b1.detach().reshape(-1).float().contiguous(), w2,
                         w.b2.detach().reshape(-1).float().contiguous())


def check_input(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None) -> None:
    """Raise ValueError for an input (or output buffer) the kernel cannot take. The device is
    checked last, so that every other rule can be checked on CPU tensors."""
    shape = check_stem_input(x, weights.out_channels, output_size)
    check_out_apart(out, x, weights, shape)
    reason = v2_only_reason(x, weights)
    if reason is not None:
        raise ValueError(reason)
    check_devices(x, weights)
    check_capability(x, MIN_CAPABILITY, "the fused stem")


@functools.lru_cache(maxsize=None)
def _extension():
    """Build (once per process; cached on disk by torch) and import the stem's own extension."""
    from cuda_kernels import _build

    return _build._load("perfmodel_stem", ("stem_bindings.cpp", "stem.cu"), False)


def run(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None,
        version: int | None = None) -> torch.Tensor:
    """Launch the fused stem; returns [N, C2, ceil(ceil(H/2)/2), ...] channels_last (``out`` if given).
    version: 1 or 2; None: 2 unless ``CUDA_KERNELS_STEM_V2`` is off, else 1 (C1 = 48: always 2, it has no
    version 1; an explicit 1 is a ValueError)."""
    b1 = getattr(weights, "b1", None)
    v2_only = b1 is not None and (b1.numel(), 2 * b1.numel()) not in V1_WIDTHS
    if version is None:
        version = 2 if v2_enabled() or v2_only else 1
    if version not in (1, 2):
        raise ValueError(f"stem kernel version must be 1 or 2, got {version}")
    if version == 1 and v2_only:
        raise ValueError(f"the fused stem has no version 1 for C1 = {b1.numel()} (version 2 only)")
    check_input(x, weights, out)
    empty = torch.empty(0, device=x.device, dtype=torch.float16)
    launch = _extension().stem_v2 if version == 2 else _extension().stem
    return launch(x, weights.w1, weights.b1, weights.w2, weights.b2, empty if out is None else out, _pdl.enabled())


WEIGHT_FIELDS = tuple(f.name for f in fields(KernelWeights))


def unpack_conv1(w1_words: torch.Tensor, c1: int) -> torch.Tensor:
    """conv1's fp16 weights [C1, 3, 3, 3] back from the packed B fragments (`pack_conv1`'s inverse)."""
    words = w1_words.reshape(c1 // 8, 2, 32, 2)
    pairs = torch.zeros(c1, 16, dtype=torch.int32, device=w1_words.device)
    nt = torch.arange(c1 // 8, device=w1_words.device).view(-1, 1, 1, 1)
    s = torch.arange(2, device=w1_words.device).view(1, -1, 1, 1)
    lane = torch.arange(32, device=w1_words.device).view(1, 1, -1, 1)
    r = torch.arange(2, device=w1_words.device).view(1, 1, 1, -1)
    rows, cols = (nt * 8 + lane // 4).expand_as(words), (s * 8 + lane % 4 + 4 * r).expand_as(words)
    pairs[rows.reshape(-1), cols.reshape(-1)] = words.reshape(-1)
    m = pairs.view(torch.float16)[:, :30].reshape(c1, 3, 10)[:, :, :9]  # [n, ky, (kx, ci)]
    return m.reshape(c1, 3, 3, 3).permute(0, 3, 1, 2)  # [n, ci, ky, kx]


def pytorch_stem(x: torch.Tensor, weights: KernelWeights) -> torch.Tensor:
    """The stem with PyTorch's fp16 convolutions from the kernel's prepared weights (the module's fallback for
    inputs the C1 = 48 kernel cannot take); channels_last like the kernel's output."""
    c1, c2 = weights.mid_channels, weights.out_channels
    w1 = unpack_conv1(weights.w1, c1).to(x.dtype)
    w2 = weights.w2.reshape(c2, 3, 3, c1).permute(0, 3, 1, 2).to(x.dtype)
    y = F.relu(F.conv2d(x, w1, weights.b1.to(x.dtype), stride=2, padding=1))
    y = F.relu(F.conv2d(y, w2, weights.b2.to(x.dtype), stride=2, padding=1))
    return y.contiguous(memory_format=torch.channels_last)


_warned: set[str] = set()


@torch.library.custom_op("convfirst_stem::stem", mutates_args=())
def stem_op(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    """`run` as one opaque PyTorch operator, for torch.compile and the profiler; an input the C1 = 48 kernel
    cannot take (``v2_only_reason``) goes through `pytorch_stem`, with a warning (once per reason)."""
    weights = KernelWeights(w1, b1, w2, b2)
    reason = v2_only_reason(x, weights)
    if reason is not None:
        if reason not in _warned:
            _warned.add(reason)
            warnings.warn(f"FusedStem falls back to PyTorch for this input: {reason}", stacklevel=2)
        return pytorch_stem(x, weights)
    return run(x, weights)


@stem_op.register_fake
def _stem_op_fake(x, w1, b1, w2, b2):
    return fake_nhwc_output(x, w2.shape[0], output_size)


class FusedStem(OpBlock):
    """The inference-form ConvFirstNet stem (two 3x3 stride-2 convolutions + bias + ReLU) in one kernel."""

    WEIGHT_FIELDS, Weights, op = WEIGHT_FIELDS, KernelWeights, stem_op
    SHAPE_FIELDS = ("mid_channels", "out_channels")

    @staticmethod
    def unsupported(block: nn.Module) -> str | None:
        return unsupported(block)

    @classmethod
    def from_block(cls, block: nn.Module) -> "FusedStem":
        cls._check(block)
        return cls(prepare_weights(FoldedStem.from_stem(block)))
