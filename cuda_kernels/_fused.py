"""The drop-in module shape the ConvFirst and FFN kernels' modules share (mma.sync, stride 2,
wgmma): prepared weights held as non-persistent buffers, so they follow ``.to()`` and
torch.compile sees them, and a forward that is one custom operator."""

from __future__ import annotations

import torch
from torch import nn


class OpBlock(nn.Module):
    """Subclasses set `WEIGHT_FIELDS` (the buffers, in the operator's argument order), `Weights`
    (the weights' dataclass, built from those fields) and `op` (the custom operator), and give
    ``unsupported(block)``."""

    WEIGHT_FIELDS: tuple[str, ...] = ()
    Weights: type
    op = None

    def __init__(self, weights):
        super().__init__()
        for name in self.WEIGHT_FIELDS:
            self.register_buffer(name, getattr(weights, name), persistent=False)

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
