"""The whole MBConv block of one image in one pair of kernel-1 CTAs (CUDA_KERNELS_FUSED_IMAGE=1, off: measured slower
in session 34; csrc/mbconv_fused_image.cuh, NOTES.md "Session 34"): at B0's 3.1 (bands of 14) and 4.1 / 4.2, kernel
1's items of image n run on cluster n's two CTAs, which then compute the image's SE and project their half of its
16-row tiles from D (V scaled by the SE in fp16, A straight from L2 in a permuted k order; mode 5, session 35: D's
pieces scaled in registers instead, V as loaded). The SE and projection kernels do not run.

CPU: the switch and its route, the shared-memory arithmetic (both kernels keep two CTAs an SM), and the projection's
fragment mapping emulated lane by lane against the matrix product (the index logic that a wrong word choice would
break). GPU (@pytest.mark.cuda): each block at batches 1, 3 and 128 against float64 (output and scratch poisoned),
the profiler naming the fused kernel and no SE or projection kernel; B0 end to end through the check before timing."""

from pathlib import Path

import numpy as np
import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
V8 = (CSRC / "mbconv_v8.cuh").read_text()
TAIL = (CSRC / "mbconv_fused_image.cuh").read_text()
SWITCH = "CUDA_KERNELS_FUSED_IMAGE"


def test_the_switch_is_off_unless_set_and_routes_two_kernels():
    assert f'const char* v = std::getenv("{SWITCH}");' in V8
    # 1 on; 3 the items alone (the pair stops once it has met: a diagnostic); 5 D scaled, at k = 3 only; else off
    assert "return v != nullptr && (v[0] == '1' || v[0] == '3' || v[0] == '5') && v[1] == '\\0' ? v[0] - '0' : 0;" \
        in V8
    assert "fused_image_tail<FIC, FIH, FIS, kExpandThreads, FIM == 3, FIM == 5>(p, smem, fi_n, fi_h);" in V8
    # mode 5 leaves the k = 5 block (3.1) to the kernels it replaces
    assert "if constexpr (KS == 3) return launch_fused_image_mode<KS, 5>(p, chunk, stream, pdl, launched);\n" \
           "    return cudaSuccess;" in V8
    assert "constexpr int SH = 4, ROWS = 14, C_OUT = 40;" in V8  # B0's 3.1 in bands of 14
    assert "constexpr int SH = 6, C_OUT = 80, UC = v8_row_unit_cols<SH, KS>();" in V8  # 4.1 / 4.2
    mbconv_cu = (CSRC / "mbconv.cu").read_text()
    # tried before kernel 1's own routes; where it ran, the block is complete (no SE, no projection)
    assert "if (fused || err != cudaSuccess) return err;" in mbconv_cu
    assert mbconv_cu.index("launch_fused_image_k3") < mbconv_cu.index("if (v9_v3)\n    err =")


def test_a_cluster_of_two_an_image():
    assert "const int grid = FIC ? 2 * p.N :" in V8
    assert "if constexpr (FIC > 0)\n      return pdl::launch_ex(kernel, dim3(grid), dim3(kExpandThreads), smem, " \
           "stream, dim3(2, 1, 1)," in V8
    # CTA h of image n: the first or second half of the image's (chunk, band) items
    assert "const int i_begin = FIC ? fi_h * (total / 2) :" in V8
    assert "if constexpr (FIC) return fi_h ? total : total / 2;" in V8


def test_v_prime_pitch_and_shared_memory():
    # pitch >= hidden and 32 mod 64 halves: a quarter warp's two 64-byte row pieces on distinct bank halves
    assert "return (hidden + 31) / 64 * 64 + 32;" in TAIL
    ldv = {240: 288, 480: 480}
    for hidden, pitch in ldv.items():
        assert pitch >= hidden and pitch % 64 == 32 and pitch - 64 < hidden
    # 3.1: V' 40 x 288 halves, pool and scale 240 floats each, 10 squeezed; 4.1: 80 x 480, 480 + 480 + 20
    tail_31 = 40 * 288 * 2 + (240 + 240 + 10) * 4
    tail_41 = 80 * 480 * 2 + (480 + 480 + 20) * 4
    assert (tail_31, tail_41) == (25_000, 80_720)
    # kernel 1's own shared memory is larger at both: the launch keeps its size, so two CTAs an SM
    k1_31 = mb.kernel1_smem_bytes(14, 28, 28, 5, 1, 48, 48, True, 11, c_in=40, dh=True, hk=True)
    k1_41 = mb.kernel1_smem_bytes(14, 14, 14, 3, 1, 80, 48, True, 11, c_in=80, tx=True, wg=True, dh=True)
    assert (k1_31, k1_41) == (114_872, 104_104)
    assert tail_31 < k1_31 <= 113 * 1024 and tail_41 < k1_41 <= 113 * 1024


