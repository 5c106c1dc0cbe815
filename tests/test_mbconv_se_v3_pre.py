"""SE version 3 with its weights copied before the wait on kernel 1 (csrc/mbconv_v3.cu se_v3p_kernel,
CUDA_KERNELS_SE_V3_PRE on unless "0", since session 22: B0 -5.6 us; NOTES.md "Session 21"): W1 and W2 land in shared
memory by cp.async while the kernel waits (PDL) for kernel 1's partial sums, so that FC1 and FC2 read shared memory
instead of waiting on global loads after the pool; the same products in the same order.

CPU: the switch and its launch, which blocks it serves (the shared memory from literal sums). GPU
(@pytest.mark.cuda): at every B0 / B2 block that runs se_v3 in version 11, batches 1, 5 and 128, the profiler names
se_v3p_kernel and the output equals the switch-off output bit for bit; B0 through the check before timing."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v3.cu").read_text()


def test_the_switch_and_its_launch():
    assert mb.SE_V3_PRE_SWITCH == "CUDA_KERNELS_SE_V3_PRE" and 'std::getenv("CUDA_KERNELS_SE_V3_PRE")' in SOURCE
    assert "constexpr int kSEV3PreMaxSmem = 100 * 1024;" in SOURCE and mb.SE_V3_PRE_MAX_SMEM == 100 * 1024
    assert "return (p.hid_pad + round_up(p.sq, 4) + 2 * p.sq * p.hidden) * 4;" in SOURCE
    # the copies are issued before the wait and waited on after the pool; the default kernel keeps its body
    body = SOURCE[SOURCE.index("void se_v3_body("):SOURCE.index("__global__ void __launch_bounds__(kSEV3Threads) se_v3_kernel")]
    assert body.index("cp_async16(smem_addr(w1s + 4 * i)") < body.index("pdl::wait();") < body.index("cp_async_wait<0>()")
    assert "se_v3_kernel(const Params p, int fc2_warps) {\n  se_v3_body<false>(p, fc2_warps);\n}" in SOURCE
    assert 'return (v == nullptr || std::strcmp(v, "0") != 0) && se_v3_pre_smem_bytes(p) <= kSEV3PreMaxSmem;' in SOURCE


def test_which_blocks_fit_by_hand():
    # B0's 2.1: hidden 144 (hid_pad 144), squeeze 6: 144 + 8 + 2 x 6 x 144 floats
    assert mb.se_v3_pre_smem_bytes(144, 6, 144) == (144 + 8 + 1_728) * 4 == 7_520
    # 4.0: hidden 240, squeeze 10: 240 + 12 + 4,800 floats
    assert mb.se_v3_pre_smem_bytes(240, 10, 240) == 20_208 <= mb.SE_V3_PRE_MAX_SMEM
    # 6.1 (SE version 5 there in versions 9-11; version 3 in 3-8): 1,152 + 48 + 110,592 floats, too much
    assert mb.se_v3_pre_smem_bytes(1152, 48, 1152) == 447_168 > mb.SE_V3_PRE_MAX_SMEM


# ---- GPU ----

def _se_v3_blocks():
    """B0 / B2 blocks where versions 9-11 run se_v3 (SE version 4 / 5 from hidden 480 on) and the pool is repeatable
    (not the blocks without an expand, whose kernel 1 pools with atomics)."""
    from mbconv_helpers import DISTINCT, block_of
    from perfmodel.zoo import fold_batchnorm

    out = []
    for name, path in DISTINCT:
        params = mb.block_params(fold_batchnorm(block_of(name, path)))
        if params.hidden < 480 and not path.startswith("features.1."):
            out.append((name, path))
    return out


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _se_v3_blocks())
def test_keeps_the_bits(name, path, batch, monkeypatch):
    from mbconv_helpers import assert_switch_keeps_the_bits

    assert_switch_keeps_the_bits(monkeypatch, name, path, batch, mb.SE_V3_PRE_SWITCH, "se_v3p_kernel")


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    from mbconv_helpers import check_fused_b0

    info = check_fused_b0(monkeypatch, {mb.SE_V3_PRE_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
    assert info["switches"].get(mb.SE_V3_PRE_SWITCH) == "1"


@pytest.mark.cuda
def test_the_default(monkeypatch):
    """Unset, version 11 runs se_v3p_kernel at 2.1 (hidden 144) and se_v3_kernel with the switch at "0"."""
    from mbconv_helpers import b0_prepared, run_profiled

    params, weights, x = b0_prepared("features.2.1", 128)
    for value, kernel, other in ((None, "se_v3p_kernel", "se_v3_kernel"), ("0", "se_v3_kernel", "se_v3p_kernel")):
        if value is None:
            monkeypatch.delenv(mb.SE_V3_PRE_SWITCH, raising=False)
        else:
            monkeypatch.setenv(mb.SE_V3_PRE_SWITCH, value)
        _, names = run_profiled(x, params, weights, mb.mbconv(x, params, weights, version=11), 11)
        assert kernel in names and other not in names, names[:600]
