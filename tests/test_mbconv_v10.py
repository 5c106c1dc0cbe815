"""MBConv version 10's projection (NOTES.md, "MBConv version 10"; csrc/mbconv_v3.cu project_v10_kernel): project_v3's
products over 64-row tiles with 8 warps, each 32-deep k step split between two warps whose sums meet in shared memory
at the tile's end. Runs inside version 9 where CUDA_KERNELS_PROJ_V10 says: "auto" (the default: where project_v9 does
not apply and project_v3 would have under 1.5 tiles per SM: B0's features.6.x), "late" (wherever project_v9 does not
apply: B0's blocks past stage 4), "all" (every block) or "off".

CPU: the switch and its wiring, shared memory from literal arithmetic, occupancy on an H200.
GPU (@pytest.mark.cuda): every MBConv shape of EfficientNet-B0 and -B2 at batch 1, 5 and 128 against float64 with
NaN-poisoned outputs (<= 2x PyTorch fp16's error) with project_v10 everywhere (every BN: 16, 32, 48, 64), batch 128
against float32, odd spatial sizes (tiles across images, a partial last tile), project_v10 against project_v3 / v9
(close, not equal: the k halves are summed apart) with the profiler showing which kernel ran, repeatability, and
EfficientNet-B0 swapped with the "late" switch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb

ROOT = Path(__file__).resolve().parents[1]
CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v3.cu").read_text()


def test_the_switch_is_wired_and_auto_by_default():
    cu = (CSRC / "mbconv.cu").read_text()
    assert "if (pv10 == 2 || (pv10 == 1 && !p9) || (pv10 == 3 && !p9 && project_v10_auto(p)))" in cu
    assert 'std::getenv("CUDA_KERNELS_PROJ_V10")' in SOURCE
    assert "if (v == nullptr) return 3;" in SOURCE and 'if (std::strcmp(v, "off") == 0) return 0;' in SOURCE
    assert 'if (std::strcmp(v, "late") == 0) return 1;' in SOURCE and 'if (std::strcmp(v, "all") == 0) return 2;' in SOURCE
    assert "constexpr int kProjV10BM = 64, kProjV10Threads = 256;" in SOURCE
    assert "return 2 * units < 3LL * sms[dev];" in SOURCE
    assert mb.PROJECT_V10_MODES == ("off", "late", "all", "auto")


# B0 at batch 128 on the H200's 132 SMs: project_v3's units = ceil(N Ho Wo / 128) x ceil(C_out / BN)
@pytest.mark.parametrize("path,rows,c_out,units,auto", [
    ("features.5.0", 128 * 14 * 14, 112, 196 * 2, False),  # 392 units: project_v3 (32.4 against 37.6 us)
    ("features.5.1", 128 * 14 * 14, 112, 196 * 2, False),  # 48.3 against 55.2 us
    ("features.6.0", 128 * 7 * 7, 192, 49 * 3, True),       # 147 < 198: project_v10 (35.9 -> 27.2 us)
    ("features.6.1", 128 * 7 * 7, 192, 49 * 3, True),       # 64.4 -> 43.8 us
    ("features.7.0", 128 * 7 * 7, 320, 49 * 5, False),      # 245 units: project_v3 (58.5 against 71.6 us)
    ("features.5.1 batch 1", 14 * 14, 112, 2 * 2, True),
])
def test_auto_rule_at_b0s_late_blocks(path, rows, c_out, units, auto):
    bn = mb.project_v3_bn(c_out)
    assert -(-rows // 128) * -(-c_out // bn) == units
    assert mb.project_v10_auto(rows, c_out, 132) is auto


@pytest.mark.parametrize("bn,smem", [
    (64, 4 * (64 + 64) * 40 * 2 + 4 * 8 * 4 * 32 * 4),   # 40,960 + 16,384 = 57,344 B
    (48, 4 * (64 + 48) * 40 * 2 + 4 * 6 * 4 * 32 * 4),   # 35,840 + 12,288 = 48,128 B
    (16, 4 * (64 + 16) * 40 * 2 + 4 * 2 * 4 * 32 * 4),   # 25,600 + 4,096 = 29,696 B
])
def test_shared_memory(bn, smem):
    assert mb.project_v10_smem_bytes(bn) == smem
    # three CTAs of 8 warps per SM (__launch_bounds__(256, 3)) fit the H200's 228 KB, 1 KB reserved per CTA
    assert 3 * (smem + 1024) <= 228 * 1024
    assert "__launch_bounds__(kProjV10Threads, 3) project_v10_kernel" in SOURCE
    assert "constexpr int kProjV3BM = 128, kProjV3BK = 32, kProjV3LD = kProjV3BK + 8, kProjV3Stages = 4;" in SOURCE


@pytest.mark.parametrize("c_out,bn", [(16, 16), (24, 32), (40, 48), (80, 48), (112, 64), (192, 64), (320, 64)])
def test_tile_width_is_project_v3s(c_out, bn):
    """project_v10 takes project_v3's BN (the fewest 64-wide tiles, then the narrowest multiple of 16)."""
    assert mb.project_v3_bn(c_out) == bn


# ---- GPU ----

def _distinct():
    from mbconv_helpers import DISTINCT

    return DISTINCT


