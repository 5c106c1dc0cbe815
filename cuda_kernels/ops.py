"""Python API of the block-fusion kernels: shape policy, weight packing, launch.

Activations are 4-D ``N x C x H x W`` tensors in ``torch.channels_last`` memory (NHWC in
memory, as PyTorch's channels-last convolutions use) or 2-D ``pixels x C`` tensors, float16.
Weights use PyTorch's convolution layouts (BatchNorm already folded):
``w1`` ``[hidden, C(,1,1)]``, ``w2`` ``[C, hidden(,1,1)]``, ``conv_w`` ``[C, 8, 3, 3]``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from cuda_kernels import _pdl
from cuda_kernels._checks import overlaps

SUPPORTED_CHANNELS = (32, 64, 128, 256)
# Widths that are multiples of 32 but not powers of two (ConvFirstNet-L's 96 and 192; the mma.sync
# template's last panel is then 32 columns wide, Config::PARTIAL in csrc/block_fusion.cuh). Compiled
# and CPU-tested, not yet run on a GPU: off unless CUDA_KERNELS_L_WIDTHS names them (NOTES.md,
# "ConvFirstNet-L widths"). The same switch holds the stride-2 96 -> 192 and 192 -> 384 blocks.
L_WIDTHS_SWITCH = "CUDA_KERNELS_L_WIDTHS"
SWITCHED_CHANNELS = (96, 192)
SUPPORTED_EXPANSIONS = (2, 4, 6)
SUPPORTED_SIZES = (56, 28, 14, 7)  # tested; any W <= MAX_WIDTH and any H also run
MAX_WIDTH = 56  # the halo buffer holds the rows a 128-pixel tile touches, for W <= 56
MAX_BATCH = 256
GROUP_WIDTH = 8
# Tile variant per channel count (see csrc/block_fusion_c*.cu and NOTES.md).
DEFAULT_VARIANT = {32: 1, 64: 0, 128: 1, 256: 1}  # fastest ConvFirst variant, measured on an H200
# not yet measured: C = 96 as C = 64 (two blocks per SM), C = 192 as C = 256 (the 4-slot ring)
DEFAULT_VARIANT.update({96: 0, 192: 1})
# The FFN on warpgroup MMAs (csrc/ffn_sm90.cu): sm_90a (H100, H200), these channel counts.
# Asked for as variant WGMMA_VARIANT; the default for a plain FFN where it can run.
WGMMA_VARIANT = 2
WGMMA_CHANNELS = (64, 128, 256)


def wgmma_chunk(channels: int) -> int:
    """Hidden channels per chunk of the wgmma kernel (csrc/ffn_sm90.cu, Cfg::HC)."""
    return 64 if channels == 256 else 128


def l_widths_enabled(kernel: str = "stride1") -> bool:
    """Whether the ConvFirstNet-L widths may run: ``CUDA_KERNELS_L_WIDTHS`` = ``1`` (or ``all``) for
    every kernel, a comma list of ``stride1`` (C = 96, 192 on the mma.sync kernel, ConvFirst and FFN)
    and ``stride2`` (96 -> 192, 192 -> 384, convfirst_s2); ``0`` (or empty): none. Unset: every kernel
    (the default since their 126 GPU tests passed on the H200, examples/measurements/l_widths/)."""
    value = os.environ.get(L_WIDTHS_SWITCH)
    if value is None:
        return True
    parts = {part.strip().lower() for part in value.split(",")}
    return bool(parts & {"1", "all"}) or kernel in parts


def supported_channels() -> tuple[int, ...]:
    """The widths the mma.sync kernel takes now: SUPPORTED_CHANNELS, plus SWITCHED_CHANNELS when on."""
    return tuple(sorted(SUPPORTED_CHANNELS + (SWITCHED_CHANNELS if l_widths_enabled("stride1") else ())))


def unsupported_channels(channels: int) -> str | None:
    """Why the mma.sync kernel does not take this width now, or None."""
    if channels in SWITCHED_CHANNELS and not l_widths_enabled("stride1"):
        return (f"C={channels}: its kernel is switched off by {L_WIDTHS_SWITCH}; unset it or set "
                f"{L_WIDTHS_SWITCH}=1 (or stride1) to use it")
    if channels not in supported_channels():
        return f"C={channels} (kernels for C in {supported_channels()})"
    return None


def _check_ffn_shapes(channels: int, hidden: int) -> None:
    reason = unsupported_channels(channels)
    if reason:
        switched = f"; {reason}" if channels in SWITCHED_CHANNELS else ""
        raise ValueError(f"block-fusion kernels support C in {supported_channels()}, got C={channels}{switched}")
    if hidden % channels or hidden // channels not in SUPPORTED_EXPANSIONS:
        raise ValueError(
            f"block-fusion kernels support hidden = alpha*C with alpha in {SUPPORTED_EXPANSIONS}, "
            f"got hidden={hidden} for C={channels}"
        )


def _as_pixels(x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int, int] | None]:
    """View x as a contiguous [pixels, C] matrix without copying."""
    if x.dtype != torch.float16 or not x.is_cuda:
        raise ValueError(f"x must be a float16 CUDA tensor, got {x.dtype} on {x.device}")
    if x.dim() == 2:
        if not x.is_contiguous():
            raise ValueError("a 2-D x must be contiguous [pixels, C]")
        return x, None
    if x.dim() != 4:
        raise ValueError(f"x must be [N, C, H, W] (channels_last) or [pixels, C], got shape {tuple(x.shape)}")
    if not x.is_contiguous(memory_format=torch.channels_last):
        raise ValueError("x must be in torch.channels_last memory format (NHWC)")
    n, c, h, w = x.shape
    return x.permute(0, 2, 3, 1).reshape(n * h * w, c), (n, c, h, w)


def _from_pixels(y: torch.Tensor, shape: tuple[int, int, int, int] | None) -> torch.Tensor:
    if shape is None:
        return y
    n, c, h, w = shape
    return y.view(n, h, w, c).permute(0, 3, 1, 2)


def _matrix(w: torch.Tensor, rows: int, cols: int, name: str) -> torch.Tensor:
    if w.numel() != rows * cols:
        raise ValueError(f"{name} must have {rows}x{cols} elements, got shape {tuple(w.shape)}")
    return w.detach().reshape(rows, cols).to(torch.float16).contiguous()


def _bias(b: torch.Tensor | None, n: int, device) -> torch.Tensor:
    if b is None:
        return torch.zeros(n, device=device, dtype=torch.float32)
    if b.numel() != n:
        raise ValueError(f"bias must have {n} elements, got {b.numel()}")
    return b.detach().reshape(n).to(torch.float32).contiguous()


def pack_conv_weight(conv_w: torch.Tensor) -> torch.Tensor:
    """[C, 8, 3, 3] grouped weight -> [C/8, 9, 32] int32 mma B fragments (two fp16 per lane).

    Lane l of group g, tap t holds W[8g + l//4, 2(l%4) : 2(l%4)+2, t]: output channel n = l//4,
    input channels k = 2(l%4), 2(l%4)+1, the m16n8k8 B-fragment layout.
    """
    channels = conv_w.shape[0]
    if tuple(conv_w.shape) != (channels, GROUP_WIDTH, 3, 3):
        raise ValueError(f"conv weight must be [C, {GROUP_WIDTH}, 3, 3], got {tuple(conv_w.shape)}")
    groups = channels // GROUP_WIDTH
    w = conv_w.detach().to(torch.float16).reshape(groups, 8, 8, 9).permute(0, 3, 1, 2).contiguous()
    return w.view(torch.int32).reshape(groups, 9, 32)


def _swizzle_128b(block: torch.Tensor) -> torch.Tensor:
    """[R, 64] fp16 -> the same rows with 16-byte chunk c of row r stored at chunk c ^ (r % 8):
    the 128-byte swizzle that the kernel's shared-memory matrix descriptors name."""
    rows = torch.arange(block.shape[0], device=block.device).unsqueeze(1)
    col = torch.arange(64, device=block.device).unsqueeze(0)
    src = ((col // 8) ^ (rows % 8)) * 8 + col % 8  # XOR is its own inverse
    return torch.gather(block, 1, src.expand(block.shape[0], 64))


def pack_wgmma_weights(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Weights of the wgmma FFN kernel in its shared-memory layout, as uint8.

    For each chunk j of HC = ``wgmma_chunk(C)`` hidden channels: U_j = w1[HC j : HC (j+1), :]
    as C/64 panels of [HC rows x 64 k], then V_j = w2[:, HC j : HC (j+1)] as HC/64 panels of
    [C rows x 64 k]; each panel row-major, 128 bytes per row, swizzled by ``_swizzle_128b``.
    Every U_j and V_j is then one contiguous bulk copy of 2*HC*C bytes.
    """
    hidden, channels = w1.shape
    chunk = wgmma_chunk(channels)
    if tuple(w2.shape) != (channels, hidden) or hidden % chunk or channels % 64:
        raise ValueError(f"cannot pack w1 {tuple(w1.shape)} / w2 {tuple(w2.shape)} for the wgmma kernel")
    w1, w2 = w1.to(torch.float16), w2.to(torch.float16)
    parts = []
    for j in range(0, hidden, chunk):
        u, v = w1[j : j + chunk], w2[:, j : j + chunk]
        parts += [_swizzle_128b(u[:, k : k + 64]) for k in range(0, channels, 64)]
        parts += [_swizzle_128b(v[:, k : k + 64]) for k in range(0, chunk, 64)]
    return torch.cat([t.reshape(-1) for t in parts]).view(torch.uint8)


def _extension():
    from cuda_kernels._build import load_extension

    return load_extension()


@dataclass(frozen=True)
class BlockWeights:
    """Kernel-ready weights of one FFN or ConvFirst block (fp16 matrices, fp32 biases)."""

    channels: int
    hidden: int
    w1: torch.Tensor  # [hidden, C] fp16
    b1: torch.Tensor  # [hidden] fp32
    w2: torch.Tensor  # [C, hidden] fp16
    b2: torch.Tensor  # [C] fp32
    conv_w: torch.Tensor  # [C/8, 9, 32] int32 fragments; empty for a plain FFN
    conv_b: torch.Tensor  # [C] fp32; empty for a plain FFN
    wgmma: torch.Tensor  # pack_wgmma_weights(w1, w2) for a plain FFN with C in WGMMA_CHANNELS, else empty

    @property
    def has_conv(self) -> bool:
        return self.conv_w.numel() > 0


def prepare_weights(
    w1: torch.Tensor,
    b1: torch.Tensor | None,
    w2: torch.Tensor,
    b2: torch.Tensor | None,
    conv_w: torch.Tensor | None = None,
    conv_b: torch.Tensor | None = None,
) -> BlockWeights:
    """Validate shapes and convert weights once, so that repeated calls launch only the kernel."""
    hidden = w1.shape[0]
    channels = w2.shape[0]
    _check_ffn_shapes(channels, hidden)
    device = w1.device
    if conv_w is not None:
        packed = pack_conv_weight(conv_w).to(device)
        conv_bias = _bias(conv_b, channels, device)
    else:
        packed = torch.empty(0, device=device, dtype=torch.int32)
        conv_bias = torch.empty(0, device=device, dtype=torch.float32)
    w1m, w2m = _matrix(w1, hidden, channels, "w1"), _matrix(w2, channels, hidden, "w2")
    wgmma = torch.empty(0, device=device, dtype=torch.uint8)
    if conv_w is None and channels in WGMMA_CHANNELS:
        wgmma = pack_wgmma_weights(w1m, w2m)
    return BlockWeights(
        channels, hidden, w1m, _bias(b1, hidden, device), w2m, _bias(b2, channels, device),
        packed, conv_bias, wgmma,
    )


def wgmma_available(weights: BlockWeights, device: torch.device) -> bool:
    """Whether the warpgroup-MMA FFN kernel can run these weights on this device."""
    return (
        weights.wgmma.numel() > 0
        and torch.cuda.get_device_capability(device) == (9, 0)
        and bool(_extension().has_wgmma)
    )


def run_block(
    x: torch.Tensor,
    weights: BlockWeights,
    residual: bool,
    variant: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch the fused kernel on prepared weights (FFN, or ConvFirst when weights has a conv).

    ``out``, if given, is written in place; it must have x's shape and memory format.
    """
    xp, shape = _as_pixels(x)
    out_pixels = torch.empty(0, device=x.device, dtype=torch.float16)
    if out is not None:
        out_pixels, out_shape = _as_pixels(out)
        if out_shape != shape or out_pixels.shape != xp.shape:
            raise ValueError("out must have the shape and memory format of x")
        if overlaps(out_pixels, xp):
            raise ValueError("out must not overlap x: tiles read x (with halos) while others "
                             "write their outputs")
    if xp.shape[1] != weights.channels:
        raise ValueError(f"x has {xp.shape[1]} channels, the weights expect {weights.channels}")
    height = width = 0
    if weights.has_conv:
        if shape is None:
            raise ValueError(f"convfirst_block needs a 4-D [N, C, H, W] input, got shape {tuple(x.shape)}")
        n, _, height, width = shape
        if not 1 <= width <= MAX_WIDTH:
            raise ValueError(
                f"convfirst_block supports 1 <= W <= {MAX_WIDTH} (tested H=W in {SUPPORTED_SIZES}), "
                f"got {height}x{width}"
            )
        if not 1 <= n <= MAX_BATCH:
            raise ValueError(f"convfirst_block supports batch 1..{MAX_BATCH}, got {n}")
        residual = True
    if variant in (None, WGMMA_VARIANT) and wgmma_available(weights, x.device):
        y = _extension().ffn_wgmma(xp, weights.wgmma, weights.b1, weights.b2, residual, out_pixels)
        return _from_pixels(y, shape)
    if variant == WGMMA_VARIANT:
        raise ValueError(f"the wgmma FFN kernel needs an sm_90 GPU (H100, H200), a plain FFN and C in {WGMMA_CHANNELS}")
    variant = DEFAULT_VARIANT[weights.channels] if variant is None else variant
    y = _extension().block_fusion(
        xp, weights.w1, weights.b1, weights.w2, weights.b2, weights.conv_w, weights.conv_b,
        height, width, residual, variant, out_pixels, _pdl.enabled(),
    )
    return _from_pixels(y, shape)


WEIGHT_FIELDS = ("w1", "b1", "w2", "b2", "conv_w", "conv_b", "wgmma")


@torch.library.custom_op("block_fusion::block", mutates_args=())
def block_op(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
             conv_w: torch.Tensor, conv_b: torch.Tensor, wgmma: torch.Tensor, residual: bool) -> torch.Tensor:
    """`run_block` as a PyTorch operator (default variant), so that torch.compile and the
    profiler see one opaque op per fused block: the fused modules call this."""
    weights = BlockWeights(w2.shape[0], w1.shape[0], w1, b1, w2, b2, conv_w, conv_b, wgmma)
    return run_block(x, weights, residual)


@block_op.register_fake
def _block_op_fake(x, w1, b1, w2, b2, conv_w, conv_b, wgmma, residual):
    return torch.empty_like(x)  # same shape, dtype and (channels-last) strides as x


def ffn(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor | None,
    w2: torch.Tensor,
    b2: torch.Tensor | None,
    residual: bool = False,
    variant: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Fused ``ReLU(x·w1ᵀ + b1)·w2ᵀ + b2`` (``+ x`` if residual); the hidden tensor stays on chip."""
    return run_block(x, prepare_weights(w1, b1, w2, b2), residual, variant, out)


def convfirst_block(
    x: torch.Tensor,
    conv_w: torch.Tensor,
    conv_b: torch.Tensor | None,
    w1: torch.Tensor,
    b1: torch.Tensor | None,
    w2: torch.Tensor,
    b2: torch.Tensor | None,
    variant: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Fused inference-form ConvFirst block: ``x + FFN(grouped_conv3x3(x) + conv_b)``, stride 1.

    ``x`` is ``[N, C, H, W]`` float16 in channels_last memory; raises ``ValueError`` for shapes
    the kernel does not support.
    """
    return run_block(x, prepare_weights(w1, b1, w2, b2, conv_w, conv_b), True, variant, out)
