"""Kernel 1 compiled for one input shape (csrc/mbconv_v8.cuh kV8Static, expand_dw_v8_kernel_dhurfws / _bcdhws;
CUDA_KERNELS_K1_STATIC; on by default in version 11 since session 26: kernel 1 2.0 158.3 -> 125.2 us, 2.1 93.3 ->
82.3, 3.0 87.3 -> 76.4, 3.1 68.7 -> 64.1, B0 -58.9 us; NOTES.md "Session 26"). The whole-unit kernels take the block's sizes
(H, W, channels, band rows) as launch values, so every address, bound and division by them is computed at run time;
the static kernels copy the parameters and set those fields to constants, and the compiler folds them: by static count
2.1's item loop goes from 1,810 to 1,360 SASS instructions (its 20 bytes of spills go), 2.0's from 1,869 to 1,233,
3.0's 1,884 to 1,344, 3.1's 1,619 to 1,356. The arithmetic is the same: bit for bit the dynamic kernel's output.

The rest of B0's version-8 kernels 1 (4.0-6.3, whose units are not all whole: _bcdhs, _txdhs) the same way behind
CUDA_KERNELS_K1_STATIC_REST (on by default since session 27: kernel 1 4.0 37.7 -> 32.4 us, 4.1 36.1 -> 31.7, 5.1 61.9
-> 56.5, 6.0 56.3 -> 51.0, B0 -49.1 us): by static count 4.1's item loop 2,072 -> 1,492, 4.0's 1,912 -> 1,325, 5.1's
1,892 -> 1,506, 6.0's 1,943 -> 1,255, 6.1's 2,522 -> 2,105. B2's 8 entries follow B0's (since session 28: B2 -190 us,
s28 call 2).

CPU: the table holds B0's blocks as torchvision builds them (input size, depthwise k and stride, channels; the band
rows mbconv's band_rows chooses), the switches and the matcher as the source reads them. ptxas (spills) is test_mbconv_v8.py's spill
test. GPU (@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5, 128 against float64 (poisoned output), bit
for bit the switch-off output where a static kernel ran, the profiler naming one at B0's 2.0, 2.1, 3.0 and 3.1; B0
end to end."""

import re
from pathlib import Path

import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def _table() -> list[tuple]:
    """kV8Static's entries after the empty one: (H, W, ks, stride, C_in, k_pad, hidden, rows, route name)."""
    body = SOURCE.split("constexpr V8Static kV8Static[] = {")[1].split("};")[0]
    return [tuple(int(v) for v in m[0].split(",")) + (m[1],) for m in re.findall(r"\{([\d, ]+), (kV8Route\w+)\}", body)]


# the route each B0 block takes in version 11 (launch_expand_dw_v8_hf): stride 2 on the bias-in-C kernels (_bcdh,
# whole units at 2.0 and 3.0, where 56 and 28 output columns are multiples of 2 and the bands of whole segments),
# stride 1 on U in registers where the units are whole (2.1, 3.1: 56 and 28 columns, multiples of 4) and on the TMA
# X with the wgmma expand at 14 x 14 and 7 x 7 (two 7 x 7 images an item)
ROUTES = {"2.0": "kV8RouteBcWhole", "2.1": "kV8RouteUrWhole", "3.0": "kV8RouteBcWhole", "3.1": "kV8RouteUrWhole",
          "4.0": "kV8RouteBc", "4.1": "kV8RouteTx1", "5.0": "kV8RouteTx1", "5.1": "kV8RouteTx1", "6.0": "kV8RouteBc",
          "6.1": "kV8RouteTx2"}


