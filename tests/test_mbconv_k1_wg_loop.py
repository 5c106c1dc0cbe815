"""Kernel 1's wgmma expand (csrc/mbconv_v8.cuh expand_dw_v8_body, WG) with its k loop unrolled per 64-channel box and
uniform descriptors (session 24; NOTES.md "Session 24"). It built each k16 step's two matrix descriptors from
warp / 4, which the compiler cannot prove warp-uniform: ~27 instructions a wgmma (14% of 4.1's kernel-1 instructions
in session 23's profile). Now the warpgroup's index comes through a shuffle and the steps within a box are constant
offsets: the same wgmmas on the same descriptors in the same order. Measured behind a switch (s24 call 3: every
distinct B0 / B2 block at batches 1, 5, 128 bit for bit the old loop's output wherever it ran; 4.1's kernel 1
39.0 -> 36.8 us, B0 -23 us), then made the only loop.

CPU: the loop as the source reads it, the descriptor offsets against x_tx_offset by literal arithmetic, the box
and tail counts at B0's wgmma blocks. ptxas (no spills) is test_mbconv_v8.py's spill test. On the GPU the wgmma
kernels are checked against float64 by test_mbconv_k1_dh2.py (version 11) and test_mbconv_k1_tma_x.py (version 10)."""

from pathlib import Path

import pytest

import cuda_kernels

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def test_the_loop_takes_uniform_descriptors_and_whole_boxes():
    assert "const int wgi = __shfl_sync(0xffffffffu, warp / 4, 0);" in SOURCE
    assert "for (int m64 = wgi; m64 * kV8WgRows < npix; m64 += kExpandThreads / 128) {" in SOURCE
    assert "for (; kb + kV8TxCols <= p.k_pad; kb += kV8TxCols, ad = bf::desc_advance(ad, a_box)," in SOURCE
    assert "for (int kk = 0; kb + kk < p.k_pad; kk += 16)" in SOURCE  # the last box's steps
    assert "m64 = warp / 4" not in SOURCE and "CUDA_KERNELS_K1_WG_LOOP" not in SOURCE


def _x_tx_offset(r: int, k: int, m_pad: int) -> int:
    """mbconv_v8.cuh x_tx_offset (halves), transliterated."""
    return (k // 64) * m_pad * 64 + r * 64 + ((((k % 64) // 8) ^ (r % 8)) * 8)


@pytest.mark.parametrize("m_pad,k_pad", [(208, 80), (208, 112), (112, 192), (16, 16), (64, 208)])
def test_box_and_step_offsets_are_the_old_loops_descriptors(m_pad, k_pad):
    """The old loop's A and B descriptors advanced by 2 x x_tx_offset(64 m64, k0, m_pad) and 2 x x_tx_offset(0, k0, 48)
    bytes; the new loop's by 2 x 64 x 64 m64 + box x 2 x 64 m_pad (A) or box x 2 x 64 x 48 (B), plus 2 kk within a
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
