"""The fused MBConv (cuda_kernels/mbconv.py): reference and BN folding against torchvision in
float64, shape policy, the swap in EfficientNet (CPU); and, on a GPU, the kernels against a
float64 / float32 reference for every MBConv shape of EfficientNet-B0 and -B2, within 2x
PyTorch float16's own error, outputs poisoned with NaN first."""

import copy
import os

import pytest
import torch
from torch import nn
from torchvision.models.efficientnet import MBConv, MBConvConfig

import cuda_kernels
from cuda_kernels import mbconv as mb
from perfmodel.harness import relative_error
from perfmodel.zoo import fold_batchnorm

from helpers import dynamo_graph
from mbconv_helpers import DISTINCT, mbconv_shapes
from mbconv_helpers import block_of as _block
from mbconv_helpers import check_on_gpu as _check_on_gpu
from mbconv_helpers import emulated_mbconv
from mbconv_helpers import fresh_model as _model
from mbconv_helpers import gpu_input as _gpu_input

# kernel-1 versions the GPU tests run (all by default; a device call may narrow it to save time)
VERSIONS = tuple(int(v) for v in os.environ.get("MBCONV_TEST_VERSIONS", ",".join(map(str, mb.VERSIONS))).split(","))




# ---- CPU: reference, folding, policy ----

@pytest.mark.parametrize("name,path", DISTINCT)
def test_reference_equals_the_torchvision_block_in_float64(name, path):
    block = _block(name, path).double()
    c, _, _ = mbconv_shapes(name)[path]
    x = torch.randn(2, c, 11, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = block(x)
        got = mb.reference(x, mb.block_params(fold_batchnorm(block)))
    assert got.shape == expected.shape
    assert relative_error(got, expected) < 1e-12
    assert expected.abs().mean() > 0.05  # not a trivially small output


def test_fold_batchnorm_keeps_efficientnet_b0_in_float64():
    model = _model("efficientnet_b0").double()
    folded = fold_batchnorm(model)
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, got = model(x), folded(x)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules())
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 49  # 16 blocks' 2-3 each, stem, head
    assert relative_error(got, expected) < 1e-12


def test_replace_blocks_swaps_every_mbconv_of_efficientnet_b0(monkeypatch):
    from cuda_kernels import stem_mbconv

    monkeypatch.setenv(stem_mbconv.SWITCH, "0")  # block 1.0 as an MBConv, not in one unit with the stem
    net = fold_batchnorm(_model("efficientnet_b0"))
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused == {"ConvFirstBlock": 0, "FFN": 0, "MBConv": 16, "EffNetStem": 1,
                          "EffNetHead": 1} and swap.fallback == {}
    fused = dict((p, m) for p, m in net.named_modules() if isinstance(m, cuda_kernels.FusedMBConv))
    assert len(fused) == 16 and not any(isinstance(m, MBConv) for m in net.modules())
    # torchvision's B0 table: stages 1..7 with (kernel, stride of the first block, channels out)
    for path, (k, s, c_out, residual) in {
        "features.1.0": (3, 1, 16, False), "features.2.0": (3, 2, 24, False), "features.2.1": (3, 1, 24, True),
        "features.3.0": (5, 2, 40, False), "features.4.2": (3, 1, 80, True), "features.5.0": (5, 1, 112, False),
        "features.6.3": (5, 1, 192, True), "features.7.0": (3, 1, 320, False),
    }.items():
        m = fused[path]
        assert (m.kernel_size, m.stride, m.out_channels, m.residual) == (k, s, c_out, residual), path
    assert fused["features.1.0"].w_exp.numel() == 0  # expand ratio 1: no expand conv


