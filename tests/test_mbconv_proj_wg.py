"""The MBConv projection on Hopper warpgroup MMAs (csrc/mbconv_proj_wg.cu; CUDA_KERNELS_PROJ_WG=off|late|all|ring|
unstaged, unstaged in version 11; CUDA_KERNELS_PROJ_WG_SPLIT=0|1|auto, auto: over two warpgroups where its tiles are at
most the SMs; NOTES.md, "The projection on warpgroup MMAs" and "Session 21").

CPU: the Python mirrors against the source's constants and literal arithmetic, which blocks of B0 / B2 it serves,
ptxas (no spills, the wgmma shapes present), and the kernel transliterated in float64: every CTA's chunks as the
tensor memory accelerator writes them (128-byte swizzle, zeros past the tensor), B read back by the descriptor's rule
(address bits 4-6 XOR bits 7-9), A by the kernel's ldmatrix addresses into wgmma's register layout, scaled by each
row's image (immediate offsets in whole chunks, clamped columns in the last) and rounded to fp16, the epilogue's map;
against the projection computed directly. GPU (@pytest.mark.cuda): every B0 / B2 shape it serves at batch 1, 5 and
128 against float64 (<= 2x PyTorch fp16's error, poisoned output), odd sizes, and against project_v3 / v10 (close, not
bitwise: another summation order) with the profiler's proof that it ran."""

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_proj_wg.cu").read_text()


def _constant(name: str) -> int:
    return int(re.search(rf"\b{name} = (\d+)", SOURCE).group(1))


def test_mirrors_match_the_source():
    assert (_constant("kProjWgRows"), _constant("kProjWgK")) == (mb.PROJECT_WG_ROWS, mb.PROJECT_WG_K) == (64, 64)
    stages = "return mw == 2 ? 4 : ks == 1 ? (bn >= 160 || (opt & kProjWgStages3) ? 3 : 4) : (bn > 120 ? 3 : 2);"
    assert stages in SOURCE  # project_wg_stages
    assert "(bn + mw * kProjWgRows) * 128 + 8" in SOURCE  # project_wg_smem_bytes
    assert 'std::getenv("CUDA_KERNELS_PROJ_WG_M128")' in SOURCE and mb.PROJECT_WG_M128_SWITCH == "CUDA_KERNELS_PROJ_WG_M128"
    built = tuple(int(n) for n in re.findall(r"bn == (\d+)", SOURCE))
    assert built == mb.PROJECT_WG_SHAPES
    gen = (CSRC / "gen_wgmma.py").read_text()
    wrappers = (CSRC / "wgmma.cuh").read_text()
    for n in mb.PROJECT_WG_SHAPES:
        assert f"case {n}: return launch_project_wg_bn<{n}>" in SOURCE
        assert f"void wgmma_m64n{n}k16_rs(float (&d)[{n // 2}]" in wrappers, n
        assert str(n) in gen
    assert 'std::getenv("CUDA_KERNELS_PROJ_WG")' in SOURCE and mb.PROJECT_WG_SWITCH == "CUDA_KERNELS_PROJ_WG"
    assert 'std::getenv("CUDA_KERNELS_PROJ_WG_OPT")' in SOURCE and mb.PROJECT_WG_OPT_SWITCH == "CUDA_KERNELS_PROJ_WG_OPT"
    assert 'std::getenv("CUDA_KERNELS_PROJ_WG_SPLIT")' in SOURCE
    assert mb.PROJECT_WG_SPLIT_SWITCH == "CUDA_KERNELS_PROJ_WG_SPLIT"
    assert "return tiles * (p.C_out / bn) <= sms[dev];" in SOURCE  # project_wg_splits mirrors it
    modes = re.findall(r'std::strcmp\(v, "(\w+)"\) == 0\) return (\d)', SOURCE)
    assert [m for m, _ in modes] == list(mb.PROJECT_WG_MODES[1:]) and [int(i) for _, i in modes] == [1, 2, 3, 4]
    assert "return (mode == 3 && !project_v9_staged_fits(p)) || (mode == 4 && !project_v9s_fits(p));" in SOURCE
    assert (_constant("kProjWgPrefetchX"), _constant("kProjWgOverlap"), _constant("kProjWgPrefetchL2"),
            _constant("kProjWgStages3")) == \
        (mb.PROJECT_WG_PREFETCH_X, mb.PROJECT_WG_OVERLAP, mb.PROJECT_WG_PREFETCH_L2, mb.PROJECT_WG_STAGES3)
    assert _constant("kProjWgProducer") == mb.PROJECT_WG_PRODUCER == 64
    assert "return kProjWgThreads + ((opt & kProjWgProducer) ? 32 : 0);" in SOURCE  # project_wg_threads
    assert [int(o) for o in re.findall(r"case (\d+): return launch_project_wg_opt<BN, \1>", SOURCE)] == \
        sorted(mb.PROJECT_WG_OPTIONS[1:])
    assert 'asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\\n"' in (CSRC / "ptx_sm90.cuh").read_text()
    assert _constant("kProjWgOptDefault") == mb.PROJECT_WG_OPT_DEFAULT == 9
    cu = (CSRC / "mbconv.cu").read_text()
    assert "if (project_wg_applies(p, project_wg_mode(version == 11))) return launch_project_wg(p, stream, pdl);" in cu
    assert "if (v == nullptr) return v11 ? 4 : 0;" in SOURCE and mb.PROJECT_WG_DEFAULT_MODE == mb.PROJECT_WG_MODES[4]
    from cuda_kernels._build import MBCONV_SOURCES

    assert "mbconv_proj_wg.cu" in MBCONV_SOURCES


