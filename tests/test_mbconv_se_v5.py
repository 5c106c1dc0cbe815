"""SE version 5: the squeeze-excitation in one kernel, a cluster of 8 CTAs per group of 4 images (8 until session 35;
CUDA_KERNELS_SE_V5_IMAGES=8) (csrc/mbconv_se_v5.cu, on where SE version 4 applies unless CUDA_KERNELS_SE_V5=0, since
session 18; NOTES.md "Current state"). CTA
r owns hidden channels [r sw, (r + 1) sw): its images' pool over them and FC1's partial product; after a cluster
barrier every CTA sums the 8 partial products in rank order through distributed shared memory (the same h in each),
then FC2 and the sigmoid for its channels.

CPU: the decomposition against the direct SE in float64 (hidden not a multiple of 64, CTAs without channels, odd
batches), the shared memory of B0's and B2's largest blocks from literal sums, the switch and its dispatch in the
sources. GPU (@pytest.mark.cuda): every distinct MBConv of B0 and B2 at batches 1, 5 and 128 against float64 (<= 2x
PyTorch fp16's error, output poisoned), the profiler naming se_v5_kernel and no other SE, within 2e-3 of SE version
4; B0 through the check before timing.

SE version 6 (same file and cluster, CUDA_KERNELS_SE_V6=1): FC1 and FC2 register-blocked over the 8 images, each CTA's
products split over threads (FC1 over channel ranges, FC2 over squeeze-output ranges) and the splits summed in order.
CPU: that decomposition against the direct SE in float64, its shared memory from literal sums. GPU: as version 5's
(float64, the profiler naming se_v6_kernel only, within 2e-3 of version 5), and B0 through the check."""

from pathlib import Path

import numpy as np
import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import DISTINCT

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
CLUSTER, IMAGES = 8, 8  # kSeV5Cluster, kSeV5Images