def test_efficientnet_v2s_fusedmbconv_blocks_are_listed_as_fallbacks():
    """EfficientNetV2-S (torchvision's table): FusedMBConv stages of 2, 4 and 4 blocks, no kernel for them yet, each
    listed with the reason; MBConv stages of 6, 9 and 15 blocks, all fused; its 3 -> 24 stem has no kernel either."""
    net = fold_batchnorm(_model("efficientnet_v2_s"))
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused["FusedMBConv"] == 0 and swap.fused["MBConv"] == 6 + 9 + 15
    fallback = dict(swap.fallback)
    assert fallback.pop("features.0") == "C 3 -> 24 (the kernel has (32, 40, 48))"
    assert sorted(fallback) == [f"features.{stage}.{i}" for stage, n in ((1, 2), (2, 4), (3, 4)) for i in range(n)]
    assert set(fallback.values()) == {"no fused kernel for FusedMBConv (3x3 convolution expand + 1x1 project) yet"}


def test_unfolded_and_training_blocks_fall_back_with_their_reason():
    net = _model("efficientnet_b0")
    swap = cuda_kernels.replace_blocks(copy.deepcopy(net))
    assert swap.fused["MBConv"] == swap.fused["EffNetStem"] == swap.fused["EffNetHead"] == 0
    assert len(swap.fallback) == 16 + 2  # + the stem and the head
    assert swap.fallback.pop("features.0") == "not in inference form (fold batchnorm first)"
    assert swap.fallback.pop("features.8") == "not in inference form (fold batchnorm first)"
    assert set(swap.fallback.values()) == {"depthwise: not in inference form (fold batchnorm first)",
                                           "expand: not in inference form (fold batchnorm first)"}
    block = fold_batchnorm(net.features[2][1]).train()
    assert cuda_kernels.FusedMBConv.unsupported(block) == "training mode (the kernel computes inference only)"


def _tv_block(**cfg) -> nn.Module:
    config = MBConvConfig(**{"expand_ratio": 6, "kernel": 3, "stride": 1, "input_channels": 16,
                             "out_channels": 16, "num_layers": 1, **cfg})
    return fold_batchnorm(MBConv(config, 0.0, nn.BatchNorm2d))


def _project_to_20(block: nn.Module) -> nn.Module:
    block.block[-1][0] = nn.Conv2d(96, 20, 1)  # torchvision's configs round channels to multiples of 8
    return block


@pytest.mark.parametrize("block,reason", [
    (lambda: _tv_block(kernel=7), "depthwise kernel (7, 7) (kernels for k in (3, 5))"),
    (lambda: _project_to_20(_tv_block()), "C_out=20 is not a multiple of 8"),
])
def test_unsupported_shapes_have_a_reason(block, reason):
    assert cuda_kernels.FusedMBConv.unsupported(block()) == reason
    with pytest.raises(ValueError, match="cannot run this block"):
        cuda_kernels.FusedMBConv.from_block(block())


def test_other_activations_and_modules_are_refused():
    block = _tv_block()
    block.block[1][2] = nn.ReLU()
    assert cuda_kernels.FusedMBConv.unsupported(block) == "depthwise: activation ReLU (the kernel has SiLU)"
    assert cuda_kernels.FusedMBConv.unsupported(nn.Conv2d(8, 8, 1)) == "not a torchvision MBConv (Conv2d)"
    block = _tv_block()
    block.block[-1][0] = nn.Conv2d(96, 16, 3, padding=1)
    assert cuda_kernels.FusedMBConv.unsupported(block) == "project: not a plain 1x1 convolution"


def test_host_checks_name_the_problem():
    x = torch.randn(2, 16, 7, 7, dtype=torch.float16)
    with pytest.raises(ValueError, match="channels_last"):
        mb.check_input(x, 16)
    x = x.contiguous(memory_format=torch.channels_last)
    with pytest.raises(ValueError, match=r"\[N, 24, H, W\]"):
        mb.check_input(x, 24)
    with pytest.raises(ValueError, match="float16"):
        mb.check_input(x.float(), 16)
    with pytest.raises(ValueError, match="CUDA"):
        mb.check_input(x, 16)


