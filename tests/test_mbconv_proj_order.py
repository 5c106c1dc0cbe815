"""The projection's tasks in the order kernel 1 wrote D, newest first (csrc/mbconv_v3.cu V9Order, project_v9so_kernel;
CUDA_KERNELS_PROJ_ORDER, off until measured, NOTES.md "Session 26"). Version 8's kernel 1 runs persistent CTAs, each
over a contiguous range of its items (one 48-channel chunk of one band of one image), one item a round; when it ends,
L2 holds the last rounds' D - the tail of every range. The default projection walks the pixels in order and reaches
most of those tails after its own misses evicted them; the ordered one cuts its 16-pixel tasks into as many blocks as
kernel 1 has ranges per chunk and reads every block's last task first, then every block's second last, ...

CPU: the order is a permutation of the tasks (every task once, the holes of shorter blocks nothing) for B0's shapes
and odd ones, newest first; the blocks of B0's 2.1 by literal arithmetic; the source as the mirror reads it. GPU
(@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5, 128, bit for bit the default order's output (each
task's arithmetic is unchanged), the profiler naming project_v9so at B0's 2.0, 2.1 and 3.1; B0 end to end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v3.cu").read_text()


def test_the_source_reads_as_the_mirror():
    assert mb.PROJ_ORDER_SWITCH == "CUDA_KERNELS_PROJ_ORDER"
    assert 'const char* v = std::getenv("CUDA_KERNELS_PROJ_ORDER");\n  return v != nullptr && std::strcmp(v, "1") == 0;' \
        in SOURCE
    for line in ("const int c = by_ranges.div(j), o = j - c * ranges;  // (c: the round, o: the block)",
                 "const int end = by_ranges.div((o + 1) * tasks), begin = by_ranges.div(o * tasks);",
                 "return c < end - begin ? end - 1 - c : tasks;",
                 "const long long chunks = std::max(1, p.hid_pad / 48), items = chunks * p.N * std::max(1, p.row_blocks);",
                 "const int k1_ctas = (int)std::min<long long>(items, 2ll * sms);",
                 "o.ranges = (int)std::max<long long>(1, std::min<long long>(tasks, (k1_ctas + chunks / 2) / chunks));",
                 "o.rounds = (int)((tasks + o.ranges - 1) / o.ranges);",
                 "if (project_v9_order_requested() && p.w_exp != nullptr) return launch_project_v9so_nt<NT>(p, stream, pdl);"):
        assert line in SOURCE, line


def test_b0_2_1_by_hand():
    """2.1: 56 x 56 at batch 128 = 401,408 pixels, 25,088 tasks of 16; hidden 144 = 3 chunks of 48, bands of 8 rows
    (7 an image): 3 x 128 x 7 = 2,688 items on 2 x 132 = 264 CTAs, 88 a chunk (264 / 3); 25,088 / 88 = 285.09: blocks
    of 285 or 286 tasks, 286 rounds."""
    assert mb.proj_order(128, 56, 56, 144, 7, 132) == (88, 286)
    tasks = 25_088
    # the first round: every block's last task, block 0's first (its end: 25,088 // 88 = 285)
    assert [mb.proj_task_of(j, tasks, 88) for j in (0, 1, 87)] == [284, 25_088 * 2 // 88 - 1, 25_087]
    # the last round (285): only the blocks of 286 tasks have one left, their first; the others a hole (tasks)
    lengths = [(o + 1) * tasks // 88 - o * tasks // 88 for o in range(88)]
    assert sorted(set(lengths)) == [285, 286] and lengths.count(286) == tasks - 88 * 285 == 8
    assert mb.proj_task_of(285 * 88 + 0, tasks, 88) == tasks  # block 0 has 285
    assert mb.proj_task_of(285 * 88 + 10, tasks, 88) == 10 * tasks // 88  # block 10 has 286: its first task


@pytest.mark.parametrize("n,ho,wo,hid_pad,row_blocks", [
    (128, 56, 56, 96, 28),    # B0's 2.0
    (128, 56, 56, 144, 7),    # 2.1
    (128, 28, 28, 240, 3),    # 3.1 (5 chunks on 264 CTAs: 52.8 a chunk, rounded to 53)
    (1, 56, 56, 144, 7),      # batch 1: fewer items than CTAs
    (5, 9, 7, 96, 2),         # odd: 315 pixels, the last task partial
    (3, 1, 5, 48, 1),         # one task
])
def test_every_task_once_newest_first(n, ho, wo, hid_pad, row_blocks):
    ranges, rounds = mb.proj_order(n, ho, wo, hid_pad, row_blocks, 132)
    tasks = -(-n * ho * wo // 16)
    order = [mb.proj_task_of(j, tasks, ranges) for j in range(ranges * rounds)]
    real = [t for t in order if t != tasks]
    assert sorted(real) == list(range(tasks))
    assert ranges * rounds - len(real) < ranges  # holes only in the last round
    # within each block the tasks come from its end to its start
    for o in range(ranges):
        mine = [t for t in order[o::ranges] if t != tasks]
        assert mine == sorted(mine, reverse=True)


# ---- GPU ----

@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import assert_bits_where_it_ran, switched_against_float64

    got, default, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.PROJ_ORDER_SWITCH, "1")
    if name == "efficientnet_b0" and path in ("features.2.0", "features.2.1", "features.3.1"):
        assert "project_v9so_kernel" in names, names[:600]
    assert_bits_where_it_ran(got, default, names, r"project_v9so_kernel")  # the same tasks, another order


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_ORDER_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
