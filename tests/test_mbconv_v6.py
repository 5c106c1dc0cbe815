"""MBConv version 6 (version 5 with csrc/mbconv_v3.cu's project_bulk_kernel: the projection's
whole-K D and V tiles brought in by the copy engine): its sizing and alignment for every MBConv
shape of EfficientNet-B0 and -B2, and its dataflow transliterated on the CPU (the unit walk, the
two-stage bulk-copy ring with its mbarrier parities, the unpadded shared-memory strides, the SE
scale per row) against the projection computed directly. Its GPU tests are in
test_mbconv_kernels.py (every version) beside the helpers they use."""

import pytest
import torch

from cuda_kernels import mbconv as mb
from tests.test_mbconv_v3 import project_bn

BM, STAGES, MAX_SMEM = 128, 2, 180 * 1024  # kProjV3BM, kProjBulkStages, kProjBulkMaxSmem


def stage_bytes(hidden: int, hk_pad: int, bn: int) -> int:
    """project_bulk_stage_bytes: 128 D rows of `hidden` halves, then BN V rows of hk_pad."""
    return (BM * hidden + bn * hk_pad) * 2


def bulk_applies(hidden: int, c_out: int) -> bool:
    """project_bulk_applies (hk_pad = hidden rounded up to the projection's k step, 32)."""
    hk_pad = -(-hidden // 32) * 32
    return hidden % 16 == 0 and STAGES * stage_bytes(hidden, hk_pad, project_bn(c_out)) + 8 * STAGES <= MAX_SMEM


def _shapes():
    from tests.test_mbconv_kernels import mbconv_shapes

    for name in ("efficientnet_b0", "efficientnet_b2"):
        for path, (c, h, w) in mbconv_shapes(name).items():
            yield name, path, c, h


def test_v6_uses_the_bulk_projection_where_two_stages_fit():
    """Which B0 blocks run project_bulk (hidden <= 240) and that every copy is 16-byte aligned and a
    multiple of 16 bytes, for full and partial last M tiles; V's rows read exist (cout_pad)."""
    import torchvision

    from perfmodel.zoo import fold_batchnorm

    used = {}
    for name, path, c, h in _shapes():
        model = getattr(torchvision.models, name)()
        params = mb.block_params(fold_batchnorm(model.eval().get_submodule(path)))
        hidden, c_out = params.hidden, params.out_channels
        hk_pad, bn = -(-hidden // 32) * 32, project_bn(c_out)
        n_tiles = -(-c_out // bn)
        assert n_tiles * bn <= -(-c_out // mb.PROJECT_TILE_N) * mb.PROJECT_TILE_N  # cout_pad rows of V
        used[(name, path)] = bulk_applies(hidden, c_out)
        if not used[(name, path)]:
            continue
        ho = mb.output_size(h, params.stride)
        for batch in (1, 3, 128):
            p_rows = batch * ho * ho
            for m0 in {0, (p_rows - 1) // BM * BM}:
                rows = min(BM, p_rows - m0)
                assert (m0 * hidden * 2) % 16 == 0 and (rows * hidden * 2) % 16 == 0
            assert (bn * hk_pad * 2) % 16 == 0 and stage_bytes(hidden, hk_pad, bn) % 16 == 0
    b0 = [p for (n, p), u in used.items() if n == "efficientnet_b0" and u]
    assert b0 == ["features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1", "features.4.0"]


def _project_bulk(d, scale, w_proj, b_proj, x, hw, hidden, hk_pad, c_out, grid):
    """project_bulk_kernel transliterated at tile level: per CTA the unit walk, the two-stage ring
    (issue i + 1 before waiting on i; stage i % 2 freed after unit i), the copies as flat byte
    ranges into the stage, fragments read back with the kernel's strides. Returns out [P, C_out]
    (NaN where never stored) and asserts the ring's order."""
    bn = project_bn(c_out)
    n_tiles = -(-c_out // bn)
    p_rows = d.shape[0]
    units = -(-p_rows // BM) * n_tiles
    d_flat, v_flat = d.reshape(-1), w_proj.reshape(-1)
    out = torch.full((p_rows, c_out), float("nan"), dtype=d.dtype)
    for cta in range(grid):
        my_units = (units - 1 - cta) // grid + 1 if cta < units else 0
        walk = [(cta + j * grid) // n_tiles for j in range(my_units)], [(cta + j * grid) % n_tiles for j in range(my_units)]
        stage = [None] * STAGES
        completed = [0] * STAGES  # phases completed per mbarrier
        freed = [True] * STAGES

        def issue(i):
            s = i % STAGES
            assert freed[s], "a stage is refilled before its unit was computed"
            m, n = walk[0][i], walk[1][i]
            rows = min(BM, p_rows - m * BM)
            a = d_flat[m * BM * hidden:(m * BM + rows) * hidden]
            b = v_flat[n * bn * hk_pad:(n * bn + bn) * hk_pad]
            assert a.numel() == rows * hidden and b.numel() == bn * hk_pad  # the expect_tx bytes / 2
            buf = torch.full((BM * hidden + bn * hk_pad,), float("nan"), dtype=d.dtype)
            buf[:a.numel()] = a
            buf[BM * hidden:] = b
            stage[s] = buf
            freed[s] = False
            completed[s] += 1

        if my_units:
            issue(0)
        for i in range(my_units):
            if i + 1 < my_units:
                issue(i + 1)
            s = i % STAGES
            assert completed[s] == i // STAGES + 1 and (completed[s] - 1) & 1 == (i // STAGES) & 1  # wait parity
            m0, n0 = walk[0][i] * BM, walk[1][i] * bn
            buf = stage[s]
            a_s = buf[:BM * hidden].reshape(BM, hidden)        # row stride `hidden`
            b_s = buf[BM * hidden:].reshape(bn, hk_pad)[:, :hidden]  # row stride hk_pad, columns < hidden read
            for r in range(BM):
                row = m0 + r
                if row >= p_rows:
                    continue
                img = min(row // hw, scale.shape[0] - 1)
                scaled = (a_s[r] * scale[img, :hidden]).half().float()  # scale_half2: one rounding
                for cc in range(bn):
                    col = n0 + cc
                    if col < c_out:
                        v = scaled @ b_s[cc] + b_proj[col] + (x[row, col] if x is not None else 0.0)
                        out[row, col] = v
            freed[s] = True  # the __syncthreads closing unit i
    return out


@pytest.mark.parametrize("p_rows,hw,hidden,c_out,grid,residual", [
    (300, 25, 32, 16, 2, False),    # features.1.0-like, partial last tile, tiles crossing images
    (257, 49, 144, 24, 3, True),    # hk_pad 160 > hidden, 3 CTAs
    (128, 128, 240, 80, 1, False),  # two N tiles of 48, one CTA walks both
    (520, 196, 96, 40, 4, False),   # BN 48 for 40 columns
])
def test_v6_bulk_projection_dataflow(p_rows, hw, hidden, c_out, grid, residual):
    gen = torch.Generator().manual_seed(p_rows + hidden)
    hk_pad, cout_pad = -(-hidden // 32) * 32, -(-c_out // 64) * 64
    n_img = -(-p_rows // hw)
    d = torch.randn(p_rows, hidden, generator=gen).half().float()
    scale = torch.rand(n_img, hidden, generator=gen)
    w_proj = torch.zeros(cout_pad, hk_pad)
    w_proj[:c_out, :hidden] = torch.randn(c_out, hidden, generator=gen).half().float()
    b_proj = torch.randn(cout_pad, generator=gen)
    x = torch.randn(p_rows, c_out, generator=gen) if residual else None
    got = _project_bulk(d, scale, w_proj, b_proj, x, hw, hidden, hk_pad, c_out, grid)
    img = torch.arange(p_rows) // hw
    want = (d * scale[img]).half().float() @ w_proj[:c_out, :hidden].t() + b_proj[:c_out]
    if residual:
        want = want + x
    assert torch.isfinite(got).all(), "every output stored"
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-4)


def test_v6_is_wired_as_version_5_with_the_bulk_projection():
    assert 6 in mb.VERSIONS and mb.KERNEL_VERSION[6] == 6
    for args in [(56, 56, 3, 1, 32, 48, True), (28, 28, 5, 1, 48, 48, True)]:
        assert mb.band_rows(*args, 6) == mb.band_rows(*args, 5)
