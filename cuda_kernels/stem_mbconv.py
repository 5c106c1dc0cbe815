"""EfficientNet's stem and its first block in one unit, with the stem's output never written
(csrc/effnet_stem_dw.cu in the MBConv extension; NOTES.md "The stem and block 1.0's kernel 1 in one kernel")::

    E = SiLU(conv 3x3 s2 (3 -> 32)(image) + b)          features.0, folded
    y = project(SE(SiLU(depthwise 3x3 (E) + b_dw)))      features.1.0: torchvision's MBConv, expand ratio 1, 32 -> C

One kernel computes E band by band in shared memory (with the depthwise's halo rows), the depthwise, D and the pool's
sums; MBConv version 11's SE and projection follow. B0 and B2 have this pair (32 channels; B3 and B4's stems are 40
and 48 wide: not built). ``replace_blocks`` swaps ``features.0`` for the unit and ``features.1.0`` for an identity
unless ``CUDA_KERNELS_EFFNET_STEM_DW=0`` or ``CUDA_KERNELS_EFFNET_STEM=0`` (on by default since session 16: B0 1.813
-> 1.807 ms against the stem's version 2 alone, 1.833 against version 1, in one call;
``examples/measurements/mbconv/s16/call1``); where the pair is not B0 / B2's, the MBConv version is not one of
``VERSIONS`` or the GPU predates compute capability 9.0, the stem and the block are swapped one by one as before. The
check before timing compares the unit against the two PyTorch blocks in sequence (``reference_paths``).
"""

from __future__ import annotations

import torch
from torch import nn

from cuda_kernels import _pdl, _switches
from cuda_kernels import effnet_stem as es
from cuda_kernels import mbconv as mb

SWITCH = "CUDA_KERNELS_EFFNET_STEM_DW"
ROWS = 8  # csrc/mbconv_stem_dw.h kStemDwRows: output rows per CTA
CHANNELS = 32  # the stem's width and block 1.0's (the kernel is built for 32)
VERSIONS = (9, 10, 11)  # the MBConv versions whose SE and projection follow it (launch_se_project_v9)
STEM_PATH, BLOCK_PATH = "features.0", "features.1.0"


def enabled() -> bool:
    """Whether replace_blocks fuses the pair: unless ``CUDA_KERNELS_EFFNET_STEM_DW=0``, and only where the stem is
    swapped at all (``CUDA_KERNELS_EFFNET_STEM``, effnet_stem.enabled)."""
    return _switches.flag(SWITCH, True) and es.enabled()


def unavailable() -> str | None:
    """Why this process cannot run the unit whatever the blocks (the MBConv version, the GPU), or None."""
    if mb.DEFAULT_VERSION not in VERSIONS:
        return f"MBConv version {mb.DEFAULT_VERSION} (the unit runs with versions {VERSIONS})"
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) < (9, 0):
            return f"compute capability {major}.{minor} (the unit's SE and projection need 9.0)"
    return None


def e_cols(wo: int) -> int:
    """E's columns (mbconv_stem_dw.h stem_dw_e_cols): 4 per depthwise column group, plus the two padding ones."""
    return (wo + 3) // 4 * 4 + 2


def e_slot(c: int) -> int:
    """The pixel slot of E column c (effnet_stem_dw.cu e_slot): the two column groups a warp reads, 4 pixels apart,
    land on the two halves of the banks."""
    return c ^ ((c >> 2) & 1)


def window_halves(width: int) -> int:
    """The image window of 2 (ROWS + 2) + 1 rows at the stem's version-2 pitch (mbconv_stem_dw.h)."""
    return (2 * (ROWS + 2) + 1) * es.window_pitch_v2(width) + 2 * es.WINDOW_OFFSET_V2


def smem_bytes(width: int, c: int = CHANNELS) -> int:
    """Shared memory of a CTA (mbconv_stem_dw.h stem_dw_smem_bytes): window, E, the pool's per-group sums."""
    wo = (width + 1) // 2
    return window_halves(width) * 2 + (ROWS + 2) * e_cols(wo) * c * 2 + 256 // (c // 2) * c * 4


def unsupported(stem: nn.Module, block: nn.Module) -> str | None:
    """Why the kernel cannot run this (folded) stem and first block, or None if it can."""
    reason = es.unsupported(stem)
    if reason is not None:
        return f"stem: {reason}"
    if stem[0].out_channels != CHANNELS:
        return f"stem 3 -> {stem[0].out_channels} (the kernel has 3 -> {CHANNELS})"
    if not isinstance(block, mb.FusedMBConv.block_class()):
        return f"{BLOCK_PATH} is not torchvision's MBConv"
    reason = mb.FusedMBConv.unsupported(block)
    if reason is not None:
        return f"block: {reason}"
    params = mb.block_params(block)
    if params.expand_w is not None or params.hidden != CHANNELS:
        return f"block: expand ratio 1 over {CHANNELS} channels needed (hidden {params.hidden})"
    if (params.kernel_size, params.stride, params.residual) != (3, 1, False):
        return (f"block: k {params.kernel_size}, stride {params.stride}, shortcut {params.residual} "
                "(the kernel has a 3x3 depthwise at stride 1, no shortcut)")
    if mb.chunk_for(params.hidden) != CHANNELS:
        return "block: its hidden channels are not one chunk"
    return None


