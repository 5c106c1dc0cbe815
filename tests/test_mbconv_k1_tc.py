"""Kernel 1 with the depthwise on tensor cores as banded products (csrc/mbconv_k1_tc.cu; CUDA_KERNELS_K1_TCDW=1, off
by default; NOTES.md, session 36): one filter row of a channel's k x k depthwise over 16 output rows x 8 outputs is
one mma.m16n8k16 plus one m16n8k8, A = E's rows at the window's three 16-byte chunks, B = the banded (Toeplitz)
matrix T_r[kk][n] = w[r][kk - n + PAD - 8].

CPU: the banded product emulated lane by lane as the kernel builds it (banded_b's one pair a lane, the windows'
chunks) against the direct depthwise in float64, k = 3 and 5, widths 14 and 28; the switch off by default and its
dispatch. GPU (@pytest.mark.cuda): B0's 3.1 and 4.1 at batches 1, 5 and 128 against float64 (<= 2x PyTorch fp16's
error, output poisoned), the profiler naming expand_dw_tc_kernel, within 2e-3 of kernel 1 version 8."""

from pathlib import Path

import numpy as np
import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SWITCH = "CUDA_KERNELS_K1_TCDW"
BLOCKS = [("efficientnet_b0", "features.3.1"), ("efficientnet_b0", "features.4.1")]


def banded_b(w: np.ndarray, lane: int) -> np.ndarray:
    """[k, 3, 2]: lane's B registers of the banded product per filter row, as banded_b builds them: registers t = 0, 1
    (k16's kk = 2q + 8t, +1) and 2 (k8's kk = 16 + 2q, +1) at output n = g, one t nonzero at most."""
    k = w.shape[0]
    pad, g, q = k // 2, lane // 4, lane % 4
    t_on, s0 = -1, 0
    for t in range(3):
        s = 2 * q + 8 * t - g + pad - 8
        if -1 <= s < k:
            assert t_on < 0, "two pairs of one lane meet the band"
            t_on, s0 = t, s
    b = np.zeros((k, 3, 2))
    if t_on >= 0:
        for r in range(k):
            b[r, t_on] = [w[r, s0] if s0 >= 0 else 0.0, w[r, s0 + 1] if s0 + 1 < k else 0.0]
    return b


def depthwise_banded(e: np.ndarray, w: np.ndarray, width: int) -> np.ndarray:
    """One channel's 16 x (8 XB) outputs from the E tile e [16 + k - 1, 8 (XB + 2)] (column p holds x = p - 8):
    per filter row and x-block, A = rows r..r + 15 at columns [8 xb, 8 xb + 24), B = T_r from the 32 lanes' registers."""
    k = w.shape[0]
    xb_count = -(-width // 8)
    t = np.zeros((k, 24, 8))  # T_r[kk][n] assembled from each lane's (kk, n) entries
    for lane in range(32):
        g, q, b = lane // 4, lane % 4, banded_b(w, lane)
        for reg in range(3):
            for j in range(2):
                t[:, 2 * q + 8 * reg + j, g] = b[:, reg, j]
    out = np.zeros((16, 8 * xb_count))
    for r in range(k):
        for xb in range(xb_count):
            out[:, 8 * xb:8 * xb + 8] += e[r:r + 16, 8 * xb:8 * xb + 24] @ t[r]
    return out


@pytest.mark.parametrize("k,width", [(3, 14), (5, 28), (5, 14), (3, 28)])
def test_the_banded_product_is_the_depthwise(k, width):
    rng = np.random.default_rng(k * 100 + width)
    pad, xb_count = k // 2, -(-width // 8)
    e = np.zeros((16 + k - 1, 8 * (xb_count + 2)))
    e[:, 8:8 + width] = rng.standard_normal((16 + k - 1, width))  # the image's columns; the rest is padding
    w = rng.standard_normal((k, k))
    direct = np.zeros((16, width))
    for y in range(16):
        for x in range(width):
            direct[y, x] = sum(e[y + r, x + 8 - pad + s] * w[r, s] for r in range(k) for s in range(k))
    np.testing.assert_allclose(depthwise_banded(e, w, width)[:, :width], direct, rtol=1e-12, atol=1e-12)


def test_the_switch_is_off_by_default_and_dispatched_in_version_11():
    launcher = (CSRC / "mbconv.cu").read_text()
    source = (CSRC / "mbconv_k1_tc.cu").read_text()
    assert f'std::getenv("{SWITCH}")' in source and "v[0] == '1'" in source  # on only when set to 1
    assert "const bool tc = v11 && !v9_v3 && kernel1_tc_requested() && kernel1_tc_applies(p);" in launcher
    from cuda_kernels._build import MBCONV_SOURCES

    assert "mbconv_k1_tc.cu" in MBCONV_SOURCES


# ---- GPU ----

@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", BLOCKS)
def test_against_float64_and_version_8(name, path, batch, monkeypatch):
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    got, base, names, *_ = switched_against_float64(monkeypatch, name, path, batch, SWITCH, "1")
    assert "expand_dw_tc_kernel" in names and "expand_dw_v8" not in names, names[:600]
    assert relative_error(got, base.double()) < 2e-3


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
