"""CPU tests of the zoo's FFN and ConvFirst blocks and of BatchNorm folding."""

import pytest
import torch
from torch import nn

from perfmodel.zoo import FFN, BlurPool, ConvBN, ConvFirstBlock, fold_batchnorm

from helpers import randomize_batchnorm


def assert_folded_matches(model: nn.Module, x: torch.Tensor) -> nn.Module:
    model = randomize_batchnorm(model)
    folded = fold_batchnorm(model)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules())
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules()), "the original must be left alone"
    with torch.no_grad():
        expected, got = model(x), folded(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    return folded


def test_convbn_fold_is_the_same_affine_map():
    block = randomize_batchnorm(ConvBN(16, 24, kernel_size=3, groups=2))
    x = torch.randn(2, 16, 9, 9)
    conv = block.fold()
    assert isinstance(conv, nn.Conv2d) and conv.bias is not None and conv.groups == 2
    torch.testing.assert_close(conv(x), block(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("expansion", [2, 4, 6])
def test_ffn_fold(expansion, residual):
    x = torch.randn(3, 32, 7, 7)
    folded = assert_folded_matches(FFN(32, expansion, residual=residual), x)
    assert isinstance(folded.expand, nn.Conv2d) and folded.expand.out_channels == 32 * expansion
    assert folded(x).shape == x.shape


def test_ffn_matches_equation_30():
    block = fold_batchnorm(randomize_batchnorm(FFN(8, 4)))
    x = torch.randn(5, 8, 1, 1)
    xm = x.flatten(1)
    u, a = block.expand.weight.flatten(1), block.expand.bias
    v, b = block.project.weight.flatten(1), block.project.bias
    expected = torch.relu(xm @ u.T + a) @ v.T + b
    torch.testing.assert_close(block(x).flatten(1), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels,size", [(32, 14), (64, 7), (16, 9)])
def test_convfirst_stride1_fold(channels, size):
    x = torch.randn(2, channels, size, size)
    folded = assert_folded_matches(ConvFirstBlock(channels, expansion=4), x)
    assert folded.conv.groups == channels // 8 and folded.conv.kernel_size == (3, 3)
    assert folded(x).shape == x.shape


def test_convfirst_stride2_downsamples_with_blurpool():
    x = torch.randn(2, 32, 14, 14)
    block = ConvFirstBlock(32, expansion=2, out_channels=64, stride=2)
    assert isinstance(block.pool, BlurPool)
    folded = assert_folded_matches(block, x)
    assert folded(x).shape == (2, 64, 7, 7)


def test_convfirst_stride1_is_residual():
    block = fold_batchnorm(randomize_batchnorm(ConvFirstBlock(16)))
    with torch.no_grad():
        block.ffn.project.weight.zero_()
        block.ffn.project.bias.zero_()
    x = torch.randn(1, 16, 5, 5)
    torch.testing.assert_close(block(x), x)


def test_blurpool_keeps_constants():
    pool = BlurPool(4)
    y = pool(torch.full((1, 4, 8, 8), 3.0))
    assert y.shape == (1, 4, 4, 4)
    torch.testing.assert_close(y, torch.full_like(y, 3.0))


def test_fold_is_a_copy_in_eval_mode():
    block = ConvFirstBlock(16).train()
    folded = fold_batchnorm(block)
    assert block.training and not folded.training
    assert isinstance(block.conv, ConvBN)


@pytest.mark.parametrize(
    "kwargs,match",
    [({"channels": 12}, "multiple of group_width"), ({"channels": 16, "stride": 3}, "stride")],
)
def test_convfirst_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ConvFirstBlock(**kwargs)


def test_residual_ffn_needs_equal_channels():
    with pytest.raises(ValueError, match="out_channels"):
        FFN(16, out_channels=32, residual=True)