def test_band_height_and_shared_memory_by_hand():
    # B0 features.2.1: 56x56, C_in 24 (k_pad 32), 3x3 stride 1, chunk 48. A band of r output rows
    # reads r + 2 input rows of 56 pixels (m pixels); X and U take (m + 48) * 40 * 2 bytes,
    # the channel sums 48 * 4.
    # v1: E holds the m pixels, 48 + 8 halves each.
    assert mb.kernel1_smem_bytes(8, 56, 56, 3, 1, 32, 48, True, 1) == 608 * 80 + 560 * 112 + 192 == 111552
    assert mb.kernel1_smem_bytes(9, 56, 56, 3, 1, 32, 48, True, 1) > mb.SMEM_BUDGET  # 616 -> 624 pixels
    assert mb.band_rows(56, 56, 3, 1, 32, 48, True, 1) == 8  # 7 bands of 8 rows
    # v2: E is a zero-bordered tile of 10 rows x 58 columns (4 outputs per thread: 56 + 2)
    assert mb.kernel1_smem_bytes(8, 56, 56, 3, 1, 32, 48, True, 2) == 608 * 80 + 10 * 58 * 112 + 192 == 113792
    assert mb.band_rows(56, 56, 3, 1, 32, 48, True, 2) == 8
    # v2, stride 2, 5x5, 28x28 -> 14 outputs (2 per thread): E is 27 + 4 = 31 wide
    assert mb.kernel1_smem_bytes(1, 28, 28, 5, 2, 48, 48, True, 2) == (
        (_round16(5 * 28) + 48) * 56 * 2 + 5 * 31 * 56 * 2 + 192)
    # 7x7, stride 1: the whole image is one band
    assert mb.band_rows(7, 7, 5, 1, 192, 48, True, 1) == 7 and mb.band_rows(7, 7, 5, 1, 192, 48, True, 2) == 7
    # expand ratio 1 (no X or U tiles): 10 input rows of 10 pixels -> 112 rows of 40 halves
    assert mb.kernel1_smem_bytes(8, 20, 10, 3, 1, 0, 32, False, 1) == 112 * 40 * 2 + 32 * 4
    assert mb.output_size(28, 2) == 14 and mb.output_size(9, 2) == 5 and mb.output_size(7, 1) == 7


