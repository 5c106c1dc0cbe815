"""EfficientNet's stem and first block as one unit (cuda_kernels/stem_mbconv.py, csrc/effnet_stem_dw.cu;
on by default since session 16; CUDA_KERNELS_EFFNET_STEM_DW=0 or CUDA_KERNELS_EFFNET_STEM=0 turns it off).

CPU: the mirrors of the source's layout and shared memory (literal sums), which pairs it takes and why it refuses
others, the swap in replace_blocks and the check before timing against the two PyTorch blocks in sequence, ptxas (no
spills), and the kernel transliterated in float64 (the image window of the band's E rows, the stem's GEMM from the
window by the kernel's offsets and masks, E's swizzled slots with its zero columns and rows, the depthwise's items, the
pool) against the convolutions computed directly. GPU (@pytest.mark.cuda): against float64 of the two blocks
(<= 2x PyTorch fp16's error, poisoned output) at B0's shape and odd sizes, and B0 with the unit swapped in."""

import copy
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

import cuda_kernels
from cuda_kernels import effnet_head as eh
from cuda_kernels import effnet_stem as es
from cuda_kernels import stem_mbconv as sm
from cuda_kernels.stem import conv1_matrix
from perfmodel.zoo import fold_batchnorm

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
HEADER = (CSRC / "mbconv_stem_dw.h").read_text()
SOURCE = (CSRC / "effnet_stem_dw.cu").read_text()


def _b0(name: str = "efficientnet_b0") -> nn.Module:
    torch.manual_seed(0)
    return fold_batchnorm(getattr(torchvision.models, name)().eval())


def test_mirrors_match_the_source():
    assert re.search(r"kStemDwRows = (\d+);", HEADER).group(1) == str(sm.ROWS) == "8"
    assert "return (wo + 3) / 4 * 4 + 2;" in HEADER
    assert "return (2 * (kStemDwRows + 2) + 1) * effstem::window_pitch_v2(width) + 2 * effstem::kWindowOffsetV2;" \
        in HEADER
    assert "stem_dw_window_halves(width) * 2 + (kStemDwRows + 2) * stem_dw_e_cols(wo) * c * 2 + 256 / (c / 2) * c * 4" \
        in HEADER
    assert "__device__ __forceinline__ int e_slot(int c) { return c ^ ((c >> 2) & 1); }" in SOURCE
    assert "effnet_stem_dw.cu" in __import__("cuda_kernels._build", fromlist=["x"]).MBCONV_SOURCES
    # B0 at 224: 112 x 112 out; window 21 rows x 680 halves + 8; E 10 rows x 114 pixels x 32 channels; 16 groups' sums
    assert sm.e_cols(112) == 114 and sm.window_halves(224) == 21 * 680 + 8
    assert sm.smem_bytes(224) == (21 * 680 + 8) * 2 + 10 * 114 * 32 * 2 + 16 * 32 * 4 == 103_584
    assert 2 * (sm.smem_bytes(224) + 1024) <= 228 * 1024  # two CTAs per SM
    # the slots: a permutation of each row's columns, and a warp's two column groups (4 apart) on opposite bank halves
    for wo in (1, 5, 112, 224):
        cols = sm.e_cols(wo)
        assert sorted(sm.e_slot(c) for c in range(cols)) == list(range(cols))
        assert all((sm.e_slot(c) & 1) != (sm.e_slot(c + 4) & 1) for c in range(cols - 4) if c % 4 < 2)


def test_it_takes_b0_and_b2_and_refuses_with_a_reason():
    for name in ("efficientnet_b0", "efficientnet_b2"):
        model = _b0(name)
        assert sm.unsupported(model.features[0], model.features[1][0]) is None, name
    b3 = _b0("efficientnet_b3")
    assert sm.unsupported(b3.features[0], b3.features[1][0]) == "stem 3 -> 40 (the kernel has 3 -> 32)"
    raw = torchvision.models.efficientnet_b0().eval()
    assert "fold batchnorm" in sm.unsupported(raw.features[0], raw.features[1][0])
    b0 = _b0()
    assert "expand ratio 1" in sm.unsupported(b0.features[0], b0.features[2][0])
    with pytest.raises(ValueError, match="cannot run this pair"):
        sm.FusedStemMBConv(b0.features[0], b0.features[2][0])


