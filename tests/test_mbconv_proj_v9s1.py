"""project_v9s with one task slot a warp (csrc/mbconv_v3.cu project_v9s1_kernel; CUDA_KERNELS_PROJ_V9_S1=1, off until
measured; NOTES.md "Session 27"). project_v9s gives each of its 8 warps two slots of 16 rows of D (the next task's copy
in flight while the warp multiplies the current one); where hidden is large that is one CTA an SM (B0's 3.1: 160,000
bytes, 8 warps an SM, its projection at 54% of DRAM bandwidth where 2.1's, two CTAs an SM, reaches 76%). One slot
halves the rings and fits two CTAs: twice the warps to hide each warp's chain, the next copy issued as soon as the
slot's MMAs have read it (before the epilogue). The same units in the same order: the same bits.

CPU: the switch, its rule and dispatch as the source reads them, the shared memory from literal sums, where it applies
(B0's 3.1, B2's 3.1 and 3.2), the existing kernels' source. GPU (@pytest.mark.cuda): every distinct B0 / B2 block at
batches 1, 5 and 128 against float64 with the switch on (poisoned output), bit for bit the switch-off output where
project_v9s1 ran, the profiler naming it at B0's 3.1; B0 end to end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import DISTINCT, block_widths, on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v3.cu").read_text()


def test_the_switch_and_its_dispatch():
    assert mb.PROJ_V9_S1_SWITCH == "CUDA_KERNELS_PROJ_V9_S1"
    assert 'const char* v = std::getenv("CUDA_KERNELS_PROJ_V9_S1");' in SOURCE
    assert "constexpr int kSmPerCta = 228 * 1024 / 2 - 1024;" in SOURCE
    assert """  return v != nullptr && std::strcmp(v, "1") == 0 &&
         project_v9t_smem_bytes(p.hidden, p.C_out, false, true) > kSmPerCta &&
         project_v9s1_smem_bytes(p.hidden, p.C_out) <= kSmPerCta;""" in SOURCE
    # after the shortcut options, in project_v9s's branch
    assert """      if (project_v9sr_requested() && p.residual) return launch_project_v9sr_nt<NT>(p, stream, pdl);
      if (project_v9s1_requested(p)) return launch_project_v9s1_nt<NT>(p, stream, pdl);
      return launch_project_v9s_nt<NT, false>(p, stream, pdl);""" in SOURCE
    assert "project_v9s1_kernel(const Params p) {  // one task slot a warp\n  project_v9t_body<NT, false, true, false, false, 1>(p);" in SOURCE
    assert "launch_v9(project_v9s1_kernel<NT>, slots, project_v9s1_smem_bytes(p.hidden, p.C_out), p, stream, pdl);" in SOURCE
    # the existing kernels keep their bodies (two slots, the default; their SASS compared unchanged when this was added)
    assert "project_v9s_kernel(const Params p) {  // the staged scale rows\n  project_v9t_body<NT, false, true>(p);" in SOURCE
    assert "if constexpr (SLOTS == 2) issue(task + step, (k + 1) & 1);" in SOURCE
    assert "      cp_async_wait<SLOTS - 1>();" in SOURCE


def test_shared_memory():
    # B0's 3.1: V 40 rows x (256 + 16) halves; one slot: 8 warps x 16 x 240 halves and 8 x 240 floats; two: twice
    v = 40 * (256 + 16) * 2
    assert mb.project_v9s1_smem_bytes(240, 40) == v + 8 * 16 * 240 * 2 + 8 * 240 * 4 == 90_880
    assert mb.project_v9t_smem_bytes(240, 40, staged=True) == v + 8 * 2 * 16 * 240 * 2 + 8 * 2 * 240 * 4 == 160_000
    # two CTAs an SM: (228 KB - 2 x 1 KB reserved) / 2 = 115,712 bytes each
    assert 90_880 <= 115_712 < 160_000
    # B2's 3.1: V 48 x (320 + 16) halves; one slot 115,200 bytes: just fits
    assert mb.project_v9s1_smem_bytes(288, 48) == 48 * 336 * 2 + 8 * 16 * 288 * 2 + 8 * 288 * 4 == 115_200
    # B0's 2.1 (hidden 144): two slots already fit two CTAs (92,928 bytes), so one slot does not apply
    assert mb.project_v9t_smem_bytes(144, 24, staged=True) == 24 * (192 + 16) * 2 + 8 * 2 * 16 * 144 * 2 + 8 * 2 * 144 * 4
    assert not mb.project_v9s1_applies(144, 24, 56 * 56)


def test_where_it_applies():
    applies = [(n, p) for n, p in DISTINCT if mb.project_v9s1_applies(*block_widths(n, p))]
    assert applies == [("efficientnet_b0", "features.3.1"), ("efficientnet_b2", "features.3.1")]
    # (B2's 3.2 is 3.1's shape: not a distinct block)


# ---- GPU ----

S1_KERNELS = {"features.3.1": "project_v9s1_kernel<5>"}


@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import check_switch_bitwise

    check_switch_bitwise(monkeypatch, name, path, batch, mb.PROJ_V9_S1_SWITCH, S1_KERNELS, r"project_v9s1_kernel")


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_V9_S1_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
