"""Kernel 1's per-item divisions as multiplies (csrc/mbconv_v8.cuh V8Div, csrc/fastdiv.h; CUDA_KERNELS_K1_FASTDIV, on
by default in version 11 where _dhur runs since session 25: 2.1's kernel 1 110.5 -> 102.6 us, 3.1's 75.6 -> 71.7;
NOTES.md "Session 25"). Every warp decodes each item (chunk, image, band) from its index, finds the end
of its CTA's item range and splits the depthwise's segments over the column groups - divisions by N bands, bands,
the grid and the column groups, each ~20 dependent SASS instructions, several times an item, before barrier A
(session 23's 3.1 profile: ~110 instructions a warp an item in that head, 4% of the stall samples). With the switch
the host passes each divisor's multiplier and shift (V8Div) and each division is 3 instructions. The same items in
the same order: the output is the divisions' bit for bit. (The wgmma _txdh took them too in the measurement: 4.1
36.7 -> 36.0 us, 5.1 61.9 -> 63.9; not kept.)

CPU: the switch, its routes and the kernels' entry points as the source reads them; fastdiv.h itself in
test_fastdiv.py. ptxas (no spills) is test_mbconv_v8.py's spill test. GPU (@pytest.mark.cuda): every distinct B0 / B2
block at batches 1, 5, 128 against float64 (poisoned output), bit for bit the divisions' output where _dhurf ran,
the profiler naming it at the 2.1s and 3.1s; B0 end to end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def test_the_switch_is_on_in_version_11_unless_0_and_routes_dhur():
    assert mb.K1_FASTDIV_SWITCH == "CUDA_KERNELS_K1_FASTDIV"
    assert 'kernel1_switch("CUDA_KERNELS_K1_FASTDIV");' in SOURCE
    assert "return (v != nullptr ? v[0] == '1' : v11) && total * total < (1ll << 31);  // (grid <= total)" in SOURCE
    # launch_expand_dw_v8_ur (UR = 2 at k = 3, k_pad 32; 3 at k = 5, k_pad 48): without the multiplies, _dhur
    assert """  if (!kernel1_v8_fd_requested(p, v11))
    return launch_expand_dw_v8<48, KS, 1, 1, HF, false, false, false, true, false, UR>(p, stream, pdl);""" in SOURCE
    assert "if (p.k_pad == 32 && kernel1_v8_ur_requested(v11)) return launch_expand_dw_v8_ur<KS, 2, HF>(" in SOURCE
    assert "if (p.k_pad == 48 && kernel1_v8_ur_requested(v11)) return launch_expand_dw_v8_ur<KS, 3, HF>(" in SOURCE
    assert "return expand_dw_v8_kernel_dhurf<HC, KS, S, G, UR>;" in SOURCE
    assert "txdhf" not in SOURCE  # measured and removed


def test_the_divisors_of_b0_2_1():
    """2.1 at batch 128: 144 channels = 3 chunks, 56 output rows in bands of 8 -> 7 bands: 3 x 128 x 7 = 2,688 items,
    N bands = 896 a chunk; 14 column groups of 4 outputs; the grid 264 (two CTAs on each of 132 SMs). The largest
    dividend, 264 x 2,688 = 709,632, is far below 2^31 (the switch asks total^2 < 2^31: 7,225,344)."""
    assert 144 // 48 * 128 * 7 == 2688 and 128 * 7 == 896 and -(-56 // 4) == 14
    assert 264 * 2688 == 709_632 and 2688**2 == 7_225_344 < 2**31
    assert "d.per_chunk = FastDiv::of((uint32_t)(((p.N + G - 1) / G) * p.row_blocks));" in SOURCE
    assert "d.ngroups = FastDiv::of((uint32_t)((p.Wo + OW - 1) / OW));" in SOURCE
    # each division the item's head ran, now a multiply: V8Item, the range's end, the depthwise's split
    assert "return fd->grid.div((int)((b + 1) * (uint32_t)total));" in SOURCE
    assert "return V8Item(i, NI(), bands, fd->per_chunk, fd->bands);" in SOURCE
    assert "const int dq = FD ? fd->ngroups.div(GROUPS) : GROUPS / ngroups, dr = GROUPS - dq * ngroups;" in SOURCE
    assert "int seg = FD ? fd->ngroups.div(group) : group / ngroups, og = group - seg * ngroups;" in SOURCE


# ---- GPU ----

@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import assert_bits_where_it_ran, switched_against_float64

    monkeypatch.setenv(mb.K1_WHOLE_SWITCH, "0")  # _dhurf itself (with whole units, the default at 2.1, it is _dhurfw)
    got, default, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_FASTDIV_SWITCH, "1")
    if path == "features.2.1":
        assert "expand_dw_v8_kernel_dhurf<48, 3, 1, 1, 2>" in names, names[:600]
    if path == "features.3.1":
        assert "expand_dw_v8_kernel_dhurf<48, 5, 1, 1, 3>" in names, names[:600]
    assert_bits_where_it_ran(got, default, names, r"expand_dw_v8_kernel_dhurf<")  # the same items in the same order


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_FASTDIV_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
