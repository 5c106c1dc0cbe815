"""E's halo rows kept between bands at k = 5 (CUDA_KERNELS_K1_HALO5; NOTES.md "Current state", s30 call 2):
at the static U-in-registers entries with k = 5 (B0's 3.1, B2's 3.1 / 3.2, expand_dw_v8_kernel_dhurfwsh) a band that
continues the previous band of its (chunk, image) in the same CTA takes the 4 E rows they share from that band's tile
instead of expanding them again. The rows are copied in shared memory after barrier A, then a barrier: held in
registers across barrier A, as at k = 3, they made ptxas spill at k = 5. 1: at every such entry in today's bands
(measured flat). 2, version 11's default since session 30 (kernel 1 64.5 -> 54.3 us, B0 -10.8 us): B0's 3.1 in 2
bands of 14 rows instead of 3 of 10 (kV8HaloBands), which fit two CTAs an SM only because with at most two bands the
kernel's X holds 2 input rows fewer; the other entries run the default kernels.

The copied rows are the same E values the expand would write (the same X rows, U, bias and rounding), so D, the pool's
sums and the output are the switch-off output bit for bit. A bit-for-bit check is not blind here: the profiler names
the kernel, and the float64 check runs on the switched output too. In bands of 14 the pool's partial sums are per band
(2 an image, not 3), so the SE's input is added in another order: within 1e-4 of the default there.

CPU: the switch and the route as the source reads them; the index logic is test_mbconv_v8.py's transliteration
(test_kernel1_v8_halo_at_k5_transliterated), ptxas (no spills) its spill test. GPU (@pytest.mark.cuda): the blocks
that take it at batches 1 (one item a CTA: no band continues), 40 and 128 (most do), B0 end to end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v8.cuh").read_text()


def test_the_switch_and_the_route():
    assert mb.K1_HALO5_SWITCH == "CUDA_KERNELS_K1_HALO5"
    assert """  const char* v = kernel1_switch("CUDA_KERNELS_K1_HALO5");
  return v != nullptr ? v[0] - '0' : v11 ? 2 : 0;""" in SOURCE  # 2 unless set, in version 11
    # k = 5 only, through the static U-in-registers route's one launcher: 2, the taller bands where listed (with the
    # static kernels on), first; 1, the halo kernel at every entry
    assert "const int halo5 = KS == 5 ? kernel1_v8_halo5_requested(v11) : 0;" in SOURCE
    assert ("if (halo5 == 2 && kernel1_v8_static_requested(v11) && launch_v8_halo_bands<KS, UR, HF>(p, stream, pdl, err))"
            in SOURCE)
    assert "if constexpr (KS == 5)\n            if (halo5 == 1)\n" in SOURCE
    assert ("else if constexpr (SH > 0 && UR > 0 && HK)\n      return expand_dw_v8_kernel_dhurfwsh<HC, KS, S, G, UR, SH, HR>;"
            in SOURCE)
    assert 'static_assert(!HK || (SH && UR > 0 && KS == 5 && S == 1), "the halo at k = 5' in SOURCE
    # the body keeps the halo where HK asks for it, whatever halo_v8 says of k = 5
    assert "constexpr bool HALO = (!(KS == 5 && S == 1) || HK) && G == 1;" in SOURCE


def test_which_entries_take_it():
    from cuda_kernels import static_shapes as ss

    entries = [(e.H, e.ks, e.C_in) for e in ss.listed_entries() if e.route == "kV8RouteUrWhole" and e.ks == 5]
    assert entries == [(28, 5, 40), (36, 5, 48)]  # B0's 3.1, B2's 3.1 / 3.2
    # their E widths (28 -> 32 and 36 -> 40 pixels: whole column groups of 4, + 4): 4 rows x WE x 12 pieces of 8
    # bytes, which would even fit the k = 3 kernels' register pieces (256 x 12); the halo kernel copies them in a
    # loop, so it needs no such cap
    assert 4 * 32 * 12 == 1_536 <= 256 * 12 and 4 * 40 * 12 == 1_920 <= 256 * 12
    assert mb.kernel1_v8_halo(28, 5, 1, keep_k5=True) and mb.kernel1_v8_halo(36, 5, 1, keep_k5=True)
    assert not mb.kernel1_v8_halo(28, 5, 1)


def test_the_taller_bands_table():
    # kV8HaloBands {entry 4, 14 rows}: entry 4 is B0's 3.1, and Python asks those rows for that shape
    assert "constexpr V8HaloBands kV8HaloBands[] = {{4, 14}};" in SOURCE
    from cuda_kernels import static_shapes as ss

    e = ss.listed_entries()[4 - 1]
    assert (e.H, e.W, e.ks, e.stride, e.C_in, e.k_pad, e.hidden, e.rows) == (28, 28, 5, 1, 40, 48, 240, 10)
    assert mb.K1_HALO5_BANDS == {(28, 28, 5, 1, 40, 48, 240): 14}


@pytest.mark.parametrize("env,want", [({}, True), ({"CUDA_KERNELS_K1_HALO5": "2"}, True),
                                      ({"CUDA_KERNELS_K1_HALO5": "1"}, False), ({"CUDA_KERNELS_K1_HALO5": "0"}, False),
                                      ({"CUDA_KERNELS_K1_STATIC": "0"}, False)])
def test_python_asks_the_taller_bands_by_default(env, want, monkeypatch):
    for name in ("CUDA_KERNELS_K1_HALO5", "CUDA_KERNELS_K1_STATIC"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert mb.kernel1_halo5_bands() is want


def _bytes_by_hand(x_rows, e_rows):
    """B0's 3.1 kernel 1 (C_in 40, k_pad 48, chunk 48, packed-fp16 taps): X (x_rows x 28 pixels rounded up to 16,
    dense: 40 halves each, + 8, rounded to 8), U (48 rows of 56 halves), E (e_rows x 32 pixels at 60 halves), the 10 thread groups'
    sums (fp32), 25 half2 taps and the fp32 bias per channel pair, the mbarrier."""
    x = -(-(-(-x_rows * 28 // 16) * 16 * 40 + 8) // 8) * 8 * 2
    return x + 48 * 56 * 2 + e_rows * 32 * 60 * 2 + 10 * 48 * 4 + 25 * 48 * 2 + 48 * 4 + 8


def test_the_taller_bands_fit_two_ctas_only_with_the_halo_kernels_x():
    two_ctas = 113 * 1024  # kV8TwoCtaSmem: 228 KB an SM, 1 KB reserved a CTA
    # bands of 14: E 18 rows; X 16 rows (each of the 2 bands touches the top or the bottom) against 18
    assert _bytes_by_hand(16, 18) == 35_856 + 5_376 + 69_120 + 1_920 + 2_592 + 8 == 114_872 <= two_ctas
    assert _bytes_by_hand(18, 18) == 40_976 + 5_376 + 69_120 + 1_920 + 2_592 + 8 == 119_992 > two_ctas
    assert mb.kernel1_smem_bytes(14, 28, 28, 5, 1, 48, 48, True, 11, c_in=40, dh=True, hk=True) == 114_872
    assert mb.kernel1_smem_bytes(14, 28, 28, 5, 1, 48, 48, True, 11, c_in=40, dh=True) == 119_992
    # three bands (today's 10 rows): the middle band loads all its 14 rows, so X is as without the halo
    assert mb.kernel1_smem_bytes(10, 28, 28, 5, 1, 48, 48, True, 11, c_in=40, dh=True, hk=True) == \
        mb.kernel1_smem_bytes(10, 28, 28, 5, 1, 48, 48, True, 11, c_in=40, dh=True) == _bytes_by_hand(14, 14)


def test_shared_memory_in_cuda_is_the_sum_by_hand(tmp_path):
    from mbconv_helpers import host_run, nvcc_path

    nvcc = nvcc_path()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME)")
    (tmp_path / "g.cu").write_text("""#include <cstdio>
