"""Kernel 1's depthwise in whole units of one output row at the static wgmma blocks (csrc/mbconv_v8.cuh
expand_dw_v8_kernel_txdhsw; CUDA_KERNELS_K1_ROW_UNITS, on by default in version 11 since session 29): 7 wide
at B0's 14 x 14 and 7 x 7 blocks, the whole 9-wide row at B2's 9 x 9 blocks.

A depthwise unit is OW output columns x R output rows of one channel pair, and an item's units are dealt to 10 groups of
24 threads, barrier B waiting for the slowest. Today's units are 4 x 4 at k = 3 and 4 x 2 at k = 5: 14 columns make 4
column groups, the last half empty, and at 4.1 the 16 units leave the slowest group 2 units, 32 outputs' worth of taps
where the average is 19.6. Units of 7 x 1 tile 14 x 14 exactly: 28 whole units, 3 rounds, 21 outputs, and no edge code
(static SASS: the unit loop 418 -> 159 instructions at k = 3, 407 -> 301 at k = 5; the slowest group's depthwise an item
2 x 418 -> 3 x 159 at 4.1; at 6.1's 7 x 7, two images an item, 2 x 438 -> 2 x 317). At 9 x 9 (k = 5) 15 units in two
rounds become 9 in one (2 x 402 -> 1 x 364). D is the same values (each output's taps in the same order); the pool's
fp16 row sums run over the unit's outputs instead of 4, so the output is close to, not bit for bit, the default's.

CPU: the units per thread group by the kernel's walk (mbconv_helpers.depthwise_walk), the switch, the width rule
and the route as the source reads them. ptxas (spills) is test_mbconv_v8.py's spill test. GPU (@pytest.mark.cuda):
every distinct B0 / B2 block at batches 1, 5, 128 against float64 (poisoned output), the profiler naming _txdhsw at
B0's 4.1, 5.0, 5.1, 6.1 and B2's 6.1, 7.0, 7.1, within 1e-3 of the switch-off output; B0 end to end."""

import re
from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import depthwise_walk, on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()
GROUPS = 10  # V8Dw<48>::GROUPS: 24 threads a group, one channel pair each


def units_per_group(images: int, rows: int, wo: int, r: int, ow: int) -> list[int]:
    """How many units each of the 10 thread groups takes in an item, by the kernel's walk (mbconv_helpers.
    depthwise_walk, checked in test_mbconv_v8 to cover every output once, one-row units included)."""
    _, writes = depthwise_walk(images, rows, wo, r, ow, GROUPS)
    return [sum(len(summed) for _, g, summed in writes if g == group) for group in range(GROUPS)]


def test_the_slowest_group_at_14_by_14():
    # 4 x 4 (k = 3, today): 4 column groups x 4 segments = 16 units, the slowest group 2 (of which 1 or 2 partial)
    walks = units_per_group(1, 14, 14, 4, 4)
    assert sum(walks) == 16 and max(walks) == 2 and walks.count(2) == 6
    # 4 x 2 (k = 5, today): 4 x 7 = 28 units, 3 rounds; 7 x 1: 2 x 14 = 28 whole units, 3 rounds
    assert sum(units_per_group(1, 14, 14, 2, 4)) == 28 and max(units_per_group(1, 14, 14, 2, 4)) == 3
    walks = units_per_group(1, 14, 14, 1, 7)
    assert sum(walks) == 28 and max(walks) == 3
    # taps a unit computes whether or not its outputs are stored: the slowest group's outputs' worth
    assert max(walks) * 7 * 1 == 21 < 2 * 4 * 4 == 32


def test_the_slowest_group_at_7_by_7_in_items_of_two_images():
    # 4 x 2 (k = 5, today): 2 column groups (the second 3 of 4 wide) x 4 segments (the last 1 of 2 rows) x 2 images
    walks = units_per_group(2, 7, 7, 2, 4)
    assert sum(walks) == 16 and max(walks) == 2
    # 7 x 1: 1 x 7 x 2 = 14 whole units, the slowest group 2 of them (static SASS: 2 x 317 instructions, not 2 x 438)
    walks = units_per_group(2, 7, 7, 1, 7)
    assert sum(walks) == 14 and max(walks) == 2 and walks.count(2) == 4


def test_the_slowest_group_at_9_by_9():
    # B2's 6.x (k = 5): 4 x 2 gives 3 column groups (the last 1 of 4 wide) x 5 segments = 15 units, two rounds; rows
    # of 9: 9 whole units, one round
    assert max(units_per_group(1, 9, 9, 2, 4)) == 2 and sum(units_per_group(1, 9, 9, 2, 4)) == 15
    assert max(units_per_group(1, 9, 9, 1, 9)) == 1 and sum(units_per_group(1, 9, 9, 1, 9)) == 9
    # B2's 7.1 (bands of 5 rows: 5 and 4): one unit a row
    assert sum(units_per_group(1, 5, 9, 1, 9)) == 5 and sum(units_per_group(1, 4, 9, 1, 9)) == 4


