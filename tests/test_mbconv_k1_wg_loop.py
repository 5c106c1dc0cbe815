"""Kernel 1's wgmma expand with its k loop unrolled per 64-channel box (csrc/mbconv_v8.cuh expand_dw_v8_kernel_txdhu,
CUDA_KERNELS_K1_WG_LOOP; off until measured, NOTES.md "Session 24"). The default kernel builds each k16 step's two
matrix descriptors from warp / 4, which the compiler cannot prove warp-uniform: ~27 instructions a wgmma (14% of 4.1's
kernel-1 instructions in session 23's profile). The variant takes the warpgroup's index through a shuffle and adds
constant offsets within a box: the same wgmmas on the same descriptors in the same order.

CPU: the switch as the source reads it, the descriptor offsets against x_tx_offset by literal arithmetic, the box
and tail counts at B0's wgmma blocks. ptxas (no spills, no serialized wgmmas) is test_mbconv_v8.py's spill test and
the source pins here. GPU (@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5 and 128 against float64
(poisoned output), bit for bit the default's output, the profiler naming the variant wherever the wgmma expand runs;
B0 end to end through the check before timing."""

import re
from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def test_the_switch_is_off_unless_1_and_selects_the_unrolled_kernel():
    assert mb.K1_WG_LOOP_SWITCH == "CUDA_KERNELS_K1_WG_LOOP"
    assert 'kernel1_switch("CUDA_KERNELS_K1_WG_LOOP");\n  return v != nullptr && v[0] == \'1\';' in SOURCE
    assert "if (wg && aligned && tx_fits(true) && kernel1_v8_wu_requested())" in SOURCE
    assert "return expand_dw_v8_kernel_txdhu<HC, KS, S, G>;" in SOURCE
    # the warpgroup's index by a shuffle (uniform to the compiler), the whole boxes' 4 wgmmas unconditional
    assert "const int wgi = __shfl_sync(0xffffffffu, warp / 4, 0);" in SOURCE
    assert "for (; kb + kV8TxCols <= p.k_pad; kb += kV8TxCols, ad = bf::desc_advance(ad, a_box)," in SOURCE


def _x_tx_offset(r: int, k: int, m_pad: int) -> int:
    """mbconv_v8.cuh x_tx_offset (halves), transliterated."""
    return (k // 64) * m_pad * 64 + r * 64 + ((((k % 64) // 8) ^ (r % 8)) * 8)


@pytest.mark.parametrize("m_pad,k_pad", [(208, 80), (208, 112), (112, 192), (16, 16), (64, 208)])
def test_box_and_step_offsets_are_the_default_descriptors(m_pad, k_pad):
    """The default's A and B descriptors advance by 2 x x_tx_offset(64 m64, k0, m_pad) and 2 x x_tx_offset(0, k0, 48)
    bytes; the variant's by 2 x 64 x 64 m64 + box x 2 x 64 m_pad (A) or box x 2 x 64 x 48 (B), plus 2 kk within a
    box. Equal for every tile and k16 step (64-row tiles start on a multiple of 8 rows: no swizzle term)."""
    a_box, b_box = 2 * m_pad * 64, 2 * 48 * 64
    for m64 in range(-(-m_pad // 64)):
        for k0 in range(0, k_pad, 16):
            box, kk = divmod(k0, 64)
            assert 2 * _x_tx_offset(64 * m64, k0, m_pad) == 2 * 64 * 64 * m64 + box * a_box + 2 * kk
            assert 2 * _x_tx_offset(0, k0, 48) == box * b_box + 2 * kk


def test_whole_boxes_and_tail_steps_at_b0():
    """B0's wgmma blocks: 4.x k_pad 80 (1 whole box, 1 tail step), 5.x 112 (1, 3), 6.x 192 (3, 0): 5, 7 and 12
    wgmmas a tile, as before."""
    counts = {k_pad: (k_pad // 64, k_pad % 64 // 16) for k_pad in (80, 112, 192)}
    assert counts == {80: (1, 1), 112: (1, 3), 192: (3, 0)}
    assert {k: 4 * b + t for k, (b, t) in counts.items()} == {80: 5, 112: 7, 192: 12}


# ---- GPU ----

def _distinct():
    from mbconv_helpers import DISTINCT

    return DISTINCT


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _distinct())
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import assert_loader_output_kept, switched_against_float64

    got, default, names, params, *_ = switched_against_float64(monkeypatch, name, path, batch,
                                                               mb.K1_WG_LOOP_SWITCH, "1")
    assert not re.search(r"expand_dw_v8_kernel_txdh<48, \d, 1, \d, true>", names), names[:600]  # no default wgmma
    if name == "efficientnet_b0" and path.split(".")[1] in ("4", "5", "6") and params.stride == 1:
        assert "expand_dw_v8_kernel_txdhu<48, " in names, names[:600]
    assert_loader_output_kept(got, default, path)  # the same wgmmas in the same order


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_WG_LOOP_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
