"""E's halo rows kept between bands at k = 5 (CUDA_KERNELS_K1_HALO5=1, off until measured; NOTES.md "Current state"):
at the static U-in-registers entries with k = 5 (B0's 3.1, B2's 3.1 / 3.2, expand_dw_v8_kernel_dhurfwsh) a band that
continues the previous band of its (chunk, image) in the same CTA takes the 4 E rows they share from that band's tile
instead of expanding them again. The rows are copied in shared memory after barrier A, then a barrier: held in
registers across barrier A, as at k = 3, they made ptxas spill at k = 5.

The copied rows are the same E values the expand would write (the same X rows, U, bias and rounding), so D, the pool's
sums and the output are the switch-off output bit for bit. A bit-for-bit check is not blind here: the profiler names
the kernel, and the float64 check runs on the switched output too.

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
  return v != nullptr && v[0] == '1';""" in SOURCE  # off unless 1
    # k = 5 only, through the static U-in-registers route's one launcher
    assert "const bool halo5 = KS == 5 && kernel1_v8_halo5_requested();" in SOURCE
    assert ("else if constexpr (SH > 0 && UR > 0 && HK)\n      return expand_dw_v8_kernel_dhurfwsh<HC, KS, S, G, UR, SH>;"
            in SOURCE)
    assert 'static_assert(!HK || (SH && UR > 0 && KS == 5 && S == 1), "the halo at k = 5' in SOURCE
    # the body keeps the halo where HK asks for it, whatever halo_v8 says of k = 5
    assert "constexpr bool HALO = (!(KS == 5 && S == 1) || HK) && G == 1;" in SOURCE


def test_which_entries_take_it():
    from cuda_kernels import static_shapes as ss

    entries = [(e.H, e.ks, e.C_in) for e in ss.listed_entries() if e.route == "kV8RouteUrWhole" and e.ks == 5]
    assert entries == [(28, 5, 40), (36, 5, 48)]  # B0's 3.1, B2's 3.1 / 3.2
    # their E widths (28 -> 32 and 36 -> 40 pixels: whole column groups of 4, + 4) fit the halo's 256 x 12 pieces:
    # 4 rows x WE x 12 pieces of 8 bytes
    assert 4 * 32 * 12 == 1_536 <= 256 * 12 and 4 * 40 * 12 == 1_920 <= 256 * 12
    assert mb.kernel1_v8_halo(28, 5, 1, keep_k5=True) and mb.kernel1_v8_halo(36, 5, 1, keep_k5=True)
    assert not mb.kernel1_v8_halo(28, 5, 1)


# ---- GPU ----

HALO5_BLOCKS = [("efficientnet_b0", "features.3.1"), ("efficientnet_b2", "features.3.1"),
                ("efficientnet_b2", "features.3.2")]


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 40, 128])
@pytest.mark.parametrize("name,path", HALO5_BLOCKS)
def test_against_float64_and_bit_for_bit(name, path, batch, monkeypatch):
    """Against float64 (check_shape, output poisoned) with the switch on, the profiler naming the halo kernel, and the
    switch-off output bit for bit."""
    import torch

    from mbconv_helpers import switched_against_float64

    got, off, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_HALO5_SWITCH, "1")
    assert "expand_dw_v8_kernel_dhurfwsh<" in names, names[:600]
    assert torch.equal(got, off)


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_HALO5_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
