"""Kernel 1's last round of expand m-tiles split in row halves (csrc/mbconv_v8.cuh expand_dw_v8_body's HT,
expand_dw_v8_kernel_dhurfh / _dhurfwh; CUDA_KERNELS_K1_HALF_TILES, off until measured, NOTES.md "Session 25"). The
mma.sync expand deals an item's 16-pixel m-tiles to its 8 warps round robin, and barrier B waits for the slowest: at
2.1 a continuing band has 28 m-tiles, so warps 0-3 run 4 and warps 4-7 run 3. Where the last round holds at most 4
tiles, each of them goes to two warps, both running its MMAs (12 HMMA) and each storing one of its two accumulator
row halves (the epilogue - bias, SiLU, packing, stores - is most of a tile's instructions). The same values stored:
bit for bit.

CPU: the switch, routes and entry points as the source reads them; the split by hand at 2.1 and 3.1; ptxas (spills)
is test_mbconv_v8.py's spill test. GPU (@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5, 128 against
float64 (poisoned output), bit for bit the default's output where an _h kernel ran, the profiler naming one at the
2.1s and 3.1s; B0 end to end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def test_the_switch_is_off_unless_1_and_routes_the_u_in_registers_kernels():
    assert mb.K1_HALF_TILES_SWITCH == "CUDA_KERNELS_K1_HALF_TILES"
    assert 'kernel1_switch("CUDA_KERNELS_K1_HALF_TILES");\n  return v != nullptr && v[0] == \'1\';' in SOURCE
    assert "return expand_dw_v8_kernel_dhurfwh<HC, KS, S, G, UR>;" in SOURCE
    assert "return expand_dw_v8_kernel_dhurfh<HC, KS, S, G, UR>;" in SOURCE
    assert "  const bool half = kernel1_v8_half_tiles_requested();" in SOURCE
    for line in ("const int tail = mtiles % kWarps, "
                 "mfull = HT && tail > 0 && 2 * tail <= kWarps ? mtiles - tail : mtiles;",
                 "for (int v = warp; v < (HT ? mfull + (mfull < mtiles ? 2 * tail : 0) : mtiles); v += kWarps) {",
                 "mt = mfull + (v - mfull) / 2;",
                 "h_only = (v - mfull) % 2;",
                 "if (HT && h_only >= 0 && h != h_only) continue;"):
        assert line in SOURCE, line


def _tiles(npix: int, warps: int = 8):
    """(tile, row half or -1) each warp runs, as the kernel deals them."""
    mtiles = -(-npix // 16)
    tail = mtiles % warps
    mfull = mtiles - tail if 0 < tail and 2 * tail <= warps else mtiles
    end = mfull + (2 * tail if mfull < mtiles else 0)
    return [[(v, -1) if v < mfull else (mfull + (v - mfull) // 2, (v - mfull) % 2) for v in range(w, end, warps)]
            for w in range(warps)]


def test_the_split_by_hand():
    """2.1's continuing band: 8 rows x 56 = 448 pixels, 28 m-tiles: 24 whole in 3 rounds, then tiles 24-27 in halves,
    one a warp (slowest warp 3.5 tiles, was 4); its first band: 9 rows, 504 pixels, 32 m-tiles, no split. 3.1's three
    bands (no halo kept at k = 5) expand 12, 14 and 10 rows x 28: 336 pixels, 21 m-tiles (a last round of 5: not split, 10
    halves on 8 warps would not shorten it); 392, 25 (tile 24 in halves on warps 0 and 1); 280, 18 (tiles 16 and 17
    in halves on warps 0-3)."""
    deal = _tiles(448)
    assert [len(d) for d in deal] == [4] * 8 and deal[0][-1] == (24, 0) and deal[7][-1] == (27, 1)
    assert sorted(t for d in deal for t in d if t[1] >= 0) == [(t, h) for t in range(24, 28) for h in (0, 1)]
    assert _tiles(504) == [[(w + 8 * k, -1) for k in range(4)] for w in range(8)]
    assert _tiles(392)[0][-1] == (24, 0) and _tiles(392)[1][-1] == (24, 1) and len(_tiles(392)[2]) == 3
    assert all(h == -1 for d in _tiles(336) for _, h in d) and max(len(d) for d in _tiles(336)) == 3
    assert [d[-1] for d in _tiles(280)[:4]] == [(16, 0), (16, 1), (17, 0), (17, 1)] and len(_tiles(280)[4]) == 2


# ---- GPU ----

@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    import re

    from mbconv_helpers import assert_bits_where_it_ran, switched_against_float64

    got, default, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_HALF_TILES_SWITCH, "1")
    if path in ("features.2.1", "features.3.1"):
        assert re.search(r"expand_dw_v8_kernel_dhurfw?h<48, ", names), names[:600]
    assert_bits_where_it_ran(got, default, names, r"expand_dw_v8_kernel_dhurfw?h<")  # the same values stored


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_HALF_TILES_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
