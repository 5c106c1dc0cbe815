"""SE version 4: the squeeze-excitation as two batched products (csrc/mbconv_se_v4.cu, CUDA_KERNELS_SE_V4=0|1|all;
on by default where hidden >= 480 since session 18; NOTES.md "The SE as two batched products"). se_v4_fc1 (CTA: 64 hidden channels x 8
images) writes FC1's partial products per slice, se_v4_fc2 (CTA: 64 channels x 16 images) sums them in slice order,
applies SiLU, FC2 and the sigmoid: each SE weight is read once per image group instead of once per image.

CPU: the decomposition (slices, image groups, the slice-order sum) against the direct SE in float64 at B0 / B2's
hidden and sq, the shared memory from literal sums, the switch and the scratch's allocation in the sources. GPU
(@pytest.mark.cuda): every distinct MBConv of B0 and B2 at batches 1, 5 and 128 against float64 (<= 2x PyTorch fp16's
error, output and scratch poisoned), the profiler naming both kernels, the output within 2e-3 of se_v3's (the same
products summed in another order), repeatable bit for bit where kernel 1 is (the SE has no atomics); B0 through the
check before timing."""

from pathlib import Path

import numpy as np
import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import DISTINCT

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
K, IMAGES1, C2, IMAGES2 = 64, 8, 64, 16  # mbconv_se_v4.cu: kSeV4K, kSeV4Images1, kSeV4C, kSeV4Images2


def se_two_products(partial: np.ndarray, hw: int, w1, b1, w2, b2) -> np.ndarray:
    """The scale as the two kernels compute it, CTA by CTA: partial [N, bands, hidden] -> scale [N, hidden]."""
    n_img, _, hidden = partial.shape
    sq = w1.shape[0]
    slices = -(-hidden // K)
    hpart = np.zeros((slices, n_img, sq))
    for s in range(slices):  # se_v4_fc1's grid: (slice, image group)
        for g in range(-(-n_img // IMAGES1)):
            for n in range(g * IMAGES1, min(n_img, (g + 1) * IMAGES1)):
                pooled = partial[n, :, s * K:(s + 1) * K].sum(axis=0) / hw
                hpart[s, n] = w1[:, s * K:(s + 1) * K] @ pooled
    scale = np.zeros((n_img, hidden))
    for c0 in range(0, hidden, C2):  # se_v4_fc2's grid: (channel block, image group)
        for g in range(-(-n_img // IMAGES2)):
            for n in range(g * IMAGES2, min(n_img, (g + 1) * IMAGES2)):
                v = sum(hpart[s, n] for s in range(slices)) + b1
                h = v / (1 + np.exp(-v))
                z = w2[c0:c0 + C2] @ h + b2[c0:c0 + C2]
                scale[n, c0:c0 + C2] = 1 / (1 + np.exp(-z))
    return scale


@pytest.mark.parametrize("hidden,sq,bands,n", [(96, 4, 28, 3), (144, 6, 7, 9), (1152, 48, 1, 17), (2112, 88, 1, 5),
                                                (480, 20, 2, 8)])
def test_the_two_products_are_the_se(hidden, sq, bands, n):
    rng = np.random.default_rng(hidden)
    partial = rng.standard_normal((n, bands, hidden))
    w1, b1 = rng.standard_normal((sq, hidden)) / 30, rng.standard_normal(sq)
    w2, b2 = rng.standard_normal((hidden, sq)) / 8, rng.standard_normal(hidden)
    hw = 49 * bands
    pooled = partial.sum(axis=1) / hw
    v = pooled @ w1.T + b1
    direct = 1 / (1 + np.exp(-((v / (1 + np.exp(-v))) @ w2.T + b2)))
    np.testing.assert_allclose(se_two_products(partial, hw, w1, b1, w2, b2), direct, rtol=1e-12, atol=1e-12)


def test_shared_memory_fits_without_opt_in_at_every_sq():
    # fc1: W1's slice sq x 65 fp32 + the pooled 8 x 64; fc2: W2's rows 64 x (sq | 1) + h 16 x sq
    assert (48 * 65 + 8 * 64) * 4 == 14528 and (64 * 49 + 16 * 48) * 4 == 15616  # B0's 6.x, sq 48
    assert (128 * 65 + 8 * 64) * 4 == 35328 and (64 * 129 + 16 * 128) * 4 == 41216 <= 48 * 1024  # kSeV4MaxSq
    se = (CSRC / "mbconv_se_v4.cu").read_text()
    assert "return (sq * (kSeV4K + 1) + kSeV4Images1 * kSeV4K) * 4;" in se
    assert "return (kSeV4C * se_v4_pitch2(sq) + kSeV4Images2 * sq) * 4;" in se
    assert "constexpr int kSeV4MaxSq = 128;" in se and "constexpr int kSeV4K = 64;" in se


def test_the_switch_and_the_scratch():
    se, dispatch = (CSRC / "mbconv_se_v4.cu").read_text(), (CSRC / "mbconv.cu").read_text()
    binding = (CSRC / "mbconv_bindings.cpp").read_text()
    assert mb.SE_V4_SWITCH == "CUDA_KERNELS_SE_V4"
    assert 'std::getenv("CUDA_KERNELS_SE_V4");\n  if (v == nullptr) return 1;' in se  # mode 1 unset
    assert "return mode == 2 || p.hidden >= kSeV4MinHidden;" in se and "kSeV4MinHidden = 480;" in se
    assert "!se_v4_applies(p, se_v4_mode())         ? launch_se_v3(p, stream, pdl)" in dispatch
    assert ": launch_se_v4(p, stream, pdl);" in dispatch  # SE version 5 only where asked for (test_mbconv_se_v5.py)
    # the partial products after the scale: slices x N x sq floats
    assert "p.N * p.hid_pad + (int64_t)mb::se_v4_scratch_floats(p.N, p.hidden, p.sq)" in binding
    assert "return (size_t)se_v4_slices(hidden) * n * sq;" in se
    assert "float* hpart = p.scale + (size_t)p.N * p.hid_pad;" in se
    assert se.count("pdl::wait();") == 2  # each kernel waits before reading its predecessor's output


# ---- GPU ----

@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", DISTINCT)
def test_every_block_against_float64(name, path, batch, monkeypatch):
    from mbconv_helpers import assert_repeatable, switched_against_float64

    from perfmodel.harness import relative_error

    monkeypatch.setenv(mb.SE_V5_SWITCH, "0")  # version 4's own kernels: version 5 takes over where it applies
    monkeypatch.setenv(mb.SE_V6_SWITCH, "0")  # and version 6 where asked for
    got, base, names, params, weights, x = switched_against_float64(monkeypatch, name, path, batch, mb.SE_V4_SWITCH,
                                                                    "all")
    assert "se_v4_fc1_kernel" in names and "se_v4_fc2_kernel" in names and "se_v3" not in names, names[:600]
    assert relative_error(got, base.double()) < 2e-3
    # repeatable where kernel 1 is: version 3's kernel 1 (no expand conv, or 7 x 7 at k = 3) pools through shared-memory
    # atomics, whose order moves the pool by an ulp (s18 call 3: those 8 cases differed run to run, the rest were equal)
    v3 = params.expand_w is None or mb.kernel1_v9_takes_v3(params.kernel_size, params.stride, *got.shape[2:])
    if not v3:
        assert_repeatable(got, x, params, weights, 11)


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.SE_V4_SWITCH: "all", mb.SE_V5_SWITCH: "0", mb.SE_V6_SWITCH: "0"},
                   {"StemMBConv": 1, "MBConv": 15}, 16)
