"""project_v9t with the SE scale staged (csrc/mbconv_v3.cu project_v9s_kernel; on unless CUDA_KERNELS_PROJ_V9_SS=0,
the default since session 20; NOTES.md "Session 20: the projections wait on their scale loads"): each warp copies its next task's scale
row (the task's image: H x W a multiple of 16) with its D rows, in the same cp.async group, into a per-slot row of
shared memory; its units read the scales from there instead of two global float4 loads each. CUDA_KERNELS_PROJ_V9_SX=1
(off, project_v9sx_kernel) stages the shortcut's 16 rows of a task too, for the epilogue.

CPU: the switch and its dispatch, the shared memory from literal sums, which blocks of B0 / B2 run it (and that a
spatial size that is not a multiple of 16 keeps project_v9t), and that every kernel that existed before keeps its
source body. GPU (@pytest.mark.cuda): every distinct B0 / B2 block where it runs, at batches 1, 5 and 128, against
float64 (poisoned outputs) and bit for bit against project_v9t (the same fp32 scales multiply the same fragments;
within 1e-4 where kernel 1 pools with atomics), the profiler naming project_v9s_kernel; odd sizes fall back to
project_v9t; B0 end to end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import DISTINCT, block_widths, folded_params

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v3.cu").read_text()


STAGED_BLOCKS = [(name, path) for name, path in DISTINCT if mb.project_v9s_applies(*block_widths(name, path))]


def test_the_switch_and_its_dispatch():
    assert mb.PROJ_V9_SS_SWITCH == "CUDA_KERNELS_PROJ_V9_SS"
    assert 'const char* v = std::getenv("CUDA_KERNELS_PROJ_V9_SS");' in SOURCE
    assert "return (v == nullptr || std::strcmp(v, \"0\") != 0) && project_v9s_fits(p, p.residual && " in SOURCE
    assert "bool project_v9s_fits(const Params& p, bool staged_shortcut) {\n  return (p.Ho * p.Wo) % 16 == 0 &&" in SOURCE
    assert "if (project_v9sx_requested()) return launch_project_v9s_nt<NT, true>(p, stream, pdl);" in SOURCE
    assert "if (!project_v9_runs_ring(p)) {\n    if (!bulk && project_v9s_runs(p)) {" in SOURCE
    assert mb.PROJ_V9_SX_SWITCH == "CUDA_KERNELS_PROJ_V9_SX" and 'std::getenv("CUDA_KERNELS_PROJ_V9_SX");' in SOURCE
    assert "const auto kernel = SX ? project_v9sx_kernel<NT> : project_v9s_kernel<NT>;" in SOURCE
    assert "project_v9s_kernel(const Params p) {  // the staged scale rows\n  project_v9t_body<NT, false, true>(p);" in SOURCE
    # the kernels that were there keep their bodies (their SASS was compared unchanged when this was added)
    assert "project_v9t_kernel(const Params p) {\n  project_v9t_body<NT, false>(p);\n}" in SOURCE
    assert ("template <int NT, bool BULK, bool SS = false, bool SX = false, bool RX = false, bool EF = false>\n"
            "__device__ __forceinline__ void project_v9t_body") in SOURCE


def test_shared_memory():
    # B0's 2.0 (no shortcut): V 24 x (128 + 16) halves, rings 8 warps x 2 tasks x 16 x 96 halves, 8 x 2 x 96 floats
    assert mb.project_v9t_smem_bytes(96, 24, staged=True) == 6_912 + 49_152 + 6_144 == 62_208  # 3 CTAs an SM
    # B0's 2.1: V 24 x (192 + 16) halves, rings 8 x 2 x 16 x 144 halves, scales 8 x 2 x 144 floats, x 8 x 2 x 16 x 24
    assert mb.project_v9t_smem_bytes(144, 24, staged=True, residual=True) == 9_984 + 73_728 + 9_216 + 12_288 == 105_216
    # B2's 3.1 (288 -> 48 with a shortcut) with x staged (SX): 48 x 336 halves + 8 x 2 x 16 x 288 halves + 8 x 2 x 288
    # floats + 8 x 2 x 16 x 48 halves: over project_v9t's 200 KB, within the 227 KB a CTA may have
    assert mb.project_v9t_smem_bytes(288, 48, staged=True, residual=True) == 32_256 + 147_456 + 18_432 + 24_576
    assert 204_800 < 222_720 <= mb.PROJECT_V9S_MAX_SMEM == 232_448
    assert "(ss ? kProjV9Warps * 2 * hidden * 4 : 0) + (ss && residual ? kProjV9Warps * 2 * 16 * c_out * 2 : 0)" in SOURCE
    assert "constexpr int kProjV9SMaxSmem = 227 * 1024;" in SOURCE


def test_which_blocks_run_it():
    # B0: 112 x 112, 56 x 56 and 28 x 28 outputs; 4.0's 14 x 14 (196 pixels) keeps project_v9t
    assert {path for name, path in STAGED_BLOCKS if name == "efficientnet_b0"} == {
        "features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1"}
    # B2 at 288 x 288: 144, 72 and 36 a side; its 4.0 / 4.1 (18 x 18 = 324 pixels) keep project_v9t
    assert {path for name, path in STAGED_BLOCKS if name == "efficientnet_b2"} == {
        "features.1.0", "features.1.1", "features.2.0", "features.2.1", "features.3.0", "features.3.1"}
    assert mb.project_v9_applies(240, 80) and not mb.project_v9s_applies(240, 80, 14 * 14, False)
    assert mb.project_v9_applies(144, 24) and not mb.project_v9s_applies(144, 24, 57 * 57, True)
    assert mb.project_v9s_applies(144, 24, 56 * 56, True) and mb.project_v9s_applies(96, 24, 4 * 4)
    assert mb.project_v9s_applies(288, 48, 36 * 36, True)  # B2's 3.1 with x staged: under the 227 KB cap


def test_a_task_lies_in_one_image():
    """The staged row is the image of the task's first row; with H x W a multiple of 16 every row of the task (16
    task .. 16 task + 15) is in that image, and there are no rows past P."""
    assert "const float* row = p.scale + (size_t)(tk * 16 / hw) * p.hid_pad;" in SOURCE
    assert "const __half* xs = p.x + (size_t)tk * 16 * p.C_out;" in SOURCE  # 16 whole rows: no partial task
    for n, hw in [(1, 16), (3, 784), (5, 3136), (2, 12544)]:
        P = n * hw
        assert P % 16 == 0
        for task in range(P // 16):
            assert len({(16 * task + r) // hw for r in range(16)}) == 1


# ---- GPU ----

@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", STAGED_BLOCKS)
def test_every_block_against_float64_and_project_v9t(name, path, batch, monkeypatch):
    from mbconv_helpers import assert_loader_output_kept, switched_against_float64

    got, base, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.PROJ_V9_SS_SWITCH, "1")
    assert "project_v9se_kernel" in names and "project_v9t_kernel" not in names, names[:600]  # EF's by default
    assert_loader_output_kept(got, base, path)  # the same fp32 scales on the same fragments


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 128])
@pytest.mark.parametrize("name,path", [(n, p) for n, p in STAGED_BLOCKS if n == "efficientnet_b0" or p == "features.3.1"])
def test_the_staged_shortcut_against_project_v9t(name, path, batch, monkeypatch):
    """CUDA_KERNELS_PROJ_V9_SX=1: project_v9sx (the shortcut's rows staged as well, where the block has one: the same
    kernel without a shortcut stages none); project_v9t's output bit for bit (1e-4 at the blocks without an expand)."""
    from mbconv_helpers import assert_loader_output_kept, switched_against_float64

    monkeypatch.setenv(mb.PROJ_V9_SX_SWITCH, "1")
    got, base, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.PROJ_V9_SS_SWITCH, "1")
    assert "project_v9sx_kernel" in names and "project_v9t_kernel" not in names, names[:600]
    assert_loader_output_kept(got, base, path)