def test_the_table_is_b0s_version_8_blocks():
    """B0 at 224 x 224 (torchvision), each block's input H x W x C_in, expand to hidden, depthwise k and stride: 2.0
    112 x 112 x 16 -> 96, k 3 s 2; 2.1 56 x 56 x 24 -> 144, k 3 s 1; 3.0 56 x 56 x 24 -> 144, k 5 s 2; 3.1 28 x 28 x 40
    -> 240, k 5 s 1; 4.0 28 x 28 x 40 -> 240, k 3 s 2; 4.1 14 x 14 x 80 -> 480, k 3 s 1; 5.0 14 x 14 x 80 -> 480, k 5
    s 1; 5.1 14 x 14 x 112 -> 672, k 5 s 1; 6.0 14 x 14 x 112 -> 672, k 5 s 2; 6.1 7 x 7 x 192 -> 1152, k 5 s 1. k_pad
    is C_in rounded up to 16 (mbconv.prepare_weights); the band rows are band_rows'. (7.0, 7 x 7 at k 3 s 1, runs
    version 3's kernel 1.)"""
    import torchvision

    model = torchvision.models.efficientnet_b0()
    want = {"2.0": (112, 16, 96), "2.1": (56, 24, 144), "3.0": (56, 24, 144), "3.1": (28, 40, 240),
            "4.0": (28, 40, 240), "4.1": (14, 80, 480), "5.0": (14, 80, 480), "5.1": (14, 112, 672),
            "6.0": (14, 112, 672), "6.1": (7, 192, 1152)}
    for path, (h, c_in, hidden) in want.items():
        stage, index = (int(v) for v in path.split("."))
        block = model.features[stage][index].block
        assert block[0][0].in_channels == c_in and block[0][0].out_channels == hidden
        ks, s = block[1][0].kernel_size[0], block[1][0].stride[0]
        k_pad = -(-c_in // 16) * 16
        rows = mb.band_rows(h, h, ks, s, k_pad, 48, True, 11, c_in, mb.kernel1_taps_global(11, s, ks))
        assert _table().index((h, h, ks, s, c_in, k_pad, hidden, rows, ROUTES[path])) == list(want).index(path), path
    assert len(_table()) == 10 + 8  # then B2's (test_static_shapes)


def test_the_switches_and_the_matcher():
    assert mb.K1_STATIC_SWITCH == "CUDA_KERNELS_K1_STATIC" and mb.K1_STATIC_REST_SWITCH == "CUDA_KERNELS_K1_STATIC_REST"
    assert """  const char* v = kernel1_switch("CUDA_KERNELS_K1_STATIC");
  return v != nullptr ? v[0] == '1' : v11;""" in SOURCE  # kernel1_v8_static_requested
    assert "return kernel1_v8_static_requested(v11) ? v8_static_entry<KS>(p) : 0;" in SOURCE
    assert """  const char* v = kernel1_switch("CUDA_KERNELS_K1_STATIC_REST");
  return (v != nullptr ? v[0] == '1' : v11) ? v8_static_entry<KS>(p) : 0;""" in SOURCE
    # each route launches the entries tagged with it (and no other), the whole-unit routes under STATIC, the rest
    # under STATIC_REST, the wgmma routes at their images an item
    assert "if constexpr (e.route == ROUTE && e.ks == KS && (KPAD == 0 || e.k_pad == KPAD))" in SOURCE
    for route, count in (("launch_v8_static<kV8RouteUrWhole, KS, 16 * UR>(kernel1_v8_static<KS>(p, v11)", 1),
                         ("launch_v8_static<kV8RouteBcWhole, KS>(kernel1_v8_static<KS>(p, v11)", 2),
                         ("launch_v8_static<kV8RouteBc, KS>(kernel1_v8_static_rest<KS>(p, v11)", 2),
                         ("const int sh = kernel1_v8_static_rest<KS>(p, v11);", 1),
                         ("g == 1 && launch_v8_static<kV8RouteTx1, KS>(sh", 1),
                         ("g == 2 && launch_v8_static<kV8RouteTx2, KS>(sh", 1)):
        assert SOURCE.count(route) == count, route
    # every field the static kernel sets is compared with the launch's (v8_static_matches, at the entry's rows)
    assert "if (v8_static_matches<KS>(p, kV8Static[i], kV8Static[i].rows)) return i;" in SOURCE
    for field in ("s.ks == KS", "p.H == s.H", "p.W == s.W", "p.stride == s.stride", "p.ksize == KS", "p.pad == KS / 2", "p.Ho == out",
                  "p.Wo == out", "p.C_in == s.C_in", "p.k_pad == s.k_pad", "p.hidden == s.hidden",
                  "p.hid_pad == s.hidden", "p.rows_per_tile == rows", "p.row_blocks == (out + rows - 1) / rows"):
        assert field in SOURCE, field
    setter = SOURCE.split("__device__ __forceinline__ void v8_static_params(Params& p) {")[1].split("\n}")[0]
    assigned = set(re.findall(r"p\.(\w+) =", setter))
    assert assigned == {"H", "W", "Ho", "Wo", "C_in", "k_pad", "hidden", "hid_pad", "rows_per_tile", "row_blocks",
                        "ksize", "stride", "pad"}
    assert "(h + 2 * (ks / 2) - ks) / s + 1" in SOURCE  # the output size, as PyTorch's conv at padding k // 2
    assert [(112 + 2 - 3) // 2 + 1, (56 + 2 - 3) // 1 + 1, (56 + 4 - 5) // 2 + 1, (28 + 4 - 5) // 1 + 1] == \
        [56, 56, 28, 28]


# ---- GPU ----

B0_KERNELS = {"features.2.0": "expand_dw_v8_kernel_bcdhws<48, 3, 2, 1, false, 1>",
              "features.2.1": "expand_dw_v8_kernel_dhurfws<48, 3, 1, 1, 2, 2>",
              "features.3.0": "expand_dw_v8_kernel_bcdhws<48, 5, 2, 1, true, 3>",
              "features.3.1": "expand_dw_v8_kernel_dhurfws<48, 5, 1, 1, 3, 4>"}


@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import check_switch_bitwise

    # the same sums in the same order (B0's 3.1 in today's bands: in version 11's default since session 30, bands of
    # 14 with the halo kept, the launch-value kernel runs bands of 10 - CUDA_KERNELS_K1_HALO5, test_mbconv_k1_halo5)
    monkeypatch.setenv(mb.K1_HALO5_SWITCH, "0")
    check_switch_bitwise(monkeypatch, name, path, batch, mb.K1_STATIC_SWITCH, B0_KERNELS, r"expand_dw_v8_kernel_\w+ws<")


# ---- GPU: the rest (CUDA_KERNELS_K1_STATIC_REST) ----

REST_KERNELS = {"features.4.0": "expand_dw_v8_kernel_bcdhs<48, 3, 2, 1, false, 5>",
                "features.4.1": "expand_dw_v8_kernel_txdhs<48, 3, 1, 1, true, 6>",
                "features.5.0": "expand_dw_v8_kernel_txdhs<48, 5, 1, 1, true, 7>",
                "features.5.1": "expand_dw_v8_kernel_txdhs<48, 5, 1, 1, true, 8>",
                "features.6.0": "expand_dw_v8_kernel_bcdhs<48, 5, 2, 1, true, 9>",
                "features.6.1": "expand_dw_v8_kernel_txdhs<48, 5, 1, 2, true, 10>"}


@on_every_distinct_block
def test_the_rest_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import check_switch_bitwise

    # (from 2 images: 6.1 at batch 1 may run one image an item; the one-row units off: version 11's default since
    # session 29, they pool in another order than the launch-value kernels, test_mbconv_k1_row_units)
    monkeypatch.setenv(mb.K1_ROW_UNITS_SWITCH, "0")
    check_switch_bitwise(monkeypatch, name, path, batch, mb.K1_STATIC_REST_SWITCH, REST_KERNELS,
                         r"expand_dw_v8_kernel_\w+dhs<", min_batch=2)


@pytest.mark.cuda
@pytest.mark.parametrize("switch", [mb.K1_STATIC_SWITCH, mb.K1_STATIC_REST_SWITCH], ids=["static", "rest"])
def test_efficientnet_b0_with_it(switch, monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {switch: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)


# ---- GPU: B2's entries (cuda_kernels/static_shapes.py computed them) ----

def _b2_static_paths() -> list[str]:
    """B2's distinct blocks that static_shapes gives an entry (the launcher then runs a static kernel there)."""
    from cuda_kernels import static_shapes as ss
    from mbconv_helpers import DISTINCT, folded_params, mbconv_shapes

    paths = []
    for name, path in DISTINCT:
        if name != "efficientnet_b2":
            continue
        p = folded_params(name, path)
        c_in, h, w = mbconv_shapes(name)[path]
        if ss.route(h, w, p.kernel_size, p.stride, c_in, p.hidden)[0] is not None:
            paths.append(path)
    return paths


def test_b2_has_static_blocks():
    assert len(_b2_static_paths()) == 8  # static_shapes' B2 entries (test_static_shapes.test_b2_entries), one block each


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("path", _b2_static_paths())
def test_b2_static_kernels(path, batch, monkeypatch):
    """B2's entries (in the source's table since session 28): against float64 (poisoned output), a static kernel 1
    named by the profiler, bit for bit the launch-value kernels' output (both static switches off). With the default's
    units: the one-row units at 6.1-7.1 (version 11's default since session 29) pool in another order."""
    from mbconv_helpers import block_prepared, check_shape, run_profiled

    monkeypatch.setenv(mb.K1_ROW_UNITS_SWITCH, "0")
    check_shape("efficientnet_b2", path, batch, 11)
    params, weights, x = block_prepared("efficientnet_b2", path, batch)
    monkeypatch.setenv(mb.K1_STATIC_SWITCH, "0")
    monkeypatch.setenv(mb.K1_STATIC_REST_SWITCH, "0")
    base = mb.mbconv(x, params, weights, version=11)
    monkeypatch.delenv(mb.K1_STATIC_SWITCH)
    monkeypatch.delenv(mb.K1_STATIC_REST_SWITCH)
    got, names = run_profiled(x, params, weights, base, 11)
    assert re.search(r"expand_dw_v8_kernel_\w+s<", names), names[:600]
    assert torch.equal(got, base)