def test_replace_blocks_swaps_the_pair_by_default(monkeypatch):
    monkeypatch.delenv(sm.SWITCH, raising=False)
    monkeypatch.delenv(es.SWITCH, raising=False)
    model = _b0()
    swap = cuda_kernels.replace_blocks(model)
    assert swap.fused == {"ConvFirstBlock": 0, "FFN": 0, "StemMBConv": 1, "MBConv": 15, "EffNetHead": 1}
    assert not swap.fallback
    assert isinstance(model.features[0], sm.FusedStemMBConv) and isinstance(model.features[1][0], nn.Identity)
    assert model.features[0].out_channels == 16
    monkeypatch.setenv(sm.SWITCH, "0")  # the stem alone, then every MBConv
    swap = cuda_kernels.replace_blocks(_b0())
    assert swap.fused == {"ConvFirstBlock": 0, "FFN": 0, "EffNetStem": 1, "MBConv": 16, "EffNetHead": 1}
    assert not swap.fallback
    monkeypatch.delenv(sm.SWITCH)
    monkeypatch.setenv(es.SWITCH, "0")  # the stem kept in PyTorch: no unit either
    swap = cuda_kernels.replace_blocks(_b0())
    assert swap.fused == {"ConvFirstBlock": 0, "FFN": 0, "MBConv": 16, "EffNetHead": 1} and not swap.fallback


def test_a_pair_the_unit_does_not_take_is_swapped_one_by_one(monkeypatch):
    """B3's 40-wide stem, or an MBConv version the unit does not follow: the stem and block 1.0 fused apart, nothing
    left in PyTorch, so nothing listed as a fallback."""
    monkeypatch.delenv(sm.SWITCH, raising=False)
    monkeypatch.delenv(es.SWITCH, raising=False)
    b3 = _b0("efficientnet_b3")
    swap = cuda_kernels.replace_blocks(b3)
    assert swap.fused == {"ConvFirstBlock": 0, "FFN": 0, "StemMBConv": 0, "EffNetStem": 1, "MBConv": 26,
                          "EffNetHead": 1}
    assert not swap.fallback and isinstance(b3.features[0], es.FusedEffNetStem)
    monkeypatch.setattr(sm.mb, "DEFAULT_VERSION", 8)
    assert sm.unavailable() == "MBConv version 8 (the unit runs with versions (9, 10, 11))"
    swap = cuda_kernels.replace_blocks(_b0())
    assert swap.fused == {"ConvFirstBlock": 0, "FFN": 0, "StemMBConv": 0, "EffNetStem": 1, "MBConv": 16,
                          "EffNetHead": 1}


