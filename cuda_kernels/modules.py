"""Drop-in modules that run inference-form zoo blocks on the fused kernels."""

from __future__ import annotations

import torch
from torch import nn

from cuda_kernels import ops


def _conv_params(conv: nn.Conv2d) -> tuple[torch.Tensor, torch.Tensor | None]:
    return conv.weight, conv.bias


class FusedFFN(nn.Module):
    """Inference-form ``perfmodel.zoo.FFN`` (BN folded) on the fused FFN kernel."""

    def __init__(self, weights: ops.BlockWeights, residual: bool):
        super().__init__()
        self.weights, self.residual = weights, residual

    @staticmethod
    def supports(block: nn.Module) -> bool:
        return (
            isinstance(block.expand, nn.Conv2d)
            and isinstance(block.project, nn.Conv2d)
            and block.out_channels == block.channels
            and block.channels in ops.SUPPORTED_CHANNELS
            and block.expansion in ops.SUPPORTED_EXPANSIONS
        )

    @classmethod
    def from_block(cls, block: nn.Module) -> "FusedFFN":
        expand, project = block.expand, block.project
        if not isinstance(expand, nn.Conv2d) or not isinstance(project, nn.Conv2d):
            raise ValueError("FusedFFN needs the inference form: call perfmodel.zoo.fold_batchnorm first")
        if block.out_channels != block.channels:
            raise ValueError("FusedFFN supports out_channels == channels only")
        w1, b1 = _conv_params(expand)
        w2, b2 = _conv_params(project)
        return cls(ops.prepare_weights(w1, b1, w2, b2), block.residual)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.run_block(x.contiguous(memory_format=torch.channels_last), self.weights, self.residual)


class FusedConvFirstBlock(nn.Module):
    """Inference-form ``perfmodel.zoo.ConvFirstBlock`` (stride 1, group width 8, 3x3) in one kernel."""

    def __init__(self, weights: ops.BlockWeights):
        super().__init__()
        self.weights = weights

    @staticmethod
    def supports(block: nn.Module) -> bool:
        return (
            getattr(block, "stride", None) == 1
            and getattr(block, "group_width", None) == ops.GROUP_WIDTH
            and getattr(block, "kernel_size", None) == 3
            and block.out_channels == block.channels
            and block.channels in ops.SUPPORTED_CHANNELS
            and block.expansion in ops.SUPPORTED_EXPANSIONS
            and isinstance(block.conv, nn.Conv2d)
        )

    @classmethod
    def from_block(cls, block: nn.Module) -> "FusedConvFirstBlock":
        if not isinstance(block.conv, nn.Conv2d):
            raise ValueError("FusedConvFirstBlock needs the inference form: call perfmodel.zoo.fold_batchnorm first")
        if not cls.supports(block):
            raise ValueError(
                "FusedConvFirstBlock supports stride 1, group width 8, 3x3, out_channels == channels, "
                f"C in {ops.SUPPORTED_CHANNELS}, alpha in {ops.SUPPORTED_EXPANSIONS}"
            )
        conv_w, conv_b = _conv_params(block.conv)
        w1, b1 = _conv_params(block.ffn.expand)
        w2, b2 = _conv_params(block.ffn.project)
        return cls(ops.prepare_weights(w1, b1, w2, b2, conv_w, conv_b))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.run_block(x.contiguous(memory_format=torch.channels_last), self.weights, True)


def replace_convfirst_blocks(model: nn.Module) -> nn.Module:
    """Swap, in place, every supported inference-form ConvFirstBlock in ``model`` for the fused module."""
    from perfmodel.zoo.blocks import ConvFirstBlock

    for name, child in model.named_children():
        if isinstance(child, ConvFirstBlock) and FusedConvFirstBlock.supports(child):
            setattr(model, name, FusedConvFirstBlock.from_block(child))
        else:
            replace_convfirst_blocks(child)
    return model


def replace_blocks(model: nn.Module) -> dict[str, int]:
    """Swap, in place, every inference-form zoo block the kernels support for its fused module.

    A supported ``ConvFirstBlock`` becomes one ``FusedConvFirstBlock``; a supported ``FFN``
    (also one inside a ConvFirst block that stays in PyTorch) a ``FusedFFN``. Returns how many
    of each were replaced.
    """
    from perfmodel.zoo.blocks import FFN, ConvFirstBlock

    counts = {"ConvFirstBlock": 0, "FFN": 0}

    def visit(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            if isinstance(child, ConvFirstBlock) and FusedConvFirstBlock.supports(child):
                setattr(parent, name, FusedConvFirstBlock.from_block(child))
                counts["ConvFirstBlock"] += 1
            elif isinstance(child, FFN) and FusedFFN.supports(child):
                setattr(parent, name, FusedFFN.from_block(child))
                counts["FFN"] += 1
            else:
                visit(child)

    visit(model)
    return counts