@pytest.fixture
def v10_all(monkeypatch):
    monkeypatch.setenv("CUDA_KERNELS_PROJ_V10", "all")  # read by the C++ launcher at every call


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _distinct())
def test_v10_every_shape_of_b0_and_b2(name, path, batch, v10_all):
    from mbconv_helpers import check_shape

    check_shape(name, path, batch, 9)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["features.2.1", "features.4.1", "features.5.1", "features.6.1", "features.7.0"])
def test_v10_batch_128_against_float32(path, v10_all):
    from mbconv_helpers import block_of, check_on_gpu, gpu_input, mbconv_shapes

    torch.manual_seed(2)
    x = gpu_input(128, mbconv_shapes("efficientnet_b0")[path])
    check_on_gpu(block_of("efficientnet_b0", path), x, 9, "float32")


@pytest.mark.cuda
@pytest.mark.parametrize("path,size,batch", [("features.5.0", 13, 5), ("features.6.1", 3, 7), ("features.7.0", 5, 3),
                                             ("features.6.0", 9, 2), ("features.1.0", 5, 5), ("features.2.1", 57, 3),
                                             ("features.5.2", 1, 9), ("features.4.2", 3, 7)])
def test_v10_odd_sizes(path, size, batch, v10_all):
    from mbconv_helpers import check_b0_at_size

    check_b0_at_size(path, size, batch, 9)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 128])
@pytest.mark.parametrize("path", ["features.4.1", "features.5.0", "features.5.1", "features.6.0", "features.6.1",
                                  "features.7.0"])
def test_v10_against_the_default_projection(path, batch, monkeypatch):
    """Same kernel 1 and SE; the projection's fp16 scaled A and V values are project_v3's and project_v9's, summed in
    another order (two fp32 halves of each k step): close to version 9's default output, not equal, and the profiler
    shows project_v10 ran (and the default's projection did not)."""
    from torch.profiler import ProfilerActivity, profile

    from mbconv_helpers import b0_prepared
    from perfmodel.harness import relative_error

    params, weights, x = b0_prepared(path, batch)
    monkeypatch.setenv("CUDA_KERNELS_PROJ_V10", "off")
    base = mb.mbconv(x, params, weights, version=9)
    monkeypatch.setenv("CUDA_KERNELS_PROJ_V10", "late")
    out = torch.full_like(base, float("nan"))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = mb.mbconv(x, params, weights, out=out, version=9)
        torch.cuda.synchronize()
    names = " ".join(e.name for e in prof.events())
    late = not mb.project_v9_applies(params.hidden, params.out_channels)
    assert ("project_v10_kernel" in names) is late, names[:500]
    assert ("project_v3_kernel" in names) is False, names[:500]
    again = mb.mbconv(x, params, weights, version=9)
    torch.cuda.synchronize()
    assert torch.isfinite(got).all()
    if not mb.kernel1_v9_takes_v3(params.kernel_size, params.stride, got.shape[2], got.shape[3]):
        assert torch.equal(got, again)  # no atomics in version 8's kernel 1 or in project_v10: repeatable
    assert relative_error(got, base.double()) < 1e-3
    if late:
        assert not torch.equal(got, base)  # another summation order: the closeness check can fail


@pytest.mark.cuda
@pytest.mark.parametrize("path,batch,expected", [("features.6.1", 128, True), ("features.6.0", 128, True),
                                                 ("features.5.1", 128, False), ("features.7.0", 128, False),
                                                 ("features.5.1", 1, True), ("features.2.1", 128, False)])
def test_the_default_picks_project_v10_by_the_rule(path, batch, expected, monkeypatch):
    """Unset CUDA_KERNELS_PROJ_V10 is "auto": project_v10 exactly where project_v10_auto says (on this GPU's SMs)."""
    from torch.profiler import ProfilerActivity, profile

    from mbconv_helpers import b0_prepared

    monkeypatch.delenv("CUDA_KERNELS_PROJ_V10", raising=False)
    params, weights, x = b0_prepared(path, batch)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        mb.mbconv(x, params, weights, version=9)
        torch.cuda.synchronize()
    names = " ".join(e.name for e in prof.events())
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = x.shape[0] * mb.output_size(x.shape[2], params.stride) * mb.output_size(x.shape[3], params.stride)
    rule = not mb.project_v9_applies(params.hidden, params.out_channels) and \
        mb.project_v10_auto(rows, params.out_channels, sms)
    assert ("project_v10_kernel" in names) is rule, names[:500]
    if sms == 132:  # the H200 the rule was measured on
        assert rule is expected


@pytest.mark.cuda
def test_efficientnet_b0_swapped_with_project_v10():
    """`perfmodel bench --backend cuda_kernels`'s mechanism with CUDA_KERNELS_PROJ_V10=late."""
    code = """
import torch
from cuda_kernels import mbconv as mb
from mbconv_helpers import fresh_model, gpu_input
from perfmodel.bench import fused_model
from perfmodel.harness import relative_error
from perfmodel.zoo import fold_batchnorm
model = fresh_model("efficientnet_b0").cuda().half().to(memory_format=torch.channels_last)
x = gpu_input(4, (3, 224, 224))
fused, info = fused_model(model, [x])
assert info["fused_blocks"]["MBConv"] == 15 and info["fused_blocks"]["StemMBConv"] == 1, info
assert info["fallback_count"] == 0, info
with torch.no_grad():
    expected = fold_batchnorm(model)(x)
    got = fused(x)
err = relative_error(got, expected.double())
print("V10 network rel error", err)
assert err < 5e-2
"""
    env = {**os.environ, "CUDA_KERNELS_PROJ_V10": "late",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