def _round16(n: int) -> int:
    return -(-n // 16) * 16


def test_weights_are_packed_zero_padded_to_the_tiles():
    block = _block("efficientnet_b0", "features.2.0")  # 16 -> 24, hidden 96, sq 4
    params = mb.block_params(fold_batchnorm(block))
    w = mb.prepare_weights(params)
    assert mb.chunk_for(96) == 48 and mb.chunk_for(32) == 32 and mb.chunk_for(16) == 32
    assert tuple(w.w_exp.shape) == (96, 16) and w.w_exp.dtype == torch.float16
    assert tuple(w.w_dw.shape) == (9, 96) and w.w_dw[4, 7] == params.dw_w[7, 0, 1, 1]
    assert tuple(w.w_proj.shape) == (64, 96) and w.w_proj[23, 95] == params.project_w[23, 95, 0, 0].half()
    assert (w.w_proj[24:] == 0).all() and (w.b_proj[24:] == 0).all()
    assert tuple(w.w_se1.shape) == (4, 96) and tuple(w.w_se2.shape) == (96, 4)
    w = mb.prepare_weights(mb.block_params(fold_batchnorm(_block("efficientnet_b0", "features.1.0"))))
    assert w.w_exp.numel() == 0 and tuple(w.w_dw.shape) == (9, 32)
    assert tuple(w.w_proj.shape) == (64, 32)  # C_out 16 padded to one 64-wide tile


def test_fused_mbconv_is_one_opaque_operator_under_torch_compile():
    """dynamo captures B0 with its 16 fused blocks as block_fusion::mbconv operators, each
    output channels-last (the fake implementation; nothing runs here)."""
    net = fold_batchnorm(_model("efficientnet_b0")).half()
    cuda_kernels.replace_blocks(net)
    x = torch.randn(2, 3, 64, 64).half().contiguous(memory_format=torch.channels_last)
    graph = dynamo_graph(net, x)
    fused = [n for n in graph.graph.nodes if "mbconv" in str(n.target)]
    assert len(fused) == 16
    second = fused[1].meta["example_value"]  # features.2.0: 16 -> 24 channels, 32 -> 16 pixels
    assert tuple(second.shape) == (2, 24, 16, 16) and second.stride() == (16 * 16 * 24, 1, 16 * 24, 24)


# ---- GPU: the kernels ----

@pytest.mark.cuda
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name,path", DISTINCT)
def test_every_mbconv_shape_of_b0_and_b2(name, path, batch, version):
    torch.manual_seed(batch)
    _check_on_gpu(_block(name, path), _gpu_input(batch, mbconv_shapes(name)[path]), version)


@pytest.mark.cuda
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", ["features.2.1", "features.3.0", "features.4.1", "features.6.1", "features.7.0"])
def test_batch_128_against_float32(path, version):
    torch.manual_seed(0)
    x = _gpu_input(128, mbconv_shapes("efficientnet_b0")[path])
    _check_on_gpu(_block("efficientnet_b0", path), x, version, "float32")


@pytest.mark.cuda
@pytest.mark.parametrize("path,size", [("features.2.0", 9), ("features.3.0", 7), ("features.4.0", 13),
                                       ("features.6.0", 1), ("features.5.1", 23), ("features.1.0", 5),
                                       ("features.2.1", 57), ("features.3.0", 2)])
@pytest.mark.parametrize("version", VERSIONS)
def test_odd_spatial_sizes(path, size, version):
    block = _block("efficientnet_b0", path)
    c = mbconv_shapes("efficientnet_b0")[path][0]
    _check_on_gpu(block, _gpu_input(5, (c, size, size)), version)


@pytest.mark.cuda
@pytest.mark.parametrize("version,path", [(3, p) for p in ("features.1.0", "features.2.0", "features.3.1", "features.5.1")]
                         + [(5, p) for p in ("features.1.0", "features.2.0", "features.3.1", "features.4.0",
                                             "features.5.0", "features.5.1", "features.6.0")]
                         + [(6, p) for p in ("features.1.0", "features.2.0", "features.3.1", "features.4.0")])
def test_v3_batch_128_against_float32(version, path):
    """Version 3's persistent projection over many tiles per CTA, on the blocks it is for; version
    5's tensor-core depthwise on the B0 blocks test_batch_128_against_float32 leaves out."""
    if version not in VERSIONS:
        pytest.skip(f"MBCONV_TEST_VERSIONS leaves out version {version}")
    torch.manual_seed(0)
    x = _gpu_input(128, mbconv_shapes("efficientnet_b0")[path])
    _check_on_gpu(_block("efficientnet_b0", path), x, version, "float32")


@pytest.mark.cuda
@pytest.mark.parametrize("old,new", [(2, 3), (3, 5), (5, 6)])
@pytest.mark.parametrize("path", ["features.1.0", "features.2.1", "features.4.0", "features.6.1", "features.7.0",
                                  "features.3.0"])
def test_v3_agrees_with_v2(path, old, new):
    """Same algorithm and rounding points: v3 differs from v2 in the SiLU approximation only
    (tanh.approx), v5 from v3 in the depthwise's fp16 taps and summation order (tensor cores),
    v6 from v5 in nothing but the pool's summation order, which varies from launch to launch in both
    (test_repeated_launches_agree); their projections are bit for bit the same
    (test_v6_projection_equals_v5_given_a_pool_independent_scale)."""
    if new not in VERSIONS:
        pytest.skip(f"MBCONV_TEST_VERSIONS leaves out version {new}")
    torch.manual_seed(1)
    block = fold_batchnorm(_block("efficientnet_b0", path)).cuda()
    params = mb.block_params(block)
    weights = mb.prepare_weights(params)
    x = _gpu_input(6, mbconv_shapes("efficientnet_b0")[path])
    before, after = (mb.mbconv(x, params, weights, version=v) for v in (old, new))
    assert torch.isfinite(after).all()
    assert relative_error(after, before.double()) < (POOL_ORDER_REL_ERROR if (old, new) == (5, 6) else 3e-3)


def _differ(a: torch.Tensor, b: torch.Tensor) -> str:
    """How two outputs differ, for an assertion message."""
    diff = (a.float() - b.float()).abs()
    return f"{int((a != b).sum())} of {a.numel()} elements differ, max |difference| {diff.max().item():.3g}"


# Versions 5 and 6 add each channel's band sum into kernel 1's shared `red` with float atomicAdd from several warps
# (mbconv_v2.cuh, depthwise_tc: four warps per 8-channel group at features.1.0), so the pool, the SE scale and the
# rounding of D * scale follow the warps' arrival order. Measured on the H200 (2026-11-30,
# examples/measurements/gpu_tests/2026-11-30/stale/): 36 of 1,204,224 outputs differed between two launches, by at
# most 2.4e-4. One fp16 rounding step of a few of the scaled values: the relative L2 difference of such a pair is
# about 1e-6, so 1e-4 leaves room for other inputs and would still catch a wrong tile or channel (~1e-2 and up).
POOL_ORDER_REL_ERROR = 1e-4


@pytest.mark.cuda
@pytest.mark.parametrize("version", [3, 5, 6])
def test_repeated_launches_agree(version):
    """features.1.0 (112 x 112, bands of 10 output rows, hidden 32 = one CTA per band and image) launched 8 times
    on one input. Version 3 (the default; one atomicAdd per (pair, group) thread into each channel's sum, 16 per
    channel) gives the same bits each time; versions 5 and 6 agree within POOL_ORDER_REL_ERROR (their pool's
    summation order varies: the comment above)."""
    if version not in VERSIONS:
        pytest.skip(f"MBCONV_TEST_VERSIONS leaves out version {version}")
    torch.manual_seed(1)
    block = fold_batchnorm(_block("efficientnet_b0", "features.1.0")).cuda()
    params = mb.block_params(block)
    weights = mb.prepare_weights(params)
    x = _gpu_input(6, mbconv_shapes("efficientnet_b0")["features.1.0"])
    first = mb.mbconv(x, params, weights, version=version)
    for _ in range(7):
        again = mb.mbconv(x, params, weights, version=version)
        if version == 3:
            assert torch.equal(again, first), _differ(again, first)
        else:
            assert relative_error(again, first.double()) < POOL_ORDER_REL_ERROR, _differ(again, first)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["features.1.0", "features.2.1", "features.3.0", "features.4.0"])
