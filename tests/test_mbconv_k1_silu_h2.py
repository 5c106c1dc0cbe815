"""Kernel 1 with E's SiLU in packed fp16 (csrc/mbconv_v8.cuh expand_dw_v8_body<..., SH>, CUDA_KERNELS_K1_SILU_H2=1; off
by default until measured; NOTES.md "Session 17"): the expand's fp32 accumulator pair rounded to half2, then h = pair /
2 + a / 2 (HFMA2), tanh.approx.f16x2 and h + h t (HFMA2), stored; 7 SASS instructions a pair (the two MUFU.TANH.F16
results merged by one PRMT) against 8.

CPU: the switch and the kernels it selects are in the source, the packed tanh is the f16x2 PTX instruction. GPU
(@pytest.mark.cuda): every distinct MBConv shape of B0 and B2 at batches 1 and 128 against float64 (<= 2x PyTorch
fp16's error, output poisoned), the profiler naming the _sh kernel, the output close to the fp32 SiLU's and not equal
to it (a switch that changed nothing would pass a closeness check alone), and B0 through the check before timing."""

from pathlib import Path

import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"


def test_the_switch_selects_the_packed_kernels():
    v8, v2 = (CSRC / "mbconv_v8.cuh").read_text(), (CSRC / "mbconv_v2.cuh").read_text()
    assert mb.K1_SILU_H2_SWITCH == "CUDA_KERNELS_K1_SILU_H2"
    assert 'kernel1_switch("CUDA_KERNELS_K1_SILU_H2");\n  return v != nullptr && v[0] == \'1\';' in v8  # off unset
    assert 'asm("tanh.approx.f16x2 %0, %1;" : "=r"(out) : "r"(in));' in v2
    # only with the HFMA2 depthwise, at stride 1 and 2, on every X path
    assert "if (kernel1_v8_sh_requested()) return launch_expand_dw_v8_sh<KS, true, true>(p, stream, pdl, v10);" in v8
    for kernel in ("expand_dw_v8_kernel_tx_sh<HC, KS, S, G, HF, WG>", "expand_dw_v8_kernel_sh<HC, KS, S, G, HF>"):
        assert f"return {kernel};" in v8
    assert "e = __hfma2(hh, tanh_h2(hh), hh);" in v8


# ---- GPU ----

def _distinct():
    from mbconv_helpers import DISTINCT

    return DISTINCT


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 128])
@pytest.mark.parametrize("name,path", _distinct())
def test_every_shape_against_float64(name, path, batch, monkeypatch):
    from mbconv_helpers import block_prepared, check_shape, run_profiled

    from perfmodel.harness import relative_error

    monkeypatch.setenv(mb.K1_SILU_H2_SWITCH, "1")
    check_shape(name, path, batch, 11)
    params, weights, x = block_prepared(name, path, batch)
    monkeypatch.setenv(mb.K1_SILU_H2_SWITCH, "0")
    fp32_silu = mb.mbconv(x, params, weights, version=11)
    monkeypatch.setenv(mb.K1_SILU_H2_SWITCH, "1")
    got, names = run_profiled(x, params, weights, fp32_silu, 11)
    if params.expand_w is None or mb.kernel1_v9_takes_v3(params.kernel_size, params.stride, *x.shape[2:]):
        return  # version 3's kernel 1 (no expand, or 7.0's shape): the switch does not apply
    assert "expand_dw_v8_kernel_sh<" in names or "expand_dw_v8_kernel_tx_sh<" in names, names[:600]
    assert 0 < relative_error(got, fp32_silu.double()) < 5e-3


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_SILU_H2_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
