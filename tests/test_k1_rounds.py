"""cuda_kernels.k1_rounds: kernel 1's item rounds over the CTAs and depthwise rounds over the thread groups, against
the counts written out from the kernel's rules (NOTES.md, session 30)."""

import pytest

from cuda_kernels import k1_rounds as kr
from cuda_kernels import static_shapes as ss


def _entry(h, ks, stride, hidden):
    return next(e for e in ss.listed_entries() if (e.H, e.ks, e.stride, e.hidden) == (h, ks, stride, hidden))


def test_b0_3_1_in_bands_of_14_and_of_10():
    e = _entry(28, 5, 1, 240)
    r = kr.block_rounds(e, 128, 132)
    # 240 / 48 = 5 chunks x 128 images x 2 bands; two CTAs on each of 132 SMs
    assert (r.rows, r.bands, r.items, r.ctas) == (14, 2, 5 * 128 * 2, 264) == (14, 2, 1280, 264)
    assert r.item_rounds == 5 and r.item_fill == pytest.approx(1280 / (5 * 264))
    # units of 4 columns x 2 rows: 28 / 4 = 7 column groups x 14 / 2 = 7 segments, on 10 thread groups
    assert r.units == (49, 49) and r.group_rounds == (5, 5) and r.group_fill == pytest.approx(98 / 100)
    old = kr.block_rounds(e, 128, 132, halo_bands=False)
    assert (old.rows, old.bands, old.items) == (10, 3, 5 * 128 * 3)
    assert old.item_rounds == 8 and old.item_fill == pytest.approx(1920 / (8 * 264))
    # bands of 10, 10, 8 rows: 7 x 5, 7 x 5, 7 x 4 units
    assert old.units == (35, 35, 28) and old.group_rounds == (4, 4, 3)
    assert old.group_fill == pytest.approx(98 / 110)


def test_b0_4_1_and_6_1():
    r = kr.block_rounds(_entry(14, 3, 1, 480), 128, 132)  # one band; the one-row units 7 wide
    assert (r.bands, r.items, r.item_rounds) == (1, 10 * 128, 5)
    assert r.units == (14 * 2,) and r.group_rounds == (3,)
    r = kr.block_rounds(_entry(7, 5, 1, 1152), 128, 132)  # two images an item, 7-wide rows
    assert (r.items, r.item_rounds) == (24 * 64, 6)
    assert r.units == (2 * 7,) and r.group_rounds == (2,) and r.group_fill == pytest.approx(14 / 20)


def test_a_small_batch_takes_one_round():
    r = kr.block_rounds(_entry(28, 5, 1, 240), 1, 132)
    assert (r.items, r.ctas, r.item_rounds, r.item_fill) == (10, 10, 1, 1.0)


def test_the_table(capsys):
    assert kr.main(["efficientnet_b0"]) == 0
    out = capsys.readouterr().out
    assert "features.3.1   28x28 k5 s1    2 x 14    1280       5  97.0%   49 x 2         5 x 2          98.0%" in out
    assert "features.1.0   -  (version 3's kernel 1" in out


def test_bad_input_exits_2():
    with pytest.raises(SystemExit) as exc:
        kr.main(["efficientnet_b0", "--sms", "0"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        kr.main(["not_a_model"])
    assert exc.value.code == 2