@pytest.mark.cuda
@pytest.mark.parametrize("path,size,batch", [("features.2.0", 9, 5), ("features.2.1", 57, 3), ("features.3.1", 2, 9),
                                             ("features.2.1", 8, 3), ("features.3.0", 16, 5)])
def test_odd_sizes(path, size, batch, monkeypatch):
    """Sizes whose H x W is not a multiple of 16 keep project_v9t; 8 x 8 and 3.0's 8 x 8 output run project_v9s."""
    from mbconv_helpers import check_b0_at_size

    monkeypatch.setenv(mb.PROJ_V9_SS_SWITCH, "1")
    check_b0_at_size(path, size, batch, 11)


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_V9_SS_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)


# ---- the shortcut one task ahead (CUDA_KERNELS_PROJ_V9_RX=1, project_v9sr_kernel, off until measured) ----

def test_the_shortcut_a_task_ahead_in_the_source():
    """The next task's shortcut is requested right after its copy is issued and moved into the current registers after
    the epilogue; past the last task the row guard (r + 8 h < P) loads nothing; only blocks with a shortcut run it."""
    assert mb.PROJ_V9_RX_SWITCH == "CUDA_KERNELS_PROJ_V9_RX" and 'std::getenv("CUDA_KERNELS_PROJ_V9_RX");' in SOURCE
    assert "v9_shortcut_load<NT>(p, task + step, g, t, P, res_next);" in SOURCE
    assert "for (int nt = 0; nt < NT; ++nt) res[h][nt] = res_next[h][nt];" in SOURCE
    assert "if (project_v9sr_requested() && p.residual) return launch_project_v9sr_nt<NT>(p, stream, pdl);" in SOURCE
    assert "res[h][nt] = r + 8 * h < P ? __ldcs(" in SOURCE
    # a warp's tasks: task, task + step, ...; the load for task + step happens in the iteration of task
    tasks, step = 100, 24
    for first in range(step):
        mine = list(range(first, tasks, step))
        loaded = [first] + [t + step for t in mine]  # before the loop, then one a task ahead
        assert loaded[:len(mine)] == mine and all(t >= tasks for t in loaded[len(mine):])