def test_v6_projection_equals_v5_given_a_pool_independent_scale(path):
    """Version 6 is version 5 with project_bulk (these four blocks: hidden <= 240, test_mbconv_v6.py) for the
    projection: the same D, scale, fragments and k order, so the same bits. With the SE's second layer zeroed
    the scale is sigmoid(b_se2) whatever the pool (fmaf(0, s, b) = b), which takes kernel 1's pool summation
    order (test_repeated_launches_agree) out of the comparison: a difference here is the
    projection's."""
    if 5 not in VERSIONS or 6 not in VERSIONS:
        pytest.skip("MBCONV_TEST_VERSIONS leaves out version 5 or 6")
    torch.manual_seed(1)
    block = fold_batchnorm(_block("efficientnet_b0", path))
    se = block.block[-2]
    with torch.no_grad():  # torchvision initialises the bias to 0: a random one, so that the scale varies by channel
        se.fc2.weight.zero_()
        se.fc2.bias.copy_(torch.randn(se.fc2.bias.shape, generator=torch.Generator().manual_seed(2)))
    assert se.fc2.bias.std() > 0.5
    block = block.cuda()
    params = mb.block_params(block)
    weights = mb.prepare_weights(params)
    x = _gpu_input(6, mbconv_shapes("efficientnet_b0")[path])
    before, after = (mb.mbconv(x, params, weights, version=v) for v in (5, 6))
    assert torch.isfinite(after).all()
    assert torch.equal(after, before), _differ(after, before)


