"""MBConv version 5 (csrc/mbconv_v2.cuh with V3 and TC: kernel 1's depthwise on tensor cores,
`depthwise_tc`): its dataflow transliterated on the CPU, lane by lane (the warps' runs of
(group, tile) pairs, the per-lane pixel stepping, the ldmatrix row addresses of each tap pair,
the diagonal B fragments, the mma.m16n8k16 fragment layouts, the accumulator -> D store and the
pool's shuffle reduction), against a padded depthwise convolution; and its numerics (version 3's
with the depthwise taps rounded to fp16). Its GPU tests are in test_mbconv_kernels.py."""

import pytest
import torch

from cuda_kernels import mbconv as mb

WARPS = 8  # kExpandThreads / 32


def _e_tile(e: torch.Tensor, oh0: int, rows: int, ks: int, stride: int, we: int) -> torch.Tensor:
    """Kernel 1's zero-bordered E tile of a band, [e_rows * WE, C] (position = row * WE + column,
    column c holding input column c - PAD), as versions 2-5 build it."""
    c, height, width = e.shape
    pad = ks // 2
    r0, e_rows = oh0 * stride - pad, (rows - 1) * stride + ks
    tile = torch.zeros(e_rows, we, c, dtype=e.dtype)
    for er in range(e_rows):
        if 0 <= r0 + er < height:
            tile[er, pad:pad + width] = e[:, r0 + er].t()
    return tile.reshape(e_rows * we, c)


def _group_width(ks: int, hc: int) -> int:
    """DwTc<KS, HC>::GW: 8-channel groups per work item (two for k = 3, sharing the addressing)."""
    return 2 if ks == 3 and hc % 16 == 0 else 1


