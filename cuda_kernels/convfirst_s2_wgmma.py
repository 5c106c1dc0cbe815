"""The stride-2 ConvFirst block on Hopper warpgroup MMAs (csrc/convfirst_s2_wgmma.cu, sm_90a): C_in -> 2 C_in for
C_in in 64, 128, 256. Weight packing, the tile dataflow in float64 (for the CPU tests), host checks, the launcher
and the ``convfirst_s2_wgmma::block`` operator. NOTES.md "Stride 2 on the wgmma kernel".

The block is the one `cuda_kernels.convfirst_s2` computes (the inference form of ``perfmodel.zoo.ConvFirstBlock``
with ``stride=2``)::

    out = Blur(x) * S + b_S  +  ReLU(Blur(conv(x) + b_c) * U + b_U) * V + b_V

`convfirst_s2.run`, called without an explicit variant (its `block` operator, and so `FusedConvFirstDown` and
`replace_blocks`), sends C_in 128 and 256 here on compute capability 9.0 (`DEFAULT_WIDTHS`, the measured
winners); ``CUDA_KERNELS_S2_WGMMA`` overrides it: ``1`` / ``all`` every width, a comma list of C_in among 64, 128,
256, ``0`` none. ``CUDA_KERNELS_S2W_PERSISTENT=1`` (default off) runs C_in 64 and 128 on the persistent variant
(NOTES.md "Stride 2 on wgmma, persistent").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

import torch
from torch.nn import functional as F
from torch.utils.weak import WeakIdKeyDictionary

from cuda_kernels import _pdl, _switches
from cuda_kernels._fused import nhwc_rows, require_sm90
from cuda_kernels.ops import GROUP_WIDTH, _swizzle_128b, pack_conv_weight

SWITCH = "CUDA_KERNELS_S2_WGMMA"
IN_CHANNELS = (64, 128, 256)  # the kernel's instances; C_out = 2 C_in
SUPPORTED_WIDTHS = tuple((c, 2 * c) for c in IN_CHANNELS)
TILE_PIXELS = 64  # output pixels per thread block: R whole output rows, R * Wo <= 64
HIDDEN_CHUNK = 128
MAX_WIDTH = 56  # input width: phase A's rows (convfirst_s2.cuh, (2R + 3) W <= 680 pixels)
MIN_SIZE = 2  # reflect padding by one needs two rows and columns
K_PANEL = 64
SLOT_ROWS = 128
SLOT_BYTES = SLOT_ROWS * K_PANEL * 2  # 16 KB: a 128-row x 64-k fp16 panel, 128-byte swizzled
STAGES = 8  # the stride-1 wgmma kernel's ring (convfirst_c512.cu, kStages)
PANEL_BYTES = TILE_PIXELS * 128  # an X, Xs or H panel: 64 pixels x 64 channels
H_BYTES = 2 * 2 * PANEL_BYTES  # two H buffers of one 128-wide chunk
PHASE_A_BYTES = (4 * 128 + 3 * 56 + 1 + 4 * 128 + 56) * 64  # s2::kPhaseABytes: input rows, zero pixel, conv rows
SMEM_LIMIT = 227 * 1024
# The widths that run here by default: measured faster than the mma.sync stride-2 kernel's best variant on the
# H200 (session 7, examples/measurements/s2_wgmma/: 128 -> 256 a6 28x28 119.6 vs 143.3 us, 256 -> 512 a6 14x14
# 84.8 vs 136.3); 64 -> 128 stays on mma.sync (212.2 vs 175.4).
DEFAULT_WIDTHS = (128, 256)

# The persistent variant (NOTES.md "Stride 2 on wgmma, persistent"; default off): persistent CTAs over the tiles, a
# conv warpgroup computing the next tile's phase A (16-channel units, two halo buffers) while the consumers run the
# current tile's products. Selected by ``run(..., persistent=True)`` or, where ``persistent`` is not given (the
# routing from `convfirst_s2.run` included), by ``CUDA_KERNELS_S2W_PERSISTENT=1`` for the C_in it serves.
PERSISTENT_SWITCH = "CUDA_KERNELS_S2W_PERSISTENT"
PERSISTENT_IN_CHANNELS = (64, 128)
PERSISTENT_THREADS = 512  # two consumer warpgroups, the producer, the conv warpgroup
UNIT_CHANNELS = 16  # a phase-A unit: 16 channels, 32-byte pixels
HALO_PIXELS = 392  # a tile's input rows at most: (2R + 3) W over W = 2..56, R = 64 // ceil(W / 2)
CONV_PIXELS = 294  # its conv rows at most: (2R + 1) W
# setmaxnreg split (65,536 registers, 128 per thread at entry): consumers inc to 168, producer dec to 32, conv inc to 144
PERSISTENT_REGS = {"consumer": 168, "producer": 32, "conv": 144}


def enabled_widths() -> tuple[int, ...]:
    """The C_in that `convfirst_s2.run` sends here: ``CUDA_KERNELS_S2_WGMMA`` ``1`` / ``all`` for every one of
    `IN_CHANNELS`, a comma list of them, ``0`` for none; unset: `DEFAULT_WIDTHS`."""
    value = os.environ.get(SWITCH)
    if value is None:
        return DEFAULT_WIDTHS
    parts = {p.strip() for p in value.strip().lower().split(",")} - {"", "0"}
    if parts & {"1", "all"}:
        return IN_CHANNELS
    return tuple(c for c in IN_CHANNELS if str(c) in parts)


def persistent_enabled() -> bool:
    """``CUDA_KERNELS_S2W_PERSISTENT`` on (1 / on / true / yes); unset: off, the default."""
    return _switches.flag(PERSISTENT_SWITCH, False)


def halo_rows(rows: int, width: int) -> tuple[int, int]:
    """Pixels of a tile's input rows (2R + 3) W and conv rows (2R + 1) W at most (fewer at the batch's edges)."""
    return (2 * rows + 3) * width, (2 * rows + 1) * width


def persistent_smem_bytes(cin: int) -> int:
    """The persistent variant's dynamic shared memory (ShapeP in convfirst_s2_wgmma.cu): X + Xs + the ring + H as
    the one-tile kernel, then two halo buffers, the conv rows, a zero pixel, 16 ring barriers, x_full / x_empty,
    and 1024 B of alignment slack."""
    if cin not in PERSISTENT_IN_CHANNELS:
        raise ValueError(f"the persistent variant takes C_in in {PERSISTENT_IN_CHANNELS}, not {cin}")
    unit_pix = 2 * UNIT_CHANNELS
    end = (cin // K_PANEL + shortcut_panels(cin)) * PANEL_BYTES + STAGES * SLOT_BYTES + H_BYTES
    return 1024 + end + (2 * HALO_PIXELS + CONV_PIXELS + 1) * unit_pix + 2 * STAGES * 8 + 16


def persistent_schedule(tiles: int, grid: int) -> list[list[int]]:
    """Tiles per CTA of the persistent grid: CTA b takes b, b + grid, ... (the kernel's walk)."""
    return [list(range(b, tiles, grid)) for b in range(min(grid, tiles))]


def persistent_grid(tiles: int, sms: int, grid_limit: int = 0) -> int:
    """The launcher's grid: min(tiles, SMs, grid_limit if > 0)."""
    return min(tiles, grid_limit) if grid_limit > 0 else min(tiles, sms)


def output_size(size: int) -> int:
    return (size + 1) // 2


def rows_per_tile(width: int) -> int:
    """The launcher's R for input width W: as many whole output rows as fit in 64 pixels."""
    return TILE_PIXELS // output_size(width)


def shortcut_panels(cin: int) -> int:
    """Xs's 64-wide k panels: C_in / 64, at least two (the shortcut runs as one stage 2 of the stride-1 kernel,
    two k panels a call; at C_in = 64 the second is zero)."""
    return max(cin // K_PANEL, 2)


def shortcut_slots(cin: int) -> int:
    return shortcut_panels(cin) * (2 * cin // SLOT_ROWS)


def slots_per_chunk(cin: int) -> int:
    return cin // K_PANEL + 2 * (2 * cin // SLOT_ROWS)


def slot_order(cin: int, hidden: int) -> list[tuple[str, int, int, int]]:
    """The weight slots in the order the kernel reads them: ``("S", 0, k, q)`` for each k panel of Xs and
    each 128-row block q of the shortcut weight [C_out, C_in] (rows = output channels 128q.., columns = input
    channels 64k..; zero where k >= C_in / 64); then per chunk j of 128 hidden channels ``("U", j, k, 0)``
    for the C_in / 64 expand panels, and ``("V", j, k, q)`` for each of the chunk's two 64-wide k panels and
    each 128-row block q of the project weight. Warpgroup w uses rows 64w.. of every U slot; of S and V slots,
    rows 64w.. of the one block at C_out = 128, block w at 256, blocks 2w, 2w + 1 at 512 (the stride-1
    kernel's stage 2 at C = C_out)."""
    cout = 2 * cin
    order = [("S", 0, k, q) for k in range(shortcut_panels(cin)) for q in range(cout // SLOT_ROWS)]
    for j in range(hidden // HIDDEN_CHUNK):
        order += [("U", j, k, 0) for k in range(cin // K_PANEL)]
        order += [("V", j, k, q) for k in range(HIDDEN_CHUNK // K_PANEL) for q in range(cout // SLOT_ROWS)]
    return order


def _slot_block(w1: torch.Tensor, w2: torch.Tensor, ws: torch.Tensor, slot) -> torch.Tensor | None:
    """The [128, 64] view a slot holds (None for the shortcut's zero panel)."""
    kind, j, k, q = slot
    rows = slice(q * SLOT_ROWS, (q + 1) * SLOT_ROWS)
    if kind == "S":
        return ws[rows, k * K_PANEL : (k + 1) * K_PANEL] if k * K_PANEL < ws.shape[1] else None
    if kind == "U":
        return w1[j * HIDDEN_CHUNK : (j + 1) * HIDDEN_CHUNK, k * K_PANEL : (k + 1) * K_PANEL]
    col = j * HIDDEN_CHUNK + k * K_PANEL
    return w2[rows, col : col + K_PANEL]


def _check_pack_shapes(w1: torch.Tensor, w2: torch.Tensor, ws: torch.Tensor) -> tuple[int, int]:
    hidden, cin = w1.shape
    if cin not in IN_CHANNELS or tuple(w2.shape) != (2 * cin, hidden) or tuple(ws.shape) != (2 * cin, cin) or \
            hidden <= 0 or hidden % HIDDEN_CHUNK:
        raise ValueError(f"cannot pack w1 {tuple(w1.shape)} / w2 {tuple(w2.shape)} / ws {tuple(ws.shape)} for the "
                         f"kernel (C_in in {IN_CHANNELS}, C_out = 2 C_in, hidden a multiple of {HIDDEN_CHUNK})")
    return hidden, cin


def pack_weights(w1: torch.Tensor, w2: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    """w1 [hidden, C_in], w2 [C_out, hidden], ws [C_out, C_in] as the kernel's stream of 16 KB slots (uint8) in
    `slot_order`, each [128, 64] block row-major with the 128-byte swizzle (`ops._swizzle_128b`)."""
    hidden, cin = _check_pack_shapes(w1, w2, ws)
    w1, w2, ws = (t.detach().to(torch.float16) for t in (w1, w2, ws))
    parts = []
    for slot in slot_order(cin, hidden):
        block = _slot_block(w1, w2, ws, slot)
        if block is None:
            parts.append(torch.zeros(SLOT_ROWS * K_PANEL, dtype=torch.float16, device=w1.device))
        else:
            parts.append(_swizzle_128b(block.contiguous()).reshape(-1))
    return torch.cat(parts).view(torch.uint8)


def unpack_slots(wpack: torch.Tensor) -> torch.Tensor:
    """The packed stream as plain [slots, 128, 64] fp16 blocks (the swizzle is its own inverse)."""
    blocks = wpack.view(torch.float16).reshape(-1, SLOT_ROWS, K_PANEL)
    return torch.stack([_swizzle_128b(b) for b in blocks])


@dataclass(frozen=True)
class SmemLayout:
    """Byte offsets of the kernel's dynamic shared memory (csrc/convfirst_s2_wgmma.cu, Shape) from its
    1024-aligned base."""

    x: int
    xs: int
    ring: int
    h: int
    work: int  # phase A's buffers (s2::kPhaseABytes), over the ring's last slots and H
    preload: int  # ring slots the producer fills during phase A
    bars: int
    total: int  # dynamic shared memory asked for (+ 1024 B alignment slack)


def smem_layout(cin: int) -> SmemLayout:
    if cin not in IN_CHANNELS:
        raise ValueError(f"no kernel for C_in={cin}")
    x = 0
    xs = x + cin // K_PANEL * PANEL_BYTES
    ring = xs + shortcut_panels(cin) * PANEL_BYTES
    h = ring + STAGES * SLOT_BYTES
    end = h + H_BYTES
    work = (end - PHASE_A_BYTES) & ~127
    return SmemLayout(x, xs, ring, h, work, (work - ring) // SLOT_BYTES, end, 1024 + end + 2 * STAGES * 8)


def smem_bytes(cin: int) -> int:
    return smem_layout(cin).total


BLUR = (1.0, 2.0, 1.0)


def _reflect(i: int, n: int) -> int:
    return -i if i < 0 else (2 * n - 2 - i if i >= n else i)


def tile_forward(x: torch.Tensor, w, wpack: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """The kernel's dataflow in x's dtype (float64 for the tests), tile by tile: [N, C_in, H, W] -> [N, C_out,
    Ho, Wo]. ``w``: `convfirst_s2.FoldedWeights` (the conv and the biases); the GEMM weights come only from
    ``wpack``, read slot by slot in stream order as the warpgroups read them, so the packing, the slot order and
    the kernel's index conventions (which rows of which slot, which accumulator columns) are what is checked.
    Per tile of R output rows (counted over n Ho + ho, so tiles cross images): X and Xs from the tile's input rows
    only (2R + 3 rows, the conv at 2R + 1), 64 rows padded with zeros; the epilogue keeps the valid rows."""
    n, cin, h, width = x.shape
    cout, hidden = 2 * cin, w.w1.shape[0]
    ho, wo = output_size(h), output_size(width)
    r = rows or rows_per_tile(width)
    if r * wo > TILE_PIXELS:
        raise ValueError(f"{r} rows of {wo} exceed the 64-pixel tile")
    dt = x.dtype
    slots = unpack_slots(wpack).to(dt)
    order = slot_order(cin, hidden)
    if slots.shape[0] != len(order):
        raise ValueError(f"wpack has {slots.shape[0]} slots, C_in={cin} hidden={hidden} needs {len(order)}")
    conv_w, conv_b, b1 = w.conv_w.to(dt), w.conv_b.to(dt), w.b1.to(dt)
    bo = (w.b2.double() + w.bs.double()).to(dt)
    vblocks = cout // SLOT_ROWS
    out = torch.empty(n * ho * wo, cout, dtype=dt)
    total_rows = n * ho

    def conv_row(img: int, t: int) -> torch.Tensor:
        """conv(x) + b_c at image row t from input rows t - 1 .. t + 1, zero outside the image: [C_in, W]."""
        rows3 = [x[img, :, t + d] if 0 <= t + d < h else x.new_zeros(cin, width) for d in (-1, 0, 1)]
        window = F.pad(torch.stack(rows3, 1)[None], (1, 1, 0, 0))
        return F.conv2d(window, conv_w, conv_b, groups=cin // GROUP_WIDTH)[0, :, 0]
    for j0 in range(0, total_rows, r):
        nrows = min(r, total_rows - j0)
        xt = torch.zeros(TILE_PIXELS, cin, dtype=dt)
        xst = torch.zeros(TILE_PIXELS, shortcut_panels(cin) * K_PANEL, dtype=dt)
        for i, jj in enumerate(range(j0, j0 + nrows)):
            img, orow = divmod(jj, ho)
            taps = [_reflect(2 * orow + a - 1, h) for a in range(3)]  # the blur's rows (reflect padding)
            yrow = sum(f * conv_row(img, t) for f, t in zip(BLUR, taps))  # [C_in, W]
            xrow = sum(f * x[img, :, t] for f, t in zip(BLUR, taps))
            for c in range(wo):
                cols = [_reflect(2 * c + b - 1, width) for b in range(3)]
                p = i * wo + c
                xt[p] = sum(f * yrow[:, t] for f, t in zip(BLUR, cols)) / 16
                xst[p, :cin] = sum(f * xrow[:, t] for f, t in zip(BLUR, cols)) / 16
        # phase B: the shortcut, then the chunks, reading the slots in stream order
        acc = torch.zeros(TILE_PIXELS, cout, dtype=dt)  # both warpgroups' accumulator columns
        it = 0

        def stage2(a_panels: torch.Tensor) -> None:
            nonlocal it
            for kp in range(2):
                a = a_panels[:, kp * K_PANEL : (kp + 1) * K_PANEL]
                for q in range(vblocks):
                    block = slots[it]
                    it += 1
                    # rows of the block = output columns 128q .. (at C_out = 128: warpgroup w takes rows 64w ..,
                    # i.e. the same columns; at 256 / 512 block q is warpgroup q // (vblocks // 2)'s, whole)
                    acc[:, q * SLOT_ROWS : (q + 1) * SLOT_ROWS] += a @ block.T

        for c in range(shortcut_panels(cin) // 2):
            stage2(xst[:, 2 * c * K_PANEL : (2 * c + 2) * K_PANEL])
        for j in range(hidden // HIDDEN_CHUNK):
            h1 = torch.zeros(TILE_PIXELS, HIDDEN_CHUNK, dtype=dt)
            for k in range(cin // K_PANEL):
                block = slots[it]
                it += 1
                for wg in range(2):  # warpgroup wg: hidden columns 64 wg .. of the chunk, from rows 64 wg ..
                    h1[:, 64 * wg : 64 * wg + 64] += xt[:, k * K_PANEL : (k + 1) * K_PANEL] @ block[64 * wg : 64 * wg + 64].T
            hbuf = torch.relu(h1 + b1[j * HIDDEN_CHUNK : (j + 1) * HIDDEN_CHUNK])
            stage2(hbuf)
        assert it == len(order)
        valid = nrows * wo
        out[j0 * wo : j0 * wo + valid] = acc[:valid] + bo
    return out.view(n, ho, wo, cout).permute(0, 3, 1, 2)


@dataclass(frozen=True)
class KernelWeights:
    """The kernel's operands: the conv as mma fragments, the three GEMMs as packed slots, fp32 biases."""

    conv_w: torch.Tensor  # [C_in / 8, 9, 32] int32 (ops.pack_conv_weight)
    conv_b: torch.Tensor  # [C_in] fp32
    wpack: torch.Tensor  # pack_weights(w1, w2, ws), uint8
    b1: torch.Tensor  # [hidden] fp32
    bo: torch.Tensor  # [C_out] fp32: b_V + b_S

    @property
    def in_channels(self) -> int:
        return self.conv_b.numel()

    @property
    def out_channels(self) -> int:
        return self.bo.numel()

    @property
    def hidden(self) -> int:
        return self.b1.numel()


def unsupported_shape(in_channels: int, out_channels: int, hidden: int) -> str | None:
    if (in_channels, out_channels) not in SUPPORTED_WIDTHS:
        return f"C {in_channels} -> {out_channels} (this kernel has {SUPPORTED_WIDTHS})"
    if hidden <= 0 or hidden % HIDDEN_CHUNK:
        return f"hidden {hidden} (a multiple of {HIDDEN_CHUNK})"
    return None


def prepare_weights(w) -> KernelWeights:
    """From `convfirst_s2.FoldedWeights` (ValueError if unsupported)."""
    hidden, cin, cout = w.w1.shape[0], w.conv_w.shape[0], w.w2.shape[0]
    reason = unsupported_shape(cin, cout, hidden)
    if reason:
        raise ValueError(f"convfirst_s2_wgmma cannot run {reason}")
    wpack = pack_weights(w.w1.reshape(hidden, cin), w.w2.reshape(cout, hidden), w.ws.reshape(cout, cin))
    f32 = lambda t: t.detach().reshape(-1).to(torch.float32).contiguous()  # noqa: E731
    return KernelWeights(pack_conv_weight(w.conv_w).to(w.conv_w.device), f32(w.conv_b), wpack, f32(w.b1),
                         f32(w.b2.detach().double() + w.bs.detach().double()))


# convfirst_s2.KernelWeights' w1 tensor -> (the three GEMM weights' versions and storage, this kernel's weights).
# Keyed by the tensor object (weakly), not its address: a freed weight's address may be reused by another one.
_FROM_S2 = WeakIdKeyDictionary()


def from_s2_weights(weights) -> KernelWeights:
    """This kernel's weights from `convfirst_s2.KernelWeights` (conv_w, conv_b, b1, bo are shared; w1, w2, ws
    packed on the first call and kept while w1 lives; packed again after an in-place change of any of them)."""
    stamp = tuple((t.data_ptr(), t._version, tuple(t.shape)) for t in (weights.w1, weights.w2, weights.ws))
    hit = _FROM_S2.get(weights.w1)
    if hit is None or hit[0] != stamp:
        wpack = pack_weights(weights.w1, weights.w2, weights.ws)
        hit = (stamp, KernelWeights(weights.conv_w, weights.conv_b, wpack, weights.b1, weights.bo))
        _FROM_S2[weights.w1] = hit
    return hit[1]


def routes(x: torch.Tensor, weights) -> bool:
    """Whether `convfirst_s2.run` (no explicit variant) sends this call here: the switch names C_in, the widths
    and hidden fit, W <= 56, and x is on a compute capability 9.0 device."""
    cin, cout = weights.w1.shape[1], weights.w2.shape[0]
    if cin not in enabled_widths() or unsupported_shape(cin, cout, weights.w1.shape[0]):
        return False
    if x.dim() != 4 or not (MIN_SIZE <= x.shape[-1] <= MAX_WIDTH) or x.shape[-2] < MIN_SIZE:
        return False
    return x.is_cuda and torch.cuda.get_device_capability(x.device) == (9, 0)


def check_input(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None) -> None:
    """Raise ValueError for an input (or output buffer) the kernel cannot take: the stride-2 kernel's rules
    (convfirst_s2.check_input: H >= 2, 2 <= W <= 56, 32-bit offsets, alignment, out, devices)."""
    from cuda_kernels.convfirst_s2 import check_input as check_s2_input

    check_s2_input(x, weights, out)


def _extension():
    from cuda_kernels._build import load_convfirst_s2_wgmma_extension

    return load_convfirst_s2_wgmma_extension()


def use_persistent(cin: int, persistent: bool | None) -> bool:
    """Whether `run` takes the persistent variant: ``persistent`` if given (True for a C_in it does not serve is a
    ValueError), else ``CUDA_KERNELS_S2W_PERSISTENT=1`` for C_in in `PERSISTENT_IN_CHANNELS`."""
    if persistent is None:
        return persistent_enabled() and cin in PERSISTENT_IN_CHANNELS
    if persistent and cin not in PERSISTENT_IN_CHANNELS:
        raise ValueError(f"the persistent variant takes C_in in {PERSISTENT_IN_CHANNELS}, not {cin}")
    return bool(persistent)


def run(x: torch.Tensor, weights: KernelWeights, rows: int = 0, out: torch.Tensor | None = None,
        persistent: bool | None = None, grid: int = 0) -> torch.Tensor:
    """Launch the kernel; returns [N, C_out, ceil(H/2), ceil(W/2)] channels_last (``out`` if given). ``rows``:
    output rows per tile (rows * Wo <= 64), 0 for the launcher's 64 // Wo. ``persistent``: the persistent variant
    (None: `use_persistent`'s switch); ``grid``: its CTAs at most (0: the SM count; tests use it for many tiles
    per CTA)."""
    check_input(x, weights, out)
    require_sm90(x, "convfirst_s2_wgmma")
    n, cin, h, w = x.shape
    ho, wo = output_size(h), output_size(w)
    if rows * wo > TILE_PIXELS:
        raise ValueError(f"rows={rows} x Wo={wo} exceeds the 64-pixel tile")
    cout = weights.out_channels
    args = (nhwc_rows(x, x, n * h * w, cin), weights.conv_w, weights.conv_b, weights.wpack, weights.b1, weights.bo,
            n, h, w, rows, nhwc_rows(out, x, n * ho * wo, cout), _pdl.enabled())
    if use_persistent(cin, persistent):
        hx, hy = halo_rows(rows or rows_per_tile(w), w)
        if hx > HALO_PIXELS or hy > CONV_PIXELS:
            raise ValueError(f"rows={rows} at W={w}: the persistent variant's buffers hold {HALO_PIXELS} input and "
                             f"{CONV_PIXELS} conv pixels")
        flat = _extension().convfirst_s2_wgmma_persistent(*args, grid)
    else:
        flat = _extension().convfirst_s2_wgmma(*args)
    return flat.view(n, ho, wo, cout).permute(0, 3, 1, 2)


WEIGHT_FIELDS = tuple(f.name for f in fields(KernelWeights))


@torch.library.custom_op("convfirst_s2_wgmma::block", mutates_args=())
def block_op(x: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor, wpack: torch.Tensor, b1: torch.Tensor,
             bo: torch.Tensor) -> torch.Tensor:
    """`run` as one opaque PyTorch operator, for torch.compile and the profiler."""
    return run(x, KernelWeights(conv_w, conv_b, wpack, b1, bo))


@block_op.register_fake
def _block_op_fake(x, conv_w, conv_b, wpack, b1, bo):
    n, _, h, w = x.shape
    return x.new_empty((n, bo.shape[0], output_size(h), output_size(w))).contiguous(
        memory_format=torch.channels_last)
