"""Kernel 1's depthwise where every unit is whole (csrc/mbconv_v8.cuh expand_dw_v8_body's W, kernel1_v8_all_whole;
CUDA_KERNELS_K1_WHOLE; on by default in version 11 since session 26: 2.1's kernel 1 102.6 -> 95.3 us, 2.0's 169.6 ->
157.3, B0 -32.2 us; NOTES.md "Session 26"). A depthwise unit is OW outputs x R output rows of one channel pair; every
unit clamped each of its E rows to the band's last (a min and its address chain: ~5 instructions a row) and tested
each output against the image's right edge and the real channels before storing it. Where the launch's geometry makes
every unit whole - the column groups fill Wo, the segments fill every band, the channels are all real - the variant's
kernels leave both out: at 2.1 the unit's loop goes from 467 to 349 SASS instructions (160 of them HFMA2), at 3.1
from 417 to 359, at 3.0 from 264 to 225. The same sums in the same order: bit for bit.

CPU: the switch, the geometry rule and the routes as the source reads them; which of B0's blocks qualify, by hand.
ptxas (spills) is test_mbconv_v8.py's spill test. GPU (@pytest.mark.cuda): every distinct B0 / B2 block at batches 1,
5, 128 against float64 (poisoned output), bit for bit the default's output where a _w kernel ran, the profiler naming
one at B0's 2.0, 2.1, 3.0 and 3.1; B0 end to end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def test_the_switch_is_on_unless_0_and_asks_the_geometry():
    assert mb.K1_WHOLE_SWITCH == "CUDA_KERNELS_K1_WHOLE"
    assert """  const char* v = kernel1_switch("CUDA_KERNELS_K1_WHOLE");
  constexpr int OW = DwTile<S>::OW, R = V8Seg<KS, S>::R;
  return (v != nullptr ? v[0] == '1' : v11) && p.Wo % OW == 0 && p.rows_per_tile % R == 0 &&
         p.Ho % p.rows_per_tile % R == 0 && p.hidden == p.hid_pad;""" in SOURCE
    for entry in ("expand_dw_v8_kernel_dhurfw<HC, KS, S, G, UR>", "expand_dw_v8_kernel_bcdhgw<HC, KS, S, G>",
                  "expand_dw_v8_kernel_bcdhw<HC, KS, S, G>"):
        assert f"return {entry};" in SOURCE
    assert "  if (kernel1_v8_all_whole<KS, 1>(p, v11))" in SOURCE  # _dhurf (launch_expand_dw_v8_ur) at k = 3 and 5
    assert """        if constexpr (DH && KS == 3) {
          cudaError_t err;
          if (kernel1_v8_all_whole<KS, 2>(p, v11)) {""" in SOURCE  # _bcdh at k = 3 (2.0)
    assert "            return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH, false, 0, false, true>(p, stream, pdl);" \
        in SOURCE
    assert "            if (!kernel1_v8_all_whole<KS, 2>(p, v11))" in SOURCE  # _bcdhg at k = 5 (3.0)
    # no clamp, no test: W, the launch's constant WU
    assert "      constexpr bool W = WU;" in SOURCE
    assert "const __half* erow = ebase + (W ? er : min(er, e_last)) * WE * LDE;" in SOURCE
    assert "if (!W && valid < OW && u >= valid) break;" in SOURCE


def test_which_b0_blocks_qualify_by_hand():
    """Column groups of OW = 4 outputs at stride 1, 2 at stride 2; segments of R = 4 rows at k = 3, stride 1, else 2;
    the bands (mbconv.band_rows, version 11): 2.0 56 x 56 outputs in bands of 2 rows; 2.1 56 in bands of 8; 3.0 28 in
    bands of 4; 3.1 28 in bands of 10 (10, 10, 8); 4.0 14 in bands of 7 (7 is odd: no); 4.1 and 5.x 14 columns, 6.x 7
    (not multiples of 4: no). Hidden 96, 144, 144, 240, 240: multiples of 48 (every channel real)."""
    def whole(wo, ow, ho, rows, r, hidden):
        return wo % ow == 0 and rows % r == 0 and ho % rows % r == 0 and hidden % 48 == 0

    assert whole(56, 2, 56, 2, 2, 96) and whole(56, 4, 56, 8, 4, 144)  # 2.0, 2.1
    assert whole(28, 2, 28, 4, 2, 144) and whole(28, 4, 28, 10, 2, 240)  # 3.0, 3.1
    assert not whole(14, 2, 14, 7, 2, 240) and not whole(14, 4, 14, 14, 4, 480)  # 4.0, 4.1
    geometry = {(112, 3, 2, 16, 16): 2, (56, 3, 1, 24, 32): 8, (56, 5, 2, 24, 32): 4, (28, 5, 1, 40, 48): 10,
                (28, 3, 2, 40, 48): 7}
    for (h, k, s, c_in, k_pad), rows in geometry.items():
        taps_global = mb.kernel1_taps_global(11, s, k)
        assert mb.band_rows(h, h, k, s, k_pad, 48, True, 11, c_in, taps_global) == rows


# ---- GPU ----

B0_KERNELS = {"features.2.0": "expand_dw_v8_kernel_bcdhw<48, 3, 2, 1>",
              "features.2.1": "expand_dw_v8_kernel_dhurfw<48, 3, 1, 1, 2>",
              "features.3.0": "expand_dw_v8_kernel_bcdhgw<48, 5, 2, 1>",
              "features.3.1": "expand_dw_v8_kernel_dhurfw<48, 5, 1, 1, 3>"}


@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import check_switch_bitwise

    monkeypatch.setenv(mb.K1_STATIC_SWITCH, "0")  # the _w kernels themselves (B0's shapes: the static _ws, the default)
    # the same sums in the same order
    check_switch_bitwise(monkeypatch, name, path, batch, mb.K1_WHOLE_SWITCH, B0_KERNELS, r"expand_dw_v8_kernel_\w+w<")


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_WHOLE_SWITCH: "1", mb.K1_STATIC_SWITCH: "0"}, {"StemMBConv": 1, "MBConv": 15},
                   16)
