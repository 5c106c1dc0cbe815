"""ConvFirstNet-L's C = 768 kernels (the extension ``perfmodel_convfirst_c768``): the stride-1 block at
C = 768 on Hopper warpgroup MMAs (csrc/convfirst_c768.cu, sm_90a) and the switch that also governs the
stride-2 block 384 -> 768 (csrc/convfirst_s2_c768.cu, run through `cuda_kernels.convfirst_s2`).

The stride-1 block is the inference form of ``perfmodel.zoo.ConvFirstBlock(768, alpha)``::

    out = x + ReLU((conv(x) + b_c) * U + b_U) * V + b_V

Each 64-pixel tile is computed by a cluster of two thread blocks: rank r computes hidden columns
64r .. 64r + 63 of every 128-wide chunk, sends its half of the chunk's H to its partner through
distributed shared memory, and accumulates output columns 384r .. 384r + 383 (NOTES.md "C = 768").
Activations are ``N x 768 x H x W`` float16 in ``torch.channels_last`` memory, W <= 28; hidden a
multiple of 128.

Switch: ``CUDA_KERNELS_C768`` (unset or ``0``: off, the default until the GPU tests pass; ``1`` or
``all``: both kernels; ``stride1`` / ``stride2``: that one). Off, ``replace_blocks`` leaves the blocks
in PyTorch with a reason that names the switch.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from cuda_kernels._checks import check_stride1_input
from cuda_kernels._fused import Stride1OpBlock, nhwc_rows, prepare_stride1_weights, require_sm90
from cuda_kernels.convfirst_c512 import HIDDEN_CHUNK, K_PANEL, MAX_WIDTH, SLOT_ROWS, WEIGHT_FIELDS, KernelWeights
from cuda_kernels.ops import _swizzle_128b

SWITCH = "CUDA_KERNELS_C768"
CHANNELS = 768
RANKS = 2  # thread blocks per tile (a cluster)
RANK_COLUMNS = CHANNELS // RANKS  # output columns per rank: 384
RANK_HIDDEN = HIDDEN_CHUNK // RANKS  # hidden columns of each chunk per rank: 64
SLOTS_PER_CHUNK = CHANNELS // (2 * K_PANEL) + (HIDDEN_CHUNK // K_PANEL) * (RANK_COLUMNS // SLOT_ROWS)  # 6 + 6
STAGES = 6  # ring slots
TILE_PIXELS = 64
SPLIT_H_MAX_WIDTH = 18  # up to this W the conv halo is double-buffered in the halves of H
# The kernel's shared memory (csrc/convfirst_c768.cu): X 12 panels of 8 KB, H 2 x 16 KB, the ring, 17 mbarriers,
# 1 KB alignment slack.
SMEM_BYTES = 1024 + 12 * 8192 + 2 * 16384 + STAGES * 16384 + (2 * STAGES + 5) * 8
# Variants: 0, the conv split between the ranks (each convolves 6 of the 12 64-channel slices of X and sends
# its 48 KB to the partner through distributed shared memory); 1, each rank convolves all 12 (phase A twice).
VARIANTS = (0, 1)
DEFAULT_VARIANT = 0  # measured: 342.8 vs 356.1 us at a6 7x7 (examples/measurements/convfirst_c768/)
# Variant overrides (for the device script's network runs, from its benchmarks): the stride-1 kernel's, and the
# stride-2 384 -> 768 block's (convfirst_s2.default_variant reads it).
VARIANT_SWITCH = "CUDA_KERNELS_C768_VARIANT"
S2_VARIANT_SWITCH = "CUDA_KERNELS_C768_S2_VARIANT"
S2_VARIANTS = (0, 1)


def _switched(name: str, variants: tuple[int, ...], default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) not in variants:
        raise ValueError(f"{name}={value!r}: expected one of {variants}")
    return int(value)


def default_variant() -> int:
    """The stride-1 kernel's variant: CUDA_KERNELS_C768_VARIANT, else DEFAULT_VARIANT."""
    return _switched(VARIANT_SWITCH, VARIANTS, DEFAULT_VARIANT)


def s2_default_variant() -> int:
    """The 384 -> 768 block's variant: CUDA_KERNELS_C768_S2_VARIANT, else 0 (the one measured)."""
    return _switched(S2_VARIANT_SWITCH, S2_VARIANTS, 0)