class FusedStemMBConv(nn.Module):
    """The folded stem and first MBConv of EfficientNet-B0 / B2 as one unit (one ``block_fusion::stem_mbconv`` op)."""

    reference_paths = (STEM_PATH, BLOCK_PATH)  # what the unit replaces, in order (bench.check_blocks)

    def __init__(self, stem: nn.Module, block: nn.Module, version: int = mb.DEFAULT_VERSION):
        super().__init__()
        reason = unsupported(stem, block)
        if reason is not None:
            raise ValueError(f"FusedStemMBConv cannot run this pair: {reason}")
        if version not in VERSIONS:
            raise ValueError(f"FusedStemMBConv runs with MBConv version {VERSIONS}, not {version}")
        self.version = version
        stem_weights = es.prepare_weights(stem[0].weight, stem[0].bias)
        params = mb.block_params(block)
        self.out_channels = params.out_channels
        self.register_buffer("stem_wb", stem_weights.wb, persistent=False)
        self.register_buffer("stem_bias", stem_weights.bias, persistent=False)
        tensors = mb.prepare_weights(params).tensors()
        for name, tensor in zip(mb.WEIGHT_FIELDS[2:], tensors[2:]):  # no expand conv: w_exp, b_exp are empty
            self.register_buffer(name, tensor, persistent=False)

    def tensors(self) -> list[torch.Tensor]:
        """The operator's tensors: the stem's packed conv and bias, then block 1.0's weights past w_exp, b_exp."""
        return [self.stem_wb, self.stem_bias] + [getattr(self, n) for n in mb.WEIGHT_FIELDS[2:]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return stem_mbconv_op(x.contiguous(memory_format=torch.channels_last), *self.tensors(), self.out_channels,
                              self.version)

    def extra_repr(self) -> str:
        return f"3->{CHANNELS}->{self.out_channels}, version={self.version}"


def _launch(x: torch.Tensor, tensors: list[torch.Tensor], out_channels: int, version: int,
            out: torch.Tensor | None = None) -> torch.Tensor:
    check_input(x)
    out_nhwc = torch.empty(0, dtype=x.dtype, device=x.device) if out is None else out.permute(0, 2, 3, 1)
    y = mb._extension().stem_mbconv(x.permute(0, 2, 3, 1), *tensors, out_channels, out_nhwc, version,
                                    _pdl.enabled())
    return y.permute(0, 3, 1, 2)


def run(x: torch.Tensor, unit: "FusedStemMBConv", out: torch.Tensor | None = None) -> torch.Tensor:
    """The unit on x (float16 [N, 3, H, W], channels_last, CUDA); into `out` ([N, C_out, Ho, Wo] channels_last) when
    given."""
    return _launch(x, unit.tensors(), unit.out_channels, unit.version, out)


def check_input(x: torch.Tensor) -> None:
    """ValueError for an image the kernel cannot take (the stem's rules, and at least 2 ROWS - 1 rows)."""
    if x.dim() != 4 or x.shape[1] != 3 or x.numel() == 0:
        raise ValueError(f"stem_mbconv: x must be a non-empty [N, 3, H, W], got {tuple(x.shape)}")
    if x.shape[3] > es.MAX_WIDTH:
        raise ValueError(f"stem_mbconv: x is {x.shape[3]} pixels wide: the window holds at most {es.MAX_WIDTH}")
    if (x.shape[2] + 1) // 2 < ROWS:
        raise ValueError(f"stem_mbconv: x is {x.shape[2]} rows high: the kernel needs >= {2 * ROWS - 1}")
    if x.dtype != torch.float16 or not x.is_contiguous(memory_format=torch.channels_last):
        raise ValueError("stem_mbconv: x must be float16 in torch.channels_last memory format")
    if not x.is_cuda:
        raise ValueError(f"stem_mbconv: x must be on a CUDA device, got {x.device}")


@torch.library.custom_op("block_fusion::stem_mbconv", mutates_args=())
def stem_mbconv_op(x: torch.Tensor, stem_wb: torch.Tensor, stem_bias: torch.Tensor, w_dw: torch.Tensor,
                   b_dw: torch.Tensor, w_se1: torch.Tensor, b_se1: torch.Tensor, w_se2: torch.Tensor,
                   b_se2: torch.Tensor, w_proj: torch.Tensor, b_proj: torch.Tensor, out_channels: int,
                   version: int) -> torch.Tensor:
    """The unit as one PyTorch operator (x channels-last float16 [N, 3, H, W]; packed weights)."""
    tensors = [stem_wb, stem_bias, w_dw, b_dw, w_se1, b_se1, w_se2, b_se2, w_proj, b_proj]
    return _launch(x, tensors, out_channels, version)


@stem_mbconv_op.register_fake
def _stem_mbconv_fake(x, stem_wb, stem_bias, w_dw, b_dw, w_se1, b_se1, w_se2, b_se2, w_proj, b_proj, out_channels,
                      version):
    n, _, h, w = x.shape
    return x.new_empty((n, out_channels, (h + 1) // 2, (w + 1) // 2)).contiguous(memory_format=torch.channels_last)


def swap(model: nn.Module) -> str | None:
    """Where the model has EfficientNet's layout (``features.0`` a stem, ``features.1.0`` an MBConv): replace the
    pair in place (features.0 -> FusedStemMBConv, features.1.0 -> nn.Identity) and return None, or return why the
    pair stays (a reason); a model without that layout: "no stem and MBConv pair"."""
    features = getattr(model, "features", None)
    try:
        stem, block = features[0], features[1][0]
    except (TypeError, IndexError, KeyError):
        return "no stem and MBConv pair"
    if not (es.is_stem(stem) and isinstance(block, mb.FusedMBConv.block_class())):
        return "no stem and MBConv pair"
    reason = unavailable() or unsupported(stem, block)
    if reason is not None:
        return reason
    features[0] = FusedStemMBConv(stem, block)
    features[1][0] = nn.Identity()
    return None
