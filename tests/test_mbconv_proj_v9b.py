"""project_v9t's tasks by one bulk copy each (csrc/mbconv_v3.cu project_v9b_kernel, CUDA_KERNELS_PROJ_V9_BULK=1, off
until measured; NOTES.md "Session 19: the projections' read pattern"): lane 0 of each warp copies its next 16-row task
(16 x hidden halves, one contiguous range) with cp.async.bulk onto the slot's mbarrier, instead of nine 16-byte
cp.async a lane; the products are project_v9t's, from the same shared-memory fragments.

CPU: the switch and its dispatch, the shared memory (two mbarriers a warp after the rings) from literal sums, the copy
sizes (multiples of 16 bytes, as cp.async.bulk requires, at every task of every block it runs), the mbarrier parity
walk, and that project_v9t's SASS is untouched (its own kernel name). GPU (@pytest.mark.cuda): every distinct B0 / B2
block where project_v9t runs, at batches 1, 5 and 128, against float64 (poisoned outputs) and bit for bit the
cp.async loader's output (within 1e-4 where kernel 1 pools with atomics: the blocks without an expand), the profiler
naming project_v9b_kernel; odd sizes (a partial last task)."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import DISTINCT, block_widths

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v3.cu").read_text()


def v9t_bytes(hidden: int, c_out: int, bulk: bool) -> int:  # project_v9t_smem_bytes
    return mb.project_v9t_smem_bytes(hidden, c_out, bulk=bulk)


def runs_v9b(hidden: int, c_out: int) -> bool:
    return mb.project_v9_applies(hidden, c_out) and v9t_bytes(hidden, c_out, True) <= mb.PROJECT_V9T_MAX_SMEM


BULK_BLOCKS = [(name, path) for name, path in DISTINCT if runs_v9b(*block_widths(name, path)[:2])]


def test_the_switch_and_its_dispatch():
    assert mb.PROJ_V9_BULK_SWITCH == "CUDA_KERNELS_PROJ_V9_BULK"
    assert 'std::getenv("CUDA_KERNELS_PROJ_V9_BULK");' in SOURCE
    assert "const bool bulk = project_v9_bulk_requested();" in SOURCE  # the launcher and project_v9_runs_ring
    assert "return bulk ? launch_project_v9t_nt<NT, true>(p, stream, pdl) : launch_project_v9t_nt<NT, false>" in SOURCE
    assert "const auto kernel = BULK ? project_v9b_kernel<NT> : project_v9t_kernel<NT>;" in SOURCE
    # the default kernel keeps its name and body: project_v9t_body<NT, false>
    assert "project_v9t_kernel(const Params p) {\n  project_v9t_body<NT, false>(p);\n}" in SOURCE
    assert "project_v9b_kernel(const Params p) {  // the bulk-copy loader\n  project_v9t_body<NT, true>(p);\n}" in SOURCE


def test_shared_memory():
    # B0's 2.1: V 24 x (192 + 16) halves, rings 8 warps x 2 tasks x 16 x 144 halves, 8 x 2 mbarriers
    assert mb.project_v9_smem_bytes(144, 24) == 24 * 208 * 2 == 9_984
    assert v9t_bytes(144, 24, True) == 9_984 + 73_728 + 128 == 83_840
    assert "(bulk ? kProjV9Warps * 16 : 0)" in SOURCE
    assert "constexpr int kProjV9TMaxSmem = 200 * 1024;" in SOURCE and mb.PROJECT_V9T_MAX_SMEM == 204_800
    # 3.1 (hidden 240, C_out 40) and 4.0 (240, 80) fit; 4.1 (480, 80) does not: the ring loader there
    assert runs_v9b(240, 40) and runs_v9b(240, 80) and not runs_v9b(480, 80)
    assert {path for name, path in BULK_BLOCKS if name == "efficientnet_b0"} == {
        "features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1", "features.4.0"}


@pytest.mark.parametrize("n,hw", [(1, 49), (5, 196), (3, 57 * 57), (128, 56 * 56), (9, 4)])
def test_copy_sizes_are_multiples_of_16_bytes(n, hw):
    """cp.async.bulk copies a multiple of 16 bytes: min(16, P - 16 task) rows x hidden x 2 bytes at every task, hidden
    a multiple of 16 wherever project_v9 applies."""
    assert "return hidden % 16 == 0 && c_out % 8 == 0" in SOURCE
    assert "(uint32_t)(min(16, P - tk * 16) * p.hidden * 2)" in SOURCE
    P = n * hw
    for hidden in (32, 96, 144, 240):
        sizes = [min(16, P - 16 * task) * hidden * 2 for task in range(-(-P // 16))]
        assert sum(sizes) == P * hidden * 2 and all(s % 16 == 0 and s > 0 for s in sizes)


def test_mbarrier_parity_walk():
    """Task k of a warp lands in slot k & 1; slot s's j-th copy completes its phase j, so the wait is on parity
    (k >> 1) & 1, which must equal the number of the slot's earlier copies mod 2."""
    assert "bf::mbar_wait(bars + 8 * (k & 1), (k >> 1) & 1);" in SOURCE
    uses = [0, 0]
    for k in range(40):
        slot = k & 1
        assert (k >> 1) & 1 == uses[slot] % 2
        uses[slot] += 1


# ---- GPU ----

@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", BULK_BLOCKS)
def test_every_block_against_float64_and_the_cp_async_loader(name, path, batch, monkeypatch):
    from mbconv_helpers import assert_loader_output_kept, switched_against_float64

    # project_v9 where its task-staged loaders fit (version 11 runs project_wg where project_v9s does not: 4.0)
    monkeypatch.setenv(mb.PROJECT_WG_SWITCH, "ring")
    got, base, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.PROJ_V9_BULK_SWITCH, "1")
    assert "project_v9b_kernel" in names and "project_v9t_kernel" not in names, names[:600]
    assert_loader_output_kept(got, base, path)  # the same fragments from shared memory


@pytest.mark.cuda
@pytest.mark.parametrize("path,size,batch", [("features.2.0", 9, 5), ("features.3.0", 7, 5), ("features.1.0", 5, 5),
                                             ("features.2.1", 57, 3), ("features.3.1", 2, 9), ("features.4.0", 13, 5)])
def test_odd_sizes(path, size, batch, monkeypatch):
    from mbconv_helpers import check_b0_at_size

    monkeypatch.setenv(mb.PROJ_V9_BULK_SWITCH, "1")
    check_b0_at_size(path, size, batch, 11)


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_V9_BULK_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
