"""CUDA_KERNELS_K1_ROWS, an experiment switch (cuda_kernels/mbconv.py rows_override, band_rows' rows_max): a cap on
kernel 1's output rows per band for one input shape, so that one device call can time band heights against the last
round of items (NOTES.md "Current state", next 6: B0's 3.1 in 3 bands of 10 rows is 1,920 items, 7.27 a CTA on 264
CTAs, 8 rounds; in 4 bands of 7, 2,560 items, 9.70 a CTA, 10 shorter rounds). The band then evens out as before."""

import pytest
import torch

from cuda_kernels import mbconv as mb


def test_the_override_reads_the_shape_keys(monkeypatch):
    monkeypatch.delenv(mb.K1_ROWS_SWITCH, raising=False)
    assert mb.rows_override(28, 28, 5, 1) is None
    monkeypatch.setenv(mb.K1_ROWS_SWITCH, "28x28k5s1=7, 56x56k3s1=4")
    assert mb.rows_override(28, 28, 5, 1) == 7 and mb.rows_override(56, 56, 3, 1) == 4
    assert mb.rows_override(56, 56, 5, 2) is None and mb.rows_override(28, 28, 3, 1) is None


@pytest.mark.parametrize("text", ["28x28k5s1", "28x28k5s1=0", "28x28k5s1=seven", "28x28=7", "k5s1=7"])
def test_a_bad_entry_names_the_switch_and_the_form(text, monkeypatch):
    monkeypatch.setenv(mb.K1_ROWS_SWITCH, text)
    with pytest.raises(ValueError, match=r"CUDA_KERNELS_K1_ROWS: .*expected HxWkKsS=ROWS"):
        mb.rows_override(28, 28, 5, 1)


def test_the_cap_then_evens_the_bands():
    """3.1 (28 x 28, k = 5, C_in 40 -> k_pad 48): 10 rows by default (3 bands: 10, 10, 8); a cap of 7 -> 4 bands of 7;
    of 8 -> still 4 bands (28 / 8 rounded up), evened to 7; of 20 -> the default. 2.1 (56 x 56, k = 3): 8 by default,
    4 under a cap of 4 (14 bands)."""
    def rows(h, k, c_in, k_pad, cap):
        return mb.band_rows(h, h, k, 1, k_pad, 48, True, 11, c_in, False, cap)

    assert [rows(28, 5, 40, 48, cap) for cap in (None, 7, 8, 20)] == [10, 7, 7, 10]
    assert [rows(56, 3, 24, 32, cap) for cap in (None, 4)] == [8, 4]


def test_the_launch_passes_it(monkeypatch):
    """mbconv.py _launch asks band_rows with the override for its input's shape (the extension faked: no GPU)."""
    seen = {}

    class FakeExtension:
        @staticmethod
        def mbconv(x, *args):
            seen["rows"] = args[13]  # after the 10 weight tensors: kernel_size, stride, out_channels, rows
            n, h, w, _ = x.shape
            return torch.empty(n, h, w, 40, dtype=x.dtype)

    monkeypatch.setattr(mb, "check_input", lambda x, c: None)
    monkeypatch.setattr(mb, "_extension", lambda: FakeExtension)
    monkeypatch.setenv(mb.K1_ROWS_SWITCH, "28x28k5s1=7")
    x = torch.zeros(2, 40, 28, 28, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    tensors = [torch.zeros(240, 48, dtype=torch.float16)] + [torch.zeros(1)] * 5 + [torch.zeros(240, 10)] + \
        [torch.zeros(1)] * 3
    mb._launch(x, tensors, 5, 1, 40, True, version=11)
    assert seen["rows"] == 7
    monkeypatch.delenv(mb.K1_ROWS_SWITCH)
    # without it: B0's 3.1 in version 11's 2 bands of 14 with the halo kept (CUDA_KERNELS_K1_HALO5, 2 unless set),
    # and 3 of 10 without them
    monkeypatch.delenv(mb.K1_HALO5_SWITCH, raising=False)
    mb._launch(x, tensors, 5, 1, 40, True, version=11)
    assert seen["rows"] == 14
    monkeypatch.setenv(mb.K1_HALO5_SWITCH, "0")
    mb._launch(x, tensors, 5, 1, 40, True, version=11)
    assert seen["rows"] == 10