@pytest.mark.cuda
def test_efficientnet_b0_through_bench_fused_model():
    """The mechanism `perfmodel bench --backend cuda_kernels` uses: every MBConv swapped and
    checked against its folded PyTorch block on the input it receives (check_blocks)."""
    from perfmodel.bench import fused_model

    model = _model("efficientnet_b0").cuda().half().to(memory_format=torch.channels_last)
    x = _gpu_input(4, (3, 224, 224))
    fused, info = fused_model(model, [x])
    assert info["fused_blocks"]["MBConv"] == 15 and info["fused_blocks"]["StemMBConv"] == 1
    assert info["fallback_count"] == 0
    assert info["fused_blocks"]["EffNetHead"] == 1  # effnet_head, on by default since session 21
    assert info["check"]["blocks_checked"] == 17  # 15 MBConv + the stem with block 1.0 (stem_mbconv) + the head
    with torch.no_grad():
        expected = fold_batchnorm(model)(x)
        got = fused(x)
    assert relative_error(got, expected.double()) < 5e-2


@pytest.mark.cuda
def test_the_raw_op_refuses_overlapping_output():
    block = fold_batchnorm(_block("efficientnet_b0", "features.2.1")).cuda().half()
    params = mb.block_params(block)
    x = _gpu_input(2, (24, 14, 14))
    with pytest.raises(RuntimeError, match="out must not overlap x"):
        mb.mbconv(x, params, out=x)


# ---- CPU: version 2's tile arithmetic, transliterated from csrc/mbconv_v2.cuh ----