def _mma_m16n8k16(acc, a, b):
    """PTX's mma.m16n8k16.row.col from per-lane fragments: a[lane] = 4 pairs, b[lane] = 2 pairs (as numbers)."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        (a01, a23, a45, a67), (b01, b23) = a[lane], b[lane]
        A[g, 2 * t:2 * t + 2], A[g + 8, 2 * t:2 * t + 2] = a01, a23
        A[g, 2 * t + 8:2 * t + 10], A[g + 8, 2 * t + 8:2 * t + 10] = a45, a67
        B[2 * t:2 * t + 2, g], B[2 * t + 8:2 * t + 10, g] = b01, b23
    return acc + A @ B


def _words(row):
    """A row of halves as its 32-bit words (pairs)."""
    return [row[i:i + 2] for i in range(0, len(row), 2)]


def _emulate_tail(D, V, scale, scale_d, s_lane=lambda t: 8 * t):
    """fused_image_tail's loop transliterated for one 16-row tile and 8 output channels. Row form (mode 1): V' = V
    diag(s) in shared memory, D's words as loaded. SCALE_D (mode 5): D's words times the scale's words at k = 32 kb +
    s_lane(t) (fi_scale4 on sch + kb * 32 + 8 t), V as loaded; the k16 tail's at sch + KB * 32 + 4 t."""
    hidden = D.shape[1]
    B = V if scale_d else V * scale
    acc = np.zeros((16, 8))
    for kb in range(hidden // 32):
        x0 = {lane: _words(D[lane >> 2, kb * 32 + 8 * (lane & 3):][:8]) for lane in range(32)}
        x1 = {lane: _words(D[(lane >> 2) + 8, kb * 32 + 8 * (lane & 3):][:8]) for lane in range(32)}
        if scale_d:
            sw = {lane: _words(scale[kb * 32 + s_lane(lane & 3):][:8]) for lane in range(32)}
            x0 = {lane: [w * sv for w, sv in zip(x0[lane], sw[lane])] for lane in range(32)}
            x1 = {lane: [w * sv for w, sv in zip(x1[lane], sw[lane])] for lane in range(32)}
        bw = {lane: _words(B[lane >> 2, kb * 32 + 8 * (lane & 3):][:8]) for lane in range(32)}
        for s in range(2):
            a = {lane: (x0[lane][2 * s], x1[lane][2 * s], x0[lane][2 * s + 1], x1[lane][2 * s + 1])
                 for lane in range(32)}
            b = {lane: (bw[lane][2 * s], bw[lane][2 * s + 1]) for lane in range(32)}
            acc = _mma_m16n8k16(acc, a, b)
    if hidden % 32:
        k0 = hidden // 32 * 32
        y0 = {lane: _words(D[lane >> 2, k0 + 4 * (lane & 3):][:4]) for lane in range(32)}
        y1 = {lane: _words(D[(lane >> 2) + 8, k0 + 4 * (lane & 3):][:4]) for lane in range(32)}
        if scale_d:
            sw = {lane: _words(scale[k0 + 4 * (lane & 3):][:4]) for lane in range(32)}
            y0 = {lane: [w * sv for w, sv in zip(y0[lane], sw[lane])] for lane in range(32)}
            y1 = {lane: [w * sv for w, sv in zip(y1[lane], sw[lane])] for lane in range(32)}
        bw = {lane: _words(B[lane >> 2, k0 + 4 * (lane & 3):][:4]) for lane in range(32)}
        a = {lane: (y0[lane][0], y1[lane][0], y0[lane][1], y1[lane][1]) for lane in range(32)}
        acc = _mma_m16n8k16(acc, a, {lane: (bw[lane][0], bw[lane][1]) for lane in range(32)})
    return acc


@pytest.mark.parametrize("scale_d", [False, True])
@pytest.mark.parametrize("hidden", [48, 240, 480])
def test_the_permuted_k_fragments_sum_the_product(hidden, scale_d):
    """Per k32 block lane (g, t) loads D[g][8 t .. 8 t + 7] and D[g + 8][...] as words x0, x1 and V'[n = g][8 t ..]
    as b; step 0 takes {x0.x, x1.x, x0.y, x1.y} with (b.x, b.y), step 1 the z / w words; a k16 tail (hidden % 32 ==
    16) loads halves 4 t .. 4 t + 3. Either way the sum is D diag(s) V^T."""
    rng = np.random.default_rng(hidden)
    D, V, s = rng.standard_normal((16, hidden)), rng.standard_normal((8, hidden)), rng.uniform(0.1, 1, hidden)
    np.testing.assert_allclose(_emulate_tail(D, V, s, scale_d), (D * s) @ V.T, rtol=1e-12, atol=1e-12)
    # and the source takes those words
    assert "const uint32_t s0[4] = {x0.x, x1.x, x0.y, x1.y}, s1[4] = {x0.z, x1.z, x0.w, x1.w};" in TAIL
    assert "bf::mma_m16n8k16(acc[nt], s0, b.x, b.y);\n        bf::mma_m16n8k16(acc[nt], s1, b.z, b.w);" in TAIL
    assert "const uint32_t s0[4] = {y0.x, y1.x, y0.y, y1.y};" in TAIL
    assert "if constexpr (SCALE_D) fi_scale4(x0, x1, *reinterpret_cast<const uint4*>(sch + kb * 32 + 8 * t));" in TAIL
    assert "const uint2 sk = *reinterpret_cast<const uint2*>(sch + KB * 32 + 4 * t);" in TAIL


def test_a_scale_at_the_wrong_channels_would_fail():
    """The emulation can fail: lane t scaling its piece by the scale's halves at 4 t instead of 8 t misses D s V^T."""
    rng = np.random.default_rng(2)
    D, V, s = rng.standard_normal((16, 64)), rng.standard_normal((8, 64)), rng.uniform(0.1, 1, 64)
    assert not np.allclose(_emulate_tail(D, V, s, True, s_lane=lambda t: 4 * t), (D * s) @ V.T)


def test_a_wrong_word_order_would_fail():
    """The emulation can fail: steps taking x0's words in order (x, y, z, w) as (a01, a23, a45, a67) miss D V^T."""
    rng = np.random.default_rng(1)
    D, V = rng.standard_normal((16, 32)), rng.standard_normal((8, 32))
    acc = np.zeros((16, 8))
    x0 = {lane: _words(D[lane >> 2, 8 * (lane & 3):][:8]) for lane in range(32)}
    bw = {lane: _words(V[lane >> 2, 8 * (lane & 3):][:8]) for lane in range(32)}
    for s in range(2):
        acc = _mma_m16n8k16(acc, {lane: tuple(x0[lane]) for lane in range(32)},
                            {lane: (bw[lane][2 * s], bw[lane][2 * s + 1]) for lane in range(32)})
    assert not np.allclose(acc, D @ V.T)


# ---- GPU ----

FUSED_BLOCKS = ["features.3.1", "features.4.1", "features.4.2"]
KERNELS = {"features.3.1": "expand_dw_v8_kernel_dhurfwsh_fi<", "features.4.1": "expand_dw_v8_kernel_txdhswb_fi<",
           "features.4.2": "expand_dw_v8_kernel_txdhswb_fi<"}


# (mode 5 runs at 4.1 / 4.2 only: test_mode_5_fuses_the_k3_blocks_only)
CASES = [(path, batch, mode) for mode in ("1", "5") for path in FUSED_BLOCKS for batch in (1, 3, 128)
         if mode == "1" or path != "features.3.1"]


@pytest.mark.cuda
@pytest.mark.parametrize("path,batch,mode", CASES)
def test_against_float64(path, batch, mode, monkeypatch):
    """Against float64 with the switch on (check_shape: within 2x PyTorch fp16's error, output and scratch poisoned),
    the profiler naming the fused kernel and neither an SE nor a projection kernel, and close to the switch-off output
    (the SE's scale applied to V in fp16 instead of to D: not bitwise)."""
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    got, off, names, *_ = switched_against_float64(monkeypatch, "efficientnet_b0", path, batch, SWITCH, mode)
    assert KERNELS[path] in names, names[:600]
    assert "se_v" not in names and "project" not in names, names[:600]
    assert relative_error(got, off.double()) < 5e-3


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["features.3.1", "features.4.1"])
def test_mode_5_fuses_the_k3_blocks_only(path, monkeypatch):
    """Mode 5 runs at 4.1 / 4.2 only: 3.1 runs kernel 1, the SE and the projection as with the switch off (a
    tolerance, not equality: the check's own runs)."""
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    got, off, names, *_ = switched_against_float64(monkeypatch, "efficientnet_b0", path, 3, SWITCH, "5")
    fused = path != "features.3.1"
    assert (KERNELS[path] in names) == fused, names[:600]
    assert ("project" in names) != fused, names[:600]
    assert relative_error(got, off.double()) < (5e-3 if fused else 1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["1", "5"])
def test_efficientnet_b0_with_it(mode, monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {SWITCH: mode}, {"StemMBConv": 1, "MBConv": 15}, 16)
