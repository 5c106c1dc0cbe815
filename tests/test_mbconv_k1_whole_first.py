"""Kernel 1's depthwise with each item's whole units first (csrc/mbconv_v8.cuh expand_dw_v8_body's WP,
expand_dw_v8_kernel_txdhp; CUDA_KERNELS_K1_WHOLE_FIRST, off until measured, NOTES.md "Session 25"). At 4.x (14 x 14
outputs, k = 3) the column groups of 4 and the segments of 4 rows leave partial units at the right and the bottom, so the
launch-wide whole kernels (CUDA_KERNELS_K1_WHOLE) do not apply. Here each item deals its whole units
(the whole segments x the whole column groups) to the thread groups first, on the path without edge handling, then
continues the round robin over its partial ones (the right column, then the bottom row). D is the default's value for
value (each output from the same taps in the same order); the units fall to other groups, so the pool's sums are
added in another order: the output is close to the default's, not bitwise. Only at k = 3: a warp holds parts of two
thread groups, and where they straddle the whole / partial boundary in a round it runs both paths; at 5.x and 6.x
that makes the slowest warp slower than the default's (test_the_slowest_warp_by_static_counts).

CPU: the switch, route and entry point as the source reads them; the deal, transliterated, against its properties
(every unit once, the whole ones in the first pass and only those, the partial ones mapped right column then bottom
row) at B0's 4.1, 5.1 and 6.1 and at shapes with only one kind of partial unit; the body's existing instantiations
SASS-identical (checked when it was written). GPU (@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5,
128 against float64 (poisoned output) and within 1e-3 of the default's output, the profiler naming _txdhp at B0's
4.1 (batch 128); B0 end to end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()
GROUPS = 10  # 256 threads / 24 channel pairs (V8Dw)


def test_the_switch_is_off_unless_1_and_routes_the_wgmma_kernel():
    assert mb.K1_WHOLE_FIRST_SWITCH == "CUDA_KERNELS_K1_WHOLE_FIRST"
    assert 'kernel1_switch("CUDA_KERNELS_K1_WHOLE_FIRST");\n  return v != nullptr && v[0] == \'1\';' in SOURCE
    assert """        if (g == 1 && p.Wo >= DwTile<1>::OW && kernel1_v8_whole_first_requested())  // (a whole column group)
          return launch_expand_dw_v8<48, KS, 1, 1, HF, true, true, false, DH, false, 0, false, false, true>(p, stream,""" \
        in SOURCE
    assert "return expand_dw_v8_kernel_txdhp<HC, KS, S, G, WG>;" in SOURCE
    # the deal as the kernel writes it (transliterated in _deal below)
    for line in ("const int ngroups_w = WP ? p.Wo / OW : ngroups, count_w = WP ? rows / R * ngroups_w : 0;",
                 "const int dq_w = WP ? GROUPS / ngroups_w : dq, dr_w = WP ? GROUPS - dq_w * ngroups_w : dr;",
                 "for (; j < (WP && pass == 0 ? count_w : items); j += GROUPS) {",
                 "const bool W = WU || (WP && pass == 0);",
                 "const int k = j - count_w, right = ngroups_w < ngroups ? rows / R : 0;",
                 "orow0 = (k < right ? k : nseg - 1) * R;",
                 "ow0 = (k < right ? ngroups - 1 : k - right) * OW;"):
        assert line in SOURCE, line


def _deal(group: int, rows: int, wo: int, r: int, ow: int = 4):
    """The units (first output row, first output column, whole) thread group `group` runs, in order: the kernel's
    two passes, its incremental (seg, og) in the first, the index map in the second."""
    ngroups, nseg = -(-wo // ow), -(-rows // r)
    ngroups_w, items = wo // ow, nseg * ngroups
    count_w = rows // r * ngroups_w
    dq, dr = GROUPS // ngroups_w, GROUPS - GROUPS // ngroups_w * ngroups_w
    seg, og = group // ngroups_w, group % ngroups_w
    out, j = [], group
    for pass_ in (0, 1):
        while j < (count_w if pass_ == 0 else items):
            if pass_ == 1:
                k, right = j - count_w, rows // r if ngroups_w < ngroups else 0
                out.append(((k if k < right else nseg - 1) * r, (ngroups - 1 if k < right else k - right) * ow, False))
            else:
                out.append((seg * r, og * ow, True))
                seg, og = seg + dq, og + dr
                if og >= ngroups_w:
                    og, seg = og - ngroups_w, seg + 1
            j += GROUPS
    return out


@pytest.mark.parametrize("rows,wo,r", [(14, 14, 4), (14, 14, 2), (7, 7, 2), (16, 14, 4), (14, 16, 4), (8, 28, 4)])
def test_the_deal_runs_every_unit_once_whole_ones_first(rows, wo, r):
    """4.1 (14 x 14, R 4), 5.1 (R 2), 6.1 (7 x 7), and shapes with only a partial column (16 rows), only a partial row
    (16 columns) or none."""
    units = [u for g in range(GROUPS) for u in _deal(g, rows, wo, r)]
    every = {(y, x) for y in range(0, rows, r) for x in range(0, wo, 4)}
    assert sorted((y, x) for y, x, _ in units) == sorted(every)  # each unit once
    for y, x, whole in units:
        assert whole == (y + r <= rows and x + 4 <= wo)  # the whole ones on the whole path, and only those
    for g in range(GROUPS):  # within a group, its whole units before its partial ones
        kinds = [whole for *_, whole in _deal(g, rows, wo, r)]
        assert kinds == sorted(kinds, reverse=True)


def test_4_1_by_hand():
    """4.1: 4 segments (4, 4, 4, 2 rows) x 4 column groups (4, 4, 4, 2 columns): 9 whole units, 7 partial; the 10
    groups take the 9 whole ones first (groups 0-8), then group 9 and groups 0-5 a partial one each. The critical
    groups (0-5) run one whole and one partial unit where the default gave some group two partial ones."""
    deals = [_deal(g, 14, 14, 4) for g in range(GROUPS)]
    assert [len(d) for d in deals] == [2] * 6 + [1] * 4
    assert [sum(w for *_, w in d) for d in deals] == [1] * 9 + [0]
    assert deals[9] == [(0, 12, False)] and deals[0] == [(0, 0, True), (4, 12, False)]


def _slowest_warp(rows, wo, r, whole_cost, partial_cost, first):
    """The most instructions any warp runs in an item's depthwise: round by round, a warp runs the whole path if any
    of its threads' groups has a whole unit, and the partial path if any has a partial one (both where both). Groups
    of 24 threads: warp w holds the groups of threads 32 w .. 32 w + 31. first: whole units first; else the default
    deal (units in index order) on its one path, costed as whole_cost."""
    ngroups, nseg = -(-wo // 4), -(-rows // r)
    if first:
        deals = [[w for *_, w in _deal(g, rows, wo, r)] for g in range(GROUPS)]
    else:
        deals = [[True for _ in range(g, nseg * ngroups, GROUPS)] for g in range(GROUPS)]
    cost = []
    for w in range(8):
        groups = {t // 24 for t in range(32 * w, 32 * w + 32) if t // 24 < GROUPS}
        total = 0
        for rnd in range(max(len(deals[g]) for g in groups)):
            kinds = {deals[g][rnd] for g in groups if rnd < len(deals[g])}
            total += (whole_cost if True in kinds else 0) + (partial_cost if False in kinds else 0)
        cost.append(total)
    return max(cost)


def test_the_slowest_warp_by_static_counts():
    """With the unit loops' static SASS counts (txdhp: whole 361 / partial 468 at k = 3, 347 / 417 at k = 5; the
    default's loop, 466 / 420, is the partial path): 4.1 829 against 932 (-11%); 5.1 1,458 against 1,260 and 6.1 764
    against 420 (slower: so k = 3 only)."""
    assert _slowest_warp(14, 14, 4, 361, 468, True) == 361 + 468
    assert _slowest_warp(14, 14, 4, 466, 466, False) == 2 * 466
    assert _slowest_warp(14, 14, 2, 347, 417, True) == 3 * 347 + 417 > _slowest_warp(14, 14, 2, 420, 420, False) == 1260
    assert _slowest_warp(7, 7, 2, 347, 417, True) == 347 + 417 > _slowest_warp(7, 7, 2, 420, 420, False) == 420


# ---- GPU ----

@on_every_distinct_block
def test_every_shape_against_float64_and_close_to_the_default(name, path, batch, monkeypatch):
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    got, default, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_WHOLE_FIRST_SWITCH, "1")
    if name == "efficientnet_b0" and batch == 128 and path == "features.4.1":
        assert "expand_dw_v8_kernel_txdhp<48, 3, 1, 1, true>" in names, names[:600]
    assert relative_error(got, default.double()) < 1e-3  # D the same; the pool's sums in another order


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_WHOLE_FIRST_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
