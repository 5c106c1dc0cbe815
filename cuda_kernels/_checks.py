"""Host checks shared by the fused ConvFirst kernels' ``check_input`` (convfirst_s2, convfirst_c512,
convfirst_c768): one rule, one message, whichever kernel raises it. Every check raises ValueError."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

import torch


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory spans of two (dense) tensors intersect."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def check_nhwc_half(x: torch.Tensor) -> None:
    """x is a 4-D float16 tensor in channels_last memory."""
    if x.dim() != 4:
        raise ValueError(f"x must be [N, C, H, W], got shape {tuple(x.shape)}")
    if not x.is_contiguous(memory_format=torch.channels_last):
        raise ValueError("x must be in torch.channels_last memory format (NHWC)")
    if x.dtype != torch.float16:
        raise ValueError(f"x must be float16, got {x.dtype}")


def check_x_aligned(x: torch.Tensor) -> None:
    if x.data_ptr() % 16:
        raise ValueError("x must be 16-byte aligned (the kernel copies 16-byte chunks)")


def _check_out_layout(out: torch.Tensor, shape: tuple[int, ...]) -> None:
    if tuple(out.shape) != shape or out.dtype != torch.float16 or \
            not out.is_contiguous(memory_format=torch.channels_last):
        raise ValueError(f"out must be a channels_last float16 tensor of shape {shape}")


def check_out(out: torch.Tensor | None, x: torch.Tensor, shape: tuple[int, ...], overlap_reason: str) -> None:
    """An output buffer (if given): channels_last float16 of `shape`, 16-byte aligned, apart from
    x (`overlap_reason` says why) and on x's device."""
    if out is None:
        return
    _check_out_layout(out, shape)
    if out.data_ptr() % 16:
        raise ValueError("out must be 16-byte aligned")
    if overlaps(out, x):
        raise ValueError(f"out must not overlap x: {overlap_reason}")
    if out.device != x.device:
        raise ValueError(f"out is on {out.device}, x on {x.device}")


def check_devices(x: torch.Tensor, weights) -> None:
    """x is a CUDA tensor and every field of the `weights` dataclass is on its device."""
    if not x.is_cuda:
        raise ValueError(f"x must be a CUDA tensor, got one on {x.device}")
    for f in fields(weights):
        if getattr(weights, f.name).device != x.device:
            raise ValueError(f"weight {f.name} is on {getattr(weights, f.name).device}, x on {x.device}")


def check_stride1_input(kernel: str, x: torch.Tensor, weights, out: torch.Tensor | None,
                        max_width: Callable[[int], int], name_width: bool = True, channels: int | None = None) -> None:
    """The stride-1 wgmma ConvFirst kernels' ``check_input`` (convfirst_c512, convfirst_c768; `kernel` names
    it in the messages): x channels_last float16 with the weights' channel count (and `channels`, if given),
    1 <= W <= ``max_width(C)`` (the message names C when `name_width`), H, N >= 1, 32-bit pixel offsets,
    16-byte aligned; `out` (if given) like x and apart from it; the device last, so that every other rule
    can be checked on CPU tensors."""
    check_nhwc_half(x)
    n, c, h, w = x.shape
    if c != weights.channels or (channels is not None and c != channels):
        raise ValueError(f"x has {c} channels, the kernel's weights take {weights.channels}")
    limit = max_width(c)
    if not (1 <= w <= limit and h >= 1 and n >= 1):
        at = f" at C={c}" if name_width else ""
        raise ValueError(f"{kernel} supports 1 <= W <= {limit}, H >= 1 and N >= 1{at}, got {n}x{h}x{w}")
    if x.numel() >= 2**31:
        raise ValueError(f"x of shape {tuple(x.shape)} is too large for 32-bit pixel offsets")
    check_x_aligned(x)
    check_out(out, x, tuple(x.shape), "tiles read x (with halos) while others write their outputs")
    check_devices(x, weights)


def check_out_apart(out: torch.Tensor | None, x: torch.Tensor, weights, shape: tuple[int, ...]) -> None:
    """An output buffer of the stems (if given): channels_last float16 of `shape`, 4-byte aligned (half2 stores),
    overlapping neither x nor a field of the `weights` dataclass, on x's device."""
    if out is None:
        return
    _check_out_layout(out, shape)
    if out.data_ptr() % 4:
        raise ValueError("out must be 4-byte aligned")
    for name, t in (("x", x), *((f.name, getattr(weights, f.name)) for f in fields(weights))):
        if overlaps(out, t):
            raise ValueError(f"out must not overlap {name}")
    if out.device != x.device:
        raise ValueError(f"out is on {out.device}, x on {x.device}")


def check_capability(x: torch.Tensor, minimum: tuple[int, int], kernel: str) -> None:
    """x's GPU has compute capability `minimum` or newer (ValueError naming it otherwise)."""
    cap = torch.cuda.get_device_capability(x.device)
    if cap < minimum:
        raise ValueError(f"{kernel} needs compute capability {minimum[0]}.{minimum[1]} or newer, "
                         f"{torch.cuda.get_device_name(x.device)} is {cap[0]}.{cap[1]}")


def check_stem_input(x: torch.Tensor, out_channels: int, output_size) -> tuple[int, int, int, int]:
    """x is a non-empty 3-channel channels_last float16 [N, 3, H, W] whose stem output [N, out_channels,
    output_size(H), output_size(W)] (returned) fits 32-bit offsets, as both stems' kernels index."""
    check_nhwc_half(x)
    n, c, h, w = x.shape
    if c != 3:
        raise ValueError(f"x has {c} channels, the stem takes 3")
    if n < 1 or h < 1 or w < 1:
        raise ValueError(f"x must not be empty, got {n}x{h}x{w}")
    shape = (n, out_channels, output_size(h), output_size(w))
    if x.numel() >= 2**31 or n * shape[1] * shape[2] * shape[3] >= 2**31:
        raise ValueError(f"x of shape {tuple(x.shape)} is too large for 32-bit offsets")
    return shape
