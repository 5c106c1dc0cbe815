"""MBConv version 7 (NOTES.md, "MBConv version 7"; csrc/mbconv_v7.cu, csrc/mbconv_v2.cuh with SE = true).

CPU: the host policy (which blocks take project_v7, the grid and warp counts per stage, the constants mirrored
from the sources), the projection's tiling transliterated (virtual image-aligned rows, copy slots, ldmatrix
fragment -> SE scale, the k-groups' slices and their reduction, the epilogue's rows) in float64 against the
projection computed directly, the SE in kernel 1's last CTA per image (the counter, the 8-warp partition, its
shared memory), and the whole block emulated with these pieces against torchvision's block in float64.
GPU (@pytest.mark.cuda): version 7 at every MBConv shape of EfficientNet-B0 and -B2 (batch 1 and 128), odd sizes,
against float64 with NaN-poisoned outputs, <= 2x PyTorch fp16's error; version 7 against version 3; repeated
launches, CUDA graphs and PDL on / off (the per-image counters must return to zero)."""

import math
import random
import re
from pathlib import Path

import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import se_fc1_float64

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
BM, BK, LD, STAGES, WARPS_K1 = 64, 64, 72, 3, 8  # csrc/mbconv_v7.cu kP7*, kernel 1's 256 threads


def _source_constant(path: str, name: str) -> int:
    m = re.search(rf"\b{name}\s*=\s*([0-9]+)", (CSRC / path).read_text())
    assert m, name
    return int(m.group(1))


