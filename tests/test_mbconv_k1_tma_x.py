"""Version 8's kernel 1 with X by the tensor memory accelerator (csrc/mbconv_v8.cuh expand_dw_v8_kernel_tx,
CUDA_KERNELS_K1_TMA_X), and with its expand on warpgroup MMAs over those boxes (CUDA_KERNELS_K1_WGMMA); both on by
default since they were measured in session 17 (NOTES.md "Kernel 1's stall reasons", "Session 17").

CPU: the swizzled offsets against the 128-byte swizzle as CUTLASS writes it (Swizzle<3, 4, 3>: byte address bits 4-6
XOR bits 7-9), X placed box by box as the copy engine would (zeros past C_in) and read back at the kernel's offsets,
ldmatrix's 8 rows on 8 distinct bank groups, which blocks take it (shared memory summed by hand). The C++ mirrors and
ptxas are test_mbconv_v8.py's (test_kernel1_v8_smem_in_cuda_equals_the_python_mirror,
test_kernel1_v8_compiles_without_spills). GPU (@pytest.mark.cuda): the block's output equal to the padded layout's bit
for bit (the same values reach the same MMAs) with the profiler naming the kernel, at B0 / B2 shapes and batches 1,
5 and 128, odd sizes against float64, and B0 with it through the check before timing."""

from pathlib import Path

import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def _swizzled(byte: int) -> int:
    """Where the copy engine's 128-byte swizzle puts the byte at `byte` of a 1024-aligned box (Swizzle<3, 4, 3>)."""
    return byte ^ (((byte >> 7) & 7) << 4)


