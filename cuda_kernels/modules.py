"""Drop-in modules that run inference-form zoo blocks on the fused kernels."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from cuda_kernels import ops
from cuda_kernels._fused import OpBlock


def _unsupported_width(channels: int, expansion: int) -> str | None:
    reason = ops.unsupported_channels(channels)  # C = 96 and 192 behind ops.L_WIDTHS_SWITCH
    if reason:
        return reason
    if expansion not in ops.SUPPORTED_EXPANSIONS:
        return f"alpha={expansion} (kernels for alpha in {ops.SUPPORTED_EXPANSIONS})"
    return None


def _conv_params(conv: nn.Conv2d) -> tuple[torch.Tensor, torch.Tensor | None]:
    return conv.weight, conv.bias


def convfirst_form_reason(block: nn.Module) -> str | None:
    """Why a ConvFirst block is not the form every stride-1 ConvFirst kernel takes (stride 1,
    group width 8, 3x3, BN folded, C -> C), or None; the width is each kernel's own check."""
    if getattr(block, "stride", None) != 1:
        return f"stride {getattr(block, 'stride', None)}"
    if getattr(block, "group_width", None) != ops.GROUP_WIDTH or getattr(block, "kernel_size", None) != 3:
        return f"group width {getattr(block, 'group_width', None)}, kernel {getattr(block, 'kernel_size', None)}"
    if not isinstance(block.conv, nn.Conv2d):
        return "not in inference form (fold batchnorm first)"
    if block.out_channels != block.channels:
        return f"out_channels {block.out_channels} != channels {block.channels}"
    return None


