"""A user's model in a local file, referenced from a spec as tiny_net.py:build."""
import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        return self.head(x.mean((2, 3)))


def build(width=16):
    return TinyNet(width)


class Untraceable(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # a data-dependent branch: needs real values
            return x
        return -x


def untraceable():
    return Untraceable()