def test_the_switch_and_the_route():
    assert mb.K1_ROW_UNITS_SWITCH == "CUDA_KERNELS_K1_ROW_UNITS"
    assert """  const char* v = kernel1_switch("CUDA_KERNELS_K1_ROW_UNITS");
  return v != nullptr ? v[0] == '1' : v11;""" in SOURCE  # version 11's default since session 29
    assert "const bool row_units = kernel1_v8_row_units_requested(v11), bias_early" in SOURCE
    # the body's unit shape: DwTile's and V8Seg's unless the kernel names another
    assert "OW = UOW > 0 ? UOW : DwTile<S>::OW" in SOURCE and "R = URS > 0 ? URS : V8Seg<KS, S>::R" in SOURCE
    # the kernel: the static _txdhs with whole units (WU) of UOW x URS
    assert ("expand_dw_v8_body<HC, KS, S, G, true, true, WG, false, true, false, 0, false, true, UOW, URS>(p, &xmap);"
            in SOURCE)
    assert "else if constexpr (UOW > 0)\n      return expand_dw_v8_kernel_txdhsw<HC, KS, S, G, WG, SH, UOW, URS>;" in SOURCE
    # the width: 7 where 7 divides the entry's output width, else the whole row up to 9, where its channels are all
    # real (whole units)
    assert "return kV8Static[SH].hidden % 48 != 0 ? 0 : out % 7 == 0 ? 7 : out <= 9 ? out : 0;" in SOURCE
    # (with CUDA_KERNELS_K1_BIAS_EARLY=1 first the same units' _txdhswb: test_mbconv_k1_bias_early)
    assert re.search(r"if \(row_units\) \{.*?\s+return launch_expand_dw_v8<48, KS, 1, G, HF, true, true, false, DH, "
                     r"false, 0, false, false, SH, UC, 1>\(\s+p, stream, pdl\);", SOURCE, re.S)
    # (the launcher refuses a shape the units do not tile)
    assert "v8_static_out(kV8Static[SH].W, KS, S) % (UOW > 0 ? UOW : 1) == 0" in SOURCE


def test_which_entries_take_it():
    from cuda_kernels import static_shapes as ss

    tx = [e for e in ss.listed_entries() if e.route in ("kV8RouteTx1", "kV8RouteTx2")]
    # stride 1: output = input; every entry's hidden is a multiple of 48
    widths = [(e.H, e.ks, e.C_in, 7 if e.H % 7 == 0 else e.H if e.H <= 9 else 0) for e in tx]
    # B0's 4.1 / 4.2, 5.0, 5.1 / 5.2, 6.1-6.3; B2's 6.1-6.4, 7.0, 7.1: every static wgmma entry
    assert widths == [(14, 3, 80, 7), (14, 5, 80, 7), (14, 5, 112, 7), (7, 5, 192, 7), (9, 5, 208, 9), (9, 3, 208, 9),
                      (9, 3, 352, 9)]
    # one image an item at 14 x 14, two at 7 x 7
    assert "return launch_static(e, std::integral_constant<int, 1>{});" in SOURCE
    assert "return launch_static(e, std::integral_constant<int, 2>{});" in SOURCE


# ---- GPU ----

ROW_KERNELS = {("efficientnet_b0", "features.4.1"): "expand_dw_v8_kernel_txdhsw<48, 3, 1, 1, true, 6, 7, 1>",
               ("efficientnet_b0", "features.5.0"): "expand_dw_v8_kernel_txdhsw<48, 5, 1, 1, true, 7, 7, 1>",
               ("efficientnet_b0", "features.5.1"): "expand_dw_v8_kernel_txdhsw<48, 5, 1, 1, true, 8, 7, 1>",
               ("efficientnet_b0", "features.6.1"): "expand_dw_v8_kernel_txdhsw<48, 5, 1, 2, true, 10, 7, 1>",
               ("efficientnet_b2", "features.6.1"): "expand_dw_v8_kernel_txdhsw<48, 5, 1, 1, true, 16, 9, 1>",
               ("efficientnet_b2", "features.7.0"): "expand_dw_v8_kernel_txdhsw<48, 3, 1, 1, true, 17, 9, 1>",
               ("efficientnet_b2", "features.7.1"): "expand_dw_v8_kernel_txdhsw<48, 3, 1, 1, true, 18, 9, 1>"}


@on_every_distinct_block
def test_every_shape_against_float64(name, path, batch, monkeypatch):
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    monkeypatch.setenv(mb.K1_BIAS_EARLY_SWITCH, "0")  # the row units as such (with it: test_mbconv_k1_bias_early)
    got, default, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_ROW_UNITS_SWITCH, "1")
    if (name, path) in ROW_KERNELS and batch >= 2:  # (B0's 6.1 at batch 1: one image an item)
        assert ROW_KERNELS[name, path] in names, names[:600]
    if "txdhsw<" in names:  # the same D, the pool's sums in another order
        assert relative_error(got, default.double()) < 1e-3
    else:  # the switch changes nothing (version 3's kernel 1 pools with atomics: last bits)
        assert relative_error(got, default.double()) < 1e-4


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_ROW_UNITS_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