class _FusedBlock(OpBlock):
    """A block on the mma.sync kernel: the forward is one ``block_fusion::block`` operator, which
    also takes whether the block adds its input."""

    WEIGHT_FIELDS = ops.WEIGHT_FIELDS

    def __init__(self, weights: ops.BlockWeights, residual: bool):
        super().__init__(weights)
        self.channels, self.hidden, self.residual = weights.channels, weights.hidden, residual

    @classmethod
    def supports(cls, block: nn.Module) -> bool:
        return cls.unsupported(block) is None

    @property
    def weights(self) -> ops.BlockWeights:
        return ops.BlockWeights(self.channels, self.hidden, *(getattr(self, n) for n in ops.WEIGHT_FIELDS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tensors = [getattr(self, n) for n in ops.WEIGHT_FIELDS]
        return ops.block_op(x.contiguous(memory_format=torch.channels_last), *tensors, self.residual)


class FusedFFN(_FusedBlock):
    """Inference-form ``perfmodel.zoo.FFN`` (BN folded) on the fused FFN kernel."""

    @staticmethod
    def unsupported(block: nn.Module) -> str | None:
        """Why the kernel cannot run this inference-form FFN, or None if it can."""
        if not isinstance(block.expand, nn.Conv2d) or not isinstance(block.project, nn.Conv2d):
            return "not in inference form (fold batchnorm first)"
        if block.out_channels != block.channels:
            return f"out_channels {block.out_channels} != channels {block.channels}"
        return _unsupported_width(block.channels, block.expansion)

    @classmethod
    def from_block(cls, block: nn.Module) -> "FusedFFN":
        cls._check(block)
        w1, b1 = _conv_params(block.expand)
        w2, b2 = _conv_params(block.project)
        return cls(ops.prepare_weights(w1, b1, w2, b2), block.residual)


class FusedConvFirstBlock(_FusedBlock):
    """Inference-form ``perfmodel.zoo.ConvFirstBlock`` (stride 1, group width 8, 3x3) in one kernel."""

    def __init__(self, weights: ops.BlockWeights):
        super().__init__(weights, residual=True)

    @staticmethod
    def unsupported(block: nn.Module) -> str | None:
        """Why the kernel cannot run this inference-form ConvFirst block, or None if it can."""
        return convfirst_form_reason(block) or _unsupported_width(block.channels, block.expansion)

    @classmethod
    def from_block(cls, block: nn.Module) -> "FusedConvFirstBlock":
        cls._check(block)
        conv_w, conv_b = _conv_params(block.conv)
        w1, b1 = _conv_params(block.ffn.expand)
        w2, b2 = _conv_params(block.ffn.project)
        return cls(ops.prepare_weights(w1, b1, w2, b2, conv_w, conv_b))


@dataclass(frozen=True)
class BlockSwap:
    """What `replace_blocks` did: fused modules per block family, and the blocks of a
    supported family left in PyTorch, by module path, with the reason."""

    fused: dict[str, int]
    fallback: dict[str, str]


def replace_blocks(model: nn.Module) -> BlockSwap:
    """Swap, in place, every inference-form zoo block the kernels support for its fused module.

    A supported ``ConvFirstBlock`` becomes one ``FusedConvFirstBlock`` (``FusedConvFirstDown``
    at stride 2, ``FusedConvFirstC512``, the wgmma kernel, at C = 512 once ``CUDA_KERNELS_C512=1``
    and at the widths ``CUDA_KERNELS_WGMMA_CONVFIRST`` names, see convfirst_c512.py; ``FusedConvFirstC768``
    at C = 768 with ``CUDA_KERNELS_C768=1``, convfirst_c768.py); a supported ``FFN``
    (also one inside a ConvFirst block that stays in PyTorch) a ``FusedFFN``. Blocks of
    either family that stay in PyTorch are listed with the reason, never dropped silently.
    A torchvision ``MBConv`` (EfficientNet; BN folded) becomes a ``FusedMBConv``, likewise.
    Unless ``CUDA_KERNELS_STEM=0``, a ConvFirstNet stem (two 3x3 stride-2 convolutions + ReLU, BN
    folded) becomes a ``FusedStem`` (stem.py), counted as "Stem" (a stem of other widths is listed).
    Unless ``CUDA_KERNELS_EFFNET_STEM=0``, EfficientNet's stem (3x3 stride-2 convolution + SiLU, BN folded)
    becomes a ``FusedEffNetStem`` (effnet_stem.py), counted as "EffNetStem"; where the kernel takes the pair
    (B0, B2; unless ``CUDA_KERNELS_EFFNET_STEM_DW=0``) the stem and the first MBConv become one ``FusedStemMBConv``
    instead (stem_mbconv.py), counted as "StemMBConv" (features.1.0 an identity); a pair it does not take is swapped
    one by one (counted "StemMBConv": 0, not a fallback: nothing stays in PyTorch for it). Unless
    ``CUDA_KERNELS_EFFNET_HEAD=0``, EfficientNet's last layer and its avgpool become one ``FusedEffNetHead``
    (effnet_head.py), counted as "EffNetHead" (a head the kernel cannot take is a fallback). torchvision's
    ``FusedMBConv`` (EfficientNetV2's first stages) has no kernel yet: each one is listed as a fallback, so that a
    benchmark of efficientnet_v2_s says which of its blocks ran in PyTorch.
    """
    from cuda_kernels import convfirst_c512 as c512
    from cuda_kernels import convfirst_c768 as c768
    from cuda_kernels.convfirst_s2 import FusedConvFirstDown
    from cuda_kernels import effnet_stem
    from cuda_kernels import stem as stem_kernel
    from cuda_kernels.mbconv import FusedMBConv
    from perfmodel.zoo.blocks import FFN, ConvFirstBlock

    fused = {"ConvFirstBlock": 0, "FFN": 0}  # other families are counted once the model has one
    fallback: dict[str, str] = {}
    families = ((ConvFirstBlock, FusedConvFirstBlock), (FFN, FusedFFN), (FusedMBConv.block_class(), FusedMBConv))
    # stems: ConvFirstNet's unless CUDA_KERNELS_STEM=0, EfficientNet's unless CUDA_KERNELS_EFFNET_STEM=0
    stems = ((stem_kernel, stem_kernel.FusedStem, "Stem"), (effnet_stem, effnet_stem.FusedEffNetStem, "EffNetStem"))

    from torchvision.models.efficientnet import FusedMBConv as TorchvisionFusedMBConv

    def visit(parent: nn.Module, prefix: str) -> None:
        for name, child in parent.named_children():
            path = f"{prefix}{name}"
            if isinstance(child, TorchvisionFusedMBConv):  # a known block family without a kernel
                fused.setdefault("FusedMBConv", 0)
                fallback[path] = "no fused kernel for FusedMBConv (3x3 convolution expand + 1x1 project) yet"
                continue
            stem = next(((kernel, cls, kind) for kernel, cls, kind in stems
                         if kernel.enabled() and kernel.is_stem(child)), None)
            if stem is not None:
                kernel, fused_cls, kind = stem
                fused.setdefault(kind, 0)
                reason = kernel.unsupported(child)
                if reason is None:
                    setattr(parent, name, fused_cls.from_block(child))
                    fused[kind] += 1
                else:
                    fallback[path] = reason
                continue
            family = next(((cls, fused_cls) for cls, fused_cls in families if isinstance(child, cls)), None)
            if family and family[0] is ConvFirstBlock and getattr(child, "stride", 1) == 2:
                family = (ConvFirstBlock, FusedConvFirstDown)  # the stride-2 kernel (convfirst_s2.py)
            elif family and family[0] is ConvFirstBlock and c768.takes(child):
                family = (ConvFirstBlock, c768.FusedConvFirstC768)  # C = 768 (CUDA_KERNELS_C768, convfirst_c768.py)
            elif family and family[0] is ConvFirstBlock and c512.takes(child):
                family = (ConvFirstBlock, c512.FusedConvFirstC512)  # the wgmma kernel (switches: convfirst_c512.py)
            reason = family and family[1].unsupported(child)
            if family:
                fused.setdefault(family[0].__name__, 0)
            if family and reason is None:
                setattr(parent, name, family[1].from_block(child))
                fused[family[0].__name__] += 1
                continue
            if family:
                fallback[path] = reason
            visit(child, path + ".")

    from cuda_kernels import stem_mbconv

    if stem_mbconv.enabled():  # EfficientNet's stem and first block as one unit (before the stem alone is swapped)
        reason = stem_mbconv.swap(model)
        if reason is None:
            fused["StemMBConv"] = 1
        elif reason != "no stem and MBConv pair":
            fused["StemMBConv"] = 0  # the stem and the block are swapped one by one below
    from cuda_kernels import effnet_head

    if effnet_head.enabled():  # EfficientNet's head and its pool (before visit: the layer is then a fused module)
        path, reason = effnet_head.swap(model)
        if path is not None:
            fused["EffNetHead"] = int(reason is None)
            if reason is not None:
                fallback[path] = reason
    visit(model, "")
    return BlockSwap(fused, fallback)