def project_bn(c_out: int) -> int:
    """csrc/mbconv_v7.cu project_v7_bn (= mbconv_v3.cu project_v3_bn)."""
    tiles = -(-c_out // 64)
    return -(-((c_out + tiles - 1) // tiles) // 16) * 16


def plan(n: int, ho: int, wo: int, c_out: int) -> dict:
    """project_v7's launch (csrc/mbconv_v7.cu launch_project_v7 / launch_v7)."""
    hw = ho * wo
    hw16 = -(-hw // 16) * 16
    bn = project_bn(c_out)
    n_tiles = -(-c_out // bn)
    ks = 4 if hw16 <= 64 else 2
    m_tiles = -(-(n * hw16) // BM)
    return {"hw16": hw16, "bn": bn, "n_tiles": n_tiles, "ks": ks, "m_tiles": m_tiles, "units": m_tiles * n_tiles,
            "warps": 4 * ks, "smem": STAGES * (BM + bn) * LD * 2}


def test_constants_mirror_the_sources():
    assert _source_constant("mbconv_v7.cu", "kP7MaxHW") == mb.PROJECT_V7_MAX_HW == 400
    for name, value in (("kP7BM", BM), ("kP7BK", BK), ("kP7Stages", STAGES)):
        assert _source_constant("mbconv_v7.cu", name) == value
    assert "kP7LD = kP7BK + 8" in (CSRC / "mbconv_v7.cu").read_text()
    assert mb.KERNEL_VERSION[7] == 7 and 7 in mb.VERSIONS
    assert 'os.environ.get("CUDA_KERNELS_MBCONV_VERSION", "11")' in Path(mb.__file__).read_text()  # not 7
    assert "version == 7" in (CSRC / "mbconv.cu").read_text()
    from cuda_kernels._build import MBCONV_SOURCES

    assert {"mbconv_v7.cu", "mbconv_v7_k3.cu", "mbconv_v7_k5.cu"} <= set(MBCONV_SOURCES)


@pytest.mark.parametrize("path,ho,c_out,applies,units,ks", [
    ("features.3.1", 28, 40, False, None, None),  # 784 pixels: version 3's projection
    ("features.4.0", 14, 80, True, 832, 2), ("features.4.1", 14, 80, True, 832, 2),
    ("features.5.1", 14, 112, True, 832, 2), ("features.6.0", 7, 192, True, 384, 4),
    ("features.6.1", 7, 192, True, 384, 4), ("features.7.0", 7, 320, True, 640, 4),
])
def test_b0_late_stages_take_project_v7_with_the_notes_grid(path, ho, c_out, applies, units, ks):
    """The per-stage numbers of the NOTES table (batch 128)."""
    assert (ho * ho <= mb.PROJECT_V7_MAX_HW) == applies
    if applies:
        got = plan(128, ho, ho, c_out)
        assert (got["units"], got["ks"]) == (units, ks)
        # resident: 3 CTAs of 8 warps (KS = 2, <= 80 registers) or 2 of 16 (KS = 4, <= 64) fit an SM's 228 KB
        ctas = 3 if ks == 2 else 2
        assert ctas * (got["smem"] + 1024) <= 228 * 1024


@pytest.mark.parametrize("ks,bn", [(2, 16), (2, 32), (2, 48), (2, 64), (4, 16), (4, 64), (1, 48)])
def test_copy_slots_cover_each_stage_once(ks, bn):
    threads = 128 * ks
    a = sorted((tid // 8 + j * threads // 8, (tid & 7) * 8) for tid in range(threads) for j in range(BM * BK // 8 // threads))
    assert a == [(r, c) for r in range(BM) for c in range(0, BK, 8)]
    chunks = bn * BK // 8
    b = sorted(((tid + j * threads) // 8, (tid & 7) * 8) for tid in range(threads) for j in range(-(-chunks // threads))
               if tid + j * threads < chunks)
    assert b == [(r, c) for r in range(bn) for c in range(0, BK, 8)]


def _fragment(lane: int, reg: int) -> tuple[int, int]:
    """(row, column) of A-fragment register `reg` of `lane` after ldmatrix.x4 (lane l addresses row l & 15,
    column (l >> 4) * 8 of the 16 x 16 tile)."""
    src = 8 * reg + lane // 4
    return src & 15, (src >> 4) * 8 + 2 * (lane % 4)


@pytest.mark.parametrize("n,hw,hidden", [(3, 49, 1152), (2, 196, 672), (5, 1, 40), (4, 9, 240), (1, 400, 480),
                                         (7, 25, 96)])
def test_every_fragment_lies_in_one_image_and_scales_by_its_own_row(n, hw, hidden):
    """Each warp's 16 fragment rows are pixels (or padding) of one image; the scale each A register uses is
    (that image, the register's channel); the epilogue's rows g, g + 8 are the accumulator rows' pixels."""
    hw16 = -(-hw // 16) * 16
    for v0 in range(0, -(-n * hw16 // BM) * BM, BM):
        for wr in range(4):
            vw = v0 + wr * 16
            img = min(vw // hw16, n - 1)
            for lane in range(32):
                g, q = lane // 4, lane % 4
                for k in range(0, hidden, 16):
                    klo, khi = min(k + 2 * q, hidden - 2), min(k + 2 * q + 8, hidden - 2)
                    for reg, kk in enumerate((klo, klo, khi, khi)):
                        row16, col = _fragment(lane, reg)
                        assert row16 == g + 8 * (reg & 1)
                        v = vw + row16
                        assert v // hw16 == vw // hw16  # one image per fragment
                        if k + col < hidden:
                            assert kk == k + col
                rr0 = vw - (vw // hw16) * hw16 + g
                for h in range(2):
                    v = vw + g + 8 * h
                    if v // hw16 < n and v % hw16 < hw:
                        assert (img, rr0 + 8 * h) == (v // hw16, v % hw16)


@pytest.mark.parametrize("ks,bn", [(2, 64), (2, 48), (4, 64), (4, 16)])
def test_k_group_exchange_is_one_slot_per_value_inside_the_stages(ks, bn):
    nt = bn // 8
    slots = [(((kh - 1) * 4 + wr) * nt * 4 + j * 4 + k) * 32 + lane
             for kh in range(1, ks) for wr in range(4) for j in range(nt) for k in range(4) for lane in range(32)]
    assert len(set(slots)) == len(slots) and max(slots) * 4 + 4 <= STAGES * (BM + bn) * LD * 2
    # group 0 reads back exactly what the others wrote
    reads = {((o * 4 + wr) * nt * 4 + j * 4 + k) * 32 + lane
             for o in range(ks - 1) for wr in range(4) for j in range(nt) for k in range(4) for lane in range(32)}
    assert reads == set(slots)


def _round16(t: torch.Tensor) -> torch.Tensor:
    return t.float().half().double()


def emulate_project_v7(d, scale, w_proj, b_proj, x, n, hw, c_out, hidden):
    """project_v7_kernel CTA by CTA (float64 sums; the scale rounded to fp16 and the fp16 product, as the
    kernel's HMUL2 and PyTorch's fp16 block): returns out [P, C_out] (float64, before the fp16 store) and how often each element was stored."""
    pl = plan(n, hw, 1, c_out)
    hw16, bn, ks, n_tiles = pl["hw16"], pl["bn"], pl["ks"], pl["n_tiles"]
    hk_pad = w_proj.shape[1]
    ktiles = -(-hidden // BK)
    out = torch.full((n * hw, c_out), float("nan"), dtype=torch.float64)
    stores = torch.zeros((n * hw, c_out), dtype=torch.int64)
    for unit in range(pl["units"]):
        m_tile, n_tile = divmod(unit, n_tiles)
        v0, n0 = m_tile * BM, n_tile * bn
        v = v0 + torch.arange(BM)
        img, rr = v // hw16, v % hw16
        valid = (img < n) & (rr < hw)
        real = img * hw + rr
        a = torch.zeros(BM, ktiles * BK, dtype=torch.float64)  # the stages, zero-filled past rows and `hidden`
        a[valid, :hidden] = d[real[valid]]
        b = torch.zeros(bn, ktiles * BK, dtype=torch.float64)
        rows = min(bn, c_out - n0)
        b[:rows, :min(hk_pad, ktiles * BK)] = w_proj[n0:n0 + rows, :ktiles * BK]
        for wr in range(4):
            vw = v0 + wr * 16
            im = min(vw // hw16, n - 1)
            kk = torch.arange(ktiles * BK).clamp(max=hidden - 1)  # finite scale past `hidden` (A is 0 there)
            sa = _round16(a[wr * 16:wr * 16 + 16] * _round16(scale[im, kk]))  # HMUL2 by the fp16 scale
            parts = []
            for kh in range(ks):
                cols = [kt * BK + s * 16 + c for kt in range(ktiles) for s in range(BK // 16) if s % ks == kh
                        for c in range(16)]
                parts.append(sa[:, cols] @ b[:, cols].t())
            acc = parts[0]
            for o in range(1, ks):
                acc = acc + parts[o]
            for h in range(16):
                vv = vw + h
                if vv // hw16 >= n or vv % hw16 >= hw:
                    continue
                row = (vv // hw16) * hw + vv % hw16
                cols_ok = min(bn, c_out - n0)
                val = acc[h, :cols_ok] + b_proj[n0:n0 + cols_ok]
                if x is not None:
                    val = val + x[row, n0:n0 + cols_ok]
                out[row, n0:n0 + cols_ok] = val
                stores[row, n0:n0 + cols_ok] += 1
    return out, stores


@pytest.mark.parametrize("n,hw,hidden,c_out,residual", [
    (3, 49, 1152, 192, True), (2, 49, 672, 320, False), (2, 196, 672, 112, True), (3, 196, 240, 80, False),
    (5, 1, 40, 16, False), (4, 9, 96, 24, True), (1, 400, 480, 88, False), (3, 25, 1056, 176, False),
])
def test_project_v7_tiling_computes_the_scaled_projection(n, hw, hidden, c_out, residual):
    gen = torch.Generator().manual_seed(hw + hidden)
    hid_pad, hk_pad, cout_pad = -(-hidden // 48) * 48, -(-hidden // 32) * 32, -(-c_out // 64) * 64
    d = _round16(torch.rand(n * hw, hidden, dtype=torch.float64, generator=gen) * 2 - 0.3)
    scale = torch.rand(n, hid_pad, dtype=torch.float64, generator=gen)
    w_proj = torch.zeros(cout_pad, hk_pad, dtype=torch.float64)
    w_proj[:c_out, :hidden] = _round16(torch.randn(c_out, hidden, dtype=torch.float64, generator=gen) / hidden ** 0.5)
    b_proj = torch.randn(cout_pad, dtype=torch.float64, generator=gen)
    x = _round16(torch.randn(n * hw, c_out, dtype=torch.float64, generator=gen)) if residual else None
    got, stores = emulate_project_v7(d, scale, w_proj, b_proj, x, n, hw, c_out, hidden)
    assert (stores == 1).all(), "every output element stored exactly once"
    img = torch.arange(n * hw) // hw
    ref = _round16(d * _round16(scale[img, :hidden])) @ w_proj[:c_out, :hidden].t() + b_proj[:c_out]
    if residual:
        ref = ref + x
    assert torch.allclose(got, ref, rtol=1e-12, atol=1e-12)


# ---- the SE in kernel 1's last CTA per image ----

def test_exactly_one_last_cta_per_image_and_the_counters_return_to_zero():
    rng = random.Random(0)
    for chunks, bands, n in ((24, 1, 5), (10, 2, 3), (1, 1, 4), (3, 14, 2)):
        counter = [0] * n
        for _launch in range(3):
            order = [(c, b, i) for c in range(chunks) for b in range(bands) for i in range(n)]
            rng.shuffle(order)
            last = []
            for _, _, i in order:  # atomicAdd, then the last one resets
                before = counter[i]
                counter[i] += 1
                if before == chunks * bands - 1:
                    counter[i] = 0
                    last.append(i)
            assert sorted(last) == list(range(n)) and counter == [0] * n


def _se_in_last_cta(partial, hw, w1, b1, w2, b2, hid_pad, smem_bytes):
    """se_in_last_cta for one image (float64), warp by warp: 8 warps; FC2 warps from the shared memory."""
    sq, hidden = w1.shape
    squeezed = se_fc1_float64(partial, hw, w1, b1, warps=WARPS_K1)
    base, per_warp = (hid_pad + -(-sq // 4) * 4) * 4, 32 * sq * 4
    fc2_warps = max(1, min(WARPS_K1, (smem_bytes - base) // per_warp))
    assert base + fc2_warps * per_warp <= smem_bytes  # the staging fits what the launcher gave
    scale = torch.full((hid_pad,), math.nan, dtype=torch.float64)
    written = torch.zeros(hidden, dtype=torch.int64)
    for warp in range(fc2_warps):
        for c0 in range(warp * 32, hidden, fc2_warps * 32):
            for lane in range(min(32, hidden - c0)):
                s, j = float(b2[c0 + lane]), lane % sq
                for _ in range(sq):
                    s += float(w2[c0 + lane, j]) * squeezed[j]
                    j = 0 if j + 1 == sq else j + 1
                scale[c0 + lane] = 1 / (1 + math.exp(-s))
                written[c0 + lane] += 1
    assert (written == 1).all()
    return scale


def kernel1_smem(hw_in: int, ks: int, stride: int, c_in: int, hidden: int, sq: int, expand: bool) -> int:
    """csrc/mbconv_v2.cuh launch_expand_dw_v2 with SE: max(kernel 1's, se_in_kernel1_min_smem)."""
    chunk = mb.chunk_for(hidden)
    k_pad = -(-c_in // 16) * 16 if expand else 0
    rows = mb.band_rows(hw_in, hw_in, ks, stride, k_pad, chunk, expand, 7)
    k1 = mb.kernel1_smem_bytes(rows, hw_in, hw_in, ks, stride, k_pad, chunk, expand, 7)
    hid_pad = -(-hidden // chunk) * chunk
    return max(k1, (hid_pad + -(-sq // 4) * 4 + 32 * sq) * 4)


@pytest.mark.parametrize("hidden,sq,bands,smem", [(1152, 48, 1, 61 * 1024), (96, 4, 14, 100 * 1024),
                                                  (2112, 88, 1, 20 * 1024), (40, 2, 3, 5000), (672, 28, 1, 40000)])
def test_se_in_last_cta_computes_the_squeeze_excitation(hidden, sq, bands, smem):
    gen = torch.Generator().manual_seed(hidden)
    hid_pad, hw = -(-hidden // 48) * 48, 49
    smem = max(smem, (hid_pad + -(-sq // 4) * 4 + 32 * sq) * 4)  # the launcher's minimum
    partial = torch.randn(bands, hid_pad, dtype=torch.float64, generator=gen) * hw / bands
    w1, b1 = torch.randn(sq, hidden, dtype=torch.float64, generator=gen) / hidden ** 0.5, torch.randn(sq, dtype=torch.float64, generator=gen)
    w2, b2 = torch.randn(hidden, sq, dtype=torch.float64, generator=gen) / sq ** 0.5, torch.randn(hidden, dtype=torch.float64, generator=gen)
    got = _se_in_last_cta(partial, hw, w1, b1, w2, b2, hid_pad, smem)
    pooled = partial[:, :hidden].sum(0) / hw
    expected = torch.sigmoid(w2 @ torch.nn.functional.silu(w1 @ pooled + b1) + b2)
    assert torch.allclose(got[:hidden], expected, rtol=1e-12, atol=1e-12)


def test_kernel1_shared_memory_holds_the_se_of_every_b0_and_b2_block():
    """FC2 warps per block from kernel 1's shared memory (at least one always: the launcher raises it)."""
    from mbconv_helpers import DISTINCT, mbconv_shapes
    from mbconv_helpers import block_of as _block

    for name, path in DISTINCT:
        block = _block(name, path)
        c, h, _ = mbconv_shapes(name)[path]
        dw = block.block[-3][0]
        hidden, sq = dw.out_channels, block.block[-2].fc1.out_channels
        smem = kernel1_smem(h, dw.kernel_size[0], dw.stride[0], c, hidden, sq, len(block.block) == 4)
        hid_pad = -(-hidden // mb.chunk_for(hidden)) * mb.chunk_for(hidden)
        base, per_warp = (hid_pad + -(-sq // 4) * 4) * 4, 32 * sq * 4
        assert 1 <= (smem - base) // per_warp and smem <= mb.SMEM_MAX, (name, path)


# ---- the block, emulated with version 7's pieces, against torchvision in float64 ----

def _emulated_v7(x, p, w, tanh_rel_err=2.0 ** -11):
    """Version 7 on the CPU: kernel 1 as version 3 (tanh SiLU with its worst relative error, fp16 E and D, the
    pool of the fp32 D by bands), the SE from the bands' partial sums (se_in_last_cta), the projection by
    emulate_project_v7 where Ho Wo <= 400 (else version 3's, same rounding points)."""
    f = torch.nn.functional
    gen = torch.Generator().manual_seed(7)

    def silu(v):
        h = v * 0.5
        e = tanh_rel_err * (torch.randint(0, 2, h.shape, generator=gen) * 2 - 1)
        return h + h * (torch.tanh(h) * (1 + e))

    hidden, c_out, k = p.hidden, p.out_channels, p.kernel_size
    n, c_in, hgt, wid = x.shape
    xf = x.double()
    e = xf
    if p.expand_w is not None:
        e = _round16(silu(f.conv2d(xf, w.w_exp[:hidden, :c_in].double()[:, :, None, None], w.b_exp[:hidden].double())))
    w_dw = w.w_dw[:, :hidden].t().reshape(hidden, 1, k, k).double()
    d32 = silu(f.conv2d(e, w_dw, w.b_dw[:hidden].double(), p.stride, k // 2, groups=hidden)).float().double()
    d = _round16(d32)
    ho, wo = d.shape[2:]
    chunk = mb.chunk_for(hidden)
    k_pad = -(-c_in // 16) * 16 if p.expand_w is not None else 0
    rows = mb.band_rows(hgt, wid, k, p.stride, k_pad, chunk, p.expand_w is not None, 7)
    hid_pad = w.b_dw.shape[0]
    scale = torch.zeros(n, hid_pad, dtype=torch.float64)
    for i in range(n):
        partial = torch.zeros(-(-ho // rows), hid_pad, dtype=torch.float64)
        for band in range(partial.shape[0]):
            partial[band, :hidden] = d32[i, :, band * rows:(band + 1) * rows].sum((1, 2))
        scale[i] = _se_in_last_cta(partial, ho * wo, w.w_se1.double(), w.b_se1[: w.w_se1.shape[0]].double(), w.w_se2.double(),
                                   w.b_se2.double(), hid_pad, 1 << 20)
    d_rows = d.permute(0, 2, 3, 1).reshape(n * ho * wo, hidden)
    x_rows = xf.permute(0, 2, 3, 1).reshape(n * ho * wo, c_out) if p.residual else None
    assert ho * wo <= mb.PROJECT_V7_MAX_HW
    out, stores = emulate_project_v7(d_rows, scale, w.w_proj.double(), w.b_proj.double(), x_rows, n, ho * wo, c_out,
                                     hidden)
    assert (stores == 1).all()
    return _round16(out).reshape(n, ho, wo, c_out).permute(0, 3, 1, 2)


@pytest.mark.parametrize("path", ["features.4.0", "features.4.1", "features.5.0", "features.5.1", "features.6.0",
                                  "features.6.1", "features.7.0"])
def test_v7_emulated_block_stays_within_twice_pytorch_fp16(path):
    """EfficientNet-B0's late blocks, batch 2 at 14x14 input: version 7's tiling, SE placement and rounding
    points against the folded torchvision block in float64 (test_mbconv_v3's case)."""
    from perfmodel.harness import relative_error
    from mbconv_helpers import b0_block_case

    x, params, weights, ref, torch_err = b0_block_case(path)
    with torch.no_grad():
        got = _emulated_v7(x, params, weights)
    err = relative_error(got, ref)
    assert 0 < torch_err and err <= 1.5 * torch_err, (err, torch_err)


@pytest.mark.parametrize("on", [False, True])
def test_version_7_reaches_the_extension_with_the_pdl_flag(monkeypatch, on):
    from cuda_kernels import _pdl

    class Fake:
        calls = []

        def mbconv(self, *args):
            self.calls.append(args)
            return torch.zeros(1, 4, 4, 16, dtype=torch.float16)

    fake = Fake()
    monkeypatch.setenv(_pdl.SWITCH, "1" if on else "0")
    monkeypatch.setattr(mb, "_extension", lambda: fake)
    monkeypatch.setattr(mb, "check_input", lambda *a, **k: None)
    tensors = [torch.zeros(0)] * 6 + [torch.zeros(64, 4)] + [torch.zeros(0)] * 4
    x = torch.zeros(1, 16, 4, 4, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    mb._launch(x, tensors, 3, 1, 16, True, version=7)
    (args,) = fake.calls
    assert args[-1] is on and args[-2] == 7


def test_the_pdl_source_check_lists_the_version_7_kernels():
    text = (Path(__file__).resolve().parent / "test_pdl.py").read_text()
    assert '("mbconv_v7.cu", "project_v7_kernel"' in text and '"se_in_last_cta<"' in text


# ---- GPU ----

def _gpu():
    from mbconv_helpers import check_on_gpu as _check_on_gpu
    from mbconv_helpers import gpu_input as _gpu_input

    return _check_on_gpu, _gpu_input


def _distinct():
    from mbconv_helpers import DISTINCT

    return DISTINCT


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 128])
@pytest.mark.parametrize("name,path", _distinct())
def test_v7_every_shape_of_b0_and_b2(name, path, batch):
    from mbconv_helpers import block_of as _block
    from mbconv_helpers import mbconv_shapes

    check, gpu_input = _gpu()
    torch.manual_seed(batch)
    check(_block(name, path), gpu_input(batch, mbconv_shapes(name)[path]), 7)


@pytest.mark.cuda
@pytest.mark.parametrize("path,size,batch", [("features.6.0", 1, 5), ("features.5.1", 23, 3), ("features.4.0", 13, 5),
                                             ("features.6.1", 5, 7), ("features.7.0", 3, 2), ("features.4.1", 20, 1),
                                             ("features.2.0", 9, 5), ("features.3.0", 7, 5), ("features.1.0", 5, 5),
                                             ("features.5.0", 17, 2)])
def test_v7_odd_sizes(path, size, batch):
    from mbconv_helpers import block_of as _block
    from mbconv_helpers import mbconv_shapes

    check, gpu_input = _gpu()
    c = mbconv_shapes("efficientnet_b0")[path][0]
    check(_block("efficientnet_b0", path), gpu_input(batch, (c, size, size)), 7)


def _prepared(path, batch, seed=1):
    from perfmodel.zoo import fold_batchnorm
    from mbconv_helpers import block_of as _block
    from mbconv_helpers import gpu_input as _gpu_input
    from mbconv_helpers import mbconv_shapes

    torch.manual_seed(seed)
    block = fold_batchnorm(_block("efficientnet_b0", path)).cuda()
    params = mb.block_params(block)
    weights = mb.prepare_weights(params)
    return params, weights, _gpu_input(batch, mbconv_shapes("efficientnet_b0")[path])


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["features.2.1", "features.4.1", "features.5.2", "features.6.0", "features.6.3",
                                  "features.7.0"])
def test_v7_agrees_with_v3_and_repeats(path):
    """Same kernel 1 and SE arithmetic, the projection summed in another order: close to version 3; three
    launches in a row (and a batch-1 launch between) agree, so the per-image counters returned to zero."""
    from perfmodel.harness import relative_error

    params, weights, x = _prepared(path, 128)
    v3 = mb.mbconv(x, params, weights, version=3)
    runs = [mb.mbconv(x, params, weights, version=7) for _ in range(2)]
    mb.mbconv(x[:1], params, weights, version=7)
    runs.append(mb.mbconv(x, params, weights, version=7))
    for r in runs:
        assert torch.isfinite(r).all()
        assert relative_error(r, v3.double()) < 3e-3
        assert relative_error(r, runs[0].double()) < 1e-3


@pytest.mark.cuda
@pytest.mark.parametrize("pdl", ["0", "1"])
def test_v7_chain_in_a_cuda_graph(monkeypatch, pdl):
    """Four blocks (k = 3 and 5, 14x14 and 7x7) captured with PDL on or off and replayed into NaN-poisoned
    outputs: each replay equals eager version 7 closely (the pool's float atomics vary in the last bits)."""
    from cuda_kernels import _pdl
    from perfmodel.harness import relative_error

    monkeypatch.setenv(_pdl.SWITCH, pdl)
    paths = ["features.5.2", "features.6.0", "features.6.1", "features.7.0"]
    steps = [_prepared(p, 8, seed=i)[:2] for i, p in enumerate(paths)]
    x = _prepared(paths[0], 8)[2]
    outs, cur = [], x
    for params, weights in steps:
        cur = mb.mbconv(cur, params, weights, version=7)
        outs.append(torch.empty_like(cur))
    want, cur = [], x
    for params, weights in steps:
        cur = mb.mbconv(cur, params, weights, version=7)
        want.append(cur.clone())

    def forward():
        cur = x
        for (params, weights), out in zip(steps, outs):
            cur = mb.mbconv(cur, params, weights, out=out, version=7)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    for _ in range(3):
        for o in outs:
            o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for o, w in zip(outs, want):
            assert torch.isfinite(o).all() and relative_error(o, w.double()) < 1e-3


# ---- project_v7, lane by lane: the kernel's byte addresses into one shared-memory image ----

def _ldmatrix_x4(smem: "np.ndarray", addrs: list[int]) -> list[list[tuple[float, float]]]:
    """ldmatrix.x4 (no transpose) on fp16 shared memory `smem` (indexed in halves) with lane l supplying the byte
    address of row l % 8 of matrix l // 8: regs[lane][r] = the two halves lane gets of matrix r."""
    assert all(a % 16 == 0 for a in addrs)
    return [[(smem[addrs[8 * r + lane // 4] // 2 + 2 * (lane % 4)], smem[addrs[8 * r + lane // 4] // 2 + 2 * (lane % 4) + 1])
             for r in range(4)] for lane in range(32)]


def _mma(acc, a, b0, b1):
    """mma.m16n8k16 row.col: acc[lane][4] += A (from a[lane][4] pairs) x B (from b0, b1 pairs), by the PTX
    fragment layouts (g = lane / 4, q = lane % 4)."""
    import numpy as np

    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for lane in range(32):
        g, q = lane // 4, lane % 4
        for r, (row, k) in enumerate(((g, 2 * q), (g + 8, 2 * q), (g, 2 * q + 8), (g + 8, 2 * q + 8))):
            A[row, k:k + 2] = a[lane][r]
        B[2 * q:2 * q + 2, g] = b0[lane]
        B[2 * q + 8:2 * q + 10, g] = b1[lane]
    C = A @ B
    for lane in range(32):
        g, q = lane // 4, lane % 4
        acc[lane][0] += C[g, 2 * q]
        acc[lane][1] += C[g, 2 * q + 1]
        acc[lane][2] += C[g + 8, 2 * q]
        acc[lane][3] += C[g + 8, 2 * q + 1]


def _project_v7_lanes(d, scale, w_proj, b_proj, x, n, hw, c_out, hidden, hid_pad):
    """project_v7_kernel transliterated per thread and lane (csrc/mbconv_v7.cu): cp.async into byte addresses of
    one shared-memory image, ldmatrix addresses, HMUL2 scaling, mma fragments, the k-groups' exchange through the
    same memory, the epilogue's stores. Returns out [P, C_out] (float64 sums) and the store count."""
    import numpy as np

    pl = plan(n, hw, 1, c_out)
    hw16, bn, ks, n_tiles = pl["hw16"], pl["bn"], pl["ks"], pl["n_tiles"]
    threads, nt_, np_, j_ = 128 * ks, bn // 8, bn // 16, BK // 16 // ks
    a_copies, b_chunks = BM * BK // 8 // threads, bn * BK // 8
    b_copies = -(-b_chunks // threads)
    hk_pad = w_proj.shape[1]
    ktiles = -(-hidden // BK)
    dflat, vflat = d.reshape(-1).numpy(), w_proj.reshape(-1).numpy()
    f16 = lambda v: float(np.float16(v))
    out = np.full((n * hw, c_out), np.nan)
    stores = np.zeros((n * hw, c_out), dtype=np.int64)
    bs_half = STAGES * BM * LD  # Bs = As + STAGES * BM * LD halves
    for unit in range(pl["units"]):
        smem = np.full(pl["smem"] // 2, np.nan)  # stale shared memory: NaN, so a missed copy shows
        m_tile = unit // n_tiles
        n0, v0 = (unit - m_tile * n_tiles) * bn, m_tile * BM
        th = []
        for tid in range(threads):
            c = (tid & 7) * 8
            a = []
            for j in range(a_copies):
                v = v0 + (tid + j * threads) // 8
                im, rr = v // hw16, v - (v // hw16) * hw16
                ok = im < n and rr < hw
                a.append([((im * hw + rr) * hidden + c) if ok else 0, ok])
            b = []
            for j in range(b_copies):
                r = (tid + j * threads) // 8
                ok = n0 + r < c_out
                b.append([(n0 + r) * hk_pad + c if ok else 0, ok])
            th.append({"c": c, "a": a, "b": b, "a_dst": 2 * ((tid // 8) * LD + c), "b_dst": 2 * (bs_half + (tid // 8) * LD + c)})
        state = {"kt": 0, "stage": 0}

        def issue():
            if state["kt"] < ktiles:
                for tid, t in enumerate(th):
                    k = state["kt"] * BK + t["c"]
                    for j, (off, ok) in enumerate(t["a"]):
                        dst = (t["a_dst"] + (state["stage"] * BM + j * (threads // 8)) * LD * 2) // 2
                        smem[dst:dst + 8] = dflat[off:off + 8] if (ok and k < hidden) else 0
                        t["a"][j][0] += BK
                    for j, (off, ok) in enumerate(t["b"]):
                        if tid + j * threads >= b_chunks:
                            break
                        dst = (t["b_dst"] + (state["stage"] * bn + j * (threads // 8)) * LD * 2) // 2
                        smem[dst:dst + 8] = vflat[off:off + 8] if (ok and k < hk_pad) else 0
                        t["b"][j][0] += BK
            state["kt"] += 1
            state["stage"] = (state["stage"] + 1) % STAGES

        warps = 4 * ks
        acc = [[[[0.0] * 4 for _ in range(nt_)] for _ in range(32)] for _ in range(warps)]  # [warp][lane][nt][4]
        for _ in range(STAGES - 1):
            issue()
        stage = 0
        for kt in range(ktiles):
            issue()
            for warp in range(warps):
                wr, kh = warp & 3, warp >> 2
                vw = v0 + wr * 16
                img = min(vw // hw16, n - 1)
                for jj in range(j_):
                    col = (kh + jj * ks) * 16
                    k = kt * BK + col
                    addrs = [2 * (stage * BM * LD + (wr * 16 + (l & 15)) * LD + (l >> 4) * 8 + col) for l in range(32)]
                    a = _ldmatrix_x4(smem, addrs)
                    for lane in range(32):
                        q = lane & 3
                        lo, hi = min(k + 2 * q, hidden - 2), min(k + 2 * q + 8, hidden - 2)
                        s = [(f16(scale[img, lo]), f16(scale[img, lo + 1])), (f16(scale[img, hi]), f16(scale[img, hi + 1]))]
                        a[lane] = [(f16(a[lane][r][0] * s[r // 2][0]), f16(a[lane][r][1] * s[r // 2][1])) for r in range(4)]
                    for npi in range(np_):
                        baddrs = [2 * (bs_half + stage * bn * LD + ((l & 7) + ((l >> 4) << 3)) * LD + ((l >> 3) & 1) * 8
                                       + npi * 16 * LD + col) for l in range(32)]
                        b = _ldmatrix_x4(smem, baddrs)
                        for half in range(2):
                            sub = [acc[warp][lane][2 * npi + half] for lane in range(32)]
                            _mma(sub, a, [b[lane][2 * half] for lane in range(32)], [b[lane][2 * half + 1] for lane in range(32)])
            stage = (stage + 1) % STAGES
        red = np.full(pl["smem"] // 4, np.nan)  # the stages reused as fp32 slots
        for warp in range(4, warps):
            wr, kh = warp & 3, warp >> 2
            for lane in range(32):
                for j in range(nt_):
                    for k in range(4):
                        red[(((kh - 1) * 4 + wr) * nt_ * 4 + j * 4 + k) * 32 + lane] = acc[warp][lane][j][k]
        for wr in range(4):
            vw = v0 + wr * 16
            img = min(vw // hw16, n - 1)
            img_ok = vw // hw16 < n
            for lane in range(32):
                g, q = lane >> 2, lane & 3
                rr0 = vw - (vw // hw16) * hw16 + g
                for nt in range(nt_):
                    for o in range(ks - 1):
                        for k in range(4):
                            acc[wr][lane][nt][k] += red[((o * 4 + wr) * nt_ * 4 + nt * 4 + k) * 32 + lane]
                    colx = n0 + nt * 8 + 2 * q
                    if colx >= c_out or not img_ok:
                        continue
                    for h in range(2):
                        if rr0 + 8 * h >= hw:
                            continue
                        row = img * hw + rr0 + 8 * h
                        for u in range(2):
                            v = acc[wr][lane][nt][2 * h + u] + float(b_proj[colx + u])
                            if x is not None:
                                v += float(x[row, colx + u])
                            out[row, colx + u] = v
                            stores[row, colx + u] += 1
    return torch.from_numpy(out), torch.from_numpy(stores)


@pytest.mark.parametrize("n,hw,hidden,c_out,residual", [(2, 49, 96, 80, True), (1, 196, 160, 64, False),
                                                        (3, 9, 40, 16, False), (1, 25, 72, 112, False),
                                                        (1, 9, 264, 48, True)])  # 5 stages: the ring wraps
def test_project_v7_lane_by_lane(n, hw, hidden, c_out, residual):
    """The kernel's own addresses and fragment layouts (shared memory poisoned with NaN: a copy that misses a
    read element, or a read outside what was copied, gives NaN) against the projection computed directly."""
    gen = torch.Generator().manual_seed(n * hw + hidden)
    hid_pad, hk_pad, cout_pad = -(-hidden // 48) * 48, -(-hidden // 32) * 32, -(-c_out // 64) * 64
    d = _round16(torch.rand(n * hw, hidden, dtype=torch.float64, generator=gen) * 2 - 0.3)
    scale = torch.rand(n, hid_pad, dtype=torch.float64, generator=gen)
    w_proj = torch.zeros(cout_pad, hk_pad, dtype=torch.float64)
    w_proj[:c_out, :hidden] = _round16(torch.randn(c_out, hidden, dtype=torch.float64, generator=gen) / hidden ** 0.5)
    b_proj = torch.randn(cout_pad, dtype=torch.float64, generator=gen)
    x = _round16(torch.randn(n * hw, c_out, dtype=torch.float64, generator=gen)) if residual else None
    got, stores = _project_v7_lanes(d, scale, w_proj, b_proj, x, n, hw, c_out, hidden, hid_pad)
    assert (stores == 1).all() and torch.isfinite(got).all()
    img = torch.arange(n * hw) // hw
    ref = _round16(d * _round16(scale[img, :hidden])) @ w_proj[:c_out, :hidden].t() + b_proj[:c_out]
    if residual:
        ref = ref + x
    assert torch.allclose(got, ref, rtol=1e-9, atol=1e-9)