RESIDUAL_BLOCKS = [(name, path) for name, path in STAGED_BLOCKS if folded_params(name, path).residual]


def test_which_blocks_have_a_shortcut():
    assert RESIDUAL_BLOCKS == [("efficientnet_b0", "features.2.1"), ("efficientnet_b0", "features.3.1"),
                               ("efficientnet_b2", "features.1.1"), ("efficientnet_b2", "features.2.1"),
                               ("efficientnet_b2", "features.3.1")]


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", RESIDUAL_BLOCKS)
def test_the_shortcut_a_task_ahead_against_project_v9t(name, path, batch, monkeypatch):
    """project_v9sr keeps project_v9t's output (the same sums; only when the shortcut is loaded moves): bit for bit, or
    within 1e-4 at B2's 1.1 (no expand: kernel 1 pools with atomics)."""
    from mbconv_helpers import assert_loader_output_kept, switched_against_float64

    monkeypatch.setenv(mb.PROJ_V9_RX_SWITCH, "1")
    got, base, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.PROJ_V9_SS_SWITCH, "1")
    assert "project_v9sr_kernel" in names and "project_v9t_kernel" not in names, names[:600]
    assert_loader_output_kept(got, base, path)


@pytest.mark.cuda
def test_efficientnet_b0_with_the_shortcut_a_task_ahead(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_V9_RX_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)


# ---- D read evict_first (CUDA_KERNELS_PROJ_V9_EF, project_v9se_kernel, on unless "0" since session 38) ----

def test_the_evict_first_read_in_the_source():
    """project_v9se is project_v9s with D's cp.async pieces carrying an L2 evict_first policy: the loader of the
    MB_D_L2_HINTS build, chosen at launch; without the define and with EF false the loader is the plain cp.async (the
    56 functions that existed kept their SASS when it was added)."""
    assert mb.PROJ_V9_EF_SWITCH == "CUDA_KERNELS_PROJ_V9_EF" and 'std::getenv("CUDA_KERNELS_PROJ_V9_EF");' in SOURCE
    assert 'std::getenv("CUDA_KERNELS_PROJ_V9_EF");\n  return v == nullptr || std::strcmp(v, "0") != 0;' in SOURCE
    assert "project_v9se_kernel(const Params p) {  // D read evict_first\n" \
           "  project_v9t_body<NT, false, true, false, false, true>(p);" in SOURCE
    assert "#else\n      constexpr bool evict_first = EF;\n#endif\n      if constexpr (evict_first) {" in SOURCE
    assert "if (project_v9_evict_first_requested()) return launch_project_v9se_nt<NT>(p, stream, pdl);" in SOURCE
    ptx = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_ptx.cuh").read_text()
    assert ptx.index("uint64_t l2_evict_first()") < ptx.index("#ifdef MB_D_L2_HINTS")  # defined in every build


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("path", ["features.2.0", "features.2.1", "features.3.1"])
def test_the_evict_first_read_keeps_the_bits(path, batch, monkeypatch):
    """Only D's L2 policy changes: float64 (poisoned output) and project_v9s's output (EF=0) bit for bit."""
    from mbconv_helpers import check_switch_keeps_the_bits

    check_switch_keeps_the_bits(monkeypatch, "efficientnet_b0", path, batch, mb.PROJ_V9_EF_SWITCH,
                                "project_v9se_kernel")


@pytest.mark.cuda
def test_efficientnet_b0_with_the_evict_first_read(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_V9_EF_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
