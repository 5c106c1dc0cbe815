"""The expand's biases loaded at the item's start (CUDA_KERNELS_K1_BIAS_EARLY, version 11's default since session 31;
NOTES.md "Current state"): in the static wgmma row-unit kernels (B0's 4.1-6.3, B2's 6.1-7.1;
expand_dw_v8_kernel_txdhswb) each lane's 12 halved biases are loaded before the item waits for its X and for barrier
A, not after them: session 30's per-instruction profile of 4.1's kernel 1 found the multiplies by 0.5 waiting on
those loads in 4.5% of its stall samples. The same values in the same arithmetic: the output is the switch-off output
bit for bit (a check that is not blind: the profiler names the kernel, and the float64 check runs on the switched
output).

CPU: the switch and the route as the source reads them, the loads' place in the body. ptxas (spills, registers) is
test_mbconv_v8.py's spill test. GPU (@pytest.mark.cuda): every block that takes it at batches 1, 5 and 128, B0 end to
end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v8.cuh").read_text()


def test_the_switch_and_the_route():
    assert mb.K1_BIAS_EARLY_SWITCH == "CUDA_KERNELS_K1_BIAS_EARLY"
    assert """  const char* v = kernel1_switch("CUDA_KERNELS_K1_BIAS_EARLY");
  return v != nullptr ? v[0] == '1' : v11;""" in SOURCE  # version 11's default since session 31
    # only where the row units run (the static wgmma entries), through the one launcher
    assert "if (row_units) {\n              if (bias_early)" in SOURCE
    assert ("if constexpr (UOW > 0 && BE)\n      return expand_dw_v8_kernel_txdhswb<HC, KS, S, G, WG, SH, UOW, URS>;"
            in SOURCE)


def test_the_loads_come_before_the_items_waits():
    body = SOURCE.split("__device__ __forceinline__ void expand_dw_v8_body(")[1].split("\n}\n")[0]
    early = body.index("hbias_e[nt][u] = 0.5f * __ldg(p.b_exp + c0 + nt * 8 + (lane & 3) * 2 + u);")
    assert early < body.index("bf::mbar_wait(bar, phase);") < body.index("__syncthreads();  // barrier A")
    # the expand takes them from there, or (BE off) loads them itself as before
    assert body.index("hbias[nt][u] = hbias_e[nt][u];") > body.index("__syncthreads();  // barrier A")
    assert "hbias[nt][u] = 0.5f * __ldg(p.b_exp + c0 + nt * 8 + (lane & 3) * 2 + u);" in body


# ---- GPU ----

BLOCKS = [("efficientnet_b0", p) for p in ("features.4.1", "features.5.0", "features.5.1", "features.6.1")] + \
    [("efficientnet_b2", p) for p in ("features.6.1", "features.7.0", "features.7.1")]


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", BLOCKS)
def test_against_float64_and_bit_for_bit(name, path, batch, monkeypatch):
    """Against float64 (check_shape, output poisoned) with the switch on, the profiler naming the kernel, and the
    switch-off output bit for bit (B0's 6.1 at batch 1: one image an item, off the static route)."""
    from mbconv_helpers import check_switch_keeps_the_bits

    check_switch_keeps_the_bits(monkeypatch, name, path, batch, mb.K1_BIAS_EARLY_SWITCH, "expand_dw_v8_kernel_txdhswb<",
                                expect_kernel=batch >= 2 or path != "features.6.1")


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_BIAS_EARLY_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
