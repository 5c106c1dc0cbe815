"""MBConv version 8 (NOTES.md, "MBConv version 8: what was built"; csrc/mbconv_v8.cuh): version 3 with kernel 1
persistent over (chunk, image, band) items, X of the next item by one bulk copy, the expand epilogue without
per-store tests, the depthwise over vertical segments with E's pixel pitch 60 halves, the pool without atomics.

CPU: the switch and its path to the kernels, which blocks run version 8's kernel 1 (kernel1_v8_applies), the item
schedule (every (chunk, image, band) exactly once over the persistent CTAs), the shared memory from literal
arithmetic, and kernel 1 transliterated (the CTAs' item walk, the dense X buffer with its stale rows, the expand's
m-tiles and E positions, E's border, the depthwise's segments and their stepping, the clamped rows, the per-group
pool sums) in float64 against a direct convolution, every D value written exactly once.
GPU (@pytest.mark.cuda): every MBConv shape of EfficientNet-B0 and -B2 at batch 128, 1 and 5 against float64 with
NaN-poisoned outputs (<= 2x PyTorch fp16's error), batch 128 against float32, odd spatial sizes, version 8 against
version 3 (closely: the pool's order) and against itself (bit for bit: the pool's order is fixed), a CUDA-graph chain
with PDL on and off, and EfficientNet-B0 swapped with CUDA_KERNELS_MBCONV_VERSION=8."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import depthwise_walk, host_run as _host_run, nvcc_path as _nvcc
from mbconv_helpers import torch_includes as _torch_includes

ROOT = Path(__file__).resolve().parents[1]
CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v8.cuh").read_text()
THREADS, HC, LDE = 256, 48, 60
PAIRS, GROUPS = HC // 2, 256 // (HC // 2)  # 24 channel pairs, 10 groups (240 threads)
H200_SMS, CTAS_PER_SM = 132, 2
POOL_ORDER_REL_ERROR = 1e-4  # as tests/test_mbconv_kernels.py: the same sums in another order
SMEM_PER_SM, SMEM_RESERVED = 228 * 1024, 1024


# ---- the switch ----

def test_version_8_is_registered_and_version_11_is_the_default():
    assert 8 in mb.VERSIONS and mb.KERNEL_VERSION[8] == 8
    assert 'os.environ.get("CUDA_KERNELS_MBCONV_VERSION", "11")' in Path(mb.__file__).read_text()
    cu = (CSRC / "mbconv.cu").read_text()
    # 9-11: v8's kernel 1 but where kernel1_v9_takes_v3 (10 and 11 with their options on by default)
    assert "(version == 8 || (v9 && !v9_v3)) && p.ksize == 3) err = launch_expand_dw_v8_k3(p, chunk, stream, pdl, v10, v11)" in cu
    assert "(version == 8 || (v9 && !v9_v3)) && p.ksize == 5) err = launch_expand_dw_v8_k5(p, chunk, stream, pdl, v10, v11)" in cu
    assert "version == 3 || version == 5 || version == 6 || version == 8" in cu  # version 3's SE and projection
    assert "(version >= 5 && version <= 11)" in (CSRC / "mbconv_bindings.cpp").read_text()
    from cuda_kernels._build import MBCONV_SOURCES

    assert {"mbconv_v8_k3.cu", "mbconv_v8_k5.cu"} <= set(MBCONV_SOURCES)


@pytest.mark.parametrize("value,expected", [(None, 11), ("10", 10), ("9", 9), ("8", 8), ("3", 3)])
def test_the_environment_switch(value, expected):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_KERNELS_MBCONV_VERSION"}
    if value is not None:
        env["CUDA_KERNELS_MBCONV_VERSION"] = value
    code = "from cuda_kernels import mbconv as m; print(m.DEFAULT_VERSION, m.FusedMBConv.__init__.__defaults__[0])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(expected), str(expected)]


# ---- which blocks run version 8's kernel 1 ----

def test_x_layout_mirrors_the_kernel():
    """Dense X rows where ldmatrix's 8 rows at pitch C_in halves hit 8 distinct 16-byte bank groups or C_in < 64;
    version 3's padded rows (pitch k_pad + 8) elsewhere, conflict-free for every B0 / B2 C_in."""
    assert "return C_in >= 64 && (C_in / 2) % 8 != 4;" in SOURCE

    def conflict_free(pitch_halves):
        return len({(r * pitch_halves * 2 // 16) % 8 for r in range(8)}) == 8

    for c_in in (16, 24, 40, 48, 80, 88, 112, 120, 192, 208, 352):
        k_pad = -(-c_in // 16) * 16
        padded = mb.x_rows_padded_v8(c_in)
        assert padded == (c_in >= 64 and not conflict_free(c_in)), c_in
        if padded:
            assert conflict_free(k_pad + 8), c_in
    assert [c for c in (16, 24, 40, 80, 112, 192) if mb.x_rows_padded_v8(c)] == [80, 112, 192]  # B0's expand inputs


def test_the_halo_is_kept_at_every_b0_b2_block_but_k5_stride_1():
    for name, path, c, h, w, hidden, ks, stride, expand in _b0_b2_blocks():
        if expand:
            assert mb.kernel1_v8_halo(w, ks, stride) == (not (ks == 5 and stride == 1)), (name, path)
    assert "constexpr int kV8HaloMax = 12;" in SOURCE and mb.V8_HALO_MAX == 12


def test_kernel1_v8_applies_mirrors_the_launcher():
    assert "if (p.w_exp == nullptr || chunk != 48)" in SOURCE  # launch_expand_dw_v8_ks: else version 3's kernel 1
    assert mb.kernel1_v8_applies(True, 48)
    assert not mb.kernel1_v8_applies(False, 48) and not mb.kernel1_v8_applies(True, 32)
    assert "static constexpr int LDE = 60;" in SOURCE and "KS == 3 && S == 1 ? 4 : 2" in SOURCE


def _b0_b2_blocks():
    from mbconv_helpers import block_of, mbconv_shapes

    out = []
    for name in ("efficientnet_b0", "efficientnet_b2"):
        for path, (c, h, w) in mbconv_shapes(name).items():
            block = block_of(name, path)
            dw = block.block[-3][0]
            expand = len(block.block) == 4
            out.append((name, path, c, h, w, dw.out_channels, dw.kernel_size[0], dw.stride[0], expand))
    return out


def test_every_expand_block_of_b0_and_b2_runs_version_8_and_only_features_1_falls_back():
    blocks = _b0_b2_blocks()
    assert len(blocks) == 16 + 23
    for name, path, c, h, w, hidden, ks, stride, expand in blocks:
        applies = mb.kernel1_v8_applies(expand, mb.chunk_for(hidden))
        assert applies == (not path.startswith("features.1.")), (name, path)
    # every kernel size and stride runs version 8's kernel 1 somewhere
    assert {(b[6], b[7]) for b in blocks if b[8]} == {(3, 1), (3, 2), (5, 1), (5, 2)}


# ---- the persistent schedule ----

def cta_items(total: int, grid: int, b: int) -> range:
    """csrc/mbconv_v8.cuh: CTA b's items [b total / grid, (b + 1) total / grid)."""
    return range(b * total // grid, (b + 1) * total // grid)


def decode(i: int, n_images: int, bands: int) -> tuple[int, int, int]:
    """V8Item: i = (chunk * N + n) * bands + band."""
    chunk, r = divmod(i, n_images * bands)
    n, band = divmod(r, bands)
    return chunk, n, band


def _launch_plan(c_in, h, w, hidden, ks, stride, batch):
    k_pad = -(-c_in // 16) * 16
    rows = mb.band_rows(h, w, ks, stride, k_pad, HC, True, 8, c_in)
    ho = mb.output_size(h, stride)
    bands = -(-ho // rows)
    chunks = -(-hidden // HC)
    total = chunks * batch * bands
    smem = mb.kernel1_smem_bytes(rows, h, w, ks, stride, k_pad, HC, True, 8, c_in)
    ctas = min(SMEM_PER_SM // (smem + SMEM_RESERVED), 65536 // (128 * THREADS))
    return rows, bands, chunks, total, smem, ctas


@pytest.mark.parametrize("batch", [1, 3, 5, 127, 128])
def test_the_items_cover_every_chunk_image_and_band_once(batch):
    for name, path, c, h, w, hidden, ks, stride, expand in _b0_b2_blocks():
        if not expand:
            continue
        rows, bands, chunks, total, smem, ctas = _launch_plan(c, h, w, hidden, ks, stride, batch)
        assert ctas == CTAS_PER_SM, (name, path, smem)
        grid = min(total, ctas * H200_SMS)
        seen = []
        for b in range(grid):
            items = cta_items(total, grid, b)
            assert len(items) >= 1  # no CTA without work: grid <= total
            got = [decode(i, batch, bands) for i in items]
            # chunk-major, then image, bands top to bottom: consecutive items of one image are consecutive bands
            for (c0, n0, b0), (c1, n1, b1) in zip(got, got[1:]):
                assert (c1, n1, b1) > (c0, n0, b0)
                assert (c1 == c0 and n1 == n0 and b1 == b0 + 1) or b1 == 0
            # at most two chunks per CTA when the CTAs outnumber the chunks (U and the taps loaded <= 2x)
            if grid >= chunks:
                assert len({g[0] for g in got}) <= 2
            seen += got
        assert sorted(seen) == [(ci, n, bi) for ci in range(chunks) for n in range(batch) for bi in range(bands)]
        assert max(len(cta_items(total, grid, b)) for b in range(grid)) - \
            min(len(cta_items(total, grid, b)) for b in range(grid)) <= 1


# ---- shared memory, by hand ----

@pytest.mark.parametrize("path,c_in,hw,ks,stride,rows,expected", [
    # features.2.1: X 10 rows x 56 x 24 + 8 halves, U 48 x 40, E 10 x 58 x 60, red 10 x 48, taps 10 x 48, mbarrier
    ("features.2.1", 24, 56, 3, 1, 8, (560 * 24 + 8) * 2 + 48 * 40 * 2 + 10 * 58 * 60 * 2 + 1920 + 1920 + 8),
    # features.3.1: X 14 rows x 28 = 392 pixels (400 padded to 16) x 40, U 48 x 56, E 14 x 32 x 60, taps 26 x 48
    ("features.3.1", 40, 28, 5, 1, 10, (400 * 40 + 8) * 2 + 48 * 56 * 2 + 14 * 32 * 60 * 2 + 1920 + 26 * 48 * 4 + 8),
    # features.5.1: one band of 14 rows: X 14 x 14 (208 padded to 16) x (112 + 8) (padded rows: 224 B would be
    # 2-way), U 48 x 120, E 18 x 20 x 60
    ("features.5.1", 112, 14, 5, 1, 14, 208 * 120 * 2 + 48 * 120 * 2 + 18 * 20 * 60 * 2 + 1920 + 26 * 48 * 4 + 8),
    # features.3.0 (stride 2, k = 5, 56x56 -> 28x28): 3 output rows = 9 input rows (504 pixels, 512 padded), E width
    # (28 - 1) * 2 + 5 = 59
    ("features.3.0", 24, 56, 5, 2, 3, (512 * 24 + 8) * 2 + 48 * 40 * 2 + 9 * 59 * 60 * 2 + 1920 + 26 * 48 * 4 + 8),
])
def test_shared_memory_from_literal_arithmetic(path, c_in, hw, ks, stride, rows, expected):
    k_pad = -(-c_in // 16) * 16
    assert mb.band_rows(hw, hw, ks, stride, k_pad, HC, True, 8, c_in) == rows
    got = mb.kernel1_smem_bytes(rows, hw, hw, ks, stride, k_pad, HC, True, 8, c_in)
    assert got == expected
    assert 2 * (got + SMEM_RESERVED) <= SMEM_PER_SM  # two CTAs per SM
    assert got <= mb.SMEM_BUDGET


def test_shared_memory_of_every_v8_block_fits_two_ctas_and_falls_back_like_version_3():
    for name, path, c, h, w, hidden, ks, stride, expand in _b0_b2_blocks():
        chunk = mb.chunk_for(hidden)
        k_pad = -(-c // 16) * 16 if expand else 0
        rows8 = mb.band_rows(h, w, ks, stride, k_pad, chunk, expand, 8, c)
        if mb.kernel1_v8_applies(expand, chunk):
            smem = mb.kernel1_smem_bytes(rows8, h, w, ks, stride, k_pad, chunk, expand, 8, c)
            assert 2 * (smem + SMEM_RESERVED) <= SMEM_PER_SM, (name, path)
        else:  # version 3's kernel 1 with version 3's bands
            assert rows8 == mb.band_rows(h, w, ks, stride, k_pad, chunk, expand, 3)
    with pytest.raises(ValueError, match="c_in"):
        mb.kernel1_smem_bytes(4, 14, 14, 3, 1, 32, 48, True, 8)


def test_kernel1_v8_smem_in_cuda_equals_the_python_mirror(tmp_path):
    """csrc/mbconv_v8.cuh expand_dw_v8_smem_bytes (compiled for the host and run, no GPU) against
    mb.kernel1_smem_bytes(version=8) at every B0 / B2 version-8 block and a few others; with X by the tensor memory
    accelerator too, and its rule (kernel1_v8_tx, items of 1 and 2 images) and swizzled offsets (x_tx_offset)."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME)")
    cases = set()
    for name, path, c, h, w, hidden, ks, stride, expand in _b0_b2_blocks():
        if expand:
            k_pad = -(-c // 16) * 16
            cases.add((h, w, ks, stride, c, k_pad, mb.band_rows(h, w, ks, stride, k_pad, HC, True, 8, c)))
    cases |= {(13, 9, 5, 2, 40, 48, 3), (7, 7, 3, 1, 80, 80, 7), (1, 1, 3, 1, 8, 16, 1), (20, 20, 5, 1, 64, 64, 2),
              (200, 200, 5, 2, 24, 32, 1), (300, 300, 3, 1, 24, 32, 1)}  # too wide for the halo
    cases = sorted(cases)
    rows = "\n".join(f"  {{{h}, {w}, {ks}, {st}, {c}, {kp}, {r}}}," for h, w, ks, st, c, kp, r in cases)
    (tmp_path / "smem.cu").write_text(f"""#include <cstdio>
#include "mbconv_v8.cuh"
int main() {{
  const int cases[][7] = {{
{rows}
  }};
  for (const auto& c : cases) {{
    const int wo = (c[1] - 1) / c[3] + 1, ow = c[3] == 1 ? 4 : 2;
    const int we = ((wo + ow - 1) / ow * ow - 1) * c[3] + c[2];
    std::printf("%d %d %d %d %d %d %d %d\\n",
                mb::expand_dw_v8_smem_bytes(c[0], c[1], wo, c[6], c[2], c[3], c[4], c[5], 48),
                mb::x_padded_v8(c[4]) ? 1 : 0, mb::halo_v8(we, c[2], c[3], 48) ? 1 : 0,
                mb::expand_dw_v8_smem_bytes(c[0], c[1], wo, c[6], c[2], c[3], c[4], c[5], 48, 1, true),
                mb::kernel1_v8_tx(true, c[0], c[1], wo, c[6], c[2], c[3], c[4], c[5], 48, 1) ? 1 : 0,
                mb::kernel1_v8_tx(true, c[0], c[1], wo, c[6], c[2], c[3], c[4], c[5], 48, 2) ? 1 : 0,
                mb::expand_dw_v8_smem_bytes(c[0], c[1], wo, c[6], c[2], c[3], c[4], c[5], 48, 2, true, true),
                mb::kernel1_v8_tx(true, c[0], c[1], wo, c[6], c[2], c[3], c[4], c[5], 48, 2, true) ? 1 : 0);
  }}
  for (int r = 0; r < 24; r += 5)
    for (int k = 0; k < 208; k += 24) std::printf("%d %d %d\\n", r, k, mb::x_tx_offset(r, k, 112));
  return 0;
}}
""")
    got = _host_run(nvcc, tmp_path / "smem.cu")
    want = [(mb.kernel1_smem_bytes(r, h, w, ks, st, kp, HC, True, 8, c), int(mb.x_rows_padded_v8(c)),
             int(mb.kernel1_v8_halo(w, ks, st, HC)), mb.kernel1_smem_bytes(r, h, w, ks, st, kp, HC, True, 8, c, tx=True),
             int(mb.kernel1_v8_tx(True, h, w, ks, st, c, kp, r, 1)), int(mb.kernel1_v8_tx(True, h, w, ks, st, c, kp, r, 2)),
             mb.kernel1_smem_bytes(r, h, w, ks, st, kp, HC, True, 8, c, 2, tx=True, wg=True),
             int(mb.kernel1_v8_tx(True, h, w, ks, st, c, kp, r, 2, wg=True)))
            for h, w, ks, st, c, kp, r in cases]
    want += [(r, k, mb.x_tx_offset(r, k, 112)) for r in range(0, 24, 5) for k in range(0, 208, 24)]
    assert got == want


def test_kernel1_v8_compiles_without_spills(tmp_path):
    """ptxas alone, no GPU: the six version-8 kernels (k = 3 and 5; stride 1 and 2; 2-image items at stride 1), each
    with fp32 and with fp16 (HFMA2) depthwise sums, and their variants, fit two CTAs' 128 registers without spilling."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME)")
    report = ""
    for k in (3, 5):
        cmd = [nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-DBF_SM90A", "-Xptxas=-v",
               f"-I{CSRC}", *_torch_includes(), "-cubin", str(CSRC / f"mbconv_v8_k{k}.cu"),
               "-o", str(tmp_path / f"k{k}.cubin")]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        report += result.stdout + result.stderr
    lines = report.splitlines()
    entries = [i for i, line in enumerate(lines) if "Compiling entry function" in line and "expand_dw_v8_kernel" in line]
    # + expand_dw_v8_kernel_tx at k = 3 and 5, 1- and 2-image items (HFMA2), the expand on mma.sync and on wgmma;
    # + the bias in the MMA at stride 2 (expand_dw_v8_kernel_bc, HFMA2) at k = 3 and 5
    # + D's epilogue in packed fp16 (CUDA_KERNELS_K1_DH2) over each HFMA2 kernel above: 8 at k = 3 and 5
    # + its stride-2 kernel with the taps from global memory (CUDA_KERNELS_K1_TAPS_G) at k = 5
    # + its stride-1 kernel with U's fragments in registers (CUDA_KERNELS_K1_U_REG) at k = 3 and 5
    # + that kernel with the item's divisions as multiplies (CUDA_KERNELS_K1_FASTDIV: _dhurf) at k = 3 and 5
    # + where every depthwise unit is whole (CUDA_KERNELS_K1_WHOLE): _dhurfw at k = 3 and 5, _bcdhw at 3, _bcdhgw at 5
    # (each item's whole units first, _txdhp, and the last round's m-tiles in halves, _dhurfh / _dhurfwh: measured in
    # session 26, removed)
    # + those compiled for B0's shapes (CUDA_KERNELS_K1_STATIC): _dhurfws at k = 3 and 5, _bcdhws at k = 3 and 5
    # + the rest of B0's (CUDA_KERNELS_K1_STATIC_REST): _bcdhs at k = 3 and 5, _txdhs at k = 3 (one) and 5 (three)
    # + B2's (session 28): _dhurfws at k = 5, _bcdhws at 3 and 5, _bcdhs at 3 and 5, _txdhs at 3 (two) and 5 (one)
    # + units of one output row at the static wgmma entries (CUDA_KERNELS_K1_ROW_UNITS): _txdhsw 7 wide at B0's 14 x 14
    #   and 7 x 7 (k = 3 one, 5 three), 9 wide at B2's 9 x 9 (k = 3 two, 5 one)
    # + the halo kept at k = 5 (CUDA_KERNELS_K1_HALO5): _dhurfwsh at B0's 3.1 and B2's 3.1 / 3.2, and B0's 3.1 in bands
    #   of 14 (=2)
    # + the biases loaded early (CUDA_KERNELS_K1_BIAS_EARLY): _txdhswb at the 7 row-unit entries
    assert len(entries) == 12 + 8 + 2 + 16 + 1 + 2 + 2 + 4 + 4 + 6 + 1 + 2 + 2 + 3 + 4 + 3 + 3 + 7, report
    for i in entries:
        spill = next(line for line in lines[i:] if "spill stores" in line)
        used = next(line for line in lines[i:] if "Used" in line and "registers" in line)
        if "expand_dw_v8_kernel_dhILi48ELi3ELi1ELi1E" in lines[i]:  # 2.1's, with the packed-fp16 epilogue: one
            # predicate register saved before the item loop (P2R, STL) and read once an item (LDL): 4 bytes, allowed
            assert " 4 bytes spill stores, 4 bytes spill loads" in spill, (lines[i], spill)
            continue
        if "expand_dw_v8_kernel_dhurILi48ELi3ELi1ELi1ELi2E" in lines[i]:  # the same with U's 24 fragment registers
            # (off until measured): 4 values stored before the item loop and loaded once an item, 16 bytes, allowed
            assert " 16 bytes spill stores, 16 bytes spill loads" in spill, (lines[i], spill)
            continue
        if "expand_dw_v8_kernel_dhurfILi48ELi3ELi1ELi1ELi2E" in lines[i]:  # ... with the multiplies (2.1's default
            # since session 25): 6 values stored before the item loop and loaded once an item, 24 bytes, allowed
            assert " 24 bytes spill stores, 24 bytes spill loads" in spill, (lines[i], spill)
            continue
        if "expand_dw_v8_kernel_dhurfwILi48ELi3ELi1ELi1ELi2E" in lines[i]:  # ... where every unit is whole (2.1's
            # default since session 26): 5 values stored before the item loop and loaded once an item, 20 bytes, allowed
            assert " 20 bytes spill stores, 20 bytes spill loads" in spill, (lines[i], spill)
            continue
        if "expand_dw_v8_kernel_bcdhsILi48ELi3ELi2ELi1ELb0ELi5E" in lines[i]:  # B0's 4.0 compiled for its shape (off
            # until measured): 3 values stored before the item loop, loaded once an item (12 / 20 bytes), allowed
            assert " 12 bytes spill stores, 20 bytes spill loads" in spill, (lines[i], spill)
            continue
        if "expand_dw_v8_kernel_bcdhwsILi48ELi3ELi2ELi1ELb0ELi14E" in lines[i]:  # B2's 4.0 (36 x 36, k 3, stride 2):
            # the same three values before the item loop, two loads an item and one after (cuobjdump), allowed
            assert " 12 bytes spill stores, 20 bytes spill loads" in spill, (lines[i], spill)
            continue
        assert spill.split()[0] == "0" and " 0 bytes spill stores, 0 bytes spill loads" in spill, (lines[i], spill)
        assert int(re.search(r"Used (\d+) registers", used).group(1)) <= 128, used  # two CTAs of 256 threads per SM


# ---- kernel 1, transliterated ----

def _div_small(q: int, d: int) -> int:
    """mbconv_v2.cuh div_small in float32, as the kernel computes it."""
    inv = np.float32(1.0) / np.float32(d)
    return int(np.float32(np.float32(q) + np.float32(0.5)) * inv)


def _silu(v):
    return v / (1.0 + np.exp(-v))


def emulate_kernel1_v8(x, w_exp, b_exp, w_dw, b_dw, hidden, ks, stride, rows_per_tile, grid, images=1,
                       halo5=False):
    """x [N, H, W, C_in] float64, w_exp [hid_pad, k_pad] zero-padded, w_dw [ks * ks, hid_pad]. Returns D, the pool's
    partial sums and how often each D value was written. images = G > 1: items of G images (one band each), as
    expand_dw_v8_kernel<..., G> walks them. halo5: the halo kept at k = 5, stride 1 too (expand_dw_v8_kernel_dhurfwsh,
    which copies it after barrier A: the same rows)."""
    G = images
    n_img, h, w, c_in = x.shape
    hid_pad, k_pad = w_exp.shape
    pad, ow_n = ks // 2, 4 if stride == 1 else 2
    inn, r_seg = (ow_n - 1) * stride + ks, mb.v8_segment_rows(ks, stride)
    seg_e = (r_seg - 1) * stride + ks
    ho, wo = mb.output_size(h, stride), mb.output_size(w, stride)
    bands = -(-ho // rows_per_tile)
    assert G == 1 or (bands == 1 and stride == 1)  # kernel1_v8_images
    n_items = -(-n_img // G) if G > 1 else n_img  # NI(): groups of G images, or images
    total = hid_pad // HC * n_items * bands
    ngroups = -(-wo // ow_n)
    we = (ngroups * ow_n - 1) * stride + ks
    rows_max = (rows_per_tile - 1) * stride + ks
    m_pad = -(-G * min(rows_max, h) * w // 16) * 16
    if halo5 and bands <= 2:  # expand_dw_v8_m_pad_hk: each band touches the top or the bottom
        m_pad = -(-min(rows_max - pad, h) * w // 16) * 16
    e_tile = rows_max * we
    padded = mb.x_rows_padded_v8(c_in)
    ldx = k_pad + 8 if padded else c_in
    x_halves = m_pad * ldx if padded else -(-(m_pad * c_in + 8) // 8) * 8
    d = np.full((n_img, ho, wo, hidden), np.nan)
    writes = np.zeros((n_img, ho, wo, hidden), dtype=np.int64)
    partial = np.full((n_img, bands, hid_pad), np.nan)
    assert grid <= total
    kh = ks - stride
    halo = mb.kernel1_v8_halo(w, ks, stride, HC, keep_k5=halo5) and G == 1
    for b in range(grid):
        xs = np.zeros(x_halves)  # zeroed once per CTA
        es = np.full((G * rows_max * we, HC), np.nan)  # E: stale (NaN) until written; G tiles
        for r in range(G * rows_max):
            for col in range(we - w):
                ec = col if col < pad else w + col
                es[r * we + ec] = 0.0
        if G > 1:  # one band per image: the pad rows above and below each tile, once per CTA
            assert rows_max == h + 2 * pad and ho == h
            for m in range(G):
                for row in [*range(pad), *range(h + pad, h + 2 * pad)]:
                    es[m * e_tile + row * we:m * e_tile + (row + 1) * we] = 0.0
        red = np.full((G, GROUPS, HC), np.nan)
        items = cta_items(total, grid, b)

        def pool_store(i):
            chunk, n, band = decode(i, n_items, bands)
            ng = min(G, n_img - G * n) if G > 1 else 1
            for m in range(ng):
                s = np.zeros(HC)
                for g in range(GROUPS):
                    s = s + red[m, g]
                partial[G * n + m if G > 1 else n, band, chunk * HC:(chunk + 1) * HC] = s

        for i in items:
            chunk, n, band = decode(i, n_items, bands)
            ng = min(G, n_img - G * n) if G > 1 else 1
            n_first = G * n if G > 1 else n  # the item's first image
            c0 = chunk * HC
            oh0 = band * rows_per_tile
            oh1 = min(oh0 + rows_per_tile, ho)
            r0 = oh0 * stride - pad
            e_rows = (oh1 - oh0 - 1) * stride + ks
            ih_lo, ih_hi = max(0, r0), min(h - 1, r0 + e_rows - 1)
            cont = halo and i > items[0] and band > 0  # the previous item: band - 1 of this (chunk, image)
            if cont:
                assert decode(i - 1, n_items, bands) == (chunk, n, band - 1) and r0 + kh - 1 <= h - 1 + pad
            ih_first = r0 + kh if cont else ih_lo
            npix = max(0, ih_hi - ih_first + 1) * w * ng
            # the bulk copy: bytes and source offset multiples of 16; G > 1: the ng images' rows, one range
            nbytes, src = npix * c_in * 2, ((n_first * h + ih_first) * w * c_in) * 2
            assert nbytes % 16 == 0 and src % 16 == 0 and nbytes <= x_halves * 2
            flat = x.reshape(-1, c_in)
            band_x = flat[src // 2 // c_in:src // 2 // c_in + npix]
            if padded:  # one bulk copy per pixel, C_in halves at pitch k_pad + 8 (16-byte aligned)
                assert (ldx * 2) % 16 == 0 and (c_in * 2) % 16 == 0
                for q in range(npix):
                    xs[q * ldx:q * ldx + c_in] = band_x[q]
            else:
                xs[:npix * c_in] = band_x.reshape(-1)
            if cont:  # the previous (full) band's last kh E rows become this band's first
                es[:kh * we] = es[(rows_max - kh) * we:rows_max * we].copy()
            if i > items[0]:
                pool_store(i - 1)
            in_lo, in_hi = ih_lo - r0, ih_hi - r0
            for m in range(ng if G == 1 else 0):  # G = 1: the band's rows outside the image, per item
                es[m * e_tile:m * e_tile + in_lo * we] = 0.0
                es[m * e_tile + (in_hi + 1) * we:m * e_tile + e_rows * we] = 0.0
            # the expand
            e_off = (ih_first - r0) * we + pad
            u = w_exp[c0:c0 + HC]
            for mt in range((npix + 15) // 16):
                qs = np.arange(mt * 16, mt * 16 + 16)
                idx = qs[:, None] * ldx + np.arange(k_pad)[None, :]
                assert idx.max() < x_halves
                acc = xs[idx] @ u.T
                full = mt * 16 + 16 <= npix
                for hrow in range(16):
                    q = mt * 16 + hrow
                    if not full and q >= npix:
                        continue
                    assert q < npix
                    m = _div_small(q, h * w) if G > 1 else 0
                    qi = q - m * h * w
                    row = _div_small(qi, w)
                    pos = m * e_tile + e_off + row * we + (qi - row * w)
                    assert pos < (m + 1) * e_tile
                    es[pos] = _silu(acc[hrow] + b_exp[c0:c0 + HC])
            # the depthwise
            rows = oh1 - oh0
            nseg = -(-rows // r_seg)
            dw_items = nseg * ngroups * ng
            dq, dr = GROUPS // ngroups, GROUPS % ngroups
            wt = w_dw[:, c0:c0 + HC]
            bias = b_dw[c0:c0 + HC]
            e3 = es.reshape(G, rows_max, we, HC)
            for g in range(GROUPS):
                seg, og = divmod(g, ngroups)
                m = 0
                if G > 1:
                    while seg >= nseg:
                        seg, m = seg - nseg, m + 1
                    red[:, g] = 0.0  # the thread's slots, every image
                m_sum = m
                sums = np.zeros(HC)
                for j in range(g, dw_items, GROUPS):
                    assert (m * nseg + seg, og) == divmod(j, ngroups)
                    orow0, ow0, mi = seg * r_seg, og * ow_n, m
                    seg, og = seg + dq, og + dr
                    if og >= ngroups:
                        og, seg = og - ngroups, seg + 1
                    if G > 1:
                        while seg >= nseg:
                            seg, m = seg - nseg, m + 1
                        if mi != m_sum:
                            red[m_sum, g] = sums
                            sums, m_sum = np.zeros(HC), mi
                    e2 = e3[mi]
                    valid_rows = min(r_seg, rows - orow0)
                    e_last = (valid_rows - 1) * stride + ks - 1
                    valid = min(ow_n, wo - ow0)
                    acc = {}
                    for er in range(seg_e):
                        erow = orow0 * stride + min(er, e_last)
                        assert erow < e_rows and ow0 * stride + inn <= we
                        e = [e2[erow, ow0 * stride + t] for t in range(inn)]
                        for o in range(r_seg):
                            dy = er - o * stride
                            if dy < 0 or dy >= ks:
                                continue
                            if dy == 0:
                                acc[o] = [bias.copy() for _ in range(ow_n)]
                            for uu in range(ow_n):
                                for dx in range(ks):
                                    acc[o][uu] = acc[o][uu] + e[uu * stride + dx] * wt[dy * ks + dx]
                            if dy == ks - 1 and o < valid_rows:
                                for uu in range(valid):
                                    s = _silu(acc[o][uu])
                                    oh, ow = oh0 + orow0 + o, ow0 + uu
                                    hc = min(HC, hidden - c0)
                                    d[n_first + mi, oh, ow, c0:c0 + hc] = s[:hc]
                                    writes[n_first + mi, oh, ow, c0:c0 + hc] += 1
                                    sums = sums + s
                if G == 1 or m_sum < ng:
                    red[m_sum, g] = sums
        pool_store(items[-1])
    return d, partial, writes


def test_segment_rows_follow_the_band():
    """4 output rows a segment at k = 3, stride 1; 2 elsewhere: at stride 2 a k = 3 band is short (B0's 2.0: 2 rows),
    and a segment of 4 summed 4 rows for 2 valid ones. The kernel's rule is the mirror's."""
    assert [mb.v8_segment_rows(k, s) for k, s in ((3, 1), (3, 2), (5, 1), (5, 2))] == [4, 2, 2, 2]
    assert mb.band_rows(112, 112, 3, 2, 16, 48, True, 11, 16) == 2  # B0 features.2.0
    source = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()
    assert "static constexpr int R = KS == 3 && S == 1 ? 4 : 2;" in source


@pytest.mark.parametrize("n,h,w,c_in,hidden,ks,stride,rows,grid", [
    (2, 14, 14, 24, 96, 3, 1, 5, 3),   # bands of 5 rows: a short last segment (R = 4), two chunks, stale X rows
    (2, 13, 13, 16, 48, 5, 1, 3, 2),   # R = 2: segments of 2 and 1 rows
    (3, 9, 11, 24, 48, 3, 2, 2, 4),    # stride 2, odd sizes
    (2, 7, 7, 40, 96, 5, 2, 4, 3),     # stride 2, k = 5, C_in % 16 == 8 (the k16 tail reads the next pixel)
    (2, 3, 3, 8, 48, 5, 1, 3, 2),      # narrower than a column group
    (1, 1, 1, 8, 48, 3, 1, 1, 1),      # one pixel
    (2, 17, 5, 112, 48, 5, 1, 5, 3),   # tall and narrow, C_in a multiple of 16
    (1, 12, 8, 16, 144, 3, 2, 6, 2),   # stride 2, one band per image, three chunks
    (2, 7, 7, 80, 96, 3, 1, 7, 3),     # padded X rows (C_in = 80), one band per image
    (3, 5, 6, 64, 48, 5, 2, 2, 2),     # padded X rows, stride 2, k = 5
    (2, 16, 9, 24, 48, 3, 1, 2, 2),    # the halo over 8 bands of 2 rows (k = 3)
    (2, 15, 7, 24, 96, 3, 2, 1, 3),    # the halo at stride 2, one row per band, an odd height
    (2, 13, 10, 16, 48, 5, 2, 2, 2),   # the halo at k = 5, stride 2 (3 rows kept), bands below the image's end
    (2, 12, 10, 16, 48, 3, 2, 3, 2),   # k = 3, stride 2: segments of 2 rows (v8_segment_rows), a short last one
    (1, 14, 6, 16, 48, 5, 1, 13, 1),   # k = 5, stride 1 (no halo): a one-row last band
])
def test_kernel1_v8_transliterated_equals_the_direct_convolution(n, h, w, c_in, hidden, ks, stride, rows, grid):
    _check_transliteration(n, h, w, c_in, hidden, ks, stride, rows, grid, 1)


@pytest.mark.parametrize("n,h,w,c_in,hidden,ks,stride,grid", [
    (4, 7, 7, 40, 96, 5, 1, 3),    # 2 groups of 2 images, two chunks, k = 5 (B0's 6.x in small)
    (5, 7, 7, 24, 48, 3, 1, 2),    # an odd batch: the last item is one image; k = 3 (7.0)
    (3, 5, 6, 80, 48, 5, 1, 2),    # padded X rows (C_in = 80): one bulk copy per pixel of both images
    (1, 7, 7, 16, 48, 3, 1, 1),    # one image: a single item of one
    (2, 1, 1, 8, 48, 3, 1, 1),     # one pixel per image: most thread groups start past the item's images
    (6, 3, 3, 40, 144, 5, 1, 4),   # C_in % 16 == 8: the k16 tail reads the next pixel (the next image's, too)
])
def test_kernel1_v8_two_image_items_transliterated(n, h, w, c_in, hidden, ks, stride, grid):
    """expand_dw_v8_kernel<..., 2>: items of 2 images (one band each), D and the per-image partial sums as the direct
    convolution computes them, every D value written once."""
    _check_transliteration(n, h, w, c_in, hidden, ks, stride, h, grid, 2)


@pytest.mark.parametrize("n,h,w,c_in,hidden,ks,stride,rows,grid", [
    (2, 28, 9, 40, 48, 5, 1, 10, 2),   # 3.1's bands (10, 10, 8 rows of 28) on a narrow image: 4 rows kept twice
    (2, 17, 5, 112, 48, 5, 1, 5, 3),   # four bands, the last two rows; CTAs starting mid-image (no halo there)
    (1, 14, 6, 16, 96, 5, 1, 4, 1),    # two chunks through one CTA: the first band of each expands all its rows
    (2, 28, 9, 40, 48, 5, 1, 14, 2),   # 3.1 in 2 bands of 14 (CUDA_KERNELS_K1_HALO5=2): X holds 16 rows, not 18
    (2, 28, 28, 40, 48, 5, 1, 14, 3),  # B0's 3.1 itself (one chunk), its default since session 30
    (2, 28, 28, 40, 48, 5, 1, 10, 4),  # ... in today's 3 bands of 10 (=1)
    (3, 20, 5, 16, 96, 5, 1, 10, 4),   # 2 bands, 2 chunks, CTAs starting at either band
])
def test_kernel1_v8_halo_at_k5_transliterated(n, h, w, c_in, hidden, ks, stride, rows, grid):
    """CUDA_KERNELS_K1_HALO5 (expand_dw_v8_kernel_dhurfwsh): E's 4 halo rows kept between the bands of a (chunk,
    image) at k = 5, stride 1, each continuing band expanding only its new rows - D and the sums as the direct
    convolution computes them."""
    assert mb.kernel1_v8_halo(w, ks, stride, HC, keep_k5=True) and not mb.kernel1_v8_halo(w, ks, stride, HC)
    _check_transliteration(n, h, w, c_in, hidden, ks, stride, rows, grid, 1, halo5=True)


def _check_transliteration(n, h, w, c_in, hidden, ks, stride, rows, grid, images, halo5=False):
    g = torch.Generator().manual_seed(h * 100 + w + ks)
    hid_pad, k_pad = -(-hidden // HC) * HC, -(-c_in // 16) * 16
    x = torch.randn(n, c_in, h, w, generator=g, dtype=torch.float64)
    we_ = torch.randn(hidden, c_in, 1, 1, generator=g, dtype=torch.float64) / math.sqrt(c_in)
    be = torch.randn(hidden, generator=g, dtype=torch.float64)
    wd = torch.randn(hidden, 1, ks, ks, generator=g, dtype=torch.float64) / ks
    bd = torch.randn(hidden, generator=g, dtype=torch.float64)
    e_ref = F.silu(F.conv2d(x, we_, be))
    d_ref = F.silu(F.conv2d(e_ref, wd, bd, stride, ks // 2, groups=hidden)).permute(0, 2, 3, 1).numpy()
    w_exp = np.zeros((hid_pad, k_pad))
    w_exp[:hidden, :c_in] = we_.reshape(hidden, c_in).numpy()
    b_exp = np.zeros(hid_pad)
    b_exp[:hidden] = be.numpy()
    w_dw = np.zeros((ks * ks, hid_pad))
    w_dw[:, :hidden] = wd.reshape(hidden, ks * ks).t().numpy()
    b_dw = np.zeros(hid_pad)
    b_dw[:hidden] = bd.numpy()
    d, partial, writes = emulate_kernel1_v8(x.permute(0, 2, 3, 1).numpy(), w_exp, b_exp, w_dw, b_dw, hidden, ks,
                                            stride, rows, grid, images, halo5)
    assert (writes == 1).all()
    np.testing.assert_allclose(d, d_ref, rtol=1e-12, atol=1e-12)
    ho = d_ref.shape[1]
    for band in range(-(-ho // rows)):
        want = d_ref[:, band * rows:(band + 1) * rows].sum(axis=(1, 2))
        np.testing.assert_allclose(partial[:, band, :hidden], want, rtol=1e-12, atol=1e-10)


def test_the_kernel_text_holds_the_modelled_expressions():
    """The expressions the transliteration models, as they stand in csrc/mbconv_v8.cuh."""
    for expr in ("const int i_begin = (int)((long long)blockIdx.x * total / gridDim.x);",
                 "return x_padded_v8(C_in) ? m_pad * (k_pad + 8) : round_up(m_pad * C_in + 8, 8);",
                 "ldx = x_padded ? p.k_pad + 8 : p.C_in;",
                 "expand_k16<HC>(acc, Xs, ldx, Us, ldu, mt * 16, k0, a_row, a_k, b_row, b_k);",
                 "bf::bulk_copy_g2s(smem_addr(Xs + q * ldx), src + (size_t)q * p.C_in, (uint32_t)(p.C_in * 2), bar);",
                 # at one image per item (G = 1) m = 0 and ng = 1: the transliteration's expressions
                 "ep[h] = Es + (m * e_tile + e_off + row * WE + (q - row * p.W)) * LDE + (lane & 3) * 2;",
                 "if (mt * 16 + 16 <= npix)",
                 "const int valid_rows = min(R, rows - orow0), e_last = (valid_rows - 1) * S + KS - 1;",
                 # (W: the launch-constant whole units, CUDA_KERNELS_K1_WHOLE; false where a unit is partial)
                 "const __half* erow = ebase + (W ? er : min(er, e_last)) * WE * LDE;",
                 "if (dy == KS - 1 && (W || o < valid_rows)) {",
                 "for (int g = 0; g < GROUPS; ++g) s += red[g * HC + tid];",
                 # (FD: the divisions as multiplies, CUDA_KERNELS_K1_FASTDIV; the same quotients)
                 "const int dq = FD ? fd->ngroups.div(GROUPS) : GROUPS / ngroups, dr = GROUPS - dq * ngroups;",
                 "const bool cont = halo && i > i_begin && it.band > 0;",
                 "ih_first = cont ? band * p.rows_per_tile * S - PAD + KH : ih_lo;",
                 "const int npix = max(0, ih_hi - ih_first + 1) * p.W * ng;",
                 "const int ng = G > 1 ? min(G, p.N - G * it.n) : 1;",
                 "Es + ((rows_max - KH) * WE + pix) * LDE + (j - pix * ECH) * 4);",
                 "if (j < hcount) *reinterpret_cast<uint2*>(Es + pix * LDE + (j - pix * ECH) * 4) = hv[k];",
                 # (HK: the same copy after barrier A, CUDA_KERNELS_K1_HALO5)
                 "*reinterpret_cast<uint2*>(Es + ofs) = *reinterpret_cast<const uint2*>(Es + (rows_max - KH) * WE * LDE + ofs);",
                 "const int e_off = (ih_first - r0) * WE + PAD;",
                 "issue_x(i + 1, halo && nx.band > 0);",
                 # items of G images (the emulation's images > 1)
                 "m = div_small(q, inv_hw);",
                 "const __half* src = p.x + ((size_t)(G > 1 ? G * it.n : it.n) * p.H + ih_lo) * p.W * p.C_in;",
                 "const int items = nseg * ngroups * ng;",
                 "const __half* ebase = Es + (mi * e_tile + orow0 * S * WE + ow0 * S) * LDE + 2 * pair;",
                 "*reinterpret_cast<float2*>(red + (m_sum * GROUPS + group) * HC + 2 * pair) = make_float2(sum0, sum1);",
                 "if (G == 1 || m_sum < ng)",
                 "p.partial[(size_t)(G * it.n + m) * p.hid_pad + it.chunk * HC + tid] = s;",
                 "*reinterpret_cast<uint2*>(Es + (m * e_tile + e) * LDE + c * 4) = make_uint2(0, 0);"):
        assert expr in SOURCE, expr
    v2 = (CSRC / "mbconv_v2.cuh").read_text()  # expand_k16: A rows m0 + a_row at pitch ldx, column k0 + a_k
    assert "expand_k16_at<HC>(acc, bf::smem_addr(Xs + (m0 + a_row) * ldx + k0 + a_k), Us, ldu, k0, b_row, b_k, c);" in v2
    # the kernel's body (expand_dw_v8_body, which expand_dw_v8_kernel runs)
    body = SOURCE.split("expand_dw_v8_body(const Params& p, const CUtensorMap* xmap = nullptr,")[1]
    body = body.split("expand_dw_v8_kernel(const Params p)")[0]
    assert "atomicAdd" not in body
    # barrier A, barrier B per item, one after the loop; the mbarrier once per CTA; with the bias in the MMA
    # (CUDA_KERNELS_K1_BIAS_C, stride 2) one more per chunk, after U is halved; with the halo kept at k = 5
    # (CUDA_KERNELS_K1_HALO5) one more per continuing band, after its copy
    assert body.count("__syncthreads()") == 6
    assert body.split("if (HK && cont) {")[1].split("if (!TG && new_chunk)")[0].count("__syncthreads()") == 1
    assert body.split("if constexpr (BC) {  // U halved")[1].split("// E rows above")[0].count("__syncthreads()") == 1


def test_bank_pattern_of_the_depthwise_loads():
    """A warp's half2 loads of one E pixel column: lanes 0-23 group g, 24-31 group g + 1 (the next column group, 4
    output columns = 4 S input pixels further at stride 1; stride 2 reads 2 x 2): at E's pitch 60 the 32 lanes hit 32
    distinct banks (version 3's pitch 56: 8 banks twice)."""
    for pitch, conflicts in ((60, False), (56, True)):
        for stride, ow_n in ((1, 4), (2, 2)):
            for warp in range(8):
                banks = []
                for lane in range(32):
                    tid = warp * 32 + lane
                    pair, group = tid % PAIRS, tid // PAIRS
                    if group >= GROUPS:
                        continue
                    pixel = (group - (warp * 32) // PAIRS) * ow_n * stride  # column groups step column-first
                    banks.append((pixel * pitch * 2 + 4 * pair) // 4 % 32)
                if len(banks) == 32:
                    assert (len(set(banks)) < 32) == conflicts, (pitch, stride, warp)


# ---- GPU ----

def _distinct():
    from mbconv_helpers import DISTINCT

    return DISTINCT


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _distinct())
def test_v8_every_shape_of_b0_and_b2(name, path, batch):
    from mbconv_helpers import check_shape

    check_shape(name, path, batch, 8)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["features.2.0", "features.2.1", "features.3.1", "features.5.1", "features.6.0"])
def test_v8_batch_128_against_float32(path):
    from mbconv_helpers import block_of, check_on_gpu, gpu_input, mbconv_shapes

    torch.manual_seed(2)
    x = gpu_input(128, mbconv_shapes("efficientnet_b0")[path])
    check_on_gpu(block_of("efficientnet_b0", path), x, 8, "float32")


@pytest.mark.cuda
@pytest.mark.parametrize("path,size,batch", [("features.6.0", 1, 5), ("features.5.1", 23, 3), ("features.4.0", 13, 5),
                                             ("features.6.1", 5, 7), ("features.7.0", 3, 2), ("features.4.1", 20, 1),
                                             ("features.2.0", 9, 5), ("features.3.0", 7, 5), ("features.1.0", 5, 5),
                                             ("features.5.0", 17, 2), ("features.2.1", 57, 3), ("features.3.1", 2, 9)])
def test_v8_odd_sizes(path, size, batch):
    from mbconv_helpers import check_b0_at_size

    check_b0_at_size(path, size, batch, 8)


def _prepared(path, batch, seed=1):
    from mbconv_helpers import b0_prepared

    return b0_prepared(path, batch, seed)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 128])
@pytest.mark.parametrize("path", ["features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1",
                                  "features.4.1", "features.5.1", "features.6.0", "features.7.0"])
def test_v8_agrees_with_v3_and_repeats_bit_for_bit(path, batch):
    """D is version 3's bit for bit, the pool's sums are in another (fixed) order: close to version 3, and
    repeated launches (a batch-1 launch between) give the same bits, except where version 8 runs version 3's kernel 1
    (no expand), whose pool adds with atomics in a varying order (measured: 1.94e-06 and 2.02e-06 from version 3)."""
    from perfmodel.harness import relative_error

    params, weights, x = _prepared(path, batch)
    v3 = mb.mbconv(x, params, weights, version=3)
    first = mb.mbconv(x, params, weights, version=8)
    mb.mbconv(x[:1], params, weights, version=8)
    again = mb.mbconv(x, params, weights, version=8)
    torch.cuda.synchronize()
    assert torch.isfinite(first).all()
    assert relative_error(first, v3.double()) < POOL_ORDER_REL_ERROR
    if path.startswith("features.1."):  # version 3's kernel 1 inside version 8: its pool adds with atomics
        assert relative_error(again, first.double()) < POOL_ORDER_REL_ERROR
    else:
        assert torch.equal(first, again)


@pytest.mark.cuda
@pytest.mark.parametrize("pdl", ["0", "1"])
def test_v8_chain_in_a_cuda_graph(monkeypatch, pdl):
    """Four blocks captured with PDL on or off and replayed into NaN-poisoned outputs equal eager version 8."""
    from cuda_kernels import _pdl

    monkeypatch.setenv(_pdl.SWITCH, pdl)
    paths = ["features.2.1", "features.3.0", "features.3.1", "features.4.0"]
    steps = [_prepared(p, 8, seed=i)[:2] for i, p in enumerate(paths)]
    x = _prepared(paths[0], 8)[2]
    outs, want, cur = [], [], x
    for params, weights in steps:
        cur = mb.mbconv(cur, params, weights, version=8)
        outs.append(torch.empty_like(cur))
        want.append(cur.clone())

    def forward():
        cur = x
        for (params, weights), out in zip(steps, outs):
            cur = mb.mbconv(cur, params, weights, out=out, version=8)

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
            assert torch.equal(o, w)


@pytest.mark.cuda
def test_efficientnet_b0_swapped_with_version_8():
    """`perfmodel bench --backend cuda_kernels`'s mechanism with CUDA_KERNELS_MBCONV_VERSION=8: every MBConv swapped
    (version 8), checked against its folded block, and the network's output close to PyTorch's."""
    code = """
import torch
from cuda_kernels import mbconv as mb
from mbconv_helpers import fresh_model, gpu_input
from perfmodel.bench import fused_model
from perfmodel.harness import relative_error
from perfmodel.zoo import fold_batchnorm
assert mb.DEFAULT_VERSION == 8
model = fresh_model("efficientnet_b0").cuda().half().to(memory_format=torch.channels_last)
x = gpu_input(4, (3, 224, 224))
fused, info = fused_model(model, [x])
assert info["fused_blocks"]["MBConv"] == 16 and info["fallback_count"] == 0, info
assert info["check"]["blocks_checked"] == 18  # 16 MBConv + the stem (the unit with block 1.0 follows versions 9-11)
# + the fused head (effnet_head, on by default)
versions = {m.version for m in fused.modules() if isinstance(m, mb.FusedMBConv)}
assert versions == {8}, versions
with torch.no_grad():
    expected = fold_batchnorm(model)(x)
    got = fused(x)
err = relative_error(got, expected.double())
print("V8 network rel error", err)
assert err < 5e-2
"""
    env = {**os.environ, "CUDA_KERNELS_MBCONV_VERSION": "8",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


# ---- items of G images (CUDA_KERNELS_K1_IMAGES=2; mbconv_v8.cuh kernel1_v8_images) ----

def test_k1_images_switch_and_rule():
    src = (CSRC / "mbconv_v8.cuh").read_text()
    assert 'kernel1_switch("CUDA_KERNELS_K1_IMAGES")' in src and mb.K1_IMAGES_SWITCH == "CUDA_KERNELS_K1_IMAGES"
    assert "if (requested <= 1 || row_blocks != 1 || stride != 1) return 1;" in src
    assert f"constexpr int kV8TwoCtaSmem = {mb.V8_TWO_CTA_SMEM // 1024} * 1024;" in src
    assert "if (g == 2) return launch_expand_dw_v8<48, KS, 1, 2, HF, false, false, false, DH>(p, stream, pdl);" in src
    # B0's features.6.1 at G = 2, by hand: X padded 112 rows (2 x 49 -> 16s) x 200 halves, U 48 x 200, E 2 x 11 x 12
    # pixels x 60 halves, the per-group sums 2 x 10 x 48 fp32, the taps and bias 26 x 48 fp32, the mbarrier
    six_one = 112 * 200 * 2 + 48 * 200 * 2 + 2 * 11 * 12 * 60 * 2 + 2 * 10 * 48 * 4 + 26 * 48 * 4 + 8
    assert six_one == 104_520 <= 113 * 1024
    assert mb.kernel1_smem_bytes(7, 7, 7, 5, 1, 192, 48, True, 8, 192, images=2) == six_one
    got = set()
    for name, path, c, h, w, hidden, ks, stride, expand in _b0_b2_blocks():
        if not expand:
            continue
        k_pad = -(-c // 16) * 16
        rows = mb.band_rows(h, w, ks, stride, k_pad, HC, True, 8, c)
        row_blocks = -(-mb.output_size(h, stride) // rows)
        if mb.kernel1_v8_images(2, row_blocks, h, w, ks, stride, c, k_pad, rows) == 2:
            got.add((name, path))
    # B0's 7 x 7 stride-1 blocks; B0's 14 x 14 ones and B2's 9 x 9 ones do not fit two CTAs per SM at 2 images
    assert got == {("efficientnet_b0", p) for p in ("features.6.1", "features.6.2", "features.6.3", "features.7.0")}
    assert mb.kernel1_v8_images(1, 1, 7, 7, 5, 1, 192, 192, 7) == 1 and mb.kernel1_v8_images(2, 2, 7, 7, 5, 1, 192, 192, 4) == 1
    assert mb.kernel1_v8_images(2, 1, 14, 14, 5, 2, 112, 112, 7) == 1  # stride 2: not built


def test_k1_images_smem_and_rule_in_cuda_equal_the_python_mirror(tmp_path):
    """kernel1_v8_images and expand_dw_v8_smem_bytes(images = 2), compiled for the host and run, against the mirror."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME)")
    cases = [(7, 7, 5, 1, 192, 192, 7, 1), (7, 7, 3, 1, 192, 192, 7, 1), (14, 14, 5, 1, 112, 112, 14, 1),
             (9, 9, 5, 1, 208, 208, 9, 1), (7, 7, 5, 1, 192, 192, 4, 2), (5, 5, 3, 1, 40, 48, 5, 1),
             (14, 14, 5, 2, 112, 112, 7, 1), (3, 3, 3, 1, 24, 32, 3, 1)]
    rows = "\n".join("  {" + ", ".join(map(str, c)) + "}," for c in cases)
    (tmp_path / "g.cu").write_text(f"""#include <cstdio>
#include "mbconv_v8.cuh"
int main() {{
  const int cases[][8] = {{
{rows}
  }};
  for (const auto& c : cases) {{
    const int wo = (c[1] - 1) / c[3] + 1;
    std::printf("%d %d\\n", mb::expand_dw_v8_smem_bytes(c[0], c[1], wo, c[6], c[2], c[3], c[4], c[5], 48, 2),
                mb::kernel1_v8_images(2, c[7], c[0], c[1], wo, c[6], c[2], c[3], c[4], c[5], 48));
  }}
  return 0;
}}
""")
    got = _host_run(nvcc, tmp_path / "g.cu")
    want = [(mb.kernel1_smem_bytes(r, h, w, ks, st, kp, HC, True, 8, c, 2), mb.kernel1_v8_images(2, rb, h, w, ks, st, c, kp, r))
            for h, w, ks, st, c, kp, r, rb in cases]
    assert got == want


@pytest.mark.parametrize("ng,rows,wo,R,OW", [(2, 7, 7, 2, 4), (2, 7, 7, 4, 4), (1, 7, 7, 2, 4), (2, 3, 3, 4, 4),
                                             (2, 14, 14, 2, 4), (2, 1, 1, 2, 4), (2, 9, 9, 4, 4),
                                             # one-row units (CUDA_KERNELS_K1_ROW_UNITS)
                                             (1, 14, 14, 1, 7), (2, 7, 7, 1, 7), (1, 9, 9, 1, 9), (1, 4, 9, 1, 9)])
def test_k1_images_depthwise_walk_covers_each_output_once(ng, rows, wo, R, OW):
    """Every (image, segment, column group) once; every slot written at most once, only for images of the item, with
    exactly its group's items of that image (an unwritten slot keeps the zero the thread stored first)."""
    groups = 256 // (HC // 2)  # 10
    visits, writes = depthwise_walk(ng, rows, wo, R, OW, groups)
    nseg, ngroups = -(-rows // R), -(-wo // OW)
    want = {(m, s * R, g * OW) for m in range(ng) for s in range(nseg) for g in range(ngroups)}
    assert sorted(visits) == sorted(want) and len(visits) == len(want)
    slots = [(m, g) for m, g, _ in writes]
    assert len(slots) == len(set(slots)) and all(m < ng for m, _ in slots)
    for m, g, summed in writes:
        assert all(v[0] == m for v in summed)
    for m in range(ng):  # each image's items, over the slots written for it, exactly once
        mine = sorted(v for _, _, summed in writes for v in summed if v[0] == m)
        assert mine == sorted(v for v in want if v[0] == m)


def test_k1_images_pixel_to_image_division_is_exact():
    """The expand's image of pixel q of a 2-image item: div_small(q, H W) in float32, exact for every pixel of every
    B0 / B2 size a one-band block has (and the row within the image, div_small(q - m H W, W), as before)."""
    for h in (3, 5, 7, 9, 14, 18):
        for q in range(2 * h * h):
            m = _div_small(q, h * h)
            assert m == q // (h * h)
            assert _div_small(q - m * h * h, h) == (q - m * h * h) // h


@pytest.mark.cuda
@pytest.mark.parametrize("path,batch", [("features.6.1", 128), ("features.6.1", 5), ("features.6.1", 1),
                                        ("features.6.3", 127), ("features.7.0", 128), ("features.7.0", 3)])
def test_k1_images_against_one_image_items(path, batch, monkeypatch):
    """Version 8 with 2-image items against 1-image items: D is the same bits, each image's pool sum is added in another
    order, so the block agrees to the pool's order (1e-4) and both are within 2x PyTorch fp16 of float64; the profiler
    shows the 2-image kernel ran; odd batches leave the last item one image."""
    from mbconv_helpers import assert_repeatable, b0_prepared, check_shape, run_profiled
    from perfmodel.harness import relative_error

    params, weights, x = b0_prepared(path, batch)
    monkeypatch.delenv(mb.K1_IMAGES_SWITCH, raising=False)
    base = mb.mbconv(x, params, weights, version=8)
    monkeypatch.setenv(mb.K1_IMAGES_SWITCH, "2")
    got, names = run_profiled(x, params, weights, base, 8)
    assert re.search(r"expand_dw_v8_kernel<48, \d, 1, 2\b", names), names[:500]
    assert relative_error(got, base.double()) < 1e-4
    assert_repeatable(got, x, params, weights, 8)
    check_shape("efficientnet_b0", path, batch, 8)
