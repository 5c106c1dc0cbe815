"""Eqs. 21-23 by literal arithmetic: ops 2*NPQK*TRS + K, elements NHWC + NPQK + KTRS + K."""
import pytest
import torch
from torch import nn

import perfmodel

N, H, W = 2, 8, 8
FP16 = 2  # bytes per element


def one_kernel(module, c, h=H, w=W, plan="op"):
    result = perfmodel.analyze(module, (c, h, w), batch=N, plan=plan, hardware="a5000-paper")
    assert len(result.kernels) == 1
    return result.kernels[0].kernel


CASES = {
    # name: (module, C, expected MACs, expected elements moved)
    "pointwise 64->256": (nn.Conv2d(64, 256, 1), 64,
                          2 * 8 * 8 * 256 * 64,
                          2 * 8 * 8 * 64 + 2 * 8 * 8 * 256 + 256 * 64 + 256),
    "full 3x3 64->64": (nn.Conv2d(64, 64, 3, padding=1), 64,
                        2 * 8 * 8 * 64 * (64 * 3 * 3),
                        2 * 8 * 8 * 64 + 2 * 8 * 8 * 64 + 64 * 64 * 9 + 64),
    "grouped T=32": (nn.Conv2d(128, 128, 3, padding=1, groups=4), 128,
                     2 * 8 * 8 * 128 * (32 * 3 * 3),
                     2 * 8 * 8 * 128 + 2 * 8 * 8 * 128 + 128 * 32 * 9 + 128),
    "grouped T=8": (nn.Conv2d(64, 64, 3, padding=1, groups=8), 64,
                    2 * 8 * 8 * 64 * (8 * 3 * 3),
                    2 * 8 * 8 * 64 + 2 * 8 * 8 * 64 + 64 * 8 * 9 + 64),
    "depthwise 3x3": (nn.Conv2d(32, 32, 3, padding=1, groups=32), 32,
                      2 * 8 * 8 * 32 * (1 * 3 * 3),
                      2 * 8 * 8 * 32 + 2 * 8 * 8 * 32 + 32 * 1 * 9 + 32),
    "stride 2": (nn.Conv2d(64, 128, 3, stride=2, padding=1), 64,  # P = Q = 4
                 2 * 4 * 4 * 128 * (64 * 3 * 3),
                 2 * 8 * 8 * 64 + 2 * 4 * 4 * 128 + 128 * 64 * 9 + 128),
    "dilation 2": (nn.Conv2d(64, 64, 3, padding=2, dilation=2), 64,  # P = H
                   2 * 8 * 8 * 64 * (64 * 3 * 3),
                   2 * 8 * 8 * 64 + 2 * 8 * 8 * 64 + 64 * 64 * 9 + 64),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_conv_ops_and_bytes(case):
    module, c, macs, elements = CASES[case]
    k = one_kernel(module, c)
    out_channels = module.out_channels
    assert k.macs == macs
    assert k.flops == 2 * macs + out_channels  # eq. 22: bias adds count K
    assert k.dram_bytes == elements * FP16  # eq. 23
    assert k.intensity == pytest.approx((2 * macs + out_channels) / (elements * FP16))


def test_transposed_conv_macs():
    # every input element scatters into K/G * R*S outputs: N*H*W*C * K*R*S
    k = one_kernel(nn.ConvTranspose2d(16, 32, 2, stride=2, bias=False), 16)
    assert k.macs == 2 * 8 * 8 * 16 * 32 * 2 * 2
    assert k.output_shape == (2, 32, 16, 16)


class Residual(nn.Module):
    """conv -> BN -> + shortcut -> ReLU: one kernel under the layer plan."""

    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + x)


def test_fused_layer_kernel_reads_shortcut_once():
    c = 64
    k = one_kernel(Residual(c), c, plan="layer")
    assert k.ops[0] == "convolution" and len(k.ops) == 4
    assert k.macs == 2 * 8 * 8 * 64 * 64
    # folded BN becomes a bias of K elements and K bias adds (eq. 22)
    assert k.flops == 2 * (2 * 8 * 8 * 64 * 64) + 64
    assert k.input_bytes == 2 * 8 * 8 * 64 * FP16  # x read once, for conv and shortcut
    assert k.weight_bytes == (64 * 64 + 64) * FP16  # weights + folded bias, no BN stats
    assert k.output_bytes == 2 * 8 * 8 * 64 * FP16  # only the block output is written


def test_plan_kernels_are_built_once_and_frozen():
    import dataclasses

    k = one_kernel(Residual(64), 64, plan="layer")
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.weight_bytes = 0
    with pytest.raises(TypeError):
        k.reads[0] = 1  # the L2-carry bookkeeping is read-only too
    assert isinstance(k.ops, tuple) and isinstance(k.nodes, tuple)
    assert sum(k.reads.values()) == k.input_bytes
    assert sum(k.writes.values()) == k.output_bytes


def test_op_plan_runs_batchnorm_as_its_own_kernel():
    result = perfmodel.analyze(Residual(64), (64, 8, 8), batch=N, plan="op")
    names = [k.kernel.ops[0] for k in result.kernels]
    assert names[:2] == ["convolution", "native_batch_norm"] or names[1].endswith("batch_norm")
    bn = result.kernels[1].kernel
    # reads x (NHWC) and 4 vectors of C statistics, writes NHWC
    assert bn.dram_bytes == (2 * 8 * 8 * 64 * 2 + 4 * 64) * FP16


def test_strided_pointwise_conv_reads_one_pixel_in_four():
    # 1x1 stride 2 touches rows and columns 0, 2, 4, 6 of 8: N * 4 * 4 * C input elements
    k = one_kernel(nn.Conv2d(64, 128, 1, stride=2, bias=False), 64)
    assert k.input_bytes == 2 * 4 * 4 * 64 * FP16
    assert k.dram_bytes == (2 * 4 * 4 * 64 + 2 * 4 * 4 * 128 + 128 * 64) * FP16
    # 3x3 stride 2 windows overlap: every input element is read (the eq. 23 case above)
    assert one_kernel(nn.Conv2d(64, 64, 3, stride=2, padding=1), 64).input_bytes == \
        2 * 8 * 8 * 64 * FP16
