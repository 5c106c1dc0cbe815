"""Correctness of the block-fusion CUDA kernels against the float64 reference block.

The fused result must be within 2x PyTorch's own float16 error (the same block run by
PyTorch in float16, channels-last), measured against the same float64 reference, on fresh
random inputs, with the output poisoned (NaN) before every call.
"""

import itertools

import pytest
import torch
from torch import nn

import cuda_kernels
from perfmodel.zoo import FFN, ConvFirstBlock, fold_batchnorm

CHANNELS = cuda_kernels.SUPPORTED_CHANNELS
EXPANSIONS = cuda_kernels.SUPPORTED_EXPANSIONS
SIZES = cuda_kernels.SUPPORTED_SIZES


def random_block(block: nn.Module) -> nn.Module:
    """Inference-form block with random weights and BN statistics, kept at a sane scale."""
    for m in block.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n) * 0.1)
            m.running_var.copy_(torch.rand(n) + 0.5)
            m.weight.data.copy_(torch.rand(n) + 0.5)
            m.bias.data.copy_(torch.randn(n) * 0.1)
    return fold_batchnorm(block.eval())


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got.double() - ref).norm() / ref.norm()).item()


def check_against_reference(block: nn.Module, x: torch.Tensor, run) -> None:
    block = block.cuda()
    with torch.no_grad():
        ref = block.double()(x.double())
        torch_fp16 = block.half()(x)
    out = torch.full_like(x, float("nan"))
    got = run(block, x, out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr()
    assert torch.isfinite(got).all(), "unwritten or non-finite outputs"
    err, torch_err = relative_error(got, ref), relative_error(torch_fp16, ref)
    assert err <= 2 * torch_err, f"kernel error {err:.3g} > 2 x PyTorch fp16 error {torch_err:.3g}"


def cuda_input(batch: int, channels: int, size: int) -> torch.Tensor:
    x = torch.randn(batch, channels, size, size, device="cuda", dtype=torch.float16)
    return x.contiguous(memory_format=torch.channels_last)


def run_convfirst(block, x, out):
    return cuda_kernels.convfirst_block(
        x, block.conv.weight, block.conv.bias, block.ffn.expand.weight, block.ffn.expand.bias,
        block.ffn.project.weight, block.ffn.project.bias, out=out,
    )


def run_ffn(block, x, out):
    return cuda_kernels.ffn(
        x, block.expand.weight, block.expand.bias, block.project.weight, block.project.bias,
        residual=block.residual, out=out,
    )


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,size", list(itertools.product(CHANNELS, EXPANSIONS, SIZES)))
def test_convfirst_all_supported_shapes(channels, expansion, size):
    batch = 3 if size >= 28 else 5
    block = random_block(ConvFirstBlock(channels, expansion))
    check_against_reference(block, cuda_input(batch, channels, size), run_convfirst)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,size,batch", [(32, 9, 1), (64, 13, 7), (128, 5, 3), (256, 3, 11), (64, 1, 2), (32, 23, 3)])
def test_convfirst_sizes_not_multiple_of_tile(channels, size, batch):
    block = random_block(ConvFirstBlock(channels, 4))
    check_against_reference(block, cuda_input(batch, channels, size), run_convfirst)


@pytest.mark.cuda
@pytest.mark.slow
def test_convfirst_largest_batch():
    block = random_block(ConvFirstBlock(64, 4))
    check_against_reference(block, cuda_input(256, 64, 14), run_convfirst)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion", list(itertools.product(CHANNELS, EXPANSIONS)))
@pytest.mark.parametrize("residual", [False, True])
def test_ffn_all_supported_shapes(channels, expansion, residual):
    block = random_block(FFN(channels, expansion, residual=residual))
    check_against_reference(block, cuda_input(3, channels, 13), run_ffn)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", range(2))
@pytest.mark.parametrize("channels", CHANNELS)
def test_every_tile_variant(channels, variant):
    block = random_block(ConvFirstBlock(channels, 2))

    def run(block, x, out):
        weights = cuda_kernels.prepare_weights(
            block.ffn.expand.weight, block.ffn.expand.bias, block.ffn.project.weight, block.ffn.project.bias,
            block.conv.weight, block.conv.bias,
        )
        return cuda_kernels.run_block(x, weights, residual=True, variant=variant, out=out)

    check_against_reference(block, cuda_input(3, channels, 14), run)


def _needs_sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma kernel needs an sm_90 GPU (H100, H200)")


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion", list(itertools.product(cuda_kernels.ops.WGMMA_CHANNELS, EXPANSIONS)))
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("batch,size", [(3, 13), (1, 7), (64, 28)])
def test_wgmma_ffn(channels, expansion, residual, batch, size):
    """Odd tails (507 and 49 pixels: partial 128-pixel tiles) and 50176 pixels (392 tiles:
    several tiles per block of the persistent grid, the weight ring wrapping many times)."""
    _needs_sm90()
    block = random_block(FFN(channels, expansion, residual=residual))

    def run(block, x, out):
        weights = cuda_kernels.prepare_weights(block.expand.weight, block.expand.bias, block.project.weight,
                                               block.project.bias)
        return cuda_kernels.run_block(x, weights, residual, variant=cuda_kernels.ops.WGMMA_VARIANT, out=out)

    check_against_reference(block, cuda_input(batch, channels, size), run)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", range(2))
@pytest.mark.parametrize("channels", [128, 256])
def test_mma_sync_ffn_variants(channels, variant):
    block = random_block(FFN(channels, 4, residual=True))

    def run(block, x, out):
        weights = cuda_kernels.prepare_weights(block.expand.weight, block.expand.bias, block.project.weight,
                                               block.project.bias)
        return cuda_kernels.run_block(x, weights, True, variant=variant, out=out)

    check_against_reference(block, cuda_input(3, channels, 13), run)


@pytest.mark.cuda
@pytest.mark.parametrize("wgmma", ["0", None])
def test_dropin_module_replaces_convfirst_blocks(monkeypatch, wgmma):
    """Both stride-1 C = 64 blocks swapped for one fused module each: with CUDA_KERNELS_WGMMA_CONVFIRST=0 the
    mma.sync kernel's (FusedConvFirstBlock, this file's kernel); unset, the wgmma kernel's (FusedConvFirstC512),
    which takes C = 64 by default since its GPU tests passed (convfirst_c512.py, DEFAULT_WGMMA_WIDTHS)."""
    from cuda_kernels import convfirst_c512 as c512

    if wgmma is None:
        monkeypatch.delenv(c512.WGMMA_SWITCH, raising=False)
    else:
        monkeypatch.setenv(c512.WGMMA_SWITCH, wgmma)
    stride1 = cuda_kernels.FusedConvFirstBlock if wgmma == "0" else c512.FusedConvFirstC512
    torch.manual_seed(0)
    net = nn.Sequential(ConvFirstBlock(64, 4), ConvFirstBlock(64, 2), ConvFirstBlock(64, 4, out_channels=128, stride=2))
    folded = random_block(net).cuda().half()
    x = cuda_input(2, 64, 28)
    with torch.no_grad():
        expected = folded(x)
        fused = folded
        swap = cuda_kernels.replace_blocks(fused)
        assert swap.fused == {"ConvFirstBlock": 3, "FFN": 0}
        assert swap.fallback == {}
        assert type(fused[0]) is stride1 and type(fused[1]) is stride1
        assert isinstance(fused[2], cuda_kernels.FusedConvFirstDown), "stride 2 on its own kernel"
        got = fused(x)
    assert got.shape == expected.shape
    assert relative_error(got, expected.double()) < 5e-3


@pytest.mark.cuda
def test_out_may_not_alias_the_input():
    weights = cuda_kernels.prepare_weights(*(t.cuda() for t in _weights(64, 256)))
    x = cuda_input(2, 64, 7)
    with pytest.raises(ValueError, match="out must not overlap x"):
        cuda_kernels.run_block(x, weights, residual=True, out=x)


@pytest.mark.cuda
def test_the_raw_op_refuses_misaligned_and_overlapping_tensors():
    """The checks in bindings.cpp guard the raw op, which ops.py's policy does not cover."""
    from cuda_kernels._build import load_extension

    ext = load_extension()
    w = cuda_kernels.prepare_weights(*(t.cuda() for t in _weights(64, 256)))
    empty = torch.empty(0, device="cuda")
    buf = torch.randn(64 * 65, device="cuda", dtype=torch.float16)
    misaligned = buf[1:1 + 64 * 64].view(64, 64)  # 2 bytes past a 16-byte boundary
    with pytest.raises(RuntimeError, match="x must be 16-byte aligned"):
        ext.block_fusion(misaligned, w.w1, w.b1, w.w2, w.b2, empty.int(), empty, 0, 0, False, 0, empty.half())
    x = buf[: 64 * 64].view(64, 64)
    with pytest.raises(RuntimeError, match="out must not overlap x"):
        ext.block_fusion(x, w.w1, w.b1, w.w2, w.b2, empty.int(), empty, 0, 0, False, 0, x)
    with pytest.raises(RuntimeError, match="b1 must be a CUDA tensor"):
        ext.block_fusion(x, w.w1, w.b1.cpu(), w.w2, w.b2, empty.int(), empty, 0, 0, False, 0, empty.half())


# ---- shape policy: CPU-only, the checks run before anything touches a GPU ----

def _weights(channels: int, hidden: int):
    return torch.randn(hidden, channels, 1, 1), torch.randn(hidden), torch.randn(channels, hidden, 1, 1), torch.randn(channels)


@pytest.mark.parametrize("channels,hidden", [(48, 192), (512, 2048), (64, 64 * 3), (64, 100)])
def test_unsupported_shapes_raise_value_error(channels, hidden):
    with pytest.raises(ValueError, match="block-fusion kernels support"):
        cuda_kernels.prepare_weights(*_weights(channels, hidden))


def test_conv_weight_must_be_group_width_8():
    with pytest.raises(ValueError, match="conv weight"):
        cuda_kernels.prepare_weights(*_weights(64, 256), torch.randn(64, 16, 3, 3), None)


def test_cpu_input_is_rejected():
    weights = cuda_kernels.prepare_weights(*_weights(64, 256))
    with pytest.raises(ValueError, match="CUDA"):
        cuda_kernels.run_block(torch.randn(2, 64, 7, 7, dtype=torch.float16), weights, residual=False)


def test_conv_weight_packing_matches_mma_fragment_layout():
    w = torch.randn(16, 8, 3, 3).half()
    packed = cuda_kernels.pack_conv_weight(w)
    assert packed.shape == (2, 9, 32)
    halves = packed.view(torch.float16).reshape(2, 9, 32, 2)
    for g, tap, lane in [(0, 0, 0), (1, 4, 13), (1, 8, 31)]:
        n, k = lane // 4, 2 * (lane % 4)
        ky, kx = divmod(tap, 3)
        assert halves[g, tap, lane, 0] == w[8 * g + n, k, ky, kx]
        assert halves[g, tap, lane, 1] == w[8 * g + n, k + 1, ky, kx]


@pytest.mark.parametrize("channels,hidden,hc", [(64, 384, 128), (128, 256, 128), (256, 1024, 64)])
def test_wgmma_weight_packing_is_the_swizzled_panel_layout(channels, hidden, hc):
    assert cuda_kernels.ops.wgmma_chunk(channels) == hc
    w1, w2 = torch.randn(hidden, channels).half(), torch.randn(channels, hidden).half()
    packed = cuda_kernels.ops.pack_wgmma_weights(w1, w2).view(torch.float16)
    assert packed.numel() == 2 * hidden * channels
    chunk = 2 * hc * channels  # halves per chunk: U_j (hc x C) then V_j (C x hc)

    def at(row, k):  # position inside a panel of 64-wide rows, 16-byte chunks XOR row % 8
        return row * 64 + ((k // 8) ^ (row % 8)) * 8 + k % 8

    last = hidden // hc - 1
    for j, r, k in [(0, 0, 0), (0, 5, 63), (1, hc - 1, channels - 1), (last, 9, 8)]:
        assert packed[j * chunk + (k // 64) * hc * 64 + at(r, k % 64)] == w1[hc * j + r, k]
    for j, n, k in [(0, 0, 0), (0, 7, 9), (1, channels - 1, hc - 1), (last, 50, 33)]:
        assert packed[j * chunk + hc * channels + (k // 64) * channels * 64 + at(n, k % 64)] == w2[n, hc * j + k]


def test_wgmma_packing_rejects_chunkless_hidden():
    with pytest.raises(ValueError, match="wgmma"):
        cuda_kernels.ops.pack_wgmma_weights(torch.randn(96, 128).half(), torch.randn(128, 96).half())


def _nvcc():
    import os
    import shutil

    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = os.path.join(home, "bin", "nvcc")
    return candidate if os.path.exists(candidate) else shutil.which("nvcc")


def test_wgmma_kernel_compiles_without_spills_or_serialized_wgmma(tmp_path):
    """ptxas alone, no GPU: the sm_90a FFN must keep its accumulators in registers. A spill
    or ptxas's C7511 "wgmma serialized" note means a silent loss of most of its speed."""
    import subprocess
    from pathlib import Path

    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME)")
    csrc = Path(cuda_kernels.__file__).parent / "csrc"
    cmd = [nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v", f"-I{csrc}",
           "-c", str(csrc / "ffn_sm90.cu"), "-o", str(tmp_path / "ffn_sm90.o")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = result.stdout + result.stderr
    kernels = [line for line in report.splitlines() if "spill stores" in line]
    assert len(kernels) == 3, report  # C = 64, 128 and 256
    assert all(line.split()[0] == "0" and " 0 bytes spill loads" in line for line in kernels), report
    assert "C7511" not in report and "serialized" not in report, report


@pytest.mark.cuda
def test_bench_backend_runs_convfirstnet_on_the_kernels(tmp_path):
    """perfmodel bench --backend cuda_kernels end to end: all 26 ConvFirst blocks of ConvFirstNet-S and its
    stem fused (the stem kernel is a default swap unless CUDA_KERNELS_STEM=0; see test_bench_cpu), each
    checked against its PyTorch block, a loadable measurement file."""
    import perfmodel
    from perfmodel.bench import bench
    from perfmodel.measure import load_measurement
    from perfmodel.spec import build_model

    spec = perfmodel.load_spec("convfirstnet_s").with_overrides(batch=8)
    # what there is to fuse, counted on the zoo model itself: depths (3, 4, 12, 4) + 3 stride-2 blocks, one stem
    model = build_model(spec)
    n_blocks = sum(isinstance(m, ConvFirstBlock) for m in model.modules())
    assert n_blocks == 3 + 4 + 12 + 4 + 3 and isinstance(model.stem, nn.Sequential)
    path = bench(spec, backend="cuda_kernels", warmup=2, repeats=20, output=tmp_path / "m.json")
    m = load_measurement(path)
    assert m.backend == "cuda_kernels" and m.batch == 8 and m.latency_ms > 0
    import json

    fusion = json.loads(path.read_text())["workload"]["fusion"]
    assert fusion["fused_blocks"] == {"ConvFirstBlock": n_blocks, "FFN": 0, "Stem": 1}
    assert fusion["fallback_count"] == 0  # the 3 stride-2 blocks run on csrc/convfirst_s2
    check = fusion["check"]
    assert check["blocks_checked"] == n_blocks + 1  # every fused module (cuda_kernels.FUSED_MODULES), the stem too
    # a real difference from PyTorch fp16 (biases exercised), within 2x PyTorch's own error
    assert 0 < check["max_relative_error"] < 1e-2 and check["worst_error_ratio"] <= 2