#include "mbconv_v8.cuh"
int main() {
  for (int hk = 0; hk < 2; ++hk)
    for (int rows : {10, 14})
      std::printf("%d\\n", mb::expand_dw_v8_smem_bytes(28, 28, 28, rows, 5, 1, 40, 48, 48, 1, false, false, true,
                                                       false, hk == 1));
  return 0;
}
""")
    assert host_run(nvcc, tmp_path / "g.cu") == [(_bytes_by_hand(14, 14),), (_bytes_by_hand(18, 18),),
                                                  (_bytes_by_hand(14, 14),), (_bytes_by_hand(16, 18),)]


# ---- GPU ----

HALO5_BLOCKS = [("efficientnet_b0", "features.3.1"), ("efficientnet_b2", "features.3.1"),
                ("efficientnet_b2", "features.3.2")]


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 40, 128])
@pytest.mark.parametrize("name,path", HALO5_BLOCKS)
def test_against_float64_and_bit_for_bit(name, path, batch, monkeypatch):
    """Against float64 (check_shape, output poisoned) with the switch on, the profiler naming the halo kernel, and the
    switch-off output bit for bit."""
    from mbconv_helpers import check_switch_keeps_the_bits

    check_switch_keeps_the_bits(monkeypatch, name, path, batch, mb.K1_HALO5_SWITCH, "expand_dw_v8_kernel_dhurfwsh<")


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 40, 128])
def test_taller_bands_against_float64_and_the_default(batch, monkeypatch):
    """B0's 3.1 with CUDA_KERNELS_K1_HALO5=2: against float64 (poisoned output), the profiler naming the kernel in
    bands of 14, within 1e-4 of the switch-off output (the pool's sums over 2 bands, not 3)."""
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    got, off, names, *_ = switched_against_float64(monkeypatch, "efficientnet_b0", "features.3.1", batch,
                                                   mb.K1_HALO5_SWITCH, "2")
    assert "expand_dw_v8_kernel_dhurfwsh<48, 5, 1, 1, 3, 4, 14>" in names, names[:600]
    assert relative_error(got, off.double()) < 1e-4


@pytest.mark.cuda
@pytest.mark.parametrize("value", ["1", "2"])
def test_efficientnet_b0_with_it(value, monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_HALO5_SWITCH: value}, {"StemMBConv": 1, "MBConv": 15}, 16)