def _emulate_v2_depthwise(e: torch.Tensor, w: torch.Tensor, stride: int, rows_per_tile: int) -> torch.Tensor:
    """Depthwise k x k (padding k // 2) of e [C, H, W] as kernel 1 v2 tiles it: per band, a
    zero-bordered E tile (rows r0 .. r0 + e_rows - 1, columns -PAD .. WE - PAD - 1) holding the
    image pixels at `e_off + row * WE + col`; each thread-item computes OW outputs of a row from
    one register segment of IN inputs per tap row. Asserts every read stays inside the tile that
    the shared-memory layout reserves (rows_max x WE)."""
    c, height, width = e.shape
    ks = w.shape[-1]
    pad, ow_per = ks // 2, (4 if stride == 1 else 2)
    n_in = (ow_per - 1) * stride + ks
    out_h, out_w = mb.output_size(height, stride), mb.output_size(width, stride)
    rows_max = (rows_per_tile - 1) * stride + ks
    ngroups = -(-out_w // ow_per)
    we = (ngroups * ow_per - 1) * stride + ks
    out = torch.full((c, out_h, out_w), float("nan"), dtype=e.dtype)
    for band in range(-(-out_h // rows_per_tile)):
        oh0 = band * rows_per_tile
        oh1 = min(oh0 + rows_per_tile, out_h)
        r0 = oh0 * stride - pad
        e_rows = (oh1 - oh0 - 1) * stride + ks
        assert e_rows <= rows_max
        ih_lo, ih_hi = max(0, r0), min(height - 1, r0 + e_rows - 1)
        tile = torch.full((c, e_rows * we), float("nan"), dtype=e.dtype)
        for pos in range(e_rows * we):  # the zero border
            er, ec = divmod(pos, we)
            if not (0 <= r0 + er < height and 0 <= ec - pad < width):
                tile[:, pos] = 0
        e_off = (ih_lo - r0) * we + pad
        for q in range((ih_hi - ih_lo + 1) * width):  # the expand epilogue's positions
            row, col = divmod(q, width)
            tile[:, e_off + row * we + col] = e[:, ih_lo + row, col]
        for item in range((oh1 - oh0) * ngroups):
            orow, og = divmod(item, ngroups)
            ow0 = og * ow_per
            acc = torch.zeros(c, ow_per, dtype=e.dtype)
            for dy in range(ks):
                base = (orow * stride + dy) * we + ow0 * stride
                assert base + n_in - 1 < e_rows * we
                seg = tile[:, base:base + n_in]
                for o in range(ow_per):
                    for dx in range(ks):
                        acc[:, o] += seg[:, o * stride + dx] * w[:, 0, dy, dx]
            for o in range(ow_per):
                if ow0 + o < out_w:
                    out[:, oh0 + orow, ow0 + o] = acc[:, o]
    return out


@pytest.mark.parametrize("size,ks,stride,rows", [(9, 3, 1, 4), (9, 5, 2, 2), (7, 5, 1, 7), (13, 3, 2, 3),
                                                 (6, 5, 2, 1), (1, 3, 2, 1), (10, 3, 1, 3), (11, 5, 1, 2)])
def test_v2_tiles_compute_the_padded_depthwise(size, ks, stride, rows):
    gen = torch.Generator().manual_seed(size * 10 + ks)
    e = torch.randn(4, size, size + 1, dtype=torch.float64, generator=gen)
    w = torch.randn(4, 1, ks, ks, dtype=torch.float64, generator=gen)
    rows = min(rows, mb.output_size(size, stride))
    expected = torch.nn.functional.conv2d(e[None], w, stride=stride, padding=ks // 2, groups=4)[0]
    got = _emulate_v2_depthwise(e, w, stride, rows)
    assert got.shape == expected.shape and torch.isfinite(got).all()
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_bench_fused_model_swaps_and_checks_every_mbconv(monkeypatch):
    """`perfmodel bench --backend cuda_kernels` on EfficientNet-B0, on the CPU: BN folded, 16
    MBConvs swapped, each checked against its folded PyTorch block in float64. The kernels are
    emulated from the packed weights, so this also checks the packing and that the kernels'
    rounding points stay within 2x PyTorch fp16's error."""
    from perfmodel.bench import fused_model

    from cuda_kernels import effnet_stem

    from cuda_kernels import effnet_head

    monkeypatch.setattr(cuda_kernels.FusedMBConv, "forward", emulated_mbconv)
    monkeypatch.setenv(effnet_stem.SWITCH, "0")  # the stem's kernel is emulated in test_effnet_stem.py
    monkeypatch.setenv(effnet_head.SWITCH, "0")  # the head's decomposition is checked in test_effnet_head.py
    model = _model("efficientnet_b0").half().to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3)).half()
    _, info = fused_model(model, [x.contiguous(memory_format=torch.channels_last)])
    assert info["fused_blocks"] == {"ConvFirstBlock": 0, "FFN": 0, "MBConv": 16} and info["fallback_count"] == 0
    check = info["check"]
    assert check["blocks_checked"] == 16
    for row in check["blocks"].values():
        assert 1e-4 < row["torch_relative_error"] < 1e-2
        assert 0 < row["relative_error"] <= 2 * row["torch_relative_error"] and row["passed"]


def test_the_block_table_shows_the_graph_ratio_against_the_best_compile_mode():
    """mbconv_bench's text table: the CUDA-graph column of torch.compile is the best of its modes (200.0 us, not the
    first mode's 250.0) and "x graph" is the best baseline over the fused time (200 / 100); launched one by one the
    small block's ratio reads 5.00 (launch overhead)."""
    from cuda_kernels.mbconv_bench import table

    def timing(launched_ms, graph_ms):
        return {"latency_ms": {"median": launched_ms}, "graph_latency_ms": {"median": graph_ms}}

    row = {"path": "features.4.1", "c": 80, "c_out": 80, "k": 3, "stride": 1, "h": 14, "block_t_min_us": 4.1,
           "speedup_vs_best_baseline": 5.0, "graph_speedup_vs_best_baseline": 2.0,
           "backends": {"cuda_kernels": {**timing(0.1, 0.1), "tflops": 1.0, "fraction_of_block_bound": 0.041,
                                         "version": 11},
                        "eager": timing(0.6, 0.3), "inductor_default": timing(0.5, 0.25),
                        "inductor_max-autotune-no-cudagraphs": timing(0.55, 0.2)}}
    line = table([row], ["default", "max-autotune-no-cudagraphs"]).splitlines()[1]
    assert line.split()[-5:] == ["100.0", "300.0", "200.0", "2.00", "v11;"]
    assert " 5.00 " in line
