"""The SE inside the projection (CUDA_KERNELS_PROJ_SE=1 | 2, session 32, off until measured; csrc/mbconv_proj_se.cuh):
where project_v9s would run, one kernel per image (or per part of one) computes that image's SE from kernel 1's band
sums, folds the scale into V (V' = V diag(s), rounded to fp16 once) and projects with no per-element scale; the SE
kernel is not launched. "2" loads A and V' by ldmatrix from rows padded to an odd multiple of 16 bytes.

CPU: the route and the switch as the source reads them, the shared memory by literal arithmetic, which of B0's blocks
take it, the padded pitches' bank offsets and the ring's row quotient by multiply-high. GPU (@pytest.mark.cuda): every
distinct B0 / B2 block at batches 1, 5 and 128 against float64 (<= 2x PyTorch fp16's error, output poisoned), the
profiler naming project_se_kernel and no SE kernel where it applies, the output within 2e-3 of the switch-off output
and (batch 128) not equal to it - V' is rounded where the default rounds s D; B0 through the check before timing."""

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
    assert 'return std::strcmp(v, "1") == 0 ? 1 : std::strcmp(v, "2") == 0 ? 2 : 0;' in SOURCE  # off unless 1 or 2
    assert "version == 11 && mode != 0" in SOURCE
    assert '#include "mbconv_proj_se.cuh"' in (CSRC / "mbconv_v3.cu").read_text()


def test_shared_memory_by_hand_at_b0_3_1():
    """hidden 240, C_out 40, squeeze 10 (hid_pad 240): V 40 rows of 256 + 16 halves; 8 warps x 2 slots x 16 rows of
    240 halves (248 padded); V' 48 rows of 256 + 8 halves; pooled, scale, squeezed (12), W1 and W2 in fp32."""
    floats = (240 + 240 + 12 + 2 * 10 * 240) * 4
    assert mb.project_se_smem_bytes(240, 240, 40, 10, False) == 40 * 272 * 2 + 8 * 2 * 16 * 240 * 2 + floats
    assert mb.project_se_smem_bytes(240, 240, 40, 10, True) == (40 * 272 * 2 + 8 * 2 * 16 * 248 * 2 + 48 * 264 * 2
                                                                + floats)
    assert mb.project_se_smem_bytes(240, 240, 40, 10, True) <= 227 * 1024  # one CTA an SM
    # 2.1 (hidden 144, C_out 24, squeeze 6): two CTAs an SM (228 KB an SM, 1 KB reserved a CTA)
    two_one = 24 * 208 * 2 + 8 * 2 * 16 * 152 * 2 + 32 * 200 * 2 + (144 + 144 + 8 + 2 * 6 * 144) * 4
    assert mb.project_se_smem_bytes(144, 144, 24, 6, True) == two_one and 2 * (two_one + 1024) <= 228 * 1024


def _takes_it(name: str, path: str) -> bool:
    hidden, c_out, hw = block_widths(name, path)
    sq = folded_params(name, path).se1_w.shape[0]
    hid_pad = -(-hidden // mb.chunk_for(hidden)) * mb.chunk_for(hidden)
    return mb.project_se_applies(hidden, hid_pad, c_out, sq, hw, True)


def test_which_b0_blocks_take_it():
    """Stages 1-3 (H x W = 112^2, 56^2, 28^2: multiples of 16); not 14 x 14 or 7 x 7 (the wgmma projections)."""
    paths = ("features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1", "features.4.0",
             "features.4.1", "features.5.0", "features.6.0", "features.7.0")
    taken = [path for path in paths if _takes_it("efficientnet_b0", path)]
    assert taken == ["features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1"]


@pytest.mark.parametrize("hidden", [32, 96, 144, 192, 240, 288, 336])
def test_padded_rows_fall_in_distinct_banks_and_the_row_quotient_is_exact(hidden):
    """ldmatrix reads 8 rows of 16 bytes a phase: conflict-free where the row pitch is an odd multiple of 16 bytes
    (the 8 segments then cover the 32 banks once); the ring's piece i goes to row i // (hidden / 8) by multiply-high."""
    for pitch_halves in (hidden + 8, -(-hidden // 64) * 64 + 8):
        banks = {(r * pitch_halves * 2 % 128) // 16 for r in range(8)}
        assert len(banks) == 8
    cpr = hidden // 8
    magic = 0xFFFFFFFF // cpr + 1
    assert all((i * magic) >> 32 == i // cpr for i in range(2 * hidden))


def _check(monkeypatch, name: str, path: str, batch: int, on: str) -> None:
    from mbconv_helpers import switched_against_float64
    from perfmodel.harness import relative_error

    got, off, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.PROJ_SE_SWITCH, on)
    if _takes_it(name, path):
        assert f"project_se_kernel<{block_widths(name, path)[1] // 8}, {'true' if on == '2' else 'false'}>" in names, \
            names[:600]
        assert "se_v3" not in names and "se_v5" not in names, names[:600]
        assert relative_error(got, off.double()) < 2e-3
        if batch == 128:
            assert not torch.equal(got, off)  # V' rounded where the default rounds s D: not blind
    else:
        assert "project_se_kernel" not in names
        assert relative_error(got, off.double()) < 1e-4  # version 3's kernel 1 pools with atomics (features.1.*)


# ---- GPU ----

@on_every_distinct_block
def test_ldmatrix_form_against_float64(name, path, batch, monkeypatch):
    _check(monkeypatch, name, path, batch, "2")


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("path", ["features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1"])
def test_plain_loads_against_float64(path, batch, monkeypatch):
    _check(monkeypatch, "efficientnet_b0", path, batch, "1")


@pytest.mark.cuda
@pytest.mark.parametrize("on", ["1", "2"])
def test_efficientnet_b0_with_it(on, monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_SE_SWITCH: on}, {"StemMBConv": 1, "MBConv": 15}, 16)