def width(hidden: int) -> int:  # se_v5_width: hidden / 8 rounded up to a multiple of 8
    return -(-(-(-hidden // CLUSTER)) // 8) * 8


def se_cluster(partial: np.ndarray, hw: int, w1, b1, w2, b2, per_cluster: int = IMAGES) -> np.ndarray:
    """The scale as the kernel computes it, cluster by cluster (per_cluster images each) and CTA by CTA: partial [N,
    bands, hidden]."""
    n_img, _, hidden = partial.shape
    sw = width(hidden)
    scale = np.full((n_img, hidden), np.nan)
    for g in range(-(-n_img // per_cluster)):
        images = range(g * per_cluster, min(n_img, (g + 1) * per_cluster))
        parts = []
        for r in range(CLUSTER):  # each CTA's pool and FC1 partial over its channels
            ch = slice(r * sw, min(hidden, (r + 1) * sw))
            pooled = partial[list(images)][:, :, ch].sum(axis=1) / hw
            parts.append(pooled @ w1[:, ch].T)
        v = sum(parts) + b1  # rank order
        h = v / (1 + np.exp(-v))
        for r in range(CLUSTER):
            ch = slice(r * sw, min(hidden, (r + 1) * sw))
            scale[list(images), ch] = 1 / (1 + np.exp(-(h @ w2[ch].T + b2[ch])))
    return scale


def random_se(hidden: int, sq: int, bands: int, n: int):
    """Kernel 1's per-band partial sums, the SE's weights and the scale computed directly: (partial, hw, w1, b1, w2,
    b2, direct)."""
    rng = np.random.default_rng(hidden + n)
    partial = rng.standard_normal((n, bands, hidden))
    w1, b1 = rng.standard_normal((sq, hidden)) / 30, rng.standard_normal(sq)
    w2, b2 = rng.standard_normal((hidden, sq)) / 8, rng.standard_normal(hidden)
    hw = 49 * bands
    v = partial.sum(axis=1) / hw @ w1.T + b1
    direct = 1 / (1 + np.exp(-((v / (1 + np.exp(-v))) @ w2.T + b2)))
    return partial, hw, w1, b1, w2, b2, direct


@pytest.mark.parametrize("per_cluster", [IMAGES, 4])
@pytest.mark.parametrize("hidden,sq,bands,n", [(480, 20, 1, 8), (1152, 48, 1, 17), (2112, 88, 1, 5), (96, 4, 28, 3),
                                                (1392, 58, 2, 9)])
def test_the_cluster_decomposition_is_the_se(hidden, sq, bands, n, per_cluster):
    *args, direct = random_se(hidden, sq, bands, n)
    np.testing.assert_allclose(se_cluster(*args, per_cluster=per_cluster), direct, rtol=1e-12, atol=1e-12)


def test_four_images_a_cluster_switch_and_layout():
    """4 images a cluster (the default since session 35; CUDA_KERNELS_SE_V5_IMAGES=8 the kernel before it): twice the
    clusters, the shared memory's per-image parts halved; an image's arithmetic does not depend on its cluster's size
    (each CTA owns the same channels), so the scale is bit for bit the 8-image kernel's (the GPU test)."""
    se = (CSRC / "mbconv_se_v5.cu").read_text()
    assert 'std::getenv("CUDA_KERNELS_SE_V5_IMAGES");\n  return v != nullptr && std::strcmp(v, "8") == 0 ? ' \
           "kSeV5Images : 4;" in se
    assert "dim3(kSeV5Cluster, (p.N + images - 1) / images)" in se
    assert "launch_se_cluster(se_v5_kernel<4>, slots4, SeV5Layout(p.hidden, p.sq, 4).floats * 4" in se
    assert "const int tid = threadIdx.x, rank = blockIdx.x, n0 = blockIdx.y * G;" in se
    # B0's 6.x at hidden 1152, squeeze 48: sw 144; floats W1 48 x 145 + W2 144 x 49 + (pool 144 + part 48 + h 48) a
    # image: 14,016 + 240 x 8 = 15,936 at 8 images (63,744 bytes), 14,976 at 4 (59,904 bytes)
    assert width(1152) == 144
    assert 48 * 145 + 144 * 49 + 8 * (144 + 48 + 48) == 15_936
    assert 48 * 145 + 144 * 49 + 4 * (144 + 48 + 48) == 14_976


def splits(n: int, threads: int = 512) -> int:  # se_v6_splits
    return 1 if n >= threads else threads // n


def se_v6_cluster(partial: np.ndarray, hw: int, w1, b1, w2, b2) -> np.ndarray:
    """The scale as SE version 6 computes it: per CTA, FC1 over split s of its channels [s kc, (s + 1) kc) (kc =
    ceil(cw / splits(sq))), the splits summed in order, the CTAs' parts in rank order; FC2 over split s of the squeeze
    outputs [s kj, (s + 1) kj) (kj = ceil(sq / splits(sw))), the splits summed in order."""
    n_img, _, hidden = partial.shape
    sq, sw = w1.shape[0], width(hidden)
    s1, s2 = splits(sq), splits(sw)
    scale = np.full((n_img, hidden), np.nan)
    for g in range(-(-n_img // IMAGES)):
        images = list(range(g * IMAGES, min(n_img, (g + 1) * IMAGES)))
        parts, ranges = [], []
        for r in range(CLUSTER):
            c0, cw = r * sw, max(0, min(sw, hidden - r * sw))
            ranges.append((c0, cw))
            pooled = partial[images][:, :, c0:c0 + cw].sum(axis=1) / hw
            kc = -(-cw // s1) if cw else 0
            split_sums = [pooled[:, s * kc:min(cw, (s + 1) * kc)] @ w1[:, c0 + s * kc:c0 + min(cw, (s + 1) * kc)].T
                          for s in range(s1)]
            parts.append(sum(split_sums))
        v = sum(parts) + b1
        h = v / (1 + np.exp(-v))
        kj = -(-sq // s2)
        for c0, cw in ranges:
            ch = slice(c0, c0 + cw)
            z = sum(h[:, s * kj:min(sq, (s + 1) * kj)] @ w2[ch, s * kj:min(sq, (s + 1) * kj)].T for s in range(s2))
            scale[images, ch] = 1 / (1 + np.exp(-(z + b2[ch])))
    return scale


@pytest.mark.parametrize("hidden,sq,bands,n", [(480, 20, 1, 8), (1152, 48, 1, 17), (2112, 88, 1, 5), (96, 4, 28, 3),
                                                (1392, 58, 2, 9), (32, 8, 56, 2),
                                                (4104, 600, 1, 3)])
def test_version_6s_split_decomposition_is_the_se(hidden, sq, bands, n):
    """Hidden 32: most CTAs without channels and FC2 split 8 ways over 8 outputs; sq 600 > 512 threads: one split."""
    *args, direct = random_se(hidden, sq, bands, n)
    np.testing.assert_allclose(se_v6_cluster(*args), direct, rtol=1e-12, atol=1e-12)


def test_version_6s_shared_memory():
    assert (splits(48), splits(144), splits(88), splits(264), splits(600)) == (10, 3, 5, 1, 1)
    # W1 sq x 145 and W2 144 x 49 (version 5's), the pool from a 16-byte boundary (14,016 floats already), pool 8 x
    # 144, part and h 8 x 48, then the splits' sums 8 x max(10 x 48, 3 x 144)
    assert (48 * 145 + 144 * 49 + 8 * 144 + 2 * 8 * 48 + 8 * 480) * 4 == 79_104  # B0's 6.x-7.0
    # B2's 7.x: 88 x 265 + 264 x 89 = 46,816 (a multiple of 4), splits 8 x max(5 x 88, 1 x 264)
    assert (88 * 265 + 264 * 89 + 8 * 264 + 2 * 8 * 88 + 8 * 440) * 4 == 215_424 <= 227 * 1024
    se = (CSRC / "mbconv_se_v5.cu").read_text()
    assert "pooled((w2 + sw * ld2 + 3) / 4 * 4)" in se and "floats(scratch + kSeV5Images * max(s1 * sq, s2 * sw))" in se
    assert "constexpr int kSeV6Threads = 512;" in se
    # two CTAs an SM: with one, 15 clusters of 8 fit an H200 at once (s19 call 5), and batch 128 launches 16
    assert "__launch_bounds__(kSeV6Threads, 2) se_v6_kernel" in se
    assert "return n >= threads ? 1 : threads / n;" in se


def test_widths_and_shared_memory():
    assert width(1152) == 144 and width(480) == 64 and width(96) == 16 and width(2112) == 264
    # W1's columns sq x (sw + 1), W2's rows sw x (sq | 1), pool 8 x sw, part and h 8 x sq; floats x 4
    assert (48 * 145 + 144 * 49 + 8 * 144 + 2 * 8 * 48) * 4 == 63_744  # B0's 6.x-7.0
    assert (88 * 265 + 264 * 89 + 8 * 264 + 2 * 8 * 88) * 4 == 201_344 <= 227 * 1024  # B2's 7.x
    se = (CSRC / "mbconv_se_v5.cu").read_text()
    assert "sw(se_v5_width(hidden)), ld1(sw + 1), ld2(sq | 1), w1(0), w2(sq * ld1), pooled(w2 + sw * ld2)," in se
    assert "part(pooled + images * sw), h(part + images * sq), floats(h + images * sq)" in se
    assert "constexpr int kSeV5Cluster = 8, kSeV5Threads = 256, kSeV5Images = 8" in se


def test_the_switch_and_its_dispatch():
    se, dispatch = (CSRC / "mbconv_se_v5.cu").read_text(), (CSRC / "mbconv.cu").read_text()
    assert mb.SE_V5_SWITCH == "CUDA_KERNELS_SE_V5"
    assert 'std::getenv("CUDA_KERNELS_SE_V5");\n  return v == nullptr || std::strcmp(v, "0") != 0;' in se  # on unset
    assert ": se_v5_requested() && se_v5_fits(p) ? launch_se_v5(p, stream, pdl)" in dispatch
    # version 6 ahead of version 5, on its own switch, off unless "1"
    assert mb.SE_V6_SWITCH == "CUDA_KERNELS_SE_V6"
    assert 'std::getenv("CUDA_KERNELS_SE_V6");\n  return v != nullptr && std::strcmp(v, "1") == 0;' in se
    assert dispatch.index(": se_v6_requested() && se_v6_fits(p) ? launch_se_v6(p, stream, pdl)") < dispatch.index(
        ": se_v5_requested()")
    # the parts are read (cluster_sum: each CTA's value, in rank order) only after the barrier that releases them, and
    # no CTA exits before every CTA has read
    assert "for (int r = 0; r < kSeV5Cluster; ++r) v[r] = ld_cluster(addr, r);" in se
    for name, end in (("se_v5_kernel", "// 8 images' fp32 values"), ("se_v6_kernel", "}  // namespace\n\nbool se_v5_")):
        kernel = se[se.index(f"{name}(const Params p)"):se.index(end)]
        tail = 'asm volatile("barrier.cluster.wait.acquire.aligned;\\n" ::: "memory");\n#endif\n}'
        assert kernel.rstrip().endswith(tail), name
        assert kernel.index("p.scale[") < kernel.rindex("barrier.cluster.wait.acquire"), name
        first = kernel.index("barrier.cluster.arrive.release.aligned;\\nbarrier.cluster.wait.acquire.aligned;")
        assert first < kernel.index("cluster_sum(part") < kernel.index(
            'asm volatile("barrier.cluster.arrive.release.aligned;\\n"'), name


# ---- GPU ----

@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", DISTINCT)
def test_every_block_against_float64(name, path, batch, monkeypatch):
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    monkeypatch.setenv(mb.SE_V4_SWITCH, "all")  # SE version 5 where version 4 applies: every block
    monkeypatch.setenv(mb.SE_V6_SWITCH, "0")  # version 5's own kernel
    got, base, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.SE_V5_SWITCH, "1")
    assert "se_v5_kernel" in names and "se_v4" not in names and "se_v3" not in names, names[:600]
    assert relative_error(got, base.double()) < 2e-3


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", [("efficientnet_b0", "features.6.1"), ("efficientnet_b0", "features.4.1"),
                                       ("efficientnet_b2", "features.7.1")])
def test_four_images_a_cluster_keeps_the_bits(name, path, batch, monkeypatch):
    """4 images a cluster: float64 (poisoned output), the profiler naming se_v5_kernel<4>, and bit for bit the 8-image
    kernel's output (CUDA_KERNELS_SE_V5_IMAGES=8: the same sums in the same order)."""
    import torch
    from mbconv_helpers import switched_against_float64

    monkeypatch.setenv(mb.SE_V4_SWITCH, "all")
    monkeypatch.setenv(mb.SE_V6_SWITCH, "0")
    got, base, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.SE_V5_IMAGES_SWITCH, "4",
                                                     off="8")
    assert "se_v5_kernel<4>" in names, names[:600]
    assert torch.equal(got, base)


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.SE_V4_SWITCH: "all", mb.SE_V5_SWITCH: "1", mb.SE_V6_SWITCH: "0"},
                   {"StemMBConv": 1, "MBConv": 15}, 16)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", DISTINCT)
def test_version_6_every_block_against_float64(name, path, batch, monkeypatch):
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    monkeypatch.setenv(mb.SE_V4_SWITCH, "all")  # where version 5 runs: every block
    got, base, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.SE_V6_SWITCH, "1")
    assert "se_v6_kernel" in names and "se_v5" not in names and "se_v4" not in names and "se_v3" not in names, \
        names[:600]
    assert relative_error(got, base.double()) < 2e-3


@pytest.mark.cuda
def test_efficientnet_b0_with_version_6(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.SE_V4_SWITCH: "all", mb.SE_V6_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
