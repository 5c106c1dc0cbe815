"""The stride-2 ConvFirst block in one kernel (csrc/convfirst_s2.cuh): reference, weight
preparation, host checks, the ``convfirst_s2::block`` operator and the drop-in module.

The block is the inference form (BatchNorm folded) of ``perfmodel.zoo.ConvFirstBlock`` with
``stride=2`` and ``out_channels = 2 * channels``::

    out = Blur(x) * S + b_S  +  ReLU(Blur(conv(x) + b_c) * U + b_U) * V + b_V

conv: grouped 3x3, group width 8, stride 1, zero padding; Blur: [1 2 1] x [1 2 1] / 16 over
reflect padding, stride 2 (``BlurPool``); U, V, S: 1x1 convolutions C_in -> hidden -> C_out and
C_in -> C_out. Activations are ``N x C x H x W`` float16 in ``torch.channels_last`` memory.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import nn
from torch.nn import functional as F

from cuda_kernels import _pdl
from cuda_kernels._checks import check_devices, check_nhwc_half, check_out, check_x_aligned
from cuda_kernels._fused import OpBlock, fake_nhwc_output
from cuda_kernels.ops import GROUP_WIDTH, L_WIDTHS_SWITCH, l_widths_enabled, pack_conv_weight

SUPPORTED_WIDTHS = ((32, 64), (64, 128), (128, 256))  # (C_in, C_out)
# ConvFirstNet-L's widths, C_in not a power of two (csrc/convfirst_s2.cuh, Config::PARTIAL): compiled
# and CPU-tested, not yet run on a GPU; off unless CUDA_KERNELS_L_WIDTHS is 1 or names stride2.
L_WIDTHS = ((96, 192), (192, 384))
# Widths whose kernel lives in the C = 512 extension (csrc/convfirst_s2_wide.cu: 64-pixel tiles, a
# 512-wide accumulator), behind the same switch (convfirst_c512.ENV_SWITCH, on by default).
SWITCHED_WIDTHS = ((256, 512),)
# ConvFirstNet-L's last stride-2 block, in the C = 768 extension (csrc/convfirst_s2_c768.cu: the output columns
# split over two thread blocks per 64-pixel tile); compiled and CPU-tested only: off unless CUDA_KERNELS_C768 is
# 1 or names stride2 (convfirst_c768.enabled).
C768_WIDTHS = ((384, 768),)
SUPPORTED_EXPANSIONS = (2, 4, 6)  # hidden = alpha * C_in
MAX_WIDTH = 56  # the kernel's shared input rows hold (2R + 3) W <= 680 pixels for W <= 56
MIN_SIZE = 2  # reflect padding by one needs two rows and columns
# Tile variants per C_in (csrc/convfirst_s2.cu): 0 everywhere; 1: two blocks per SM (C_in 64) or
# 64-pixel tiles (C_in 128); 2 and 3: the same tiles with deeper weight rings.
VARIANTS = {32: (0, 2), 64: (0, 1, 2), 128: (0, 1, 2, 3), 256: (0,),
            96: (0, 1), 192: (0,), 384: (0, 1)}
# 384 -> 768 (csrc/convfirst_s2_c768.cu): 0, the two column halves of a tile each compute stage 1 (measured 403.5 us,
# 0.95x torch.compile); 1, the halves are a cluster splitting stage 1 and exchanging H through distributed shared
# memory (compiled and CPU-checked only; the default stays 0 until it is timed).  # 96: 128-pixel tiles, or 64-pixel tiles at two blocks per SM; 192: 64-pixel tiles


def default_variant(in_channels: int, width: int) -> int:
    """The fastest variant measured on an H200 (NOTES.md, stride-2 ConvFirst kernel)."""
    if in_channels == 64:  # 64 -> 128 a6 56x56: variant 2 175.4 / 177.4 us, 1 184.3 / 186.5, in two calls;
        return 2 if width >= 56 else 1  # smaller inputs were timed with variants 0 and 1 only
    if in_channels == 128:
        return 1 if output_size(width) <= 7 else 0  # 64-pixel tiles when 128-pixel ones leave SMs idle
    if in_channels == 384:  # 384 -> 768: CUDA_KERNELS_C768_S2_VARIANT, else 0
        from cuda_kernels import convfirst_c768

        return convfirst_c768.s2_default_variant()
    return 0


def output_size(size: int) -> int:
    """Height or width after BlurPool: reflect pad 1, 3 taps, stride 2."""
    return (size + 1) // 2


def blur_pool(x: torch.Tensor) -> torch.Tensor:
    """[1 2 1] x [1 2 1] / 16 over reflect padding, stride 2, written as strided sums (not the
    zoo's depthwise convolution, so the two are independent)."""
    xp = F.pad(x, (1, 1, 1, 1), mode="reflect")
    ho, wo = output_size(x.shape[2]), output_size(x.shape[3])
    rows = xp[:, :, 0 : 2 * ho - 1 : 2] + 2 * xp[:, :, 1 : 2 * ho : 2] + xp[:, :, 2 : 2 * ho + 1 : 2]
    cols = rows[..., 0 : 2 * wo - 1 : 2] + 2 * rows[..., 1 : 2 * wo : 2] + rows[..., 2 : 2 * wo + 1 : 2]
    return cols / 16


@dataclass(frozen=True)
class FoldedWeights:
    """The inference-form block's tensors in PyTorch layouts: conv_w [C_in, 8, 3, 3],
    w1 [hidden, C_in(,1,1)], w2 [C_out, hidden(,1,1)], ws [C_out, C_in(,1,1)], biases 1-D."""

    conv_w: torch.Tensor
    conv_b: torch.Tensor
    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor
    ws: torch.Tensor
    bs: torch.Tensor

    @classmethod
    def from_block(cls, block: nn.Module) -> "FoldedWeights":
        """From a folded zoo ``ConvFirstBlock(stride=2)`` whose shortcut is BlurPool + 1x1 conv."""
        conv, expand, project, short = block.conv, block.ffn.expand, block.ffn.project, block.shortcut[1]
        return cls(conv.weight, conv.bias, expand.weight, expand.bias, project.weight, project.bias,
                   short.weight, short.bias)


def reference(x: torch.Tensor, w: FoldedWeights) -> torch.Tensor:
    """The block computed op by op in x's dtype (float64 for a reference)."""
    cast = {f.name: getattr(w, f.name).to(x.dtype) for f in fields(w)}
    cin = x.shape[1]
    y = F.conv2d(x, cast["conv_w"], cast["conv_b"], padding=1, groups=cin // GROUP_WIDTH)
    hidden = F.relu(F.conv2d(blur_pool(y), cast["w1"].reshape(-1, cin, 1, 1), cast["b1"]))
    z = F.conv2d(hidden, cast["w2"].reshape(-1, hidden.shape[1], 1, 1), cast["b2"])
    return F.conv2d(blur_pool(x), cast["ws"].reshape(-1, cin, 1, 1), cast["bs"]) + z


def unsupported_shape(in_channels: int, out_channels: int, hidden: int) -> str | None:
    """Why the kernel cannot run these widths, or None."""
    if (in_channels, out_channels) in SWITCHED_WIDTHS:
        from cuda_kernels import convfirst_c512

        if not convfirst_c512.enabled("stride2"):
            return (f"C {in_channels} -> {out_channels}: its kernel (in the C=512 extension) is switched off by "
                    f"{convfirst_c512.ENV_SWITCH}; unset it or set it to 1 (or stride2) to use it")
    elif (in_channels, out_channels) in C768_WIDTHS:
        from cuda_kernels import convfirst_c768

        if not convfirst_c768.enabled("stride2"):
            return (f"C {in_channels} -> {out_channels}: its kernel (in the C=768 extension) is off until its GPU "
                    f"tests pass; set {convfirst_c768.SWITCH}=1 (or stride2) to use it")
    elif (in_channels, out_channels) in L_WIDTHS:
        if not l_widths_enabled("stride2"):
            return (f"C {in_channels} -> {out_channels}: its kernel is switched off by {L_WIDTHS_SWITCH}; unset "
                    f"it or set {L_WIDTHS_SWITCH}=1 (or stride2) to use it")
    elif (in_channels, out_channels) not in SUPPORTED_WIDTHS:
        return f"C {in_channels} -> {out_channels} (the stride-2 kernel has {SUPPORTED_WIDTHS})"
    if hidden % in_channels or hidden // in_channels not in SUPPORTED_EXPANSIONS:
        return f"hidden {hidden} for C_in={in_channels} (alpha in {SUPPORTED_EXPANSIONS})"
    return None


@dataclass(frozen=True)
class KernelWeights:
    """The kernel's operands: fp16 matrices, fp32 biases, the conv as mma fragments."""

    conv_w: torch.Tensor  # [C_in/8, 9, 32] int32 (ops.pack_conv_weight)
    conv_b: torch.Tensor  # [C_in] fp32
    w1: torch.Tensor  # [hidden, C_in] fp16
    b1: torch.Tensor  # [hidden] fp32
    w2: torch.Tensor  # [C_out, hidden] fp16
    ws: torch.Tensor  # [C_out, C_in] fp16
    bo: torch.Tensor  # [C_out] fp32: b_V + b_S, the epilogue's one bias

    @property
    def in_channels(self) -> int:
        return self.w1.shape[1]

    @property
    def out_channels(self) -> int:
        return self.w2.shape[0]

    @property
    def hidden(self) -> int:
        return self.w1.shape[0]


def prepare_weights(w: FoldedWeights) -> KernelWeights:
    """Validate the widths and convert the weights once (raises ValueError if unsupported)."""
    hidden, cin = w.w1.shape[0], w.conv_w.shape[0]
    cout = w.w2.shape[0]
    reason = unsupported_shape(cin, cout, hidden)
    if reason:
        raise ValueError(f"convfirst_s2 cannot run {reason}")
    expected = {"w1": hidden * cin, "w2": cout * hidden, "ws": cout * cin, "conv_b": cin, "b1": hidden,
                "b2": cout, "bs": cout}
    for name, numel in expected.items():
        if getattr(w, name).numel() != numel:
            raise ValueError(f"{name} has {getattr(w, name).numel()} elements, expected {numel}")

    def half(t, rows, cols):
        return t.detach().reshape(rows, cols).to(torch.float16).contiguous()

    def f32(t):
        return t.detach().reshape(-1).to(torch.float32).contiguous()

    return KernelWeights(
        pack_conv_weight(w.conv_w).to(w.conv_w.device), f32(w.conv_b), half(w.w1, hidden, cin), f32(w.b1),
        half(w.w2, cout, hidden), half(w.ws, cout, cin), f32(w.b2.detach().double() + w.bs.detach().double()),
    )


def check_input(x: torch.Tensor, weights: KernelWeights, out: torch.Tensor | None = None) -> None:
    """Raise ValueError for an input (or output buffer) the kernel cannot take. The device is
    checked last, so that every other rule can be checked on CPU tensors."""
    check_nhwc_half(x)
    n, c, h, w = x.shape
    if c != weights.in_channels:
        raise ValueError(f"x has {c} channels, the weights expect {weights.in_channels}")
    if not (MIN_SIZE <= h and MIN_SIZE <= w <= MAX_WIDTH) or n < 1:
        raise ValueError(f"convfirst_s2 supports H >= {MIN_SIZE}, {MIN_SIZE} <= W <= {MAX_WIDTH} and N >= 1, "
                         f"got {n}x{h}x{w}")
    if x.numel() >= 2**31 or n * output_size(h) * output_size(w) * weights.out_channels >= 2**31:
        raise ValueError(f"x of shape {tuple(x.shape)} is too large for 32-bit pixel offsets")
    check_x_aligned(x)
    check_out(out, x, (n, weights.out_channels, output_size(h), output_size(w)),
              "tiles read x while others write their outputs")
    check_devices(x, weights)


def _extension():
    from cuda_kernels._build import load_convfirst_s2_extension

    return load_convfirst_s2_extension()


def _wide_extension():
    from cuda_kernels._build import load_convfirst_c512_extension

    return load_convfirst_c512_extension()


def _c768_extension():
    from cuda_kernels._build import load_convfirst_c768_extension

    return load_convfirst_c768_extension()


def shared_memory_need(in_channels: int, out_channels: int) -> int:
    """Bytes of shared memory per block the kernel for these widths asks for (from the build)."""
    if (in_channels, out_channels) in SWITCHED_WIDTHS:
        return int(_wide_extension().s2_wide_smem_bytes())
    if (in_channels, out_channels) in C768_WIDTHS:
        return int(_c768_extension().s2_smem_bytes())
    return int(_extension().smem_bytes(in_channels, out_channels))


def run(x: torch.Tensor, weights: KernelWeights, variant: int | None = None, rows_per_tile: int = 0,
        out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch the fused kernel; returns [N, C_out, ceil(H/2), ceil(W/2)] channels_last (``out``
    if given). ``rows_per_tile`` (output rows per tile of 128 or 64 pixels) 0 lets the launcher
    choose. Without a variant, the widths `convfirst_s2_wgmma.enabled_widths` names run on the wgmma
    kernel (C_in 128 and 256 by default; ``CUDA_KERNELS_S2_WGMMA`` overrides)."""
    if variant is None:
        from cuda_kernels import convfirst_s2_wgmma as wgmma

        if wgmma.routes(x, weights):
            rows = rows_per_tile if rows_per_tile * output_size(x.shape[-1]) <= wgmma.TILE_PIXELS else 0
            return wgmma.run(x, wgmma.from_s2_weights(weights), rows, out)
    check_input(x, weights, out)
    cin, cout = weights.in_channels, weights.out_channels
    need = shared_memory_need(cin, cout)
    have = torch.cuda.get_device_properties(x.device).shared_memory_per_block_optin
    if need > have:
        raise ValueError(f"convfirst_s2 {cin} -> {cout} needs {need} B of shared memory per block, "
                         f"{torch.cuda.get_device_name(x.device)} offers {have} B")
    n, _, h, w = x.shape
    variant = default_variant(cin, w) if variant is None else variant
    if variant not in VARIANTS[cin]:
        raise ValueError(f"convfirst_s2 has no variant {variant} for C_in={cin} (it has {VARIANTS[cin]})")
    ho, wo = output_size(h), output_size(w)
    flat_out = torch.empty(0, device=x.device, dtype=torch.float16)
    if out is not None:
        flat_out = out.permute(0, 2, 3, 1).reshape(n * ho * wo, cout)
    args = (x.permute(0, 2, 3, 1).reshape(n * h * w, cin), weights.conv_w, weights.conv_b, weights.w1, weights.b1,
            weights.w2, weights.ws, weights.bo, n, h, w, rows_per_tile)
    if (cin, cout) in SWITCHED_WIDTHS:
        flat = _wide_extension().convfirst_s2_wide(*args, flat_out, _pdl.enabled())
    elif (cin, cout) in C768_WIDTHS:
        flat = _c768_extension().convfirst_s2_c768(*args, variant, flat_out)
    else:
        flat = _extension().convfirst_s2(*args, variant, flat_out, _pdl.enabled())
    return flat.view(n, ho, wo, cout).permute(0, 3, 1, 2)


WEIGHT_FIELDS = tuple(f.name for f in fields(KernelWeights))


@torch.library.custom_op("convfirst_s2::block", mutates_args=())
def block_op(x: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor,
             w2: torch.Tensor, ws: torch.Tensor, bo: torch.Tensor) -> torch.Tensor:
    """`run` as one opaque PyTorch operator (default variant), for torch.compile and the profiler."""
    return run(x, KernelWeights(conv_w, conv_b, w1, b1, w2, ws, bo))


@block_op.register_fake
def _block_op_fake(x, conv_w, conv_b, w1, b1, w2, ws, bo):
    return fake_nhwc_output(x, w2.shape[0], output_size)


class FusedConvFirstDown(OpBlock):
    """Inference-form ``perfmodel.zoo.ConvFirstBlock(C, alpha, 2C, stride=2)`` in one kernel."""

    WEIGHT_FIELDS, Weights, op = WEIGHT_FIELDS, KernelWeights, block_op
    SHAPE_FIELDS = ("in_channels", "out_channels")

    @staticmethod
    def unsupported(block: nn.Module) -> str | None:
        """Why the kernel cannot run this inference-form ConvFirst block, or None if it can."""
        from perfmodel.zoo.blocks import BlurPool

        if getattr(block, "stride", None) != 2:
            return f"stride {getattr(block, 'stride', None)} (this kernel is the stride-2 block)"
        if getattr(block, "group_width", None) != GROUP_WIDTH or getattr(block, "kernel_size", None) != 3:
            return f"group width {getattr(block, 'group_width', None)}, kernel {getattr(block, 'kernel_size', None)}"
        short = list(block.shortcut)
        if not isinstance(block.conv, nn.Conv2d) or not all(isinstance(m, (BlurPool, nn.Conv2d)) for m in short):
            return "not in inference form (fold batchnorm first)"
        if len(short) != 2 or not isinstance(short[0], BlurPool) or not isinstance(block.pool, BlurPool):
            return f"out_channels {block.out_channels} == channels: no 1x1 shortcut conv (kernel has C_out = 2 C_in)"
        return unsupported_shape(block.channels, block.out_channels, block.channels * block.expansion)

    @classmethod
    def from_block(cls, block: nn.Module) -> "FusedConvFirstDown":
        cls._check(block)
        return cls(prepare_weights(FoldedWeights.from_block(block)))