def test_the_unit_needs_compute_capability_9(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert sm.unavailable() == "compute capability 8.0 (the unit's SE and projection need 9.0)"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert sm.unavailable() is None
    # a model without the pair is left alone, with no fallback entry
    resnet = fold_batchnorm(torchvision.models.resnet18().eval())
    assert cuda_kernels.replace_blocks(resnet).fallback == {}


def _unpack_stem(wb: torch.Tensor) -> torch.Tensor:
    """stem.pack_conv1 undone: the fragments' words back to the [C, 32] B matrix, then [C, 3, 3, 3] (k = ky 10 +
    kx 3 + ci)."""
    c = wb.numel() // (2 * 32 * 2) * 8
    nt = torch.arange(c // 8).view(-1, 1, 1, 1)
    s = torch.arange(2).view(1, -1, 1, 1)
    lane = torch.arange(32).view(1, 1, -1, 1)
    r = torch.arange(2).view(1, 1, 1, -1)
    pairs = torch.zeros(c, 16, dtype=torch.int32)
    pairs[nt * 8 + lane // 4, s * 8 + lane % 4 + 4 * r] = wb.cpu().view(c // 8, 2, 32, 2)
    m = pairs.view(torch.float16)[:, :30].reshape(c, 3, 10)[:, :, :9].reshape(c, 3, 3, 3)  # [C, ky, kx, ci]
    return m.permute(0, 3, 1, 2)


def test_unpack_undoes_the_packing():
    w = torch.randn(32, 3, 3, 3).half()
    assert torch.equal(_unpack_stem(es.prepare_weights(w, torch.zeros(32)).wb), w)


def _emulated_unit(self, x):
    """What the unit computes, in float32 from its packed weights, rounded to fp16 where the kernels store (E, D,
    the scaled D, the output): the stem, then block 1.0 as the MBConv kernels run it (test_mbconv_kernels'
    emulation, expand ratio 1)."""
    f = torch.nn.functional
    e = f.silu(f.conv2d(x.float(), _unpack_stem(self.stem_wb).float(), self.stem_bias, stride=2, padding=1))
    e = e.half().float()
    hidden, c_out = self.w_se2.shape[0], self.out_channels
    w_dw = self.w_dw[:, :hidden].t().reshape(hidden, 1, 3, 3)
    d = f.silu(f.conv2d(e, w_dw, self.b_dw[:hidden], 1, 1, groups=hidden)).half().float()
    b_se1 = self.b_se1[: self.w_se1.shape[0]]  # padded past the squeeze width (mbconv.SE1_BIAS_MIN)
    scale = torch.sigmoid(f.silu(d.mean((2, 3)) @ self.w_se1.t() + b_se1) @ self.w_se2.t() + self.b_se2)
    scaled = (d * scale[:, :, None, None]).half().float()
    y = f.conv2d(scaled, self.w_proj[:c_out, :hidden].float()[:, :, None, None], self.b_proj[:c_out])
    return y.half().contiguous(memory_format=torch.channels_last)


def test_the_check_before_timing_compares_the_unit_with_both_blocks(monkeypatch):
    """`perfmodel bench --backend cuda_kernels` on the CPU with the unit emulated: check_blocks runs the unit's
    reference as features.0 then features.1.0 (reference_paths) in float64, so a unit computing only the stem, or
    the block without the stem, would fail it."""
    from mbconv_helpers import emulated_mbconv
    from perfmodel.bench import fused_model

    monkeypatch.delenv(sm.SWITCH, raising=False)  # on by default
    monkeypatch.delenv(es.SWITCH, raising=False)
    monkeypatch.setenv(eh.SWITCH, "0")  # the fused head has no CPU emulation here
    monkeypatch.setattr(sm.FusedStemMBConv, "forward", _emulated_unit)
    monkeypatch.setattr(cuda_kernels.FusedMBConv, "forward", emulated_mbconv)  # the other 15, as test_mbconv_kernels
    from mbconv_helpers import fresh_model

    model = fresh_model("efficientnet_b0").half().to(memory_format=torch.channels_last)  # realistic BN statistics
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3)).half()
    _, info = fused_model(model, [x.contiguous(memory_format=torch.channels_last)])
    assert info["fused_blocks"]["StemMBConv"] == 1 and info["fused_blocks"]["MBConv"] == 15
    rows = info["check"]["blocks"]
    assert info["check"]["blocks_checked"] == 16 and "features.0" in rows
    assert 1e-4 < rows["features.0"]["torch_relative_error"] < 1e-2
    assert 0 < rows["features.0"]["relative_error"] <= 2 * rows["features.0"]["torch_relative_error"]


def test_compiles_without_spills():
    import os
    import subprocess

    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    if not nvcc.exists():
        pytest.skip("nvcc not found (set CUDA_HOME)")
    cmd = [str(nvcc), "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v", f"-I{CSRC}", "-c",
           str(CSRC / "effnet_stem_dw.cu"), "-o", "/dev/null"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout + result.stderr
    assert "stem_dw_kernel" in text
    assert re.search(r"Used (\d+) registers", text) and int(re.search(r"Used (\d+) registers", text).group(1)) <= 128
    assert " 0 bytes spill stores, 0 bytes spill loads" in text


# ---- the kernel, transliterated ----

def _pair_offset(k: int, pitch: int) -> int:
    ky, t = (k // 10, k % 10) if k < 30 else (2, 8)
    return ky * pitch + t


def _keep(k: int) -> tuple[bool, bool]:
    return (k < 30, k < 30 and k % 10 != 8)


def emulate(x, w, b, w_dw, b_dw, seg=4):
    """x [N, H, W, 3], w [32, 3, 3, 3], b [32], w_dw [32, 3, 3], b_dw [32] (float64): the kernel's D [N, Ho, Wo,
    32] (SiLU in float64, no rounding), how often each D value was written, and partial [N, bands, 32]; depthwise
    items of `seg` output rows (4, or 8: the whole band, CUDA_KERNELS_STEM_DW_SEG=8) and slots as each form computes
    them."""
    n_img, H, W, _ = x.shape
    C, R, ER = 32, sm.ROWS, sm.ROWS + 2
    Ho, Wo = (H + 1) // 2, (W + 1) // 2
    WE, pitch, w0 = sm.e_cols(Wo), es.window_pitch_v2(W), es.WINDOW_OFFSET_V2
    bands = -(-Ho // R)
    bm = conv1_matrix(torch.from_numpy(w)).double().numpy()
    silu = lambda v: v / (1.0 + np.exp(-v))  # noqa: E731
    D = np.full((n_img, Ho, Wo, C), np.nan)
    writes = np.zeros(D.shape, dtype=np.int64)
    partial = np.full((n_img, bands, C), np.nan)
    for n in range(n_img):
        for band in range(bands):
            oy0 = band * R
            rows, sy0 = min(R, Ho - oy0), oy0 - 1
            iy0 = 2 * sy0 - 1
            win = np.full(sm.window_halves(W), np.nan)  # 1. (the per-half path; the 16-byte one is the stem's)
            for r in range(2 * ER + 1):
                iy = iy0 + r
                for c in range(3 * W + 7):
                    i = c - 3
                    win[r * pitch + w0 + c] = x[n, iy].reshape(-1)[i] if 0 <= iy < H and 0 <= i < 3 * W else 0.0
            E = np.full(ER * WE * C, np.nan)
            for r in range(ER):  # E's columns outside the stem's output
                for col in [0] + list(range(Wo + 1, WE)):
                    E[(r * WE + sm.e_slot(col)) * C: (r * WE + sm.e_slot(col)) * C + C] = 0.0
            for px in range(ER * Wo):  # 2. the stem's GEMM by the kernel's offsets and masks
                er, sx = divmod(px, Wo)
                base = w0 + 2 * er * pitch + 6 * sx
                sy = sy0 + er
                for c in range(C):
                    acc = 0.0
                    for k in range(0, 32, 2):
                        lo, hi = _keep(k)
                        o = base + _pair_offset(k, pitch)
                        acc += (win[o] * bm[c, k] if lo else 0.0) + (win[o + 1] * bm[c, k + 1] if hi else 0.0)
                    E[(er * WE + sm.e_slot(sx + 1)) * C + c] = silu(acc + b[c]) if 0 <= sy < Ho else 0.0
            ngroups, nseg = -(-Wo // 4), -(-rows // seg)  # 3. the depthwise's items, thread (pair, group)
            red = np.zeros((16, C))
            for group in range(16):
                for item in range(group, nseg * ngroups, 16):
                    s_i, og = divmod(item, ngroups)
                    orow0, ow0 = seg * s_i, 4 * og
                    vrows, valid = min(seg, rows - orow0), min(4, Wo - ow0)
                    # the slot of column ow0 + xx: e_slot, or (whole-band items) ow0 + (xx ^ (og & 1 ^ xx >> 2))
                    slot = [sm.e_slot(ow0 + xx) if seg == 4 else ow0 + (xx ^ ((og & 1) ^ (xx >> 2))) for xx in range(6)]
                    block = np.array([[E[((orow0 + er) * WE + slot[xx]) * C: ((orow0 + er) * WE + slot[xx]) * C + C]
                                       for xx in range(6)] for er in range(seg + 2)])  # every value the thread reads
                    assert not np.isnan(block).any()
                    for o in range(vrows):
                        for u in range(valid):
                            v = silu(np.einsum("yxc,cyx->c", block[o: o + 3, u: u + 3], w_dw) + b_dw)
                            D[n, oy0 + orow0 + o, ow0 + u] = v
                            writes[n, oy0 + orow0 + o, ow0 + u] += 1
                            red[group] += v
            partial[n, band] = red.sum(0)
    return D, writes, partial


@pytest.mark.parametrize("seg", [4, 8])
@pytest.mark.parametrize("n_img,H,W", [(1, 16, 16), (2, 17, 9), (1, 21, 30), (1, 40, 8)])
def test_transliteration_equals_the_convolutions(n_img, H, W, seg):
    rng = np.random.default_rng(H * 100 + W)
    x = rng.standard_normal((n_img, H, W, 3)).astype(np.float16).astype(np.float64)
    w = rng.standard_normal((32, 3, 3, 3)).astype(np.float16).astype(np.float64)
    b, w_dw, b_dw = rng.standard_normal(32), rng.standard_normal((32, 3, 3)), rng.standard_normal(32)
    D, writes, partial = emulate(x, w, b, w_dw, b_dw, seg)
    assert (writes == 1).all()
    f = torch.nn.functional
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)
    e = f.silu(f.conv2d(xt, torch.from_numpy(w), torch.from_numpy(b), stride=2, padding=1))
    d = f.silu(f.conv2d(e, torch.from_numpy(w_dw)[:, None], torch.from_numpy(b_dw), padding=1, groups=32))
    want = d.permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(D, want, rtol=0, atol=1e-10)
    Ho = want.shape[1]
    for band in range(partial.shape[1]):
        np.testing.assert_allclose(partial[:, band], want[:, 8 * band: min(8 * band + 8, Ho)].sum((1, 2)), atol=1e-9)


def test_the_two_options_in_the_source():
    """CUDA_KERNELS_STEM_DW_BC=1 (the stem's bias and halving in its MMA, off unless set) and CUDA_KERNELS_STEM_DW_SEG
    (whole-band depthwise items unless "4": the default since session 20); the four builds; the BC form's algebra and
    the whole-band slot formula."""
    src = (CSRC / "effnet_stem_dw.cu").read_text()
    lane = (CSRC / "effnet_stem.cuh").read_text()
    assert 'std::getenv("CUDA_KERNELS_STEM_DW_BC")' in src and 'std::getenv("CUDA_KERNELS_STEM_DW_SEG")' in src
    assert 'const bool bc = bc_env != nullptr && std::strcmp(bc_env, "1") == 0;' in src
    assert 'const bool band = seg_env == nullptr || std::strcmp(seg_env, "4") != 0;' in src
    for bc in ("true", "false"):
        for seg in ("kStemDwRows", "4"):
            assert f"stem_dw_kernel<4, {bc}, {seg}>" in src
    # BC: B and the bias halved, the first k step's C the halved bias, SiLU(v) as h + h tanh(h) of h = v / 2
    first_step = ("if (BC && s == 0)\n          bf::mma_m16n8k16_c(acc[nt], a, b[nt][s][0], b[nt][s][1], bi[nt][0], "
                  "bi[nt][1]);")
    assert first_step in lane
    assert "bi[nt][0] *= 0.5f;" in lane and "w = __hmul2(w, half);" in lane
    v = np.linspace(-12, 12, 97)
    h = v / 2
    np.testing.assert_allclose(h + h * np.tanh(h), v / (1 + np.exp(-v)), rtol=1e-12, atol=1e-15)
    # whole-band items: column ow0 + x (ow0 = 4 og) sits in slot ow0 + (x ^ (og & 1 ^ x >> 2)), e_slot's value
    assert "ow0 + (x ^ (sbit ^ (x >> 2)))" in src and "const int sbit = og & 1;" in src
    for og in range(64):
        for x in range(6):
            assert 4 * og + (x ^ ((og & 1) ^ (x >> 2))) == sm.e_slot(4 * og + x)


# ---- GPU ----

def _pair_case(n: int, H: int, W: int, seed: int = 0):
    from mbconv_helpers import fresh_model

    torch.manual_seed(seed)
    model = fold_batchnorm(fresh_model("efficientnet_b0"))
    stem, block = model.features[0].cuda(), model.features[1][0].cuda()
    x = torch.randn(n, 3, H, W, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    return stem, block, x


@pytest.mark.cuda
@pytest.mark.parametrize("options", [{}, {"CUDA_KERNELS_STEM_DW_BC": "1"}, {"CUDA_KERNELS_STEM_DW_SEG": "4"},
                                     {"CUDA_KERNELS_STEM_DW_BC": "1", "CUDA_KERNELS_STEM_DW_SEG": "4"}],
                         ids=["default", "bc", "seg4", "bc_seg4"])
@pytest.mark.parametrize("n,H,W", [(128, 224, 224), (1, 224, 224), (3, 17, 23), (2, 16, 448), (5, 33, 40)])
def test_against_float64(n, H, W, options, monkeypatch):
    from perfmodel.harness import relative_error
    from torch.profiler import ProfilerActivity, profile

    for name, value in options.items():
        monkeypatch.setenv(name, value)
    stem, block, x = _pair_case(n, H, W)
    unit = sm.FusedStemMBConv(stem, block).cuda()
    pair = nn.Sequential(copy.deepcopy(stem), copy.deepcopy(block))
    with torch.no_grad():
        want = copy.deepcopy(pair).double()(x.double())
        torch_fp16 = pair.half()(x)
        out = torch.full_like(torch_fp16, float("nan")).contiguous(memory_format=torch.channels_last)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            got = sm.run(x, unit, out=out)
            torch.cuda.synchronize()
    names = " ".join(e.name for e in prof.events())
    bc, seg = "CUDA_KERNELS_STEM_DW_BC" in options, 4 if "CUDA_KERNELS_STEM_DW_SEG" in options else 8
    assert f"stem_dw_kernel<4, {str(bc).lower()}, {seg}>" in names, names[:400]
    assert got.data_ptr() == out.data_ptr() and torch.isfinite(got).all()
    err, ref_err = relative_error(got, want), relative_error(torch_fp16, want)
    assert ref_err > 0 and err <= 2 * ref_err, (err, ref_err)


@pytest.mark.cuda
def test_efficientnet_b0_with_the_unit_swapped_in(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {sm.SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
    check_fused_b0(monkeypatch, {sm.SWITCH: "0"}, {"EffNetStem": 1, "MBConv": 16}, 17)
