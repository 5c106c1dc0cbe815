"""The drop-in module shape the ConvFirst and FFN kernels' modules share (mma.sync, stride 2,
wgmma): prepared weights held as non-persistent buffers, so they follow ``.to()`` and
torch.compile sees them, and a forward that is one custom operator; and what the stride-1 wgmma
ConvFirst kernels (convfirst_c512, convfirst_c768) share: the weight preparation and the module."""

from __future__ import annotations

import torch
from torch import nn


class OpBlock(nn.Module):
    """Subclasses set `WEIGHT_FIELDS` (the buffers, in the operator's argument order), `Weights`
    (the weights' dataclass, built from those fields) and `op` (the custom operator), and give
    ``unsupported(block)``; `SHAPE_FIELDS` name the weights' properties (widths) kept as attributes."""

    WEIGHT_FIELDS: tuple[str, ...] = ()
    SHAPE_FIELDS: tuple[str, ...] = ()
    Weights: type
    op = None

    def __init__(self, weights):
        super().__init__()
        for name in self.WEIGHT_FIELDS:
            self.register_buffer(name, getattr(weights, name), persistent=False)
        for name in self.SHAPE_FIELDS:
            setattr(self, name, getattr(weights, name))

    @classmethod
    def _check(cls, block: nn.Module) -> None:
        reason = cls.unsupported(block)
        if reason is not None:
            raise ValueError(f"{cls.__name__} cannot run this block: {reason}")

    @property
    def weights(self):
        return self.Weights(*(getattr(self, n) for n in self.WEIGHT_FIELDS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tensors = [getattr(self, n) for n in self.WEIGHT_FIELDS]
        return type(self).op(x.contiguous(memory_format=torch.channels_last), *tensors)


def fake_nhwc_output(x: torch.Tensor, channels: int, output_size) -> torch.Tensor:
    """A strided kernel's output for x [N, C, H, W] as its operator's fake: empty [N, channels,
    output_size(H), output_size(W)] in channels_last memory."""
    n, _, h, w = x.shape
    return x.new_empty((n, channels, output_size(h), output_size(w))).contiguous(memory_format=torch.channels_last)


def require_sm90(x: torch.Tensor, kernel: str) -> None:
    """The wgmma kernels run on compute capability 9.0 only (ValueError naming the GPU otherwise)."""
    if torch.cuda.get_device_capability(x.device) != (9, 0):
        raise ValueError(f"{kernel} runs on compute capability 9.0 (H100, H200), not "
                         f"{torch.cuda.get_device_name(x.device)}")


def nhwc_rows(t: torch.Tensor | None, like: torch.Tensor, pixels: int, channels: int) -> torch.Tensor:
    """A channels-last [N, C, H, W] tensor as the kernels' [pixels, C] rows (a view), or, for None, the
    empty tensor that asks the binding to allocate the output."""
    if t is None:
        return torch.empty(0, device=like.device, dtype=torch.float16)
    return t.permute(0, 2, 3, 1).reshape(pixels, channels)


def f32_bias(b: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor:
    """A bias of `n` elements as contiguous fp32 (zeros where there is none)."""
    if b is None:
        return torch.zeros(n, device=device, dtype=torch.float32)
    if b.numel() != n:
        raise ValueError(f"bias has {b.numel()} elements, expected {n}")
    return b.detach().reshape(n).to(torch.float32).contiguous()


def prepare_stride1_weights(kernel: str, unsupported_shape, pack_weights, weights_type: type,
                            conv_w: torch.Tensor, conv_b: torch.Tensor | None, w1: torch.Tensor,
                            b1: torch.Tensor | None, w2: torch.Tensor, b2: torch.Tensor | None):
    """The stride-1 wgmma ConvFirst kernels' ``prepare_weights``: the widths checked by
    ``unsupported_shape(C, hidden)`` (ValueError naming `kernel`), w1 / w2 packed by ``pack_weights(w1, w2)``,
    the conv as mma fragments, fp32 biases, as ``weights_type(conv_w, conv_b, wpack, b1, b2)`` on w1's device."""
    from cuda_kernels.ops import pack_conv_weight

    hidden, channels = w1.shape[0], w2.shape[0]
    reason = unsupported_shape(channels, hidden)
    if reason:
        raise ValueError(f"{kernel} cannot run {reason}")
    if w1.numel() != hidden * channels or w2.numel() != channels * hidden:
        raise ValueError(f"w1 {tuple(w1.shape)} / w2 {tuple(w2.shape)} do not match hidden={hidden}, C={channels}")
    device = w1.device
    wpack = pack_weights(w1.detach().reshape(hidden, channels), w2.detach().reshape(channels, hidden))
    return weights_type(pack_conv_weight(conv_w).to(device), f32_bias(conv_b, channels, device), wpack.to(device),
                        f32_bias(b1, hidden, device), f32_bias(b2, channels, device))


def block_tensors(block: nn.Module) -> tuple:
    """(conv_w, conv_b, w1, b1, w2, b2) of an inference-form stride-1 ConvFirst block: the arguments of the
    stride-1 kernels' ``prepare_weights``."""
    conv, expand, project = block.conv, block.ffn.expand, block.ffn.project
    return conv.weight, conv.bias, expand.weight, expand.bias, project.weight, project.bias


class Stride1OpBlock(OpBlock):
    """The stride-1 wgmma ConvFirst kernels' drop-in module: subclasses also set `prepare` (their
    ``prepare_weights``, as a staticmethod) and give ``unsupported(block)`` (`form_reason` first)."""

    SHAPE_FIELDS = ("channels", "hidden")
    prepare = None

    @staticmethod
    def form_reason(block: nn.Module, unsupported_shape) -> str | None:
        """Why the block is not the stride-1 form, or its widths not ``unsupported_shape``'s, or None."""
        from cuda_kernels.modules import convfirst_form_reason

        return convfirst_form_reason(block) or unsupported_shape(block.channels, block.channels * block.expansion)

    @classmethod
    def from_block(cls, block: nn.Module):
        cls._check(block)
        return cls(cls.prepare(*block_tensors(block)))