@pytest.mark.parametrize("m_pad", [16, 48, 112, 208])  # 48: U's rows under the wgmma expand
def test_offsets_follow_the_128_byte_swizzle(m_pad):
    for row in range(m_pad):
        for k in range(0, 256, 8):
            plain = (k // 64) * m_pad * 128 + row * 128 + (k % 64) * 2  # box k // 64, row `row`, 128 bytes a row
            assert 2 * mb.x_tx_offset(row, k, m_pad) == _swizzled(plain), (row, k)


def test_the_boxes_read_back_as_x_and_ldmatrix_does_not_conflict():
    """X (98 pixels x 192 channels, an item of two 7 x 7 images) placed as three swizzled boxes of 112 rows (rows past
    the item and channels past C_in: zeros), read at x_tx_offset: every (row, 8-channel piece) is X's; each k16 step's
    8-row ldmatrix phases touch 8 distinct 16-byte bank groups."""
    m_pad, c_in = 112, 192
    x = torch.arange(98 * c_in, dtype=torch.int64).reshape(98, c_in) + 1
    boxes = -(-c_in // 64)
    smem = torch.zeros(boxes * m_pad * 64, dtype=torch.int64)  # in halves
    for b in range(boxes):
        for row in range(m_pad):
            for k in range(64):
                value = x[row, 64 * b + k] if row < 98 and 64 * b + k < c_in else 0
                smem[_swizzled(b * m_pad * 128 + row * 128 + 2 * k) // 2] = value
    for row in range(m_pad):
        for k in range(0, boxes * 64, 8):
            at = mb.x_tx_offset(row, k, m_pad)
            want = x[row, k:k + 8] if row < 98 and k < c_in else torch.zeros(8, dtype=torch.int64)
            assert torch.equal(smem[at:at + 8], want), (row, k)
    for m0 in range(0, m_pad, 16):
        for k0 in range(0, c_in, 16):
            for half in (0, 8):  # one 8 x 16-byte phase of ldmatrix.x4: rows m0 + half .. + 7 at one k piece
                for kk in (k0, k0 + 8):
                    groups = {(mb.x_tx_offset(m0 + half + r, kk, m_pad) * 2 // 16) % 8 for r in range(8)}
                    assert len(groups) == 8, (m0, k0, half, kk)


def test_which_blocks_take_it():
    """Shared memory summed by hand (X boxes + 1 KB slack, U, E, the per-group sums, taps, the mbarrier) against the
    two-CTA limit of 113 KB = 115,712 bytes."""
    args = dict(kernel_size=3, stride=1, c_in=80, k_pad=80, rows=14, images=1)
    # B0 features.4.1 (14 x 14, C_in 80): X 1024 + 2 boxes x 208 x 128, U 48 x 88 x 2, E 16 x 18 x 60 x 2,
    # sums 10 x 48 x 4, taps (9 + 1) x 48 x 4, 8
    assert mb.kernel1_smem_bytes(14, 14, 14, 3, 1, 80, 48, True, 8, 80, 1, tx=True) == \
        1024 + 2 * 208 * 128 + 48 * 88 * 2 + 16 * 18 * 60 * 2 + 10 * 48 * 4 + 10 * 48 * 4 + 8 == 101_128
    assert mb.kernel1_v8_tx(True, 14, 14, **args) and not mb.kernel1_v8_tx(False, 14, 14, **args)
    # features.6.1 (7 x 7, C_in 192, two images an item): X 1024 + 3 boxes x 112 x 128, U 48 x 200 x 2,
    # E 2 x 11 x 12 x 60 x 2, sums 2 x 10 x 48 x 4, taps 26 x 48 x 4, 8: less than the padded rows' 104,520
    assert mb.kernel1_smem_bytes(7, 7, 7, 5, 1, 192, 48, True, 8, 192, 2, tx=True) == \
        1024 + 3 * 112 * 128 + 48 * 200 * 2 + 2 * 11 * 12 * 60 * 2 + 2 * 10 * 48 * 4 + 26 * 48 * 4 + 8 == 103_752
    assert mb.kernel1_v8_tx(True, 7, 7, 5, 1, 192, 192, 7, 2)
    # features.5.1 (C_in 112): 1024 + 2 x 208 x 128 + 48 x 120 x 2 + 18 x 20 x 60 x 2 + 1,920 + 4,992 + 8 = 115,912:
    # over the limit and over the padded rows' 111,560, so it keeps them
    assert mb.kernel1_smem_bytes(14, 14, 14, 5, 1, 112, 48, True, 8, 112, 1, tx=True) == 115_912 > 113 * 1024
    assert not mb.kernel1_v8_tx(True, 14, 14, 5, 1, 112, 112, 14, 1)
    # features.2.1 (C_in 24): dense X rows, one copy an item already
    assert not mb.x_rows_padded_v8(24) and not mb.kernel1_v8_tx(True, 56, 56, 3, 1, 24, 32, 8, 1)
    # more than 256 pixels a box: 20 x 20 at C_in 80
    assert not mb.kernel1_v8_tx(True, 20, 20, 3, 1, 80, 80, 20, 1)


def test_the_wgmma_operands_start_32_bytes_further_per_k16_step():
    """The wgmma expand's descriptors (ptx_sm90.cuh smem_desc_sw128: K-major, 128-byte swizzle, 8-row groups 1024
    bytes apart) start at a 1024-aligned box plus the tile's first row plus 32 bytes per 16-wide k step: what the
    kernel passes (2 x_tx_offset of the tile's first row) is that address, for X's 64-pixel tiles and U's 48 rows."""
    for m_pad in (64, 112, 208, 256):
        assert (m_pad * 128) % 1024 == 0  # every box (and U after the boxes) 1024-aligned
        for m64 in range(-(-m_pad // 64)):
            for k0 in range(0, 352, 16):
                assert 2 * mb.x_tx_offset(64 * m64, k0, m_pad) == \
                    (k0 // 64) * m_pad * 128 + 64 * m64 * 128 + (k0 % 64) // 16 * 32
    for k0 in range(0, 352, 16):
        assert 2 * mb.x_tx_offset(0, k0, 48) == (k0 // 64) * 48 * 128 + (k0 % 64) // 16 * 32


def test_the_wgmma_expand_fits_where_its_u_does():
    """U in the swizzled layout: 2 boxes x 48 rows x 128 bytes at C_in 80 (against 48 x 88 x 2 padded)."""
    assert mb.u_bytes_v8(80, 48, True) == 2 * 48 * 128 == 12_288 and mb.u_bytes_v8(80, 48, False) == 8_448
    # features.4.1: 101,128 - 8,448 + 12,288 = 104,968, two CTAs; 5.0 (k = 5): 112,840 + 3,840 = 116,680 > 115,712
    assert mb.kernel1_smem_bytes(14, 14, 14, 3, 1, 80, 48, True, 8, 80, 1, tx=True, wg=True) == 104_968
    assert mb.kernel1_v8_tx(True, 14, 14, 3, 1, 80, 80, 14, 1, wg=True)
    assert mb.kernel1_smem_bytes(14, 14, 14, 5, 1, 80, 48, True, 8, 80, 1, tx=True, wg=True) == 116_680
    assert mb.kernel1_v8_tx(True, 14, 14, 5, 1, 80, 80, 14, 1) and not mb.kernel1_v8_tx(True, 14, 14, 5, 1, 80, 80, 14,
                                                                                       1, wg=True)
    # features.6.1, two images: U 3 x 48 x 128 = 18,432 against 48 x 200 x 2 = 19,200
    assert mb.kernel1_smem_bytes(7, 7, 7, 5, 1, 192, 48, True, 8, 192, 2, tx=True, wg=True) == 103_752 - 768


def test_each_b0_block_runs_the_expand_that_fits():
    """With both switches on the wgmma expand where its U layout fits two CTAs, mma.sync over the TMA X where only that
    fits (5.0), bulk copies where X's rows are dense or the boxes do not fit (2.1, 5.1); version 11's packed-fp16
    epilogue (CUDA_KERNELS_K1_DH2, on there by default) has smaller taps, so 5.0 and 5.1 take the wgmma expand too; a
    switch off takes its path away, and the wgmma expand never runs without the TMA X."""
    b0 = {"features.2.1": (56, 56, 3, 1, 24, 32, 8, 1), "features.4.1": (14, 14, 3, 1, 80, 80, 14, 1),
          "features.5.0": (14, 14, 5, 1, 80, 80, 14, 1), "features.5.1": (14, 14, 5, 1, 112, 112, 14, 1),
          "features.6.1": (7, 7, 5, 1, 192, 192, 7, 2)}
    routes = {path: mb.kernel1_v8_expand(True, True, *shape) for path, shape in b0.items()}
    assert routes == {"features.2.1": "ldmatrix", "features.4.1": "wgmma", "features.5.0": "tma",
                      "features.5.1": "ldmatrix", "features.6.1": "wgmma"}
    routes = {path: mb.kernel1_v8_expand(True, True, *shape, dh=True) for path, shape in b0.items()}
    assert routes == {"features.2.1": "ldmatrix", "features.4.1": "wgmma", "features.5.0": "wgmma",
                      "features.5.1": "wgmma", "features.6.1": "wgmma"}
    assert mb.kernel1_v8_expand(True, False, *b0["features.4.1"]) == "tma"
    assert mb.kernel1_v8_expand(False, True, *b0["features.4.1"]) == "ldmatrix"
    assert "tx = kernel1_v8_tx_requested(), wg = tx && kernel1_v8_wg_requested() && sm90a_build();" in SOURCE
    for name in ("CUDA_KERNELS_K1_TMA_X", "CUDA_KERNELS_K1_WGMMA"):  # unset: on
        assert f'const char* v = kernel1_switch("{name}");\n  return v == nullptr || v[0] == \'1\';' in SOURCE


@pytest.mark.parametrize("arch,defined", [("9.0", True), ("8.0", False), ("8.0;9.0", True)])
def test_the_build_tells_the_launchers_that_wgmma_is_built(arch, defined, monkeypatch):
    """sm90a_build (mbconv_v8.cuh) reads BF_SM90A in .cu host code: the build must pass it to nvcc, not only to the
    C++ compiler of the bindings."""
    import torch.utils.cpp_extension as ext

    from cuda_kernels import _build

    seen = {}
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", arch)
    monkeypatch.setattr(ext, "load", lambda **kwargs: seen.update(kwargs))
    _build._load("probe", ("mbconv_v8_k3.cu",), False)
    assert ("-DBF_SM90A" in seen["extra_cuda_cflags"]) == defined
    assert ("-DBF_SM90A" in seen["extra_cflags"]) == defined


SMEM_CASES = [  # (H, W, k, rows, C_in, images): B0 4.1, 5.0, 6.1 (2 images), B2 6.1, 7.1 (2 bands), 2.1 (dense X)
    (14, 14, 3, 14, 80, 1), (14, 14, 5, 14, 80, 1), (7, 7, 5, 7, 192, 2), (9, 9, 5, 9, 208, 1), (9, 9, 3, 5, 352, 1),
    (56, 56, 3, 8, 24, 1)]


def test_the_shared_memory_regions_hold_what_the_kernel_writes(tmp_path):
    """csrc/mbconv_v8.cuh v8_smem (compiled for the host and run): for each layout (padded or dense X, the boxes, the
    boxes with the wgmma expand's U) every region is at least as long as what the kernel writes there, counted here
    from the layouts (X's rows or boxes, U's rows or swizzled rows: the largest x_tx_offset + 8, E's G tiles, the
    per-group sums, the taps), U 1024-aligned under the wgmma expand (its descriptors), and the shared memory the
    launch asks for covers it all. (The wgmma expand first put E at the padded U's end: U's swizzled rows ran 3.8
    KB into E at C_in 80.)"""
    from mbconv_helpers import host_run, nvcc_path

    nvcc = nvcc_path()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME)")
    layouts = [(False, False), (True, False), (True, True)]
    lines = []
    for h, w, k, rows, c_in, g in SMEM_CASES:
        for tx, wg in layouts:
            lines.append(f"  {{{h}, {w}, {k}, {rows}, {c_in}, {g}, {int(tx)}, {int(wg)}}},")
    body = "\n".join(lines)
    (tmp_path / "regions.cu").write_text(f"""#include <cstdio>
#include "mbconv_v8.cuh"
int main() {{
  const int cases[][8] = {{
{body}
  }};
  for (const auto& c : cases) {{
    const int h = c[0], w = c[1], k = c[2], rows = c[3], c_in = c[4], g = c[5];
    const int k_pad = (c_in + 15) / 16 * 16, wo = w, we = ((wo + 3) / 4 * 4 - 1) + k, e_rows = rows - 1 + k;
    const int m_pad = mb::expand_dw_v8_m_pad(h, w, rows, k, 1, g);
    const mb::V8Smem r = mb::v8_smem(m_pad, c_in, k_pad, e_rows * we, g, k, 48, c[6], c[7]);
    std::printf("%d %d %d %d %d %d %d %d\\n", m_pad, r.u, r.e, r.red, r.wdw, r.bar, r.end,
                mb::expand_dw_v8_smem_bytes(h, w, wo, rows, k, 1, c_in, k_pad, 48, g, c[6], c[7]));
  }}
  return 0;
}}
""")
    got = iter(host_run(nvcc, tmp_path / "regions.cu"))
    for h, w, k, rows, c_in, g in SMEM_CASES:
        k_pad = -(-c_in // 16) * 16
        e_tile = (rows - 1 + k) * ((-(-w // 4) * 4 - 1) + k)
        for tx, wg in layouts:
            m_pad, u, e, red, wdw, bar, end, smem = next(got)
            if tx:
                x_len = -(-k_pad // 64) * m_pad * 128
            elif mb.x_rows_padded_v8(c_in):
                x_len = m_pad * (k_pad + 8) * 2
            else:
                x_len = m_pad * c_in * 2 + 16  # the last row's k16 step reads 8 halves past the band
            u_len = (max(mb.x_tx_offset(r, 8 * c, 48) for r in range(48) for c in range(k_pad // 8)) + 8) * 2 if wg \
                else 48 * (k_pad + 8) * 2
            assert u >= x_len and e - u >= u_len, (h, w, c_in, tx, wg)
            assert red - e >= g * e_tile * 60 * 2 and wdw - red >= g * 10 * 48 * 4, (h, w, c_in, tx, wg)
            assert bar - wdw >= (k * k + 1) * 48 * 4 and bar % 8 == 0 and end == bar + 8
            assert smem == end + (1024 if tx else 0)
            if wg:
                assert u % 1024 == 0  # U's descriptors (X's boxes start 1024-aligned in the kernel)
    # the kernel carves with these offsets where it takes the boxes
    assert "__half* Es = TX ? reinterpret_cast<__half*>(base + L.e) : Us + HC * ldu;" in SOURCE


def test_the_launch_encodes_the_boxes_it_expects():
    assert "half_2d_sw128(&xmap, p.x, (unsigned long long)p.N * p.H * p.W, p.C_in, p.C_in, m_pad, kV8TxCols)" in SOURCE
    assert "bf::mbar_arrive_expect_tx(bar, (uint32_t)(boxes * m_pad * 128));" in SOURCE
    assert 'kernel1_switch("CUDA_KERNELS_K1_TMA_X")' in SOURCE and mb.K1_TMA_X_SWITCH == "CUDA_KERNELS_K1_TMA_X"
    assert "reinterpret_cast<uintptr_t>(p.x) % 16 == 0" in SOURCE  # the copy engine's global alignment


# ---- GPU ----

GPU_CASES = [("efficientnet_b0", "features.4.1", 128), ("efficientnet_b0", "features.4.1", 1),
             ("efficientnet_b0", "features.5.0", 5), ("efficientnet_b0", "features.6.1", 128),
             ("efficientnet_b0", "features.6.1", 5), ("efficientnet_b0", "features.6.1", 1),
             ("efficientnet_b2", "features.6.1", 3), ("efficientnet_b2", "features.7.1", 3)]


@pytest.mark.cuda
@pytest.mark.parametrize("name,path,batch", GPU_CASES)
def test_the_output_is_the_padded_layouts(name, path, batch, monkeypatch):
    """The same X values reach the same MMAs in the same order: equal bits, and the profiler shows the TX kernel ran
    (B2's 7.1 has two bands per image: the second band's copy starts under the halo)."""
    from mbconv_helpers import assert_switch_keeps_the_bits

    monkeypatch.setenv(mb.K1_WGMMA_SWITCH, "0")  # mma.sync over the boxes
    assert_switch_keeps_the_bits(monkeypatch, name, path, batch, mb.K1_TMA_X_SWITCH, "expand_dw_v8_kernel_tx")


@pytest.mark.cuda
@pytest.mark.parametrize("wg", ["0", "1"])
@pytest.mark.parametrize("path,size,batch", [("features.4.1", 13, 3), ("features.6.1", 9, 2),
                                             ("features.6.1", 5, 1), ("features.5.0", 11, 4)])
def test_odd_sizes_against_float64(path, size, batch, wg, monkeypatch):
    from mbconv_helpers import check_b0_at_size

    monkeypatch.setenv(mb.K1_TMA_X_SWITCH, "1")
    monkeypatch.setenv(mb.K1_WGMMA_SWITCH, wg)
    check_b0_at_size(path, size, batch, 11)


@pytest.mark.cuda
@pytest.mark.parametrize("switches", [{}, {mb.K1_WGMMA_SWITCH: "0"}, {mb.K1_TMA_X_SWITCH: "0"}])
def test_efficientnet_b0_with_it(switches, monkeypatch):
    """The defaults (wgmma and TMA X), mma.sync over the TMA X, and bulk copies: every block checked, none falls back."""
    from mbconv_helpers import check_fused_b0

    for name in (mb.K1_TMA_X_SWITCH, mb.K1_WGMMA_SWITCH):
        monkeypatch.delenv(name, raising=False)
    check_fused_b0(monkeypatch, switches, {"StemMBConv": 1, "MBConv": 15}, 16)


WG_CASES = [("efficientnet_b0", "features.4.1", 128, "<48, 3, 1, 1, true, true>"),
            ("efficientnet_b0", "features.4.1", 1, "<48, 3, 1, 1, true, true>"),
            ("efficientnet_b0", "features.6.1", 128, "<48, 5, 1, 2, true, true>"),
            ("efficientnet_b0", "features.6.1", 5, "<48, 5, 1, 2, true, true>"),
            ("efficientnet_b2", "features.6.1", 3, "<48, 5, 1, 1, true, true>"),
            ("efficientnet_b2", "features.7.1", 3, "<48, 3, 1, 1, true, true>")]


@pytest.mark.cuda
@pytest.mark.parametrize("name,path,batch,instance", WG_CASES)
def test_the_wgmma_expand(name, path, batch, instance, monkeypatch):
    """Against float64 (<= 2x PyTorch fp16's error, output poisoned), the profiler naming the wgmma instantiation, and
    within a few fp16 ulps of the mma.sync expand over the same boxes (the same k16 steps in the same order; within a
    step the hardware may add in another order, so E can round the other way)."""
    from mbconv_helpers import block_of, block_prepared, check_on_gpu, run_profiled

    from perfmodel.harness import relative_error

    monkeypatch.setenv(mb.K1_DH2_SWITCH, "0")  # the instantiations named here (the packed-fp16 epilogue's: _txdh)
    monkeypatch.setenv(mb.K1_WGMMA_SWITCH, "1")
    params, weights, x = block_prepared(name, path, batch)
    check_on_gpu(block_of(name, path), x, 11)
    monkeypatch.setenv(mb.K1_WGMMA_SWITCH, "0")
    monkeypatch.setenv(mb.K1_TMA_X_SWITCH, "1")
    mma = mb.mbconv(x, params, weights, version=11)
    monkeypatch.setenv(mb.K1_WGMMA_SWITCH, "1")
    got, names = run_profiled(x, params, weights, mma, 11)
    assert f"expand_dw_v8_kernel_tx{instance}" in names, names[:600]
    assert relative_error(got, mma.double()) < 2e-3
