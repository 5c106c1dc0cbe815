"""The stride-2 ConvFirst kernel (cuda_kernels/convfirst_s2.py, csrc/convfirst_s2.cuh).

CPU: the reference against the zoo block in float64, BlurPool arithmetic by hand, the host
checks, the weight preparation, the module swap and its fallback reasons, the operator's fake
implementation. GPU (marked cuda): every supported width and expansion at several sizes, odd
sizes and batches, the output poisoned with NaN first; the kernel's error against the float64
zoo block must be at most twice PyTorch float16's own (and PyTorch's nonzero, else the check
would be blind).
"""

import itertools

import pytest
import torch
from torch import nn

import cuda_kernels
from cuda_kernels import convfirst_s2 as s2
from helpers import channels_last, check_against_float64, misaligned_nhwc, swap_against_float64
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm


@pytest.fixture(autouse=True)
def _mma_sync_only(monkeypatch):
    """This file tests the mma.sync stride-2 kernel: keep `run` without a variant off the wgmma kernel, which
    takes C_in 128 and 256 by default (tests/test_convfirst_s2_wgmma.py tests that one)."""
    monkeypatch.setenv("CUDA_KERNELS_S2_WGMMA", "0")


def down_block(cin: int, expansion: int, cout: int | None = None, seed: int = 0) -> nn.Module:
    """Folded zoo stride-2 block with realistic batchnorm statistics."""
    torch.manual_seed(seed)
    block = ConvFirstBlock(cin, expansion, 2 * cin if cout is None else cout, stride=2)
    return fold_batchnorm(randomize_batchnorm(block, seed=seed))


# ---- CPU ----

@pytest.mark.parametrize("cin,expansion,h,w", [(32, 6, 8, 8), (64, 4, 7, 7), (32, 2, 13, 6), (128, 6, 2, 3)])
def test_reference_is_the_zoo_block_in_float64(cin, expansion, h, w):
    block = down_block(cin, expansion).double()
    x = torch.randn(2, cin, h, w, dtype=torch.float64)
    with torch.no_grad():
        want = block(x)
        got = s2.reference(x, s2.FoldedWeights.from_block(block))
    assert got.shape == (2, 2 * cin, (h + 1) // 2, (w + 1) // 2)
    assert relative_error(got, want) < 1e-13


def test_blur_pool_by_hand():
    # 2x2: reflect padding repeats the other row/column, so the one output is the mean
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).reshape(1, 1, 2, 2)
    assert s2.blur_pool(x).item() == 2.5
    # 3x3 -> 2x2: each output averages a 2x2 block (the reflected tap doubles the inner one)
    x = torch.arange(9.0).reshape(1, 1, 3, 3)
    assert s2.blur_pool(x).reshape(-1).tolist() == [2.0, 3.0, 5.0, 6.0]
    # 4x4, interior output (1, 1): rows 1..3, cols 1..3 with weights [1 2 1] x [1 2 1] / 16
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    weights = [[1, 2, 1], [2, 4, 2], [1, 2, 1]]
    want = sum(weights[a][b] * (4 * (1 + a) + (1 + b)) for a in range(3) for b in range(3)) / 16
    assert s2.blur_pool(x)[0, 0, 1, 1].item() == want == 10.0


def test_output_size():
    assert [s2.output_size(n) for n in (56, 28, 14, 7, 2, 3)] == [28, 14, 7, 4, 1, 2]


def _reflect(i: int, n: int) -> int:
    return -i if i < 0 else (2 * n - 2 - i if i >= n else i)


