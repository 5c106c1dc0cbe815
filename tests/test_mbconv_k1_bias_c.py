"""Kernel 1 at stride 2 with the expand's bias and halving in the MMA (csrc/mbconv_v8.cuh expand_dw_v8_kernel_bc,
CUDA_KERNELS_K1_BIAS_C; on by default since session 18: 2.0's kernel 1 174.3 -> 170.3 us, B0 -8 us): U halved in shared
memory once per chunk, each m-tile's first k16 step started from C = the halved bias read straight from registers, so
the epilogue is SiLU(acc) - no accumulator zeroing (12 CS2R a tile) and no FFMA per E element.

CPU: the switch, the C-operand MMA, the halving; the default kernels' SASS is unchanged (checked by hand with
cuobjdump when it was built: every k = 3 and k = 5 expand_dw_v8 function byte-identical). GPU (@pytest.mark.cuda):
every distinct stride-2 MBConv of B0 and B2 at batches 1, 5 and 128 against float64 (<= 2x PyTorch fp16's error,
output poisoned), the profiler naming the _bc kernel, and the output within 1e-3 of the default kernel's (the same
products; the bias added inside the MMA, so E may round the other way); B0 through the check before timing."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"


def test_the_switch_builds_the_bias_into_the_first_mma():
    v8, ptx = (CSRC / "mbconv_v8.cuh").read_text(), (CSRC / "ptx.cuh").read_text()
    assert mb.K1_BIAS_C_SWITCH == "CUDA_KERNELS_K1_BIAS_C"
    assert 'kernel1_switch("CUDA_KERNELS_K1_BIAS_C");\n  return v == nullptr || v[0] == \'1\';' in v8  # on unset
    # stride 2 only, with the HFMA2 depthwise
    assert "if (kernel1_v8_bc_requested()) {" in v8
    assert "return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH>(p, stream, pdl);" in v8
    # D = A B + C with C's two per-lane values repeated over the fragment's two rows
    assert '"{%10,%11,%10,%11};\\n"' in ptx and '"=f"(d[0])' in ptx
    assert "expand_k16<HC>(acc, Xs, ldx, Us, ldu, mt * 16, 0, a_row, a_k, b_row, b_k, hbias);" in v8
    assert "for (int k = 0; k < 4; ++k) h[k] = __hmul2(h[k], half);" in v8  # U halved (exact above 2^-13)
    assert "e = __floats2half2_rn(silu_of_half(acc[nt][2 * h]), silu_of_half(acc[nt][2 * h + 1]));" in v8


# ---- GPU ----

def _stride2():
    from mbconv_helpers import DISTINCT, block_of

    return [(n, p) for n, p in DISTINCT if block_of(n, p).block[-3][0].stride[0] == 2]


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _stride2())
def test_stride2_blocks_against_float64(name, path, batch, monkeypatch):
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    monkeypatch.setenv(mb.K1_DH2_SWITCH, "0")  # the fp32 epilogue's _bc (the packed one's _bcdh: test_mbconv_k1_dh2)
    got, default, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_BIAS_C_SWITCH, "1")
    assert "expand_dw_v8_kernel_bc<" in names, names[:600]
    assert relative_error(got, default.double()) < 1e-3


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_BIAS_C_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
