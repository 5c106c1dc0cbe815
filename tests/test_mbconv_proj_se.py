"""The SE inside the projection (CUDA_KERNELS_PROJ_SE=1, session 32, off until measured; csrc/mbconv_proj_se.cuh):
where project_v9s would run, each CTA takes a contiguous range of tasks within at most two images, computes those
images' SE from kernel 1's band sums, folds each scale into a V (V' = V diag(s), rounded to fp16 once) and projects
with no per-element scale; the SE kernel is not launched.

CPU: the route and the switch as the source reads them, the shared memory by literal arithmetic, which of B0's blocks
it fits. GPU (@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5 and 128 with the switch at 1 against
float64 (<= 2x PyTorch fp16's error, output poisoned), the profiler naming project_se_kernel and no SE kernel where it
applies, the output within 2e-3 of the switch-off output and (batch 128) not equal to it - V' is rounded where the
default rounds s D; B0 through the check before timing."""

from pathlib import Path

import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import block_widths, folded_params, on_every_distinct_block

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_proj_se.cuh").read_text()


def test_the_route_and_the_switch():
    assert mb.PROJ_SE_SWITCH == "CUDA_KERNELS_PROJ_SE"
    route = (CSRC / "mbconv.cu").read_text().split("cudaError_t launch_se_project_v9(")[1].split("\n}\n")[0]
    # before the SE kernel's launch, and only where neither part is ablated
    first = 'if (!ablated("se") && !ablated("project") && project_se_runs(p, version)) return launch_project_se(p, stream, pdl);'
    assert route.index(first) < route.index("launch_se_v3(p, stream, pdl)")
    assert 'return v != nullptr && std::strcmp(v, "1") == 0;' in SOURCE  # off unless 1
    assert "version == 11 && project_se_requested()" in SOURCE
    # a CTA's range spans at most two images: at least one CTA an image
    assert "p.N, std::min<long long>((long long)slots.ctas_per_sm[dev] * slots.sms[dev]" in SOURCE
    assert '#include "mbconv_proj_se.cuh"' in (CSRC / "mbconv_v3.cu").read_text()


def test_shared_memory_by_hand():
    """B0's 3.1 (hidden 240, C_out 40, squeeze 10, hid_pad 240): V and V'1, 40 rows of 256 + 16 halves each; 8 warps
    x 2 slots x 16 rows of 240 halves; pooled and the scale 2 x 240, squeezed 2 x 12, W1 and W2 in fp32: one CTA an
    SM (228 KB, 1 KB reserved a CTA). 2.1 (hidden 144, C_out 24, squeeze 6): two."""
    three_one = 2 * 40 * 272 * 2 + 8 * 2 * 16 * 240 * 2 + (4 * 240 + 2 * 12 + 2 * 10 * 240) * 4
    assert mb.project_se_smem_bytes(240, 240, 40, 10) == three_one and 2 * (three_one + 1024) > 228 * 1024
    two_one = 2 * 24 * 208 * 2 + 8 * 2 * 16 * 144 * 2 + (4 * 144 + 2 * 8 + 2 * 6 * 144) * 4
    assert mb.project_se_smem_bytes(144, 144, 24, 6) == two_one and 2 * (two_one + 1024) <= 228 * 1024


def test_a_range_spans_at_most_two_images():
    """The launcher's ranges [c T / G, (c + 1) T / G) with G >= N CTAs, by literal cases: 3.1 at batch 128 (T = 128 x
    49 tasks, G = 132), 2.1 (T = 128 x 196, G = 264), batch 3 on 132 CTAs (3.1: G = min(132, ceil(147 / 8)) = 19)."""
    for tasks_per_image, n, grid in ((49, 128, 132), (196, 128, 264), (49, 3, 19), (49, 200, 200)):
        t = n * tasks_per_image
        for c in range(grid):
            first, end = t * c // grid, t * (c + 1) // grid
            assert end > first and (end - 1) // tasks_per_image - first // tasks_per_image <= 1
    # the slowest warp of 3.1's 132 ranges: 48 tasks over 8 warps = 6, as project_v9s's grid stride gives
    assert max(-(-(128 * 49 * (c + 1) // 132 - 128 * 49 * c // 132) // 8) for c in range(132)) == 6


def _takes_it(name: str, path: str) -> bool:
    hidden, c_out, hw = block_widths(name, path)
    sq = folded_params(name, path).se1_w.shape[0]
    hid_pad = -(-hidden // mb.chunk_for(hidden)) * mb.chunk_for(hidden)
    return mb.project_se_applies(hidden, hid_pad, c_out, sq, hw)


def test_which_b0_blocks_take_it():
    """Stages 1-3 (H x W = 112^2, 56^2, 28^2: multiples of 16); not 14 x 14 or 7 x 7 (the wgmma projections)."""
    paths = ("features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1", "features.4.0",
             "features.4.1", "features.5.0", "features.6.0", "features.7.0")
    taken = [path for path in paths if _takes_it("efficientnet_b0", path)]
    assert taken == ["features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1"]


def _check(monkeypatch, name: str, path: str, batch: int, on: str, runs: bool) -> None:
    from mbconv_helpers import switched_against_float64
    from perfmodel.harness import relative_error

    got, off, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.PROJ_SE_SWITCH, on)
    if runs:
        assert f"project_se_kernel<{block_widths(name, path)[1] // 8}>" in names, names[:600]
        assert "se_v3" not in names and "se_v5" not in names, names[:600]
        assert relative_error(got, off.double()) < 2e-3
        if batch == 128:
            assert not torch.equal(got, off)  # V' rounded where the default rounds s D: not blind
    else:
        assert "project_se_kernel" not in names
        assert relative_error(got, off.double()) < 1e-4  # version 3's kernel 1 pools with atomics (features.1.*)


# ---- GPU ----

@on_every_distinct_block
def test_every_shape_against_float64(name, path, batch, monkeypatch):
    _check(monkeypatch, name, path, batch, "1", _takes_it(name, path))


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_SE_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
