"""The stride-1 ConvFirst block in one kernel on Hopper warpgroup MMAs (csrc/convfirst_c512.cu,
sm_90a; written for C = 512, templated on the channel count: C in 64, 128, 256, 384, 512): weight packing,
host checks, the ``convfirst_c512::block`` operator and the drop-in module.

The block is the inference form (BatchNorm folded) of ``perfmodel.zoo.ConvFirstBlock(C, alpha)``::

    out = x + ReLU((conv(x) + b_c) * U + b_U) * V + b_V

conv: grouped 3x3, group width 8, stride 1, zero padding. Activations are ``N x C x H x W``
float16 in ``torch.channels_last`` memory, W <= 28 (W <= 56 at C = 64); hidden = alpha * C a multiple of 128.

Two switches:

- ``CUDA_KERNELS_C512`` (unset or ``1``: on, the default since the GPU tests passed; ``stride1``
  or ``stride2``: only that kernel; ``0``: off): ``replace_blocks`` swaps a C = 512 block for
  `FusedConvFirstC512`; switched off it stays in PyTorch with that reason (no other kernel has
  C = 512).
- ``CUDA_KERNELS_WGMMA_CONVFIRST=256`` (a comma list of widths among 64, 128 and 256; ``1`` or ``all``
  for all three, ``0`` for none): stride-1 blocks of those widths run here instead of on the mma.sync
  kernel (`cuda_kernels.FusedConvFirstBlock`), which keeps every other width, and these ones where
  this kernel cannot run (W > 28, or 56 at C = 64, is refused at the call; off compute capability 9.0 the swap
  keeps the mma.sync kernel). `DEFAULT_WGMMA_WIDTHS` applies when the variable is unset: C = 64, 128
  and 256, each on by default since its GPU tests passed on the H200 and it beat the mma.sync kernel.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

import torch
from torch import nn

from cuda_kernels import _pdl, _switches
from cuda_kernels._checks import check_stride1_input
from cuda_kernels._fused import Stride1OpBlock, nhwc_rows, prepare_stride1_weights, require_sm90
from cuda_kernels.ops import _swizzle_128b

ENV_SWITCH = "CUDA_KERNELS_C512"
WGMMA_SWITCH = "CUDA_KERNELS_WGMMA_CONVFIRST"
CHANNELS = 512  # the width no other kernel serves (CUDA_KERNELS_C512)
SUPPORTED_CHANNELS = (64, 128, 256, 384, 512)  # the kernel's template instances
# C = 384 (ConvFirstNet-L's stage 2; no other kernel has it): 192 output columns per warpgroup as one
# n128 and one n64 accumulator (V block 1 split by rows); variants 0, 1 and 4. On by default since its
# GPU tests passed on the H200 (examples/measurements/convfirst_wgmma_v4/); CUDA_KERNELS_C384=0 turns it off.
C384 = 384
C384_SWITCH = "CUDA_KERNELS_C384"
WGMMA_WIDTHS = (64, 128, 256)  # widths the mma.sync kernel also serves: CUDA_KERNELS_WGMMA_CONVFIRST picks
# C = 256 on since its GPU tests passed (H200, examples/measurements/convfirst_c256/: 87/87 with C = 512
# and 128) and it ran 1.74x the mma.sync kernel; C = 128 too since variant 2 ran C=128 a6 28x28 in
# 158.8 us against the mma.sync kernel's 177.2 (1.12x, examples/measurements/convfirst_wgmma_v4/)
# C = 64 (ConvFirstNet-H200 stage 0, 56x56; stage 2 split by k on register A operands, NOTES.md "C = 64 on
# the wgmma kernel") too since its 49 GPU tests passed and variant 3 ran C=64 a6 56x56 in 176.9 us against
# the mma.sync kernel's 212.3 (1.20x, examples/measurements/convfirst_c64/)
DEFAULT_WGMMA_WIDTHS: tuple[int, ...] = (64, 128, 256)
HIDDEN_CHUNK = 128  # hidden must be a multiple (alpha 2, 4, 6, ... at C >= 256; 2, 3, 4, ... at 128)
MAX_WIDTH = 28  # the conv halo of a 64-pixel tile, (63 // W + 4) * W pixels, fits in the kernel's 255
# C = 64 loads only the window of pixels its taps read, p0 - W - 1 .. p0 + 64 + W, at its place in the halo
# rows: every halo index is below 3 W + 64 (<= 255 up to W = 63; built and tested to 56).
MAX_WIDTH_C64 = 56
HALO_PIXELS = 255  # the halo aliases the two H buffers (32 KB), less one zero pixel
TILE_PIXELS = 64
SLOT_ROWS = 128  # a weight slot is one 128-row x 64-column fp16 panel (16 KB), 128-byte swizzled
K_PANEL = 64
# Variants (csrc/convfirst_c512.cu): 0, every thread block streams every weight slot from L2; 1,
# clusters of two thread blocks multicast each slot into both (half the L2 weight traffic); 2 (C <= 256),
# variant 0 with the conv halo double-buffered (slice s + 1 loads while slice s computes). Measured on
# the H200 (examples/measurements/convfirst_c256/): 1 lost 3-15% to 0 at every width; 2 won 5.4% over 0
# at C=256 a4 14x14 (86.8 vs 91.8 us) and passed its GPU tests, so it is the default where it exists.
# 3 (C <= 256): persistent, one thread block per SM walking its tiles, a fourth warpgroup computing the
# next tile's conv while the consumers run the current tile's FFN (NOTES.md "Variant 3"). Its GPU tests
# passed once its conv warpgroup's register raise was fixed (18/18, H200), and it is the fastest at every
# width it has: C=256 a6 14x14 102.4 us (variant 2: 111.7), C=128 a6 28x28 136.6 (160.6), C=64 a6 56x56
# 176.9 (256.6 / 260.3) (examples/measurements/convfirst_wgmma_v4/v3fix/, convfirst_c64/): the default
# at C <= 256.
# 4 (every width, W <= 18): variant 0 with the halo double-buffered in the two halves of the idle H
# buffers (no extra shared memory, so C = 384 and 512 have it too). Its GPU tests passed (H200,
# examples/measurements/convfirst_wgmma_v4/): C=512 a6 7x7 106.7 us (variant 0: 109.5), C=384 a6 14x14
# 202.8 (209.6), C=256 a6 14x14 111.3 (variant 2: 111.6, a tie), so it is the default at C >= 384, W <= 18.
# 5 (C = 64 and 128; NOTES.md "Variant 5"): variant 3 with the conv warpgroup's halo prefetched one unit
# (tile, 64-channel slice) ahead into two buffers, each holding the tile's window (`shifted_window`), and at
# C = 128 the epilogue's shortcut loaded at the tile's start. The default at C = 128 (131.4 vs 135.0 us, H200);
# no gain at C = 64.
# 6 (C = 64, hidden <= 512; NOTES.md "Variant 6"): persistent as 3, but each consumer warpgroup runs its own tile
# (the CTA's local tile k on warpgroup k % 2: all 128 hidden channels of every chunk, no partial-sum exchange, the
# chunk pipelined in 64-wide halves), two X buffers with their own x_full / x_empty, the conv warpgroup (variant 5's
# prefetched stream) computing every tile. Resident weights only: `run` falls back to variant 3 from the switch
# where hidden > 512 (alpha 10, 12), and refuses an explicit variant 6 there. The default at C = 64 (162.6 vs 177.3 us
# at a6 56x56, H200).
# 7 (C = 128 and 256; NOTES.md "Variant 7"): persistent, 3 warpgroups (two consumers, the producer), the FFN split by k:
# each consumer warpgroup computes stage 1 for its 64 of every chunk's 128 hidden channels, keeps H in registers and runs
# stage 2 for all C output columns from them (m64nCk16 with A from registers): no H in shared memory, no barrier between
# the warpgroups per chunk; the two partial sums are added once per tile in X and the 32 KB after it; the conv is the
# consumers' own, its halo prefetched one (tile, slice) unit ahead into two buffers (`ksplit_units`). Correct on the
# H200 (22 GPU tests) but no faster (C = 256 a6 101.8 vs 103.4 us, a4 81.3 vs 78.4, C = 128 136.8 vs 136.5): off
# unless CUDA_KERNELS_C512_VARIANT=7 or 256:7 selects it.
# 8 (C = 256; NOTES.md "What binds the C = 256 block", "Next: variant 8"): variant 7's FFN without the conv: a separate conv
# kernel (one CTA per tile and 64-channel slice, variant 7's arithmetic) writes X = conv(x) + b_c into a scratch of whole
# tiles in the fused kernel's swizzled panel layout (`conv8_scratch_bytes`, `conv8_scratch_rows`), the fused kernel loads
# each tile's X by one bulk copy into two X buffers, and the epilogue reads the shortcut rows (copied into the tile's dead
# X buffer by the producer warpgroup's idle warps) and b2 from shared memory; `run` allocates the scratch (or takes one,
# ``xconv``). Its chunk loop on constant slots with the descriptors in uniform registers (NOTES.md "Session 9"): C=256 a6
# 14x14 83.6 us against variant 3's 102.7 in the same call, output bit for bit variant 7's, 30/30 GPU tests (H200,
# examples/measurements/convfirst_c512_v8/loop/): the default at C = 256 (CUDA_KERNELS_C512_VARIANT=256:3 for the old).
# Variant 8's conv kernel, version b (NOTES.md "Variant 8's conv kernel, version b"): one CTA per tile for all four
# 64-channel slices (the tile's window by cp.async into four regions, one commit group per slice; the lane's nine tap
# addresses computed once per tile and offset per slice; the taps outer so a warp's four m16n8k8 chains interleave),
# the same X bit for bit. Not yet run on a GPU: off unless CUDA_KERNELS_CONV8B=1.
CONV8B_SWITCH = "CUDA_KERNELS_CONV8B"
CONV8B_SMEM = 4 * (132 * 128 + 128)  # four regions: a slice's shifted window (variant 7's 132 pixels) + its zero pixel
CONV8B_COPY_STEPS = 4  # 32 window pixels per step and thread row: 128 >= a window's 2 W + 66 (122 at W = 28)
VARIANTS = (0, 1, 2, 3, 4, 5, 6, 7, 8)
PREFETCH_WIDTHS = (64, 128)  # the widths with variant 5
PINGPONG_WIDTHS = (64,)  # the widths with variant 6
KSPLIT_WIDTHS = (128, 256)  # the widths with variant 7
CONV8_WIDTHS = (256,)  # the widths with variant 8
CONV8_BARRIERS = 22  # variant 8: full[8], empty[8], x_full[2], x_empty[2], x_dead, sc_full
KSPLIT_HALO_PIXELS = 132  # variant 7: pixels per halo buffer (a tile's shifted window is <= 2 W + 73 = 129 at W = 28)
PINGPONG_MAX_HIDDEN = 512  # variant 6: every weight slot (2 per 128-wide chunk) resident in the 8-slot ring
PREFETCH_HALO_PIXELS = 192  # variant 5: pixels per halo buffer (a tile's shifted window is <= 2 W + 73)
DEFAULT_VARIANT = 0  # at C = 512
# C = 64 has variants 0, 2, 3, 5 (one 64-channel slice: variant 2 overlaps nothing and runs as 0).
SPLIT_H_MAX_WIDTH = 18  # variant 4: the halo of a 64-pixel tile, (63 // W + 4) * W pixels, fits in 127
# CUDA_KERNELS_C512_VARIANT overrides default_variant: one variant for every width that has it ("3"), or
# per width ("256:3,128:3,512:4"); a variant the width lacks (or, for 4, a W > 18 at the call) is skipped.
VARIANT_SWITCH = "CUDA_KERNELS_C512_VARIANT"


def switched_variant(channels: int) -> int | None:
    """The variant CUDA_KERNELS_C512_VARIANT names for this width, or None."""
    value = os.environ.get(VARIANT_SWITCH, "").strip()
    if not value:
        return None
    chosen = None
    for part in value.split(","):
        width, _, variant = part.strip().rpartition(":")
        if not variant.isdigit() or int(variant) not in VARIANTS or (width and not width.isdigit()):
            raise ValueError(f"{VARIANT_SWITCH}={value!r}: expected a variant in {VARIANTS} or a list C:variant")
        if not width or int(width) == channels:
            chosen = int(variant)
    return chosen if chosen is not None and chosen in variants(channels) else None


def default_variant(channels: int, width: int | None = None) -> int:
    """The variant `run` uses: CUDA_KERNELS_C512_VARIANT's where it applies (for 4: W <= 18), else the
    fastest measured on the H200: 6 at C = 64 (162.6 vs variant 3's 177.3 us at a6 56x56, 142.7 vs 155.0 at a4;
    `run` falls back to 3 where the hidden width exceeds its resident weights, `pingpong_fallback`), 5 at
    C = 128 (131.4 vs 135.0 us at a6 28x28, bit-identical output), 8 at C = 256 (83.6 vs variant 3's 102.7 us at a6
    14x14, the same call), 4 above where W <= 18 (known), 0 otherwise."""
    switched = switched_variant(channels)
    if switched is not None and (switched != 4 or width is None or width <= SPLIT_H_MAX_WIDTH):
        return switched
    if channels == 64:
        return 6
    if channels == 128:
        return 5
    if channels == 256:
        return 8
    if channels < 256:
        return 3
    return 4 if width is not None and width <= SPLIT_H_MAX_WIDTH else DEFAULT_VARIANT


def variants(channels: int) -> tuple[int, ...]:
    """The variants the kernel has at this width (2 and 3 need the shared memory C = 384 / 512 fill; C = 64
    has 0, 2, 3, 5 and 6: no multicast, and variant 4's halves are for W <= 18; 5 is C = 64 and 128 only: C = 256's
    X does not fit beside its two halo buffers; 6 is C = 64 only; 7 is C = 128 and 256: its stage 2 is m64nCk16, and
    C = 384 / 512's accumulator would not fit the registers; 8 is C = 256 only, the width it was designed for)."""
    if channels == 64:
        return (0, 2, 3, 5, 6)
    if channels == 128:
        return (0, 1, 2, 3, 4, 5, 7)
    if channels == 256:
        return (0, 1, 2, 3, 4, 7, 8)
    return (0, 1, 4)


SMEM_LIMIT = 227 * 1024  # the H200's opt-in shared memory per block (232,448 B)


def smem_bytes(channels: int, variant: int = 0) -> int:
    """Dynamic shared memory per block of the instance (csrc/convfirst_c512.cu, Shape / Shape3; 0 where
    the width has no such variant): X (C / 64 panels of 8 KB), the two H buffers (32 KB), the 8-slot ring
    (128 KB), variants 2 and 3 a second 32 KB halo after the ring, 1024 B of alignment slack, 16 mbarriers,
    and variant 3 its two X barriers; variant 5 (Shape5) instead of the 32 KB halo two halo buffers of
    `PREFETCH_HALO_PIXELS` pixels and one zero pixel (222,480 B at C = 64, 230,672 B at C = 128); variant 6 (Shape6)
    two X buffers, the ring, variant 5's halo buffers and zero pixel, 8 full and 4 X barriers, no H (197,856 B); variant 7
    (Shape7) X and the exchange's other half (2 x C / 64 panels: the 64 x C fp32 partial sums), the ring, two halo buffers
    of `KSPLIT_HALO_PIXELS` pixels, one zero pixel, 16 ring barriers (231,680 B at C = 256, 198,912 B at C = 128); variant
    8 (Shape8, C = 256) two X buffers (2 x 32 KB), the exchange (32 KB, two rounds), the ring, b2 (C fp32), `CONV8_BARRIERS`
    barriers (231,600 B). The extension's ``smem_bytes`` must agree (GPU test)."""
    if channels not in SUPPORTED_CHANNELS or variant not in variants(channels):
        return 0
    if variant == 8:
        x_tile = channels // K_PANEL * TILE_PIXELS * 128
        return 1024 + 2 * x_tile + x_tile + 8 * 16384 + 4 * channels + 8 * CONV8_BARRIERS
    if variant == 7:
        body = 2 * (channels // K_PANEL) * TILE_PIXELS * 128 + 8 * 16384 + 2 * KSPLIT_HALO_PIXELS * 128 + 128
        return 1024 + body + 2 * 8 * 8
    if variant == 5:
        body = channels // K_PANEL * TILE_PIXELS * 128 + 2 * 16384 + 8 * 16384 + 2 * PREFETCH_HALO_PIXELS * 128 + 128
        return 1024 + body + 2 * 8 * 8 + 16
    if variant == 6:  # two X buffers, the ring, variant 5's two halo buffers and zero pixel; 8 full + 4 X barriers
        body = 2 * TILE_PIXELS * 128 + 8 * 16384 + 2 * PREFETCH_HALO_PIXELS * 128 + 128
        return 1024 + body + 8 * 8 + 4 * 8
    body = channels // K_PANEL * TILE_PIXELS * 128 + 2 * 16384 + 8 * 16384 + (32768 if variant in (2, 3) else 0)
    return 1024 + body + 2 * 8 * 8 + (16 if variant == 3 else 0)


def max_width(channels: int) -> int:
    """The widest image the instance for `channels` takes (its conv halo must fit in 255 pixels)."""
    return MAX_WIDTH_C64 if channels == 64 else MAX_WIDTH


def halo_window(p0: int, width: int, pixels: int) -> tuple[int, int, int]:
    """The halo of the 64-pixel tile at p0 as the kernel indexes it: (row_lo, first, end), halo index =
    pixel - row_lo * W. Widths other than 64 load whole rows row_lo .. row_hi (first = 0, end = rows x W);
    C = 64 only the window p0 - W - 1 .. p0 + 64 + W within them (conv_phase / conv_tile)."""
    rows_total = pixels // width
    p_last = min(p0 + TILE_PIXELS, pixels) - 1
    row_lo, row_hi = max(p0 // width - 1, 0), min(p_last // width + 1, rows_total - 1)
    first = max(p0 - width - 1, row_lo * width) - row_lo * width
    end = min(p0 + TILE_PIXELS + width + 1, (row_hi + 1) * width) - row_lo * width
    return row_lo, first, end


def shifted_window(p0: int, width: int, pixels: int) -> tuple[int, int, int, int]:
    """Variant 5's halo buffer for the tile at p0 (conv_stream): (row_lo, shift, first, end). It loads the
    window halo indices first .. end - 1 (`halo_window`, at every width) and addresses the buffer from
    buffer - 128 * shift, shift = first rounded down to a multiple of 8 (the 128-byte swizzle's row % 8 stays):
    halo index q lives at pixel q - shift of the buffer, which must be below `PREFETCH_HALO_PIXELS`."""
    row_lo, first, end = halo_window(p0, width, pixels)
    return row_lo, first & ~7, first, end


def prefetch_units(my_tiles: int, channels: int) -> list[tuple[int, int, int]]:
    """Variant 5's conv warpgroup stream for a CTA with `my_tiles` tiles: (tile k, slice s, buffer) for
    tiles 1 .. my_tiles - 1 (tile 0's conv is the consumers'), unit u in buffer u % 2; unit u + 1 is issued
    while unit u computes."""
    slices = channels // K_PANEL
    return [(1 + u // slices, u % slices, u % 2) for u in range(max(my_tiles - 1, 0) * slices)]


def ksplit_units(my_tiles: int, channels: int) -> list[tuple[int, int, int]]:
    """Variant 7's conv stream for a CTA with `my_tiles` tiles: (tile k, slice s, buffer) for every tile (the consumers
    compute each tile's conv themselves), unit u = k C/64 + s in halo buffer u % 2; unit u + 1 is issued once every warp
    has passed unit u's barrier (so the next tile's first slice loads during this tile's FFN)."""
    slices = channels // K_PANEL
    return [(u // slices, u % slices, u % 2) for u in range(max(my_tiles, 0) * slices)]


def conv8b_enabled() -> bool:
    """CUDA_KERNELS_CONV8B as the environment sets it now: variant 8's conv kernel version b (default off)."""
    return _switches.flag(CONV8B_SWITCH, False)


def conv8_scratch_bytes(pixels: int, channels: int = 256) -> int:
    """Variant 8's conv scratch for `pixels` pixels: whole 64-pixel tiles, each C / 64 swizzled 8 KB panels (the rows past
    the last pixel hold b_c, as variant 7's X)."""
    return -(-pixels // TILE_PIXELS) * (channels // K_PANEL) * TILE_PIXELS * 128


def conv8_scratch_layout(rows: torch.Tensor) -> torch.Tensor:
    """X [P, C] fp16 rows as variant 8's conv kernel stores them: P padded to whole tiles (pad rows zero here), tile t,
    panel s (channels 64 s ..) at byte (t C / 64 + s) 8 KB, each panel 64 rows x 128 bytes with the 128-byte swizzle
    (`ops._swizzle_128b`). Returns the flat fp16 tensor (`conv8_scratch_bytes` / 2 elements)."""
    pixels, channels = rows.shape
    tiles = -(-pixels // TILE_PIXELS)
    padded = rows.new_zeros(tiles * TILE_PIXELS, channels)
    padded[:pixels] = rows
    panels = padded.reshape(tiles, TILE_PIXELS, channels // K_PANEL, K_PANEL).permute(0, 2, 1, 3)
    return _swizzle_128b(panels.reshape(-1, K_PANEL)).reshape(-1)


def conv8_scratch_rows(scratch: torch.Tensor, pixels: int, channels: int = 256) -> torch.Tensor:
    """The inverse of `conv8_scratch_layout` (the swizzle is its own inverse): X [pixels, C] from the scratch (uint8 or
    fp16, at least `conv8_scratch_bytes` bytes)."""
    flat = scratch.reshape(-1)
    flat = flat.view(torch.float16) if flat.dtype == torch.uint8 else flat
    tiles = -(-pixels // TILE_PIXELS)
    panels = _swizzle_128b(flat[: tiles * channels * TILE_PIXELS].reshape(-1, K_PANEL))
    rows = panels.reshape(tiles, channels // K_PANEL, TILE_PIXELS, K_PANEL).permute(0, 2, 1, 3)
    return rows.reshape(tiles * TILE_PIXELS, channels)[:pixels]


def check_conv8_scratch(xconv: torch.Tensor, x: torch.Tensor, out: torch.Tensor | None = None) -> None:
    """Raise ValueError for a variant-8 scratch the kernel cannot take: uint8, contiguous, at least
    `conv8_scratch_bytes` of x's pixels, 16-byte aligned, not overlapping x or out, on x's device (checked last)."""
    n, c, h, w = x.shape
    need = conv8_scratch_bytes(n * h * w, c)
    if xconv.dtype != torch.uint8 or not xconv.is_contiguous():
        raise ValueError(f"convfirst_c512 variant 8: xconv must be a contiguous uint8 tensor, got {xconv.dtype}")
    if xconv.numel() < need:
        raise ValueError(f"convfirst_c512 variant 8: xconv has {xconv.numel()} bytes, needs {need}")
    if xconv.data_ptr() % 16:
        raise ValueError("convfirst_c512 variant 8: xconv must be 16-byte aligned")
    for other, name in ((x, "x"), (out, "out")):
        if other is not None and other.numel() and other.device == xconv.device:
            lo, hi = other.data_ptr(), other.data_ptr() + other.numel() * other.element_size()
            if xconv.data_ptr() < hi and lo < xconv.data_ptr() + xconv.numel():
                raise ValueError(f"convfirst_c512 variant 8: xconv must not overlap {name}")
    if xconv.device != x.device:
        raise ValueError(f"convfirst_c512 variant 8: xconv is on {xconv.device}, x on {x.device}")


def ksplit_exchange(channels: int) -> dict[str, int]:
    """Variant 7's exchange of partial sums, per consumer warpgroup: float4s given per thread (the C / 2 columns it does
    not keep: C / 16 float4s), bytes per warpgroup, and the area it uses (X and the same size after it)."""
    per_thread = channels // 16
    return {"float4_per_thread": per_thread, "bytes_per_warpgroup": per_thread * 16 * 128,
            "area": 2 * (channels // K_PANEL) * TILE_PIXELS * 128}


def pingpong_tiles(tiles: int, sms: int) -> list[tuple[list[int], list[int]]]:
    """Variant 6's schedule: variant 3's thread blocks and tiles (`persistent_tiles`), block b's local tile k on
    consumer warpgroup k % 2 (X buffer k % 2): per block (warpgroup 0's tiles, warpgroup 1's tiles)."""
    return [(mine[0::2], mine[1::2]) for mine in persistent_tiles(tiles, sms)]


def pingpong_fallback(variant: int, hidden: int) -> int:
    """The variant `run` launches for `variant` chosen by default or by the switch: 3 instead of 6 where hidden >
    `PINGPONG_MAX_HIDDEN` (variant 6 keeps every weight slot resident)."""
    return 3 if variant == 6 and hidden > PINGPONG_MAX_HIDDEN else variant


def persistent_tiles(tiles: int, sms: int) -> list[list[int]]:
    """Variant 3's schedule: min(tiles, sms) thread blocks, block b taking tiles b, b + grid, ...
    (csrc/convfirst_c512.cu, launch_persistent and the kernel's `my_tiles`)."""
    grid = min(tiles, sms)
    my_tiles = [(tiles - 1 - b) // grid + 1 if b < tiles else 0 for b in range(grid)]
    return [[b + k * grid for k in range(my_tiles[b])] for b in range(grid)]


def enabled(kernel: str = "stride1") -> bool:
    """Whether ``replace_blocks`` may use a C = 512 kernel: both when ``CUDA_KERNELS_C512`` is unset
    or ``1``; a comma list of ``stride1`` (this module's kernel) and ``stride2`` (the 256 -> 512
    stride-2 block, convfirst_s2) only those named; ``0`` neither."""
    value = os.environ.get(ENV_SWITCH)
    if value is None:  # on by default: both kernels passed their GPU tests (311/311, H200)
        return True
    parts = {part.strip() for part in value.split(",")}
    return "1" in parts or kernel in parts


def wgmma_widths() -> tuple[int, ...]:
    """The widths below 512 that `replace_blocks` sends to this kernel: ``CUDA_KERNELS_WGMMA_CONVFIRST``
    (``256``, ``64,128,256``, ``1`` / ``all`` for every one of `WGMMA_WIDTHS`, ``0`` for none), else
    `DEFAULT_WGMMA_WIDTHS`."""
    value = os.environ.get(WGMMA_SWITCH)
    if value is None:
        return DEFAULT_WGMMA_WIDTHS
    parts = {part.strip().lower() for part in value.split(",")} - {""}
    if parts & {"1", "all"}:
        return WGMMA_WIDTHS
    return tuple(c for c in WGMMA_WIDTHS if str(c) in parts)


def c384_enabled() -> bool:
    """Whether `replace_blocks` may send C = 384 blocks here: unless ``CUDA_KERNELS_C384=0`` (on by default
    since its GPU tests passed)."""
    return _switches.flag(C384_SWITCH, True)


def takes(block: nn.Module) -> bool:
    """Whether `replace_blocks` sends this stride-1 ConvFirst block here (rather than to the
    mma.sync kernel): C = 512 always (no other kernel has it; off, it falls back with the switch's
    name), a width in `wgmma_widths` when the kernel can run it."""
    channels = getattr(block, "channels", 0)
    if channels == CHANNELS:
        return True
    if channels == C384:  # switched off, the block goes to the mma.sync kernel, which gives its reason
        return c384_enabled() and FusedConvFirstC512.unsupported(block) is None
    return channels in wgmma_widths() and FusedConvFirstC512.unsupported(block) is None


def unsupported_shape(channels: int, hidden: int) -> str | None:
    """Why the kernel cannot run these widths, or None."""
    if channels not in SUPPORTED_CHANNELS:
        return f"C={channels} (this kernel is C in {SUPPORTED_CHANNELS})"
    if hidden <= 0 or hidden % HIDDEN_CHUNK:
        return f"hidden {hidden} (the C={channels} kernel needs a multiple of {HIDDEN_CHUNK})"
    return None


def slots_per_chunk(channels: int) -> int:
    """C / 64 U slots, then C / 128 V slots for each of the chunk's two 64-wide k panels; at C = 64 one U
    slot and one V slot (the chunk's two 64 x 64 panels of V stacked)."""
    if channels == 64:
        return 2
    return channels // K_PANEL + (HIDDEN_CHUNK // K_PANEL) * (channels // SLOT_ROWS)


def slot_order(hidden: int, channels: int = CHANNELS) -> list[tuple[str, int, int, int]]:
    """The weight slots in the order the kernel reads them: per chunk j of 128 hidden channels,
    ``("U", j, k, 0)`` for the C / 64 expand panels (rows = the chunk's hidden channels, columns =
    input channels 64k..64k+63), then ``("V", j, k, q)`` for each of the chunk's two 64-wide k
    panels and the C / 128 row blocks q of the project weight (rows = output channels
    128q..128q+127). Warpgroup w of the kernel uses rows 64w.. of every U slot; of V, blocks
    2w, 2w+1 at C = 512, block w at C = 256, and rows 64w.. of the one block at C = 128.
    C = 64: ``("U", j, 0, 0)``, ``("V", j, 0, 0)`` per chunk, the V slot holding V[:, 128j .. 128j + 63] in
    rows 0..63 and V[:, 128j + 64 ..] in rows 64..127: warpgroup w reads rows 64w.. (its k half)."""
    order = []
    if channels == 64:
        for j in range(hidden // HIDDEN_CHUNK):
            order += [("U", j, 0, 0), ("V", j, 0, 0)]
        return order
    for j in range(hidden // HIDDEN_CHUNK):
        order += [("U", j, k, 0) for k in range(channels // K_PANEL)]
        order += [("V", j, k, q) for k in range(HIDDEN_CHUNK // K_PANEL) for q in range(channels // SLOT_ROWS)]
    return order


def _slot_view(w1: torch.Tensor, w2: torch.Tensor, slot: tuple[str, int, int, int]) -> list[torch.Tensor]:
    """The views of w1 [hidden, C] or w2 [C, hidden] that `slot` holds, stacked by rows into [128, 64]:
    one [128, 64] block, or at C = 64 a V slot's two [64, 64] k panels."""
    kind, j, k, q = slot
    if kind == "U":
        return [w1[j * HIDDEN_CHUNK : (j + 1) * HIDDEN_CHUNK, k * K_PANEL : (k + 1) * K_PANEL]]
    col = j * HIDDEN_CHUNK + k * K_PANEL
    if w2.shape[0] == 64:
        return [w2[:, col : col + K_PANEL], w2[:, col + K_PANEL : col + 2 * K_PANEL]]
    return [w2[q * SLOT_ROWS : (q + 1) * SLOT_ROWS, col : col + K_PANEL]]


def pack_weights(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """w1 [hidden, C] and w2 [C, hidden] as the kernel's stream of 16 KB slots (uint8), in
    `slot_order`, each block stored row-major with the 128-byte swizzle (`ops._swizzle_128b`)."""
    hidden, channels = w1.shape[0], w1.shape[-1]
    if channels not in SUPPORTED_CHANNELS or tuple(w1.shape) != (hidden, channels) or \
            tuple(w2.shape) != (channels, hidden) or hidden % HIDDEN_CHUNK:
        raise ValueError(f"cannot pack w1 {tuple(w1.shape)} / w2 {tuple(w2.shape)} for the kernel "
                         f"(C in {SUPPORTED_CHANNELS}, hidden a multiple of {HIDDEN_CHUNK})")
    w1, w2 = w1.to(torch.float16), w2.to(torch.float16)
    parts = [_swizzle_128b(torch.cat(_slot_view(w1, w2, s), 0).contiguous()).reshape(-1)
             for s in slot_order(hidden, channels)]
    return torch.cat(parts).view(torch.uint8)


def unpack_weights(wpack: torch.Tensor, hidden: int, channels: int = CHANNELS) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `pack_weights` (the swizzle is its own inverse): (w1, w2) as fp16."""
    blocks = wpack.view(torch.float16).reshape(-1, SLOT_ROWS, K_PANEL)
    w1 = torch.empty(hidden, channels, dtype=torch.float16, device=wpack.device)
    w2 = torch.empty(channels, hidden, dtype=torch.float16, device=wpack.device)
    for block, slot in zip(blocks, slot_order(hidden, channels), strict=True):
        plain, row = _swizzle_128b(block), 0
        for view in _slot_view(w1, w2, slot):
            view.copy_(plain[row : row + view.shape[0]])
            row += view.shape[0]
    return w1, w2


@dataclass(frozen=True)
class KernelWeights:
    """The kernel's operands: the conv as mma fragments, the FFN as packed slots, fp32 biases."""

    conv_w: torch.Tensor  # [C / 8, 9, 32] int32 (ops.pack_conv_weight)
    conv_b: torch.Tensor  # [C] fp32
    wpack: torch.Tensor  # pack_weights(w1, w2), uint8
    b1: torch.Tensor  # [hidden] fp32
    b2: torch.Tensor  # [C] fp32

    @property
    def hidden(self) -> int:
        return self.b1.numel()

    @property
    def channels(self) -> int:
        return self.b2.numel()


def prepare_weights(conv_w: torch.Tensor, conv_b: torch.Tensor | None, w1: torch.Tensor, b1: torch.Tensor | None,
                    w2: torch.Tensor, b2: torch.Tensor | None) -> KernelWeights:
    """Validate the widths and convert the folded block's weights once (ValueError if unsupported)."""
    return prepare_stride1_weights("convfirst_c512", unsupported_shape, pack_weights, KernelWeights,
                                   conv_w, conv_b, w1, b1, w2, b2)


def check_input(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None) -> None:
    """Raise ValueError for an input (or output buffer) the kernel cannot take. The device is
    checked last, so that every other rule can be checked on CPU tensors."""
    check_stride1_input("convfirst_c512", x, weights, out, max_width)


def _extension():
    from cuda_kernels._build import load_convfirst_c512_extension

    return load_convfirst_c512_extension()


def run(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None,
        variant: int | None = None, xconv: torch.Tensor | None = None) -> torch.Tensor:
    """Launch the fused kernel; returns [N, C, H, W] channels_last (``out`` if given). Variant 8 launches its conv
    kernel and the fused kernel, the conv's X in ``xconv`` (uint8, `conv8_scratch_bytes`; allocated when None)."""
    if variant is None:
        variant = pingpong_fallback(default_variant(weights.channels, x.shape[-1]), weights.hidden)
    elif variant == 6 and weights.hidden > PINGPONG_MAX_HIDDEN:
        raise ValueError(f"convfirst_c512 variant 6 needs hidden <= {PINGPONG_MAX_HIDDEN} (resident weights), "
                         f"got {weights.hidden}")
    if variant not in variants(weights.channels):
        raise ValueError(f"convfirst_c512 has no variant {variant} at C={weights.channels} "
                         f"(it has {variants(weights.channels)})")
    if variant == 4 and x.dim() == 4 and x.shape[-1] > SPLIT_H_MAX_WIDTH:
        raise ValueError(f"convfirst_c512 variant 4 needs W <= {SPLIT_H_MAX_WIDTH}, got {x.shape[-1]}")
    if xconv is not None and variant != 8:
        raise ValueError(f"convfirst_c512: xconv is variant 8's scratch, not variant {variant}'s")
    if xconv is not None and x.dim() == 4:  # before check_input's device check (last), so CPU tensors test it
        check_conv8_scratch(xconv, x, out)
    check_input(x, weights, out)
    require_sm90(x, "convfirst_c512")
    n, c, h, w = x.shape
    if variant == 8:
        if xconv is None:
            xconv = torch.empty(conv8_scratch_bytes(n * h * w, c), dtype=torch.uint8, device=x.device)
        flat = _extension().convfirst_c512_v8(nhwc_rows(x, x, n * h * w, c), weights.conv_w, weights.conv_b,
                                              weights.wpack, weights.b1, weights.b2, h, w,
                                              nhwc_rows(out, x, n * h * w, c), xconv, _pdl.enabled(),
                                              conv8b_enabled())
        return flat.view(n, h, w, c).permute(0, 3, 1, 2)
    flat = _extension().convfirst_c512(nhwc_rows(x, x, n * h * w, c), weights.conv_w,
                                       weights.conv_b, weights.wpack, weights.b1, weights.b2, h, w, variant,
                                       nhwc_rows(out, x, n * h * w, c), _pdl.enabled())
    return flat.view(n, h, w, c).permute(0, 3, 1, 2)


WEIGHT_FIELDS = tuple(f.name for f in fields(KernelWeights))


@torch.library.custom_op("convfirst_c512::block", mutates_args=())
def block_op(x: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor, wpack: torch.Tensor, b1: torch.Tensor,
             b2: torch.Tensor) -> torch.Tensor:
    """`run` as one opaque PyTorch operator, for torch.compile and the profiler."""
    return run(x, KernelWeights(conv_w, conv_b, wpack, b1, b2))


@block_op.register_fake
def _block_op_fake(x, conv_w, conv_b, wpack, b1, b2):
    return torch.empty_like(x)  # same shape, dtype and (channels-last) strides as x


class FusedConvFirstC512(Stride1OpBlock):
    """Inference-form ``perfmodel.zoo.ConvFirstBlock(C, alpha)`` (stride 1) in one kernel on wgmma:
    C = 512, and C = 256 / 128 where ``CUDA_KERNELS_WGMMA_CONVFIRST`` sends them here."""

    WEIGHT_FIELDS, Weights, op, prepare = WEIGHT_FIELDS, KernelWeights, block_op, staticmethod(prepare_weights)

    @staticmethod
    def unsupported(block: nn.Module) -> str | None:
        """Why the kernel cannot (or may not yet) run this inference-form block, or None."""
        reason = Stride1OpBlock.form_reason(block, unsupported_shape)
        if reason:
            return reason
        channels = block.channels
        if channels == CHANNELS and not enabled():
            return (f"C={CHANNELS}: its kernel (cuda_kernels/convfirst_c512.py) is switched off by "
                    f"{ENV_SWITCH}; unset it or set it to 1 (or stride1) to use it")
        if channels == C384 and not c384_enabled():
            return (f"C={C384}: its kernel (cuda_kernels/convfirst_c512.py) is switched off by {C384_SWITCH}=0; "
                    f"unset it or set {C384_SWITCH}=1 to use it")
        if channels not in (CHANNELS, C384) and channels not in wgmma_widths():
            return (f"C={channels}: the wgmma kernel is off for this width (the mma.sync kernel runs it); "
                    f"set {WGMMA_SWITCH}={channels} to use it")
        if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
            return f"C={channels}: its kernel needs compute capability 9.0 (H100, H200)"
        return None