@pytest.mark.parametrize("w", [2, 3, 7, 13, 14, 27, 28, 55, 56])
def test_tile_rows_fit_the_kernels_buffers(w):
    """csrc/convfirst_s2.cuh sizes its phase-A buffers for 4 * 128 + 3 * 56 input pixels and
    4 * 128 + 56 conv pixels. A tile of R whole output rows (R * Wo <= 128, rows counted over
    n * Ho + ho) reads the conv rows ylo..yhi and the input rows one further on each side: every
    blur tap of the tile must lie in ylo..yhi, and the counts must fit, for even and odd H and
    tiles that cross images."""
    n, wo = 3, s2.output_size(w)
    for h in range(2, 30):
        ho = s2.output_size(h)

        def centre(j):  # global input row at the middle of output row j's blur window
            return (j // ho) * h + 2 * (j % ho)

        for rows in range(1, 128 // wo + 1):
            for j0 in range(0, n * ho, rows):
                j1 = min(j0 + rows, n * ho) - 1
                ylo, yhi = max(centre(j0) - 1, 0), min(centre(j1) + 1, n * h - 1)
                xlo, xhi = max(ylo - 1, 0), min(yhi + 1, n * h - 1)
                assert (xhi - xlo + 1) * w <= 4 * 128 + 3 * 56 and (yhi - ylo + 1) * w <= 4 * 128 + 56
                for j in range(j0, j1 + 1):
                    for a in range(3):
                        row = (j // ho) * h + _reflect(2 * (j % ho) + a - 1, h)
                        assert ylo <= row <= yhi


def test_prepare_weights_layouts_and_the_merged_bias():
    block = down_block(64, 4)
    w = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    assert (w.in_channels, w.out_channels, w.hidden) == (64, 128, 256)
    assert w.conv_w.shape == (8, 9, 32) and w.conv_w.dtype == torch.int32
    assert w.w1.shape == (256, 64) and w.w2.shape == (128, 256) and w.ws.shape == (128, 64)
    assert {t.dtype for t in (w.w1, w.w2, w.ws)} == {torch.float16}
    want = block.ffn.project.bias.double() + block.shortcut[1].bias.double()
    assert torch.allclose(w.bo.double(), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("cin,cout,hidden,reason", [
    (256, 512, 1536, "C 256 -> 512"), (64, 64, 256, "C 64 -> 64"), (32, 64, 96, "hidden 96"),
    (64, 128, 64 * 8, "hidden 512"),
])
def test_unsupported_widths_have_a_reason(monkeypatch, cin, cout, hidden, reason):
    monkeypatch.setenv("CUDA_KERNELS_C512", "0")  # 256 -> 512 has a kernel behind this switch (on by default)
    assert s2.unsupported_shape(cin, cout, hidden).startswith(reason)


def test_supported_widths():
    for (cin, cout), alpha in itertools.product(s2.SUPPORTED_WIDTHS, s2.SUPPORTED_EXPANSIONS):
        assert s2.unsupported_shape(cin, cout, alpha * cin) is None


def _weights(cin=32):
    return s2.prepare_weights(s2.FoldedWeights.from_block(down_block(cin, 2)))


@pytest.mark.parametrize("make,message", [
    (lambda: torch.zeros(32, 8, 8, dtype=torch.float16), r"\[N, C, H, W\]"),
    (lambda: torch.zeros(1, 32, 8, 8, dtype=torch.float16), "channels_last"),
    (lambda: channels_last(torch.zeros(1, 32, 8, 8)), "float16"),
    (lambda: channels_last(torch.zeros(1, 64, 8, 8, dtype=torch.float16)), "64 channels"),
    (lambda: channels_last(torch.zeros(1, 32, 8, 57, dtype=torch.float16)), "W <= 56"),
    (lambda: channels_last(torch.zeros(1, 32, 1, 8, dtype=torch.float16)), "H >= 2"),
    (lambda: misaligned_nhwc((1, 32, 4, 4)), "16-byte aligned"),
    (lambda: channels_last(torch.zeros(1, 32, 8, 8, dtype=torch.float16)), "CUDA tensor"),
])
def test_host_checks(make, message):
    with pytest.raises(ValueError, match=message):
        s2.check_input(make(), _weights())


def test_host_checks_on_out():
    x = channels_last(torch.zeros(2, 32, 8, 8, dtype=torch.float16))
    w = _weights()
    with pytest.raises(ValueError, match=r"shape \(2, 64, 4, 4\)"):
        s2.check_input(x, w, channels_last(torch.zeros(2, 64, 8, 8, dtype=torch.float16)))
    flat = torch.zeros(2 * 32 * 8 * 8, dtype=torch.float16)  # out inside x's memory
    x = flat.as_strided((2, 32, 8, 8), (8 * 8 * 32, 1, 8 * 32, 32))
    out = flat.as_strided((2, 64, 4, 4), (4 * 4 * 64, 1, 4 * 64, 64))
    with pytest.raises(ValueError, match="overlap"):
        s2.check_input(x, w, out)


def test_module_reasons(monkeypatch):
    monkeypatch.setenv("CUDA_KERNELS_C512", "0")
    unsupported = s2.FusedConvFirstDown.unsupported
    assert unsupported(down_block(32, 6)) is None
    assert unsupported(fold_batchnorm(ConvFirstBlock(32, 6))).startswith("stride 1")
    assert unsupported(ConvFirstBlock(32, 6, 64, stride=2)) == "not in inference form (fold batchnorm first)"
    assert "no 1x1 shortcut conv" in unsupported(down_block(32, 6, cout=32))
    assert unsupported(down_block(256, 4)).startswith("C 256 -> 512")
    assert unsupported(down_block(32, 3)).startswith("hidden 96")
    with pytest.raises(ValueError, match="stride 1"):
        s2.FusedConvFirstDown.from_block(fold_batchnorm(ConvFirstBlock(32, 6)))


def test_replace_blocks_swaps_stride_2_blocks_and_names_the_rest(monkeypatch):
    monkeypatch.setenv("CUDA_KERNELS_C512", "0")  # so that 256 -> 512 falls back, with its reason
    monkeypatch.setenv("CUDA_KERNELS_WGMMA_CONVFIRST", "0")  # the stride-1 C = 64 block on the mma.sync kernel
    net = nn.Sequential(down_block(32, 6), fold_batchnorm(ConvFirstBlock(64, 6)), down_block(256, 4, seed=1),
                        down_block(64, 4, cout=64, seed=2))
    swap = cuda_kernels.replace_blocks(net)
    # block 3 stays in PyTorch, but its FFN (64 -> 64) runs on the FFN kernel
    assert swap.fused == {"ConvFirstBlock": 2, "FFN": 1}
    assert isinstance(net[3].ffn, cuda_kernels.FusedFFN)
    assert isinstance(net[0], s2.FusedConvFirstDown) and isinstance(net[1], cuda_kernels.FusedConvFirstBlock)
    assert set(swap.fallback) == {"2", "2.ffn", "3"}
    assert swap.fallback["2"].startswith("C 256 -> 512")
    assert swap.fallback["2.ffn"] == "out_channels 512 != channels 256"
    assert "no 1x1 shortcut conv" in swap.fallback["3"]
    assert (net[0].in_channels, net[0].out_channels) == (32, 64)


def test_fake_operator_gives_the_strided_channels_last_output():
    from torch._subclasses.fake_tensor import FakeTensorMode

    w = _weights(64)
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = channels_last(torch.empty(3, 64, 7, 9, dtype=torch.float16))
        y = torch.ops.convfirst_s2.block(x, *(getattr(w, n) for n in s2.WEIGHT_FIELDS))
    assert tuple(y.shape) == (3, 128, 4, 5)
    assert y.stride() == (4 * 5 * 128, 1, 5 * 128, 128) and y.dtype == torch.float16


# ---- GPU ----

def check_kernel(cin: int, expansion: int, batch: int, h: int, w: int | None = None, **kwargs) -> float:
    """Run the kernel on the poisoned output and compare against the float64 zoo block."""
    w = h if w is None else w
    block = down_block(cin, expansion, seed=cin + h).cuda()
    x = channels_last(torch.randn(batch, cin, h, w, device="cuda", dtype=torch.float16))
    weights = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    shape = (batch, 2 * cin, s2.output_size(h), s2.output_size(w))
    return check_against_float64(block, x, lambda out: s2.run(x, weights, out=out, **kwargs), shape)


@pytest.mark.cuda
@pytest.mark.parametrize("widths,expansion,size", list(itertools.product(
    s2.SUPPORTED_WIDTHS, s2.SUPPORTED_EXPANSIONS, (56, 28, 14, 7))))
def test_every_supported_shape(widths, expansion, size):
    check_kernel(widths[0], expansion, 3 if size >= 28 else 5, size)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,batch,h,w", [
    (32, 3, 13, 13), (64, 1, 7, 7), (128, 5, 9, 9), (32, 2, 55, 55), (64, 7, 10, 6), (128, 3, 2, 2),
    (32, 11, 3, 5), (64, 2, 27, 27),
])
def test_odd_sizes_and_batches(cin, batch, h, w):
    check_kernel(cin, 6, batch, h, w)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,size", [(32, 56), (64, 28), (128, 14)])
@pytest.mark.parametrize("batch", [128, 1, 37])
def test_convfirstnet_s_shapes(cin, size, batch):
    check_kernel(cin, 6, batch, size)


@pytest.mark.cuda
@pytest.mark.parametrize("rows_per_tile", [1, 2, 3, 4])
@pytest.mark.parametrize("cin,size,variant", [(32, 14, 0), (64, 13, 0), (128, 7, 0), (128, 15, 1)])
def test_tiles_across_images(cin, size, variant, rows_per_tile):
    """Explicit tile heights: tiles of 2-4 output rows straddle images (Ho = 7, 4 or 8)."""
    check_kernel(cin, 4, 3, size, rows_per_tile=rows_per_tile, variant=variant)


OTHER_VARIANTS = [(cin, v) for cin, vs in s2.VARIANTS.items() for v in vs if v]


@pytest.mark.cuda
@pytest.mark.parametrize("cin,variant", OTHER_VARIANTS)
@pytest.mark.parametrize("size,batch", [(56, 4), (13, 3), (14, 37), (7, 1)])
def test_other_variants(monkeypatch, cin, variant, size, batch):
    """Two blocks per SM, 64-pixel tiles, deeper weight rings: the same results. 384 -> 768's kernel is in the
    C=768 extension, off by default (convfirst_c768.SWITCH): switched on for its cases, as tests/test_convfirst_c768.py
    does."""
    if (cin, 2 * cin) in s2.C768_WIDTHS:
        from cuda_kernels import convfirst_c768

        monkeypatch.setenv(convfirst_c768.SWITCH, "stride2")
    check_kernel(cin, 6, batch, size, variant=variant)


@pytest.mark.cuda
def test_no_variant_1_for_32_channels():
    with pytest.raises(ValueError, match="no variant 1"):
        check_kernel(32, 6, 1, 8, variant=1)


def test_default_variants():
    """From the H200 measurements (NOTES.md): C_in 64 two blocks per SM, and at 56x56 the deeper weight ring
    (variant 2: 175.4 and 177.4 us against variant 1's 184.3 and 186.5 in two calls); C_in 128 64-pixel tiles
    at 14x14 input (7x7 output, 896 rows of tiles), 128-pixel tiles at 28x28."""
    assert [s2.default_variant(32, 56), s2.default_variant(64, 28), s2.default_variant(64, 56),
            s2.default_variant(128, 14), s2.default_variant(128, 28)] == [0, 1, 2, 1, 0]
    assert all(s2.default_variant(c, w) in s2.VARIANTS[c] for c in s2.VARIANTS for w in (7, 14, 28, 56))


@pytest.mark.cuda
def test_raw_op_refuses_overlap_and_bad_shapes():
    block = down_block(32, 2).cuda()
    weights = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    ext = s2._extension()
    x = torch.randn(2 * 8 * 8, 32, device="cuda", dtype=torch.float16)
    args = [weights.conv_w, weights.conv_b, weights.w1, weights.b1, weights.w2, weights.ws, weights.bo]
    with pytest.raises(RuntimeError, match="overlap"):
        ext.convfirst_s2(x, *args, 2, 8, 8, 0, 0, x.view(-1)[: 2 * 4 * 4 * 64].view(-1, 64))
    with pytest.raises(RuntimeError, match="bad N, H, W"):
        ext.convfirst_s2(x, *args, 2, 8, 7, 0, 0, torch.empty(0, device="cuda", dtype=torch.float16))
    assert s2.shared_memory_need(128, 256) <= torch.cuda.get_device_properties(0).shared_memory_per_block_optin


@pytest.mark.cuda
def test_swapped_network_matches_pytorch():
    net = nn.Sequential(down_block(32, 6), fold_batchnorm(randomize_batchnorm(ConvFirstBlock(64, 6))),
                        down_block(64, 6, seed=3)).cuda().half()
    x = channels_last(torch.randn(4, 32, 28, 28, device="cuda", dtype=torch.float16))
    swap, got, exact = swap_against_float64(net, x)
    assert swap.fused == {"ConvFirstBlock": 3, "FFN": 0} and swap.fallback == {}
    assert got.shape == (4, 128, 7, 7)
    assert relative_error(got, exact) < 5e-3
