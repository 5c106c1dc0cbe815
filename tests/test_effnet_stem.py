"""EfficientNet's fused stem (cuda_kernels/effnet_stem.py, csrc/effnet_stem.cu; on unless CUDA_KERNELS_EFFNET_STEM=0,
since session 15's measurement).

CPU: which modules it takes (torchvision's B0 / B3 / B4 stems, folded) and why it refuses others, the switch, the
mirrors of the source's constants, and the kernel transliterated in float64: the band's window (zero padding, even
pitch), each thread's k-pair offsets into it (the pad pairs k >= 30 included), the mma fragments' rows and the
epilogue's map, against the convolution computed directly. GPU (@pytest.mark.cuda): every width against float64
(<= 2x PyTorch fp16's error, poisoned output), odd sizes, batch 1, W = 448, and B0 with the stem swapped in."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

import cuda_kernels
from cuda_kernels import effnet_stem as es
from cuda_kernels.stem import conv1_matrix

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
HEADER = (CSRC / "effnet_stem.h").read_text()
SOURCE = (CSRC / "effnet_stem.cu").read_text() + (CSRC / "effnet_stem.cuh").read_text()  # the kernel and its pieces


def _folded_stem(name: str) -> nn.Module:
    from perfmodel.zoo import fold_batchnorm

    return fold_batchnorm(getattr(torchvision.models, name)().eval()).features[0]


def test_mirrors_match_the_source():
    assert re.search(r"kRows = (\d+);", HEADER).group(1) == str(es.BAND_ROWS) == "8"
    assert re.search(r"kMaxWidth = (\d+);", HEADER).group(1) == str(es.MAX_WIDTH) == "448"
    assert "return ((width + 2) * 3 + 1) & ~1;" in HEADER and "(2 * kRows + 1) * window_pitch(width) * 2" in HEADER
    for c in es.WIDTHS:
        assert f"if (C == {c}) return launch_nt<{c // 8}, V2>" in SOURCE
    # the transliteration's _pair_offset and _keep
    assert "const int ky = k < 30 ? k / 10 : 2, t = k < 30 ? k - 10 * (k / 10) : 8;" in SOURCE
    assert "keep[s][h] = k >= 30 ? 0u : (k % 10 == 8 ? 0x0000FFFFu : 0xFFFFFFFFu);" in SOURCE
    assert "const int i = c - 3;" in SOURCE and "base[h] = w0 + 2 * oy * pitch + 6 * ox;" in SOURCE
    # 224 wide: (226 x 3 = 678 halves) x 17 rows x 2 bytes; 448 wide still within 48 KB (no opt-in)
    assert es.window_pitch(224) == 678 and es.smem_bytes(224) == 17 * 678 * 2 == 23_052
    assert es.window_pitch(7) == 28 and es.smem_bytes(es.MAX_WIDTH) == 17 * 1350 * 2 <= 48 * 1024


def test_version_2_mirrors_match_the_source():
    assert re.search(r"kWindowOffsetV2 = (\d+);", HEADER).group(1) == str(es.WINDOW_OFFSET_V2) == "4"
    assert "return (3 * width + 7 + 7) & ~7;" in HEADER
    assert "return (c / 2 + 4) % 8 == 4 ? c / 2 + 4 : c / 2 + 8;" in HEADER
    assert "return (2 * kRows + 1) * window_pitch_v2(width) + 2 * kWindowOffsetV2;" in HEADER
    assert "return window_halves_v2(width) * 2 + 8 * 16 * stage_words(c) * 4;" in HEADER
    assert 'std::getenv("CUDA_KERNELS_EFFNET_STEM_V2")' in SOURCE and es.V2_SWITCH == "CUDA_KERNELS_EFFNET_STEM_V2"
    assert "return v == nullptr || !(v[0] == '0' && v[1] == '\\0');" in SOURCE  # version 2 unless the switch is 0
    # 224 wide: 3 x 224 + 7 = 679 -> 680 halves a row; 17 rows + 8 halves, then 8 warps x 16 rows x 20 words
    assert es.window_pitch_v2(224) == 680 and es.smem_bytes_v2(224, 32) == (17 * 680 + 8) * 2 + 8 * 16 * 20 * 4 \
        == 33_376
    # staging rows of C / 2 + 4 (32: 20, 48: 28) or + 8 (40: 28) words: a quad's 8 rows on distinct bank groups
    assert [es.stage_words(c) for c in es.WIDTHS] == [20, 28, 28]
    for c in es.WIDTHS:
        banks = {(g * es.stage_words(c) + q) % 32 for g in range(8) for q in range(4)}
        assert len(banks) == 32, c
    # the window's 16-byte pieces start on 16-byte boundaries: row r's word 4 t + 2 at half r pitch + 4 + 8 t + 4
    for w in (8, 224, 448):
        assert es.window_pitch_v2(w) % 8 == 0 and (es.WINDOW_OFFSET_V2 + 4) % 8 == 0
    # past ~330 pixels the window and stages need the opt-in above 48 KB (the launcher asks for it)
    assert es.smem_bytes_v2(es.MAX_WIDTH, 48) == (17 * 1352 + 8) * 2 + 8 * 16 * 28 * 4 > 48 * 1024
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize" in SOURCE


@pytest.mark.parametrize("name,width", [("efficientnet_b0", 32), ("efficientnet_b2", 32), ("efficientnet_b3", 40),
                                        ("efficientnet_b4", 48)])
def test_it_takes_torchvisions_stems(name, width):
    stem = _folded_stem(name)
    assert es.is_stem(stem) and es.unsupported(stem) is None and stem[0].out_channels == width
    fused = es.FusedEffNetStem.from_block(stem)
    assert fused.out_channels == width and fused.wb.numel() == width // 8 * 2 * 32 * 2


def test_it_refuses_with_a_reason():
    unfolded = torchvision.models.efficientnet_b0().features[0]
    assert es.is_stem(unfolded) and "fold batchnorm" in es.unsupported(unfolded)
    v2 = _folded_stem("efficientnet_v2_s")  # 3 -> 24
    assert es.is_stem(v2) and es.unsupported(v2) == "C 3 -> 24 (the kernel has (32, 40, 48))"
    mobilenet = torchvision.models.mobilenet_v3_small().features[0]  # Hardswish: not this stem
    assert not es.is_stem(mobilenet)
    head = _folded_stem("efficientnet_b0")
    head[0] = nn.Conv2d(3, 32, 3, stride=1, padding=1)
    assert "stride (1, 1)" in es.unsupported(head)
    with pytest.raises(ValueError, match="cannot run this block"):
        es.FusedEffNetStem.from_block(head)


def test_the_switch_is_on_by_default(monkeypatch):
    from cuda_kernels import stem_mbconv
    from perfmodel.zoo import fold_batchnorm

    monkeypatch.delenv(es.SWITCH, raising=False)
    monkeypatch.setenv(stem_mbconv.SWITCH, "0")  # the stem alone, not in one unit with block 1.0 (test_stem_mbconv)
    model = fold_batchnorm(torchvision.models.efficientnet_b0().eval())
    swap = cuda_kernels.replace_blocks(model)
    assert swap.fused["EffNetStem"] == 1 and swap.fused["MBConv"] == 16 and not swap.fallback
    assert isinstance(model.features[0], es.FusedEffNetStem)
    monkeypatch.setenv(es.SWITCH, "0")
    model = fold_batchnorm(torchvision.models.efficientnet_b0().eval())
    swap = cuda_kernels.replace_blocks(model)
    assert "EffNetStem" not in swap.fused and not isinstance(model.features[0], es.FusedEffNetStem)


# ---- the kernel, transliterated ----

def _pair_offset(k: int, pitch: int) -> int:
    """effnet_stem.cu pair_offset."""
    ky, t = (k // 10, k % 10) if k < 30 else (2, 8)
    return ky * pitch + t


def _keep(k: int) -> tuple[bool, bool]:
    """Which halves of the A pair (k, k + 1) effnet_stem.cu keeps: none for k >= 30, the low one where k + 1 is a
    row's pad (9, 19, 29)."""
    return (k < 30, k < 30 and k % 10 != 8)


