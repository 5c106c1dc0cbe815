"""Kernel 1's mma.sync expand with U's fragments in registers (csrc/mbconv_v8.cuh expand_dw_v8_kernel_dhur,
CUDA_KERNELS_K1_U_REG; on by default in version 11 since session 25: 2.1's kernel 1 117.2 -> 110.4 us, 3.1's
80.9 -> 76.1, B0 -13.0 us; NOTES.md "Session 25"). At 2.1 (56 x 56, C_in 24 -> k_pad 32, k = 3) each
warp runs ~3.5 16-pixel m-tiles an item and loaded U's B fragments for each (6 ldmatrix.x4 of 8 per m-tile; the
expand's loop was 14% of 2.1's kernel-1 instructions and 17% of its stall samples in session 21's profile, the HMMAs
waiting on the loads). The variant loads them once an item (24 registers; 36 at 3.1, k = 5, k_pad 48) and each m-tile
waits for its A fragments only: the same MMAs in the same order.

CPU: the switch and routes as the source reads them, the registers by hand. ptxas (2.1's: 16 bytes spilled once an
item, allowed explicitly; 3.1's: none) is test_mbconv_v8.py's spill test; the 39 other kernel-1 functions
SASS-identical (checked when it was written). GPU (@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5, 128 against float64 (poisoned
output), bit for bit the default's output where the variant ran, the profiler naming it at the 2.1s and 3.1s; B0 end
to end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def test_the_switch_is_on_in_version_11_unless_0_and_takes_k_pad_32_at_k_3_and_48_at_k_5():
    assert mb.K1_U_REG_SWITCH == "CUDA_KERNELS_K1_U_REG"
    assert 'kernel1_switch("CUDA_KERNELS_K1_U_REG");\n  return v != nullptr ? v[0] == \'1\' : v11;' in SOURCE
    for ks, k_pad, ur in ((3, 32, 2), (5, 48, 3)):  # (launch_expand_dw_v8_ur: the multiplies by default, FASTDIV)
        assert f"""  if constexpr (DH && KS == {ks})
    if (p.k_pad == {k_pad} && kernel1_v8_ur_requested(v11)) return launch_expand_dw_v8_ur<KS, {ur}, HF>(""" in SOURCE
    assert "return expand_dw_v8_kernel_dhur<HC, KS, S, G, UR>;" in SOURCE
    # the m-tile reads A only; B from the item's registers
    assert "bf::mma_m16n8k16(acc[2 * np], a, ub[ks][np][0], ub[ks][np][1]);" in SOURCE


def test_the_fragments_fit_24_and_36_registers():
    """U at k_pad 32 and 48 channels: 2 k16 steps x 3 pairs of 8-channel n-tiles x 4 registers (one ldmatrix.x4 each)
    = 24; each m-tile then loads 2 ldmatrix.x4 (A) for 8 (A and B) before. At k_pad 48 (3.1): 36, 3 for 12."""
    pairs = 48 // 16
    assert {k: k // 16 * pairs * 4 for k in (32, 48)} == {32: 24, 48: 36}
    assert {k: (k // 16 * (1 + pairs), k // 16) for k in (32, 48)} == {32: (8, 2), 48: (12, 3)}
    assert mb.kernel1_v8_expand(True, True, 56, 56, 3, 1, 24, 32, 8, 1, dh=True) == "ldmatrix"  # 2.1: bulk copies
    assert mb.kernel1_v8_expand(True, True, 28, 28, 5, 1, 40, 48, 10, 1, dh=True) == "ldmatrix"  # 3.1


# ---- GPU ----

@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import assert_bits_where_it_ran, switched_against_float64

    monkeypatch.setenv(mb.K1_FASTDIV_SWITCH, "0")  # _dhur itself (with the multiplies, the default, it is _dhurf)
    got, default, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_U_REG_SWITCH, "1")
    if path == "features.2.1":  # B0's and B2's: C_in 24, stride 1, k = 3
        assert "expand_dw_v8_kernel_dhur<48, 3, 1, 1, 2>" in names, names[:600]
    if path == "features.3.1":  # C_in 40 (B0) and 48 (B2): k_pad 48, k = 5
        assert "expand_dw_v8_kernel_dhur<48, 5, 1, 1, 3>" in names, names[:600]
    assert_bits_where_it_ran(got, default, names, r"expand_dw_v8_kernel_dhur<")  # the same MMAs in the same order


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_U_REG_SWITCH: "1", mb.K1_FASTDIV_SWITCH: "0"}, {"StemMBConv": 1, "MBConv": 15},
                   16)