SMEM_LIMIT = 227 * 1024


def enabled(kernel: str = "stride1") -> bool:
    """Whether ``replace_blocks`` may use a C = 768 kernel: ``CUDA_KERNELS_C768`` = ``1`` (or ``all``)
    for both, a comma list of ``stride1`` / ``stride2`` for those; unset, ``0`` or empty: neither."""
    value = os.environ.get(SWITCH, "")
    parts = {part.strip().lower() for part in value.split(",")} - {""}
    return bool(parts & {"1", "all"}) or kernel in parts


def slot_order(hidden: int) -> list[tuple[str, int, int, int, int]]:
    """The weight slots in the order the kernel streams them: rank 0's stream, then rank 1's. Per chunk j
    of 128 hidden channels and rank r: ``("U", r, j, i, 0)`` for i in 0..5 (rows 0..63: the rank's 64
    hidden channels 128j + 64r .. x input channels 128i .. 128i + 63; rows 64..127: the same hidden
    channels x input channels 128i + 64 ..), then ``("V", r, j, k, q)`` for the chunk's two 64-wide k
    panels, the rank's own first (k = r: the H panel it computed, while the partner's is in flight), and
    the rank's three 128-row blocks q of output channels 384r + 128q ..."""
    order = []
    for r in range(RANKS):
        for j in range(hidden // HIDDEN_CHUNK):
            order += [("U", r, j, i, 0) for i in range(CHANNELS // (2 * K_PANEL))]
            order += [("V", r, j, k, q) for k in (r, 1 - r) for q in range(RANK_COLUMNS // SLOT_ROWS)]
    return order


def _slot_view(w1: torch.Tensor, w2: torch.Tensor, slot) -> torch.Tensor:
    """The [128, 64] block of w1 [hidden, 768] or w2 [768, hidden] that `slot` holds."""
    kind, r, j, k, q = slot
    if kind == "U":
        rows = slice(j * HIDDEN_CHUNK + r * RANK_HIDDEN, j * HIDDEN_CHUNK + (r + 1) * RANK_HIDDEN)
        return torch.cat([w1[rows, 2 * k * K_PANEL : (2 * k + 1) * K_PANEL],
                          w1[rows, (2 * k + 1) * K_PANEL : (2 * k + 2) * K_PANEL]], 0)
    row0, col = r * RANK_COLUMNS + q * SLOT_ROWS, j * HIDDEN_CHUNK + k * K_PANEL
    return w2[row0 : row0 + SLOT_ROWS, col : col + K_PANEL]


def pack_weights(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """w1 [hidden, 768] and w2 [768, hidden] as the kernel's two streams of 16 KB slots (uint8), in
    `slot_order`, each block row-major with the 128-byte swizzle."""
    hidden = w1.shape[0]
    if tuple(w1.shape) != (hidden, CHANNELS) or tuple(w2.shape) != (CHANNELS, hidden) or hidden % HIDDEN_CHUNK \
            or hidden == 0:
        raise ValueError(f"cannot pack w1 {tuple(w1.shape)} / w2 {tuple(w2.shape)} for the C = 768 kernel "
                         f"(hidden a multiple of {HIDDEN_CHUNK})")
    w1, w2 = w1.to(torch.float16), w2.to(torch.float16)
    parts = [_swizzle_128b(_slot_view(w1, w2, s).contiguous()).reshape(-1) for s in slot_order(hidden)]
    return torch.cat(parts).view(torch.uint8)


def unpack_weights(wpack: torch.Tensor, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `pack_weights`: (w1, w2) as fp16."""
    blocks = wpack.view(torch.float16).reshape(-1, SLOT_ROWS, K_PANEL)
    w1 = torch.empty(hidden, CHANNELS, dtype=torch.float16)
    w2 = torch.empty(CHANNELS, hidden, dtype=torch.float16)
    for block, slot in zip(blocks, slot_order(hidden), strict=True):
        block = _swizzle_128b(block.cpu())
        kind, r, j, k, q = slot
        if kind == "U":
            rows = slice(j * HIDDEN_CHUNK + r * RANK_HIDDEN, j * HIDDEN_CHUNK + (r + 1) * RANK_HIDDEN)
            w1[rows, 2 * k * K_PANEL : (2 * k + 1) * K_PANEL] = block[:RANK_HIDDEN]
            w1[rows, (2 * k + 1) * K_PANEL : (2 * k + 2) * K_PANEL] = block[RANK_HIDDEN:]
        else:
            _slot_view(w1, w2, slot).copy_(block)
    return w1, w2


def unsupported_shape(channels: int, hidden: int) -> str | None:
    if channels != CHANNELS:
        return f"C={channels} (this kernel is C = {CHANNELS})"
    if hidden <= 0 or hidden % HIDDEN_CHUNK:
        return f"hidden {hidden} (the C={CHANNELS} kernel needs a multiple of {HIDDEN_CHUNK})"
    return None


def prepare_weights(conv_w: torch.Tensor, conv_b: torch.Tensor | None, w1: torch.Tensor, b1: torch.Tensor | None,
                    w2: torch.Tensor, b2: torch.Tensor | None) -> KernelWeights:
    """Validate the widths and convert the folded block's weights once (ValueError if unsupported)."""
    return prepare_stride1_weights("convfirst_c768", unsupported_shape, pack_weights, KernelWeights,
                                   conv_w, conv_b, w1, b1, w2, b2)


def check_input(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None) -> None:
    """Raise ValueError for an input (or output buffer) the kernel cannot take (the device last)."""
    check_stride1_input("convfirst_c768", x, weights, out, lambda c: MAX_WIDTH, name_width=False, channels=CHANNELS)


def _extension():
    from cuda_kernels._build import load_convfirst_c768_extension

    return load_convfirst_c768_extension()


def run(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None,
        variant: int | None = None) -> torch.Tensor:
    """Launch the fused kernel; returns [N, 768, H, W] channels_last (``out`` if given)."""
    variant = default_variant() if variant is None else variant
    if variant not in VARIANTS:
        raise ValueError(f"convfirst_c768 has no variant {variant} (it has {VARIANTS})")
    check_input(x, weights, out)
    require_sm90(x, "convfirst_c768")
    n, c, h, w = x.shape
    flat = _extension().convfirst_c768(nhwc_rows(x, x, n * h * w, c), weights.conv_w, weights.conv_b,
                                       weights.wpack, weights.b1, weights.b2, h, w, variant,
                                       nhwc_rows(out, x, n * h * w, c))
    return flat.view(n, h, w, c).permute(0, 3, 1, 2)


@torch.library.custom_op("convfirst_c768::block", mutates_args=())
def block_op(x: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor, wpack: torch.Tensor, b1: torch.Tensor,
             b2: torch.Tensor) -> torch.Tensor:
    """`run` as one opaque PyTorch operator, for torch.compile and the profiler."""
    return run(x, KernelWeights(conv_w, conv_b, wpack, b1, b2))


@block_op.register_fake
def _block_op_fake(x, conv_w, conv_b, wpack, b1, b2):
    return torch.empty_like(x)


def takes(block: nn.Module) -> bool:
    """Whether `replace_blocks` sends this stride-1 ConvFirst block here: every C = 768 block (switched
    off, it falls back with the switch's name; no other kernel has C = 768)."""
    return getattr(block, "channels", 0) == CHANNELS and getattr(block, "stride", 1) == 1


class FusedConvFirstC768(Stride1OpBlock):
    """Inference-form ``perfmodel.zoo.ConvFirstBlock(768, alpha)`` (stride 1) in one kernel (two-CTA clusters)."""

    WEIGHT_FIELDS, Weights, op, prepare = WEIGHT_FIELDS, KernelWeights, block_op, staticmethod(prepare_weights)

    @staticmethod
    def unsupported(block: nn.Module) -> str | None:
        """Why the kernel cannot (or may not yet) run this inference-form block, or None."""
        reason = Stride1OpBlock.form_reason(block, unsupported_shape)
        if reason:
            return reason
        if not enabled("stride1"):
            return (f"C={CHANNELS}: its kernel (cuda_kernels/convfirst_c768.py) is off until its GPU tests pass; "
                    f"set {SWITCH}=1 (or stride1) to use it")
        if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
            return f"C={CHANNELS}: its kernel needs compute capability 9.0 (H100, H200)"
        return None