def _window_v1(x: np.ndarray, n: int, iy0: int, rows: int) -> np.ndarray:
    """effnet_stem.cu step 1, version 1: one half per lane, zero outside the image."""
    _, H, W, _ = x.shape
    pitch = es.window_pitch(W)
    win = np.full((2 * rows + 1) * pitch, np.nan)
    for r in range(2 * rows + 1):
        iy = iy0 + r
        for c in range(pitch):
            i = c - 3
            win[r * pitch + c] = x[n, iy].reshape(-1)[i] if 0 <= iy < H and 0 <= i < 3 * W else 0.0
    return win


def _window_v2(x: np.ndarray, n: int, iy0: int, rows: int, vector: bool) -> np.ndarray:
    """effnet_stem.cu step 1, version 2. Unwritten halves stay NaN: a read of one that is not masked shows up as a
    NaN output. `vector`: the 16-byte path (W % 8 == 0), each piece's words rebuilt as __byte_perm(a, b, 0x5432) =
    (high half of a, low half of b), the row's first two words and the word after its last piece apart."""
    _, H, W, _ = x.shape
    pitch, w0 = es.window_pitch_v2(W), es.WINDOW_OFFSET_V2
    win = np.full(es.window_halves_v2(W), np.nan)
    for r in range(2 * rows + 1):
        iy = iy0 + r
        inside = 0 <= iy < H
        row = x[n, iy].reshape(-1) if inside else np.zeros(3 * W)
        at = r * pitch + w0
        if not vector:
            for c in range(3 * W + 7):
                i = c - 3
                win[at + c] = row[i] if inside and 0 <= i < 3 * W else 0.0
            continue
        pieces = 3 * W // 8
        for t in range(pieces):
            v = row[8 * t: 8 * t + 8]  # words 4 t .. 4 t + 3 as halves (lo, hi)
            nxt = row[8 * t + 8: 8 * t + 10] if t + 1 < pieces else np.zeros(2)
            words = [(v[2 * u], v[2 * u + 1]) for u in range(4)] + [(nxt[0], nxt[1])]
            for u in range(4):  # window word 4 t + 2 + u = (hi of word u, lo of word u + 1)
                win[at + 8 * t + 4 + 2 * u] = words[u][1]
                win[at + 8 * t + 4 + 2 * u + 1] = words[u + 1][0]
        win[at: at + 4] = [0.0, 0.0, 0.0, row[0]]  # row[0], row[1] words
        win[at + 3 * W + 4: at + 3 * W + 6] = 0.0  # the word after the last piece
    return win