def test_tile_widths_and_shared_memory_by_hand():
    # C_out up to 256 is one tile; 320 and 352 (B0 / B2's last block) are two of 160 / 176; no shape built: none
    assert [mb.project_wg_bn(c) for c in (16, 24, 40, 48, 80, 88, 112, 120, 192, 208, 320, 352, 32, 264, 360)] == \
        [16, 24, 40, 48, 80, 88, 112, 120, 192, 208, 160, 176, 0, 0, 0]
    # 1 KB slack + stages x (B: bn rows x 128 bytes + A: 64 rows x 128 bytes + an 8-byte mbarrier)
    assert mb.project_wg_smem_bytes(192) == 1024 + 3 * (192 * 128 + 64 * 128 + 8) == 99_352
    assert mb.project_wg_smem_bytes(80) == 1024 + 4 * (80 * 128 + 64 * 128 + 8) == 74_784
    for n in mb.PROJECT_WG_SHAPES:  # two CTAs per SM (228 KB, 1 KB reserved per CTA); the swizzle's 1024-byte blocks
        assert 2 * (mb.project_wg_smem_bytes(n) + 1024) <= 228 * 1024 and (n * 128) % 1024 == 0
    # split over two warpgroups: two rings of 2 stages up to bn = 120, of 3 past it
    assert mb.project_wg_smem_bytes(112, 2) == 1024 + 2 * 2 * (112 * 128 + 64 * 128 + 8) == 91_168
    assert mb.project_wg_smem_bytes(192, 2) == 1024 + 2 * 3 * (192 * 128 + 64 * 128 + 8) == 197_680
    for n in mb.PROJECT_WG_SHAPES:
        smem = mb.project_wg_smem_bytes(n, 2)
        assert smem + 1024 <= 228 * 1024  # one CTA fits (the reduction's bn / 2 x 128 floats fit in its stages)
        assert n * 256 <= smem - 1024 - 2 * mb.project_wg_stages(n, 2) * 8
        if n <= 112:  # __launch_bounds__(256, 2): two CTAs of two warpgroups
            assert 2 * (smem + 1024) <= 228 * 1024
    # option 9 (3 stages): at 5.x (bn = 112) three CTAs an SM fit where two did (228 KB, 1 KB reserved per CTA), and
    # 3 x 158 registers x 128 threads (rounded to 160 a thread) fit 65,536: 392 row tiles in one wave of 396 CTAs
    assert mb.project_wg_smem_bytes(112, 1, 1, 9) == 1024 + 3 * (112 * 128 + 64 * 128 + 8) == 68_632
    assert 3 * (68_632 + 1024) <= 228 * 1024 < 3 * (mb.project_wg_smem_bytes(112) + 1024)
    assert 3 * 160 * 128 <= 65_536 and -(-128 * 196 // 64) == 392 <= 3 * 132
    assert mb.project_wg_stages(192, opt=9) == mb.project_wg_stages(192) == 3  # from bn = 160 on: 3 already
    # option 73 (session 33): option 9's 3 stages and a second 8-byte mbarrier each; 160 threads (a producer warp).
    # At bn = 80 (ptxas: 127 registers, 128 allocated) three CTAs still fit an SM: 3 x 160 x 128 <= 65,536
    assert mb.project_wg_smem_bytes(80, 1, 1, 73) == 1024 + 3 * (80 * 128 + 64 * 128 + 8) + 3 * 8 == 56_368
    assert mb.project_wg_threads(73) == 160 and mb.project_wg_threads(9) == 128
    assert 3 * (56_368 + 1024) <= 228 * 1024 and 3 * 160 * 128 <= 65_536
    # 128-row tiles: one ring of 4 stages of B and 128 rows of A
    assert mb.project_wg_smem_bytes(112, 1, 2) == 1024 + 4 * ((112 + 128) * 128 + 8) == 123_936
    assert all(mb.project_wg_smem_bytes(n, 1, 2) + 1024 <= 228 * 1024 for n in mb.PROJECT_WG_SHAPES)


def test_which_blocks_it_serves():
    """late: where project_v9 does not apply (from stage 5 on in B0); all: every block of B0."""
    from mbconv_helpers import block_of, mbconv_shapes
    from perfmodel.zoo import fold_batchnorm

    late, ring, unstaged, every = set(), set(), set(), set()
    for path, (_, h, w) in mbconv_shapes("efficientnet_b0").items():
        params = mb.block_params(fold_batchnorm(block_of("efficientnet_b0", path)))
        hw = mb.output_size(h, params.stride) * mb.output_size(w, params.stride)
        if mb.project_wg_bn(params.out_channels):
            every.add(path)
            if not mb.project_v9_applies(params.hidden, params.out_channels):
                late.add(path)
            elif mb.project_v9_runs_ring(params.hidden, params.out_channels, hw):
                ring.add(path)
            if not mb.project_v9s_applies(params.hidden, params.out_channels, hw):
                unstaged.add(path)
    assert late == {"features.5.0", "features.5.1", "features.5.2", "features.6.0", "features.6.1", "features.6.2",
                    "features.6.3", "features.7.0"}
    # ring: also where project_v9's task-staged loaders do not fit: hidden 480 -> 80 at 14 x 14, 77 KB of V and
    # 8 warps x 2 tasks x 16 rows x 480 halves = 240 KB of rings (4.0's hidden 240 fits: project_v9t)
    assert ring == {"features.4.1", "features.4.2"}
    # split over two warpgroups by default (auto) on an H200's 132 SMs at batch 128: 6.x, 128 x 7 x 7 rows = 98 tiles
    # of C_out 192; not 7.0 (98 tiles x two columns of 160), 5.x (128 x 14 x 14 / 64 = 392 tiles)
    assert [mb.project_wg_splits(128 * hw, c, 132) for hw, c in ((49, 192), (49, 320), (196, 112), (196, 80))] == \
        [True, False, False, False]
    assert mb.project_v9t_smem_bytes(480, 80) > mb.PROJECT_V9T_MAX_SMEM >= mb.project_v9t_smem_bytes(240, 80)
    # unstaged: wherever project_v9s does not run - also 4.0 (14 x 14 = 196 rows an image: tasks of 16 rows would
    # span two images), which runs project_v9t
    assert unstaged == late | ring | {"features.4.0"} and 196 % 16 == 4
    assert every == set(mbconv_shapes("efficientnet_b0"))


def test_compiles_without_spills():
    nvcc = Path(__import__("os").environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    if not nvcc.exists():
        pytest.skip("nvcc not found (set CUDA_HOME)")
    from torch.utils.cpp_extension import include_paths

    cmd = [str(nvcc), "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v", f"-I{CSRC}",
           *[f"-I{p}" for p in include_paths()], "-cubin", str(CSRC / "mbconv_proj_wg.cu"), "-o", "/dev/null"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = result.stdout + result.stderr
    entries = re.findall(r"Compiling entry function '_ZN2mb17project_wg_kernelILi(\d+)ELi(\d+)E", report)
    assert sorted((int(n), int(o)) for n, o in entries) == \
        [(n, o) for n in sorted(mb.PROJECT_WG_SHAPES) for o in mb.PROJECT_WG_OPTIONS]
    for kernel in ("project_wg_sk_kernel", "project_wg_m2_kernel"):
        found = re.findall(rf"Compiling entry function '_ZN2mb{len(kernel)}{kernel}ILi(\d+)E", report)
        assert sorted(int(n) for n in found) == sorted(mb.PROJECT_WG_SHAPES), kernel
    assert "spill stores" in report and all(" 0 bytes spill stores, 0 bytes spill loads" in line
                                            for line in report.splitlines() if "spill stores" in line)
    assert "Potential Performance Loss" not in report  # ptxas serialising the wgmmas would say so


# ---- the kernel, transliterated ----

def _panel_offset(row: int, chunk: int) -> int:
    """ptx.cuh panel_offset: where the loader puts 16-byte piece `chunk` of B's row `row`."""
    return row * 128 + (((chunk ^ row) & 7) << 4)


def _descriptor_read(buf: np.ndarray, n: int, k: int) -> float:
    """The element (n, k) a K-major 128-byte-swizzled wgmma operand holds: linear address n * 128 + 2 k, its bits 4-6
    XORed with bits 7-9 (the swizzle applies to the 1024-aligned address; the descriptor starts at + 32 bytes per k16,
    which only moves bits 5-6 of the linear address)."""
    linear = n * 128 + 2 * k
    return buf[(linear ^ (((linear >> 7) & 7) << 4)) // 2]


def _r16(a):
    return np.asarray(a, dtype=np.float64).astype(np.float16).astype(np.float64)


def _tma_box(src: np.ndarray, r0: int, c0: int, rows: int) -> np.ndarray:
    """A tensor-memory-accelerator box of `rows` x 64 fp16 elements of src from (r0, c0), as the 128-byte swizzle lays
    it in shared memory (16-byte piece ch of row r at panel_offset(r, ch)); zeros where the box leaves src."""
    buf = np.full(rows * 64, np.nan)
    for r in range(rows):
        for ch in range(8):
            row, col = r0 + r, c0 + ch * 8  # src's columns are a multiple of 8: a piece is wholly in or out
            o = _panel_offset(r, ch) // 2
            buf[o:o + 8] = src[row, col:col + 8] if row < src.shape[0] and col < src.shape[1] else 0.0
    return buf


def _cta_steps(cta: int, grid_x: int, tiles: int, chunks: int, wg: int = 0, ks: int = 1):
    """The kernel's (tile, chunk) steps for warpgroup `wg` of `ks` in CTA `cta` of `grid_x`: tiles cta, cta + grid_x,
    ...; of each tile the chunks tile % chunks + wg, + ks, ..., wrapping (step_tile, step_chunk)."""
    mine = (chunks - wg + ks - 1) // ks
    my_tiles = (tiles - 1 - cta) // grid_x + 1 if cta < tiles else 0
    for j in range(my_tiles * mine):
        tile = cta + (j // mine) * grid_x
        c = ks * (j % mine) + wg + tile % chunks
        yield tile, (c if c < chunks else c - chunks)


def test_persistent_steps_by_hand():
    # 4 row tiles of 3 chunks on 3 CTAs: CTA 0 takes tiles 0 and 3, CTA 2 tile 2 from its chunk 2 % 3 = 2
    assert list(_cta_steps(0, 3, 4, 3)) == [(0, 0), (0, 1), (0, 2), (3, 0), (3, 1), (3, 2)]
    assert list(_cta_steps(1, 3, 4, 3)) == [(1, 1), (1, 2), (1, 0)]
    assert list(_cta_steps(2, 3, 4, 3)) == [(2, 2), (2, 0), (2, 1)]
    assert list(_cta_steps(5, 6, 4, 3)) == []  # more CTAs than tiles: none
    assert "const int c = KS * (j % mine) + wg + tile % chunks;" in SOURCE
    assert "blockIdx.x + (j / mine) * gridDim.x" in SOURCE and "const int mine = (chunks - wg + KS - 1) / KS;" in SOURCE


def test_split_steps_by_hand():
    """Two warpgroups, one tile a CTA: tile 3 of 11 chunks (B0's 5.x: 672 / 64 rounded up) from chunk 3; warpgroup 0
    takes 3, 5, 7, 9, 0, 2 and warpgroup 1 4, 6, 8, 10, 1: every chunk once. One chunk: warpgroup 1 has none."""
    assert list(_cta_steps(3, 8, 8, 11, wg=0, ks=2)) == [(3, 3), (3, 5), (3, 7), (3, 9), (3, 0), (3, 2)]
    assert list(_cta_steps(3, 8, 8, 11, wg=1, ks=2)) == [(3, 4), (3, 6), (3, 8), (3, 10), (3, 1)]
    for tile in range(20):
        for chunks in (1, 2, 7, 8, 18):
            got = [c for wg in (0, 1) for _, c in _cta_steps(tile, 20, 20, chunks, wg, 2)]
            assert sorted(got) == list(range(chunks)), (tile, chunks)
    assert list(_cta_steps(0, 1, 1, 1, wg=1, ks=2)) == []


def emulate_project_wg(d, scale, w_proj, b_proj, x, n_img, hw, hidden, c_out, residual, grid_x):
    """d [P, hidden] fp16 values, scale [N, hid_pad], w_proj [cout_pad, hk_pad] zero-padded, b_proj [cout_pad];
    grid_x persistent CTAs per column tile."""
    P = n_img * hw
    bn = mb.project_wg_bn(c_out)
    chunks = -(-hidden // 64)
    tiles = -(-P // 64)
    out = np.full((P, c_out), np.nan)
    writes = np.zeros((P, c_out), dtype=np.int64)
    steps = [(b, t, c) for b in range(grid_x) for t, c in _cta_steps(b, grid_x, tiles, chunks)]
    for by in range(c_out // bn):
        for i, (cta, bx, c) in enumerate(steps):
            m0, n0 = bx * 64, by * bn
            if i % chunks == 0:
                acc = np.zeros((64, bn))
            k0 = c * 64
            a_s = _tma_box(d, m0, k0, 64)  # tm_d: D [P, hidden]
            b_s = _tma_box(w_proj[:c_out], n0, k0, bn)  # tm_w: V [C_out, hk_pad]
            for warp in range(4):
                for lane in range(32):
                    q, g = lane % 4, lane // 4
                    r_lo, r_hi = m0 + warp * 16 + g, m0 + warp * 16 + g + 8
                    img = [min(r, P - 1) // hw for r in (r_lo, r_hi)]
                    for kk in range(4):
                        # the scales: immediate offsets in a whole chunk, clamped columns in a partial one
                        k = k0 + kk * 16 + 2 * q
                        whole = k0 + 64 <= hidden
                        klo = k if whole else min(k, hidden - 2)
                        khi = k + 8 if whole else min(k + 8, hidden - 2)
                        # a[kk][j]: j = 0 (lo, k), 1 (hi, k), 2 (lo, k + 8), 3 (hi, k + 8); columns c, c + 1,
                        # read by ldmatrix from row lr's piece 2 kk + kc / 8 at the kernel's XOR-ed address
                        for j, (h, kc, ks) in enumerate(((0, 0, klo), (1, 0, klo), (0, 8, khi), (1, 8, khi))):
                            lr = warp * 16 + g + 8 * h
                            piece = 2 * kk + kc // 8
                            addr = lr * 128 + ((piece ^ (lr & 7)) << 4) + 4 * q
                            for u in range(2):
                                col = kk * 16 + kc + 2 * q + u
                                a = _r16(a_s[addr // 2 + u] * scale[img[h], ks + u])
                                for nn in range(bn):
                                    acc[lr, nn] += a * _descriptor_read(b_s, nn, col)
            if i % chunks != chunks - 1:
                continue
            for lr in range(64):
                row = m0 + lr
                if row >= P:
                    continue
                for nn in range(0, bn, 2):
                    col = n0 + nn
                    for u in range(2):
                        v = acc[lr, nn + u] + b_proj[col + u] + (x[row, col + u] if residual else 0.0)
                        out[row, col + u] = v
                        writes[row, col + u] += 1
    return out, writes


@pytest.mark.parametrize("n_img,hw,hidden,c_out,hk_pad,residual,grid_x", [
    (2, 49, 72, 80, 80, True, 2),     # 98 rows: a partial last tile; a partial last chunk (72 = 64 + 8)
    (3, 5, 64, 320, 64, False, 1),    # many images per tile; C_out 320 in two tiles of 160
    (1, 7, 136, 88, 144, False, 1),   # hk_pad > hidden: B's padding columns, A zero there
    (1, 70, 32, 16, 32, True, 1),     # features.1.0's widths: one chunk, half of it zero-filled; one CTA, two tiles
    (5, 49, 136, 24, 136, True, 3),   # 4 tiles on 3 persistent CTAs (CTA 0: tiles 0 and 3), 3 chunks rotated
])
def test_transliteration_equals_the_direct_projection(n_img, hw, hidden, c_out, hk_pad, residual, grid_x):
    rng = np.random.default_rng(n_img * 100 + hw)
    P = n_img * hw
    hid_pad = -(-hidden // 48) * 48
    d = _r16(rng.standard_normal((P, hidden)))
    scale = rng.uniform(0.1, 1.0, (n_img, hid_pad))
    scale[:, hidden:] = np.nan  # never written by the SE; the kernel must clamp its reads
    cout_pad = -(-c_out // 16) * 16
    w_proj = np.zeros((cout_pad, hk_pad))
    w_proj[:c_out, :hidden] = _r16(rng.standard_normal((c_out, hidden)) / np.sqrt(hidden))
    b_proj = np.zeros(cout_pad)
    b_proj[:c_out] = rng.standard_normal(c_out)
    x = _r16(rng.standard_normal((P, c_out)))
    # the scale past hidden is NaN (never written): an unclamped read would turn the zero A there into NaN
    got, writes = emulate_project_wg(d, scale, w_proj, b_proj, x, n_img, hw, hidden, c_out, residual, grid_x)
    assert (writes == 1).all()
    img = np.arange(P) // hw
    a = _r16(d * scale[img, :hidden])
    want = a @ w_proj[:c_out, :hidden].T + b_proj[:c_out] + (x if residual else 0.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


# ---- GPU ----

def _served():
    from mbconv_helpers import DISTINCT, block_of
    from perfmodel.zoo import fold_batchnorm

    return [(name, path) for name, path in DISTINCT
            if mb.project_wg_bn(mb.block_params(fold_batchnorm(block_of(name, path))).out_channels)]


# the kernels: one warpgroup a 64-row tile; the hidden dimension over two; 128-row tiles on two
KERNELS = {"one": {"CUDA_KERNELS_PROJ_WG_SPLIT": "0"}, "split": {"CUDA_KERNELS_PROJ_WG_SPLIT": "1"},
           "m128": {"CUDA_KERNELS_PROJ_WG_SPLIT": "0", "CUDA_KERNELS_PROJ_WG_M128": "1"}}


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _served())
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_shape_it_serves(name, path, batch, kernel, monkeypatch):
    from mbconv_helpers import check_shape

    monkeypatch.setenv(mb.PROJECT_WG_SWITCH, "all")
    for switch, value in KERNELS[kernel].items():
        monkeypatch.setenv(switch, value)
    check_shape(name, path, batch, 11)


@pytest.mark.cuda
@pytest.mark.parametrize("path,size,batch", [("features.5.1", 11, 3), ("features.6.1", 5, 7), ("features.7.0", 3, 9),
                                             ("features.4.1", 13, 2), ("features.6.0", 9, 1)])
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_odd_sizes(path, size, batch, kernel, monkeypatch):
    from mbconv_helpers import check_b0_at_size

    monkeypatch.setenv(mb.PROJECT_WG_SWITCH, "all")
    for switch, value in KERNELS[kernel].items():
        monkeypatch.setenv(switch, value)
    check_b0_at_size(path, size, batch, 11)


@pytest.mark.cuda
@pytest.mark.parametrize("path,batch", [("features.4.1", 128), ("features.5.1", 128), ("features.6.1", 128),
                                        ("features.7.0", 128), ("features.6.1", 1)])
def test_runs_and_is_close_to_the_mma_sync_projections(path, batch, monkeypatch):
    """Against the same version with its own projection: the same fp16 products, summed k16 step by k16 step as
    project_v3 / v9 do (equal bits are possible there; project_v10 sums two k halves apart): within 5e-4 relative,
    repeatable where kernel 1 is (not at 7.0: version 3's kernel 1 pools through shared-memory atomics, whose order
    moves the SE scale by an ulp), and the profiler shows project_wg_kernel (and no other projection) ran: the proof
    that it is not the same kernel twice."""
    from mbconv_helpers import assert_repeatable, b0_prepared, run_profiled
    from perfmodel.harness import relative_error

    params, weights, x = b0_prepared(path, batch)
    monkeypatch.delenv(mb.PROJECT_WG_SWITCH, raising=False)
    base = mb.mbconv(x, params, weights, version=10)
    monkeypatch.setenv(mb.PROJECT_WG_SWITCH, "all")
    got, names = run_profiled(x, params, weights, base, 10)
    assert re.search(r"project_wg(_sk)?_kernel", names) and not re.search(r"project_v\d+t?_kernel", names), names[:600]
    assert relative_error(got, base.double()) < 5e-4
    if not mb.kernel1_v9_takes_v3(params.kernel_size, params.stride, got.shape[2], got.shape[3]):
        assert_repeatable(got, x, params, weights, 10)


@pytest.mark.cuda
@pytest.mark.parametrize("switches", [{"CUDA_KERNELS_PROJ_WG": "all"},
                                      {"CUDA_KERNELS_PROJ_WG": "all", "CUDA_KERNELS_K1_V3_HFMA2": "1"},
                                      {"CUDA_KERNELS_PROJ_WG": "all", "CUDA_KERNELS_PROJ_WG_OPT": "3"},
                                      {"CUDA_KERNELS_PROJ_WG_OPT": "5"}])
def test_efficientnet_b0_on_its_own_activations(switches, monkeypatch):
    """What `perfmodel bench --backend cuda_kernels` checks before timing: every MBConv of B0 (random weights,
    realistic BN) on the input it receives in the network, within 2x PyTorch fp16's error of float64 (bench.check_blocks
    raises otherwise). Random-input tests once passed a kernel that this check refused (NOTES.md, "Session 13")."""
    from mbconv_helpers import check_fused_b0

    info = check_fused_b0(monkeypatch, switches, {"StemMBConv": 1, "MBConv": 15}, 16)  # the stem with block 1.0
    assert info["mbconv_versions"] == [mb.DEFAULT_VERSION] == [11]  # on the H200: no fallback
    assert all(info["switches"].get(k) == v for k, v in switches.items())


# ---- the options (CUDA_KERNELS_PROJ_WG_OPT; 9 by default since session 22) ----

def _one_warpgroup_then(path: str, batch: int, monkeypatch, opt: str, switch: str, value: str):
    """B0's block `path` at `batch`: version 11's output with project_wg everywhere on one warpgroup at option `opt`
    (the base), then, under the profiler, with `switch` = `value`: (got, base, names, params, weights, x)."""
    from mbconv_helpers import b0_prepared, run_profiled

    params, weights, x = b0_prepared(path, batch)
    monkeypatch.setenv(mb.PROJECT_WG_SWITCH, "all")
    monkeypatch.setenv(mb.PROJECT_WG_SPLIT_SWITCH, "0")  # the options are the one-warpgroup kernel's
    monkeypatch.setenv(mb.PROJECT_WG_OPT_SWITCH, opt)
    base = mb.mbconv(x, params, weights, version=11)
    monkeypatch.setenv(switch, value)
    got, names = run_profiled(x, params, weights, base, 11)
    return got, base, names, params, weights, x


@pytest.mark.cuda
@pytest.mark.parametrize("opt", [1, 2, 3, 5, 9, 73])
@pytest.mark.parametrize("path,batch", [("features.2.1", 128), ("features.4.1", 128), ("features.5.0", 128),
                                        ("features.6.1", 128), ("features.7.0", 128), ("features.6.1", 1),
                                        ("features.3.1", 5)])
def test_options_give_option_0s_values(path, batch, opt, monkeypatch):
    """Each option moves loads (or sizes the ring: 9), not arithmetic: the same sums in the same order, so option 0's
    values (torch.equal; a -0 may turn +0 where there is no shortcut), and the profiler shows the option's instantiation
    ran (project_wg_kernel<BN, opt>): the check compares two different kernels. Where version 11 runs version 3's kernel
    1 (features.7.0), its pool adds through shared-memory atomics, so the SE scale, and the block's output, change from
    run to run in the last bits (session 15's first call: torch.equal failed there for that reason): there the option
    must agree with option 0 as closely as a second run of option 0 does, within 1e-3."""
    got, base, names, params, weights, x = _one_warpgroup_then(path, batch, monkeypatch, "0", mb.PROJECT_WG_OPT_SWITCH,
                                                               str(opt))
    atomic_pool = mb.kernel1_v9_takes_v3(params.kernel_size, params.stride, got.shape[2], got.shape[3])
    assert atomic_pool == (path == "features.7.0")
    bn = mb.project_wg_bn(params.out_channels)
    assert re.search(rf"project_wg_kernel<{bn}, {opt}>", names), names[:600]
    if not atomic_pool:
        assert torch.equal(got, base)
        return
    monkeypatch.setenv(mb.PROJECT_WG_OPT_SWITCH, "0")
    again = mb.mbconv(x, params, weights, version=11)
    rel = [((y.double() - base.double()).norm() / base.double().norm()).item() for y in (got, again)]
    assert rel[0] < 1e-3 and rel[1] < 1e-3, rel


@pytest.mark.cuda
@pytest.mark.parametrize("opt", ["3", "9", "73"])
@pytest.mark.parametrize("path,size,batch", [("features.5.1", 11, 3), ("features.6.1", 5, 7), ("features.7.0", 3, 9)])
def test_options_odd_sizes(path, size, batch, opt, monkeypatch):
    from mbconv_helpers import check_b0_at_size

    monkeypatch.setenv(mb.PROJECT_WG_SWITCH, "all")
    monkeypatch.setenv(mb.PROJECT_WG_SPLIT_SWITCH, "0")
    monkeypatch.setenv(mb.PROJECT_WG_OPT_SWITCH, opt)
    check_b0_at_size(path, size, batch, 11)


# ---- the hidden dimension over two warpgroups (CUDA_KERNELS_PROJ_WG_SPLIT=1) and the ring mode ----

@pytest.mark.cuda
@pytest.mark.parametrize("path,batch", [("features.4.1", 128), ("features.5.1", 128), ("features.6.1", 128),
                                        ("features.7.0", 128), ("features.6.1", 1), ("features.1.0", 5)])
@pytest.mark.parametrize("kernel", ["split", "m128"])
def test_split_and_m128_are_close_to_one_warpgroup(path, batch, kernel, monkeypatch):
    """The split adds each warpgroup's partial sums once at the end; 128-row tiles start their chunks where the
    128-row tile does: within 5e-4 of one warpgroup's sums, not equal to them where kernel 1 is repeatable at batch
    128 (proof that another summation ran), and the profiler names the kernel and no other projection."""
    from mbconv_helpers import b0_prepared, run_profiled
    from perfmodel.harness import relative_error

    params, weights, x = b0_prepared(path, batch)
    monkeypatch.setenv(mb.PROJECT_WG_SWITCH, "all")
    monkeypatch.setenv(mb.PROJECT_WG_SPLIT_SWITCH, "0")
    base = mb.mbconv(x, params, weights, version=11)
    for switch, value in KERNELS[kernel].items():
        monkeypatch.setenv(switch, value)
    got, names = run_profiled(x, params, weights, base, 11)
    bn = mb.project_wg_bn(params.out_channels)
    name = {"split": "project_wg_sk_kernel", "m128": "project_wg_m2_kernel"}[kernel]
    assert re.search(rf"{name}<{bn}>", names), names[:600]
    assert not re.search(r"project_wg_kernel<|project_v\d+\w*_kernel", names), names[:600]
    assert relative_error(got, base.double()) < 5e-4
    repeatable = not mb.kernel1_v9_takes_v3(params.kernel_size, params.stride, got.shape[2], got.shape[3])
    if batch == 128 and repeatable:
        assert not torch.equal(got, base)


@pytest.mark.cuda
@pytest.mark.parametrize("mode,taken,kept,kept_kernel", [
    ("ring", "features.4.1", "features.4.0", "project_v9t_kernel"),
    ("unstaged", "features.4.0", "features.3.1", "project_v9se_kernel")])
def test_modes_take_their_blocks_only(mode, taken, kept, kept_kernel, monkeypatch):
    """CUDA_KERNELS_PROJ_WG=ring: project_wg at 4.1 (project_v9's ring there), not at 4.0 (project_v9t); unstaged: at
    4.0 too, not at 3.1 (project_v9s). Where taken, "all"'s bits (the same kernel)."""
    from mbconv_helpers import b0_prepared, run_profiled

    params, weights, x = b0_prepared(taken, 128)
    monkeypatch.setenv(mb.PROJECT_WG_SWITCH, "all")
    base = mb.mbconv(x, params, weights, version=11)
    monkeypatch.setenv(mb.PROJECT_WG_SWITCH, mode)
    got, names = run_profiled(x, params, weights, base, 11)
    assert f"project_wg_kernel<80, {mb.PROJECT_WG_OPT_DEFAULT}>" in names and "project_v9" not in names, names[:600]
    assert torch.equal(got, base)
    params, weights, x = b0_prepared(kept, 128)
    _, names = run_profiled(x, params, weights, mb.mbconv(x, params, weights, version=11), 11)
    assert kept_kernel in names and "project_wg" not in names, names[:600]


@pytest.mark.cuda
@pytest.mark.parametrize("path,kernel", [("features.4.0", "project_wg_kernel<80, 9>"),
                                         ("features.4.2", "project_wg_kernel<80, 9>"),
                                         ("features.3.1", "project_v9se_kernel")])
def test_unstaged_is_version_11s_default(path, kernel, monkeypatch):
    """Unset, version 11 runs project_wg where project_v9s does not fit (4.0: 196 rows an image; 4.2: V and the
    rings too large) and project_v9s where it does (3.1)."""
    from mbconv_helpers import b0_prepared, run_profiled

    monkeypatch.delenv(mb.PROJECT_WG_SWITCH, raising=False)
    params, weights, x = b0_prepared(path, 128)
    _, names = run_profiled(x, params, weights, mb.mbconv(x, params, weights, version=11), 11)
    assert kernel in names, names[:600]


@pytest.mark.cuda
def test_unstaged_leaves_project_v9s_blocks_to_the_loader_switches(monkeypatch):
    """Unstaged is structural: with CUDA_KERNELS_PROJ_V9_SS=0 at 3.1 (where project_v9s fits) project_v9 runs
    project_v9t as asked, not project_wg."""
    from mbconv_helpers import b0_prepared, run_profiled

    monkeypatch.delenv(mb.PROJECT_WG_SWITCH, raising=False)
    monkeypatch.setenv(mb.PROJ_V9_SS_SWITCH, "0")
    params, weights, x = b0_prepared("features.3.1", 128)
    _, names = run_profiled(x, params, weights, mb.mbconv(x, params, weights, version=11), 11)
    assert "project_v9t_kernel" in names and "project_wg" not in names, names[:600]


@pytest.mark.cuda
def test_split_by_default_where_the_tiles_fit_the_sms(monkeypatch):
    """CUDA_KERNELS_PROJ_WG_SPLIT unset (auto): B0's 6.1 at batch 128 (98 tiles) over two warpgroups, 5.1 (392) on
    one; the split kernel's output equals CUDA_KERNELS_PROJ_WG_SPLIT=1's bit for bit (the same kernel)."""
    from mbconv_helpers import b0_prepared, run_profiled

    monkeypatch.delenv(mb.PROJECT_WG_SPLIT_SWITCH, raising=False)
    assert torch.cuda.get_device_properties(0).multi_processor_count >= 98
    for path, kernel in (("features.6.1", "project_wg_sk_kernel<192>"), ("features.5.1", "project_wg_kernel<112, 9>")):
        params, weights, x = b0_prepared(path, 128)
        monkeypatch.setenv(mb.PROJECT_WG_SPLIT_SWITCH, "1")
        split = mb.mbconv(x, params, weights, version=11)
        monkeypatch.delenv(mb.PROJECT_WG_SPLIT_SWITCH)
        got, names = run_profiled(x, params, weights, split, 11)
        assert kernel in names, names[:600]
        assert torch.equal(got, split) == (path == "features.6.1")


@pytest.mark.cuda
@pytest.mark.parametrize("switches", [{"CUDA_KERNELS_PROJ_WG": "ring"}, {"CUDA_KERNELS_PROJ_WG_SPLIT": "1"},
                                      {"CUDA_KERNELS_PROJ_WG": "ring", "CUDA_KERNELS_PROJ_WG_SPLIT": "1"},
                                      {"CUDA_KERNELS_PROJ_WG": "unstaged"}, {"CUDA_KERNELS_PROJ_WG_M128": "1"}])
def test_efficientnet_b0_with_the_split_and_ring(switches, monkeypatch):
    from mbconv_helpers import check_fused_b0

    info = check_fused_b0(monkeypatch, switches, {"StemMBConv": 1, "MBConv": 15}, 16)
    assert all(info["switches"].get(k) == v for k, v in switches.items())
