"""What a plan is: its kind, block patterns and custom groups, parsed where they enter
(a spec, an option). Importing this module does not import torch."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError

PLAN_KINDS = ("op", "eager", "layer", "inductor", "block")
# Residual-block classes of torchvision, timm, transformers and perfmodel's zoo: the default
# `block` patterns.
TORCHVISION_BLOCKS = ("BasicBlock", "Bottleneck", "CNBlock", "MBConv", "FusedMBConv",
                      "InvertedResidual", "_InvertedResidual", "EncoderBlock",
                      "SwinTransformerBlock", "SwinTransformerBlockV2", "MaxVitBlock",
                      "ResBottleneckBlock", "InceptionA", "InceptionB", "InceptionC", "InceptionD",
                      "InceptionE", "Inception", "Fire", "_DenseLayer")
# timm: ConvNeXt, ViT/DeiT/BEiT (`Block`), EfficientNet/MobileNet, ResNet(V2), RegNet, Swin,
# MaxViT/CoAtNet, ByobNet, EVA, MLP-Mixer, DenseNet
TIMM_BLOCKS = ("ConvNeXtBlock", "Block", "ResPostBlock", "DepthwiseSeparableConv",
               "UniversalInvertedResidual", "EdgeResidual", "PreBottleneck", "PreActBasic",
               "PreActBottleneck", "MbConvBlock", "TransformerBlock2d", "MaxxVitBlock",
               "BottleneckBlock", "DarkBlock", "EdgeBlock", "SelfAttnBlock", "EvaBlock",
               "MixerBlock", "DenseLayer")
# transformers: encoder and decoder layers of the common text and vision models
TRANSFORMERS_BLOCKS = ("BertLayer", "RobertaLayer", "XLMRobertaLayer", "ElectraLayer",
                       "AlbertLayer", "TransformerBlock", "ModernBertEncoderLayer", "ViTLayer",
                       "DeiTLayer", "BeitLayer", "Dinov2Layer", "ViTMAELayer", "CLIPEncoderLayer",
                       "SiglipEncoderLayer", "SwinLayer", "Swinv2Layer", "ConvNextLayer",
                       "ConvNextV2Layer", "ResNetBottleNeckLayer", "ResNetBasicLayer", "GPT2Block",
                       "LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer",
                       "GemmaDecoderLayer", "PhiDecoderLayer", "OPTDecoderLayer", "T5Block",
                       "BartEncoderLayer", "BartDecoderLayer", "WhisperEncoderLayer",
                       "WhisperDecoderLayer")
ZOO_BLOCKS = ("ConvFirstBlock", "FFN")
DEFAULT_BLOCKS = TORCHVISION_BLOCKS + TIMM_BLOCKS + TRANSFORMERS_BLOCKS + ZOO_BLOCKS


@dataclass(frozen=True)
class PlanSpec:
    """Which plan, with block patterns and custom groups where they apply."""

    kind: str = "layer"
    blocks: tuple[str, ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()
    freezing: bool = False  # inductor: torch.compile with Inductor's freezing (BN folded)

    @classmethod
    def parse(cls, text: str, *, file: str | None = None, field: str = "plan") -> "PlanSpec":
        """``op``, ``layer``, ``inductor``, ``inductor:freezing``, ``block`` or
        ``block:CNBlock,layer3.*``."""
        kind, _, patterns = str(text).partition(":")
        kind = kind.strip()
        if kind not in PLAN_KINDS:
            raise InputError(f"unknown plan '{text}' (choose from op, eager, layer, inductor, "
                             "inductor:freezing, block, or block:PATTERN[,PATTERN...])",
                             file=file, field=field)
        if kind == "inductor" and patterns.strip():
            if patterns.strip() != "freezing":
                raise InputError(f"the inductor plan takes only ':freezing', got '{text}'",
                                 file=file, field=field)
            return cls(kind, freezing=True)
        blocks = tuple(p.strip() for p in patterns.split(",") if p.strip())
        if blocks and kind != "block":
            raise InputError(f"only the block plan takes patterns, got '{text}'",
                             file=file, field=field)
        return cls(kind, blocks)

    @property
    def block_patterns(self) -> tuple[str, ...]:
        return self.blocks or DEFAULT_BLOCKS

    def __str__(self) -> str:
        text = self.kind + (":" + ",".join(self.blocks) if self.blocks else "")
        text += ":freezing" if self.freezing else ""
        return text + (f"+{len(self.groups)} groups" if self.groups else "")