def emulate(x: np.ndarray, w: np.ndarray, b: np.ndarray, version: int = 1,
            vector: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """x [N, H, W, 3], w [C, 3, 3, 3] (fp16 values), b [C]: the kernel's output [N, Ho, Wo, C] before the SiLU and
    rounding, and how often each output was written. Version 2 writes through the warp's staging tile."""
    n_img, H, W, _ = x.shape
    C = w.shape[0]
    NT = C // 8
    Ho, Wo = (H + 1) // 2, (W + 1) // 2
    R = es.BAND_ROWS
    pitch, w0 = (es.window_pitch(W), 0) if version == 1 else (es.window_pitch_v2(W), es.WINDOW_OFFSET_V2)
    bm = conv1_matrix(torch.from_numpy(w)).double().numpy()  # [C, 32]: the B matrix pack_conv1 packs
    out = np.full((n_img, Ho, Wo, C), np.nan)
    writes = np.zeros((n_img, Ho, Wo, C), dtype=np.int64)
    for n in range(n_img):
        for band in range(-(-Ho // R)):
            oy0 = band * R
            rows = min(R, Ho - oy0)
            iy0 = 2 * oy0 - 1
            win = _window_v1(x, n, iy0, rows) if version == 1 else _window_v2(x, n, iy0, rows, vector)
            P = rows * Wo
            band_out = out[n, oy0: oy0 + rows].reshape(-1)  # the band's output, contiguous (a view)
            band_writes = writes[n, oy0: oy0 + rows].reshape(-1)
            for tile in range(-(-P // 16)):
                stage = np.full((16, es.stage_words(C) * 2), np.nan)  # halves
                for lane in range(32):
                    g, q = lane // 4, lane % 4
                    base = []
                    for h in range(2):
                        p = min(tile * 16 + g + 8 * h, P - 1)
                        base.append(w0 + 2 * (p // Wo) * pitch + 6 * (p % Wo))
                    for h in range(2):  # the accumulator rows this lane holds
                        p = tile * 16 + g + 8 * h
                        if version == 1 and p >= P:
                            continue
                        for nt in range(NT):
                            for u in range(2):
                                col = nt * 8 + 2 * q + u
                                acc = 0.0
                                # every k of the GEMM: the lanes of the quad hold pairs 2 q' (+ 8): all 32 k's
                                for s in range(2):
                                    for qq in range(4):
                                        for hh in range(2):
                                            k = 16 * s + 2 * qq + 8 * hh
                                            o = base[h] + _pair_offset(k, pitch)
                                            lo, hi = _keep(k)  # the A register's halves the kernel keeps
                                            acc += (win[o] * bm[col, k] if lo else 0.0) + \
                                                (win[o + 1] * bm[col, k + 1] if hi else 0.0)
                                if version == 1:
                                    band_out[p * C + col] = acc + b[col]
                                    band_writes[p * C + col] += 1
                                else:  # staging word (g + 8 h) stage_words + 4 nt + q, half u
                                    stage[g + 8 * h, 2 * (4 * nt + q) + u] = acc + b[col]
                if version == 2:  # 16-byte piece c: pixel c / NT, channels 8 (c % NT) ..
                    for lane in range(32):
                        for c in range(lane, 16 * NT, 32):
                            row, part = c // NT, c % NT
                            p = tile * 16 + row
                            if p < P:
                                band_out[p * C + 8 * part: p * C + 8 * part + 8] = stage[row, 8 * part: 8 * part + 8]
                                band_writes[p * C + 8 * part: p * C + 8 * part + 8] += 1
    return out, writes


@pytest.mark.parametrize("version,vector", [(1, False), (2, False), (2, True)])
@pytest.mark.parametrize("n_img,H,W,C", [(1, 17, 9, 32), (2, 4, 5, 40), (1, 1, 1, 48), (1, 18, 3, 32),
                                         (1, 5, 8, 48), (1, 19, 16, 40)])
def test_transliteration_equals_the_convolution(n_img, H, W, C, version, vector):
    if vector and W % 8:
        pytest.skip("the 16-byte window path needs W % 8 == 0")
    rng = np.random.default_rng(H * 100 + W)
    x = rng.standard_normal((n_img, H, W, 3)).astype(np.float16).astype(np.float64)
    w = rng.standard_normal((C, 3, 3, 3)).astype(np.float16).astype(np.float64)
    b = rng.standard_normal(C)
    got, writes = emulate(x, w, b, version, vector)
    assert (writes == 1).all()
    want = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w),
                                      torch.from_numpy(b), stride=2, padding=1).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def test_a_non_finite_pixel_reaches_only_the_outputs_whose_window_holds_it():
    """The pad pair (8, 9) of output ox reads pixel 2 ox + 2's channel 0 (window half 6 ox + 9 = 3 (ix + 1) + ci),
    outside its 3x3 window (2 ox - 1 .. 2 ox + 1): masked, so an Inf there stays out of ox (PyTorch's convolution
    agrees) and reaches ox + 1, whose window holds it."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 3, 9, 3)).astype(np.float16).astype(np.float64)
    x[0, 1, 2, 0] = np.inf  # row 1, pixel 2, channel 0: read by output column 0's pad pair, in column 1's window
    w = np.abs(rng.standard_normal((32, 3, 3, 3))).astype(np.float16).astype(np.float64)
    b = rng.standard_normal(32)
    got, _ = emulate(x, w, b)
    want = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w),
                                      torch.from_numpy(b), stride=2, padding=1).permute(0, 2, 3, 1).numpy()
    assert np.isfinite(got[0, :, 0]).all() and np.isinf(got[0, 0, 1]).all()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def test_the_pad_pairs_stay_in_the_window():
    """The last pixel's last pair (k = 30: ky 2, t 8-9) at odd W reads the window row's padding half."""
    for W in (1, 3, 223, 224, 447, 448):
        pitch, Wo = es.window_pitch(W), (W + 1) // 2
        last = 2 * (es.BAND_ROWS - 1) * pitch + 6 * (Wo - 1) + _pair_offset(30, pitch) + 1
        assert last < (2 * es.BAND_ROWS + 1) * pitch
        assert 6 * (Wo - 1) + 9 < pitch  # within its own row


def test_compiles_without_spills():
    import os
    import subprocess

    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    if not nvcc.exists():
        pytest.skip("nvcc not found (set CUDA_HOME)")
    cmd = [str(nvcc), "-std=c++17", "-O3", "-gencode=arch=compute_80,code=sm_80",
           "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v", f"-I{CSRC}", "-c", str(CSRC / "effnet_stem.cu"),
           "-o", "/dev/null"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "spill stores" in line]
    assert len(lines) >= 3 and all(" 0 bytes spill stores, 0 bytes spill loads" in line for line in lines)


# ---- GPU ----

def _gpu_case(C: int, n: int, H: int, W: int, seed: int = 0):
    torch.manual_seed(seed)
    conv = nn.Conv2d(3, C, 3, stride=2, padding=1).cuda()
    with torch.no_grad():
        conv.weight.mul_(2.0)
    stem = nn.Sequential(conv, nn.Identity(), nn.SiLU())
    x = torch.randn(n, 3, H, W, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    return stem, x


GPU_SHAPES = [(32, 128, 224, 224), (32, 1, 224, 224), (40, 3, 300, 300), (48, 2, 380, 380), (32, 5, 17, 23),
              (32, 1, 1, 1), (48, 2, 9, 448), (40, 2, 33, 448), (32, 3, 20, 16)]


@pytest.mark.cuda
@pytest.mark.parametrize("version", ["0", "1"])  # CUDA_KERNELS_EFFNET_STEM_V2
@pytest.mark.parametrize("C,n,H,W", GPU_SHAPES)
def test_against_float64(C, n, H, W, version, monkeypatch):
    from perfmodel.harness import relative_error

    monkeypatch.setenv(es.V2_SWITCH, version)
    stem, x = _gpu_case(C, n, H, W)
    weights = es.prepare_weights(stem[0].weight, stem[0].bias)
    want = es.reference(x.double(), stem[0].weight.double(), stem[0].bias.double())
    torch_fp16 = es.reference(x, stem[0].weight.half(), stem[0].bias.half())
    out = torch.full_like(torch_fp16, float("nan")).contiguous(memory_format=torch.channels_last)
    got = es.run(x, weights, out=out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr() and torch.isfinite(got).all()
    err, ref_err = relative_error(got, want), relative_error(torch_fp16, want)
    assert err <= 2 * ref_err, (err, ref_err)
    again = es.run(x, weights)
    assert torch.equal(got, again)


@pytest.mark.cuda
def test_efficientnet_b0_with_the_stem_swapped_in(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {es.SWITCH: "1", "CUDA_KERNELS_EFFNET_STEM_DW": "0"}, {"EffNetStem": 1}, 17)


@pytest.mark.cuda
@pytest.mark.parametrize("C,n,H,W", GPU_SHAPES)
def test_version_2_gives_version_1s_values(C, n, H, W, monkeypatch):
    """Version 2 moves data, not arithmetic (the same mma operands, the same epilogue), so version 1's bits; the
    profiler shows each version's own instantiation ran (stem_kernel<NT, false / true>): two different kernels."""
    from torch.profiler import ProfilerActivity, profile

    stem, x = _gpu_case(C, n, H, W, seed=1)
    weights = es.prepare_weights(stem[0].weight, stem[0].bias)
    runs = {}
    for version in ("0", "1"):
        monkeypatch.setenv(es.V2_SWITCH, version)
        out = torch.full((n, C, (H + 1) // 2, (W + 1) // 2), float("nan"), device="cuda", dtype=torch.float16)
        out = out.contiguous(memory_format=torch.channels_last)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            es.run(x, weights, out=out)
            torch.cuda.synchronize()
        names = " ".join(e.name for e in prof.events())
        assert f"stem_kernel<{C // 8}, {'true' if version == '1' else 'false'}>" in names, names[:400]
        runs[version] = out
    assert torch.isfinite(runs["1"]).all() and torch.equal(runs["0"], runs["1"])