def _depthwise_tc(tile: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, rows: int, wo: int, we: int, ks: int,
                  stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    """depthwise_tc on one band and chunk of HC channels, transliterated: returns D (the
    pre-SiLU values, 2 h, [rows * Wo, HC], NaN where never written) and the pool (sum over the
    band of D per channel; the kernel sums SiLU(D), the dataflow is the same). Asserts every
    ldmatrix row lies inside the tile and every D element is written once."""
    hc = tile.shape[1]
    gw = _group_width(ks, hc)
    grp_n, ntap = hc // (8 * gw), ks * ks
    npair = (ntap + 1) // 2
    npo = rows * wo
    ntiles = (npo + 15) >> 4
    total = grp_n * ntiles
    per_warp = -(-total // WARPS)
    dq, dr = 16 // wo, 16 - (16 // wo) * wo
    d = torch.full((npo, hc), float("nan"), dtype=tile.dtype)
    writes = torch.zeros(npo, hc, dtype=torch.int64)
    pool = torch.zeros(hc, dtype=tile.dtype)
    toff = [[((min(2 * j + hi, ntap - 1)) // ks) * we + min(2 * j + hi, ntap - 1) % ks for j in range(npair)]
            for hi in (0, 1)]  # E positions; the kernel keeps them in bytes
    for warp in range(WARPS):
        i0 = warp * per_warp
        i1 = min(i0 + per_warp, total)
        grp, tile_i = divmod(i0, ntiles)
        i = i0
        while i < i1:
            tiles = min(i1 - i, ntiles - tile_i)
            i += tiles
            b, bias_frag = [], []
            for gi in range(gw):
                ch = grp * 8 * gw + gi * 8
                # B fragments: lane (g, q) holds b[j][u] = rows 8u + 2q, 8u + 2q + 1 of column g
                bg = torch.full((npair, 16, 8), float("nan"), dtype=tile.dtype)
                for lane in range(32):
                    g, q = lane >> 2, lane & 3
                    diag = (g >> 1) == q
                    for j in range(npair):
                        for u in range(2):
                            t = 2 * j + u
                            wv = 0.5 * w[t, ch + g] if (t < ntap and diag) else 0.0
                            lo, hi_ = (0.0, wv) if g & 1 else (wv, 0.0)
                            bg[j, 8 * u + 2 * q, g], bg[j, 8 * u + 2 * q + 1, g] = lo, hi_
                for j in range(npair):  # B = [diag(w_2j); diag(w_2j+1)] / 2
                    for u in range(2):
                        t = 2 * j + u
                        want = torch.diag(0.5 * w[t, ch:ch + 8]) if t < ntap else torch.zeros(8, 8, dtype=tile.dtype)
                        assert torch.equal(bg[j, 8 * u:8 * u + 8], want)
                b.append(bg)
                bias_frag.append([0.5 * bias[ch + 2 * (lane & 3) + k] for lane in range(32) for k in (0, 1)])
            # per-lane pixel (r, c) of its ldmatrix row, stepped by 16 pixels a tile
            rc = [divmod(tile_i * 16 + (lane & 15), wo) for lane in range(32)]
            sums = torch.zeros(gw, 32, 2, dtype=tile.dtype)
            for t in range(tile_i, tile_i + tiles):
                addr = []
                for lane in range(32):
                    r, c = rc[lane]
                    addr.append(min(r, rows - 1) * stride * we + c * stride)
                    c += dr
                    r += dq
                    if c >= wo:
                        c -= wo
                        r += 1
                    rc[lane] = (r, c)
                left = npo - t * 16
                for gi in range(gw):
                    ch = grp * 8 * gw + gi * 8
                    acc = torch.zeros(16, 8, dtype=tile.dtype)
                    for lane in range(32):  # accumulators from the bias: c0, c1 row g; c2, c3 row g + 8
                        g, q = lane >> 2, lane & 3
                        for h in range(2):
                            acc[g + 8 * h, 2 * q] = bias_frag[gi][2 * lane]
                            acc[g + 8 * h, 2 * q + 1] = bias_frag[gi][2 * lane + 1]
                    for j in range(npair):
                        a = torch.empty(16, 16, dtype=tile.dtype)
                        for lane in range(32):  # ldmatrix.x4: matrix lane // 8, its row lane % 8
                            pos = addr[lane] + toff[lane >> 4][j]
                            assert 0 <= pos < tile.shape[0]
                            m = lane & 15  # matrices 0, 1: A rows 0-15, k 0-7; matrices 2, 3: rows 0-15, k 8-15
                            a[m, 8 * (lane >> 4):8 * (lane >> 4) + 8] = tile[pos, ch:ch + 8]  # + 16 bytes per gi
                        acc = acc + a @ b[gi][j]
                    for lane in range(32):
                        g, q = lane >> 2, lane & 3
                        for h in range(2):
                            if g + 8 * h < left:
                                f = t * 16 + g + 8 * h
                                for k in range(2):
                                    v = 2 * acc[g + 8 * h, 2 * q + k]
                                    d[f, ch + 2 * q + k] = v
                                    writes[f, ch + 2 * q + k] += 1
                                    sums[gi, lane, k] += v
            for o in (4, 8, 16):  # __shfl_xor_sync over the 8 lanes of a column pair
                sums = sums + sums[:, [lane ^ o for lane in range(32)]]
            for gi in range(gw):
                for lane in range(4):
                    for k in range(2):
                        pool[grp * 8 * gw + gi * 8 + 2 * lane + k] += sums[gi, lane, k]
            grp += 1
            tile_i = 0
    assert (writes == 1).all(), "every D element of the band written exactly once"
    return d, pool


@pytest.mark.parametrize("height,width,ks,stride,rows,hc", [
    (9, 10, 3, 1, 4, 32),   # partial last band, Wo = 10 (one wrap per tile)
    (7, 7, 5, 1, 7, 48),    # 7x7: dq = 2, dr = 2, the 13th tap pair half empty
    (13, 14, 3, 2, 3, 48),  # stride 2, Wo = 7
    (14, 14, 5, 2, 7, 32),  # stride 2, k = 5, the whole image in one band
    (5, 20, 3, 1, 5, 32),   # Wo = 20 > 16
    (1, 1, 3, 2, 1, 48),    # one pixel: one tile of 1 valid row
    (6, 16, 5, 1, 2, 48),   # Wo = 16: dr = 0
    (23, 23, 5, 1, 3, 32),  # features.5.1 at an odd size
])
def test_v5_depthwise_tc_computes_the_padded_depthwise_and_pool(height, width, ks, stride, rows, hc):
    gen = torch.Generator().manual_seed(height * 100 + width + ks)
    e = torch.randn(hc, height, width, dtype=torch.float64, generator=gen)
    w = torch.randn(hc, 1, ks, ks, dtype=torch.float64, generator=gen)
    bias = torch.randn(hc, dtype=torch.float64, generator=gen)
    out_h, out_w = mb.output_size(height, stride), mb.output_size(width, stride)
    rows = min(rows, out_h)
    expected = torch.nn.functional.conv2d(e[None], w, bias, stride=stride, padding=ks // 2, groups=hc)[0]
    ow = 4 if stride == 1 else 2  # the E tile's width as versions 2-5 lay it out (DwTile<S>::OW)
    we = (-(-out_w // ow) * ow - 1) * stride + ks
    w_taps = w.reshape(hc, ks * ks).t()  # [k * k, HC], as prepare_weights packs w_dw
    for oh0 in range(0, out_h, rows):
        band = min(rows, out_h - oh0)
        tile = _e_tile(e, oh0, band, ks, stride, we)
        d, pool = _depthwise_tc(tile, w_taps, bias, band, out_w, we, ks, stride)
        want = expected[:, oh0:oh0 + band].reshape(hc, -1).t()
        assert torch.allclose(d, want, rtol=1e-12, atol=1e-12)
        assert torch.allclose(pool, want.sum(0), rtol=1e-12, atol=1e-10)


def test_v5_band_tiles_split_evenly_over_the_warps():
    """Every (group, tile) pair of a band belongs to one warp's run, and a warp builds B at most
    GRP / 8 + 2 times (features.2.1's band at k = 3: 3 groups of 16 channels x 28 tiles; 7x7:
    3 x 4; 112 wide: 2 x 70; k = 5: 6 groups of 8 channels)."""
    for grp_n, ntiles in [(3, 28), (3, 4), (2, 70), (6, 49), (6, 1), (4, 1), (6, 13)]:
        total = grp_n * ntiles
        per_warp = -(-total // WARPS)
        seen = []
        for warp in range(WARPS):
            i0, i1 = warp * per_warp, min(warp * per_warp + per_warp, total)
            groups = {i // ntiles for i in range(i0, i1)}
            assert len(groups) <= grp_n // WARPS + 2
            seen += list(range(i0, i1))
        assert sorted(seen) == list(range(total))


def test_v5_is_wired_as_version_3_with_the_tensor_core_depthwise():
    assert 5 in mb.VERSIONS and mb.KERNEL_VERSION[5] == 5 and mb.DEFAULT_VERSION in mb.VERSIONS
    # same E tile and bands as version 3 (only the depthwise's arithmetic differs)
    for args in [(56, 56, 3, 1, 32, 48, True), (112, 112, 3, 1, 0, 32, False), (28, 28, 5, 1, 48, 48, True)]:
        assert mb.band_rows(*args, 5) == mb.band_rows(*args, 3)


@pytest.mark.parametrize("path", ["features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1",
                                  "features.4.1", "features.5.1", "features.6.1", "features.7.0"])
def test_v5_numerics_stay_within_twice_pytorch_fp16(path):
    """Version 3's rounding points and tanh.approx error (test_mbconv_v3's emulation) with the
    depthwise taps rounded to fp16 after halving, as the B fragments hold them (2026-11-30:
    0.90-0.97x PyTorch fp16's error on these nine blocks, the same as version 3 to 3 digits)."""
    from perfmodel.harness import relative_error
    from tests.test_mbconv_v3 import _emulated_v3, b0_block_case

    x, params, weights, ref, torch_err = b0_block_case(path)
    w_dw16 = (0.5 * weights.w_dw).half().float() * 2  # the kernel's B: fp16 of the halved tap
    v5_weights = mb.MBConvWeights(**{**{f: getattr(weights, f) for f in mb.WEIGHT_FIELDS}, "w_dw": w_dw16})
    with torch.no_grad():
        v3 = relative_error(_emulated_v3(x, params, weights, 2.0 ** -11), ref)
        v5 = relative_error(_emulated_v3(x, params, v5_weights, 2.0 ** -11), ref)
    assert 0 < torch_err and v5 <= 1.5 * torch_err, (v5, v3, torch_err)
