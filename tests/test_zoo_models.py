"""The zoo's MBConv blocks and ConvFirstNet variants: folding, tracing, sizes."""
import pytest
import torch

import perfmodel
from perfmodel.zoo.blocks import ConvFirstBlock, fold_batchnorm
from perfmodel.zoo.convfirstnet import MODELS
from perfmodel.zoo.mbconv import FusedMBConv, MBConv

from helpers import randomize_batchnorm


@pytest.mark.parametrize("block", [MBConv(16, 4, 3), MBConv(16, 6, 5), FusedMBConv(16, 4)],
                         ids=["mbconv3", "mbconv5", "fused"])
def test_mbconv_fold_is_exact_in_float32(block):
    block = randomize_batchnorm(block)
    x = torch.randn(2, 16, 9, 9)
    folded = fold_batchnorm(block)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    with torch.no_grad():
        torch.testing.assert_close(folded(x), block(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_convfirstnet_variants_trace_fully(name):
    spec = perfmodel.load_spec(name)  # each variant has a model spec
    r = perfmodel.analyze_spec(spec, batch=2, plan="block:ConvFirstBlock")
    assert r.unsupported == {}
    blocks = [m for m in MODELS[name]().modules() if isinstance(m, ConvFirstBlock)]
    assert sum(k.kernel.name.startswith("stages.") for k in r.kernels) == len(blocks)


def test_convfirstnet_sizes_span_1_to_10_gmacs():
    gmacs = {n: perfmodel.analyze_spec(n, batch=1).gmacs_per_image for n in MODELS}
    assert 0.9 <= min(gmacs.values()) <= 1.2
    assert 8 <= max(gmacs.values()) <= 10.5


def test_convfirst_block_macs_literal():
    # grouped 3x3 (T=8) + expand C->aC + project aC->C at HxW, plus a stride-1 identity shortcut
    c, a, h = 64, 4, 14
    r = perfmodel.analyze(ConvFirstBlock(c, a), (c, h, h), batch=2, plan="block:ConvFirstBlock")
    assert r.macs == 2 * h * h * (c * 8 * 9 + c * a * c + a * c * c)
    assert len(r.kernels) == 1
    k = r.kernels[0].kernel
    # block-fused: X in, Z out, weights and folded biases
    assert k.dram_bytes == 2 * (2 * 2 * h * h * c + c * 8 * 9 + c + c * a * c + a * c
                                + a * c * c + c)
