"""The early projections compiled for B0's shapes (csrc/mbconv_v3.cu kV9Static, project_v9ss_kernel;
CUDA_KERNELS_PROJ_STATIC, off until measured, NOTES.md "Session 26"), as kernel 1's static shapes
(test_mbconv_k1_static.py): project_v9s with the block's output size, hidden, C_out and shortcut as constants, so its
unit loop over hidden / 16 unrolls and the row, column and image indices fold (2.1's task loop 657 -> 369 static SASS
instructions). The same products in the same order: bit for bit project_v9s's output.

CPU: the table holds B0's blocks as torchvision builds them; the switch and the matcher as the source reads them. GPU
(@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5, 128 against float64 (poisoned output), bit for bit
the switch-off output, the profiler naming project_v9ss at B0's 2.0-3.1; B0 end to end."""

import re
from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v3.cu").read_text()


def test_the_table_is_b0s_early_projections():
    """B0 at 224 x 224: 2.0 projects 96 -> 24 channels at 56 x 56 (stride 2: no shortcut), 2.1 144 -> 24 at 56 x 56
    (shortcut), 3.0 144 -> 40 at 28 x 28 (none), 3.1 240 -> 40 at 28 x 28 (shortcut)."""
    import torchvision

    body = SOURCE.split("constexpr V9Static kV9Static[] = {")[1].split("};")[0]
    table = [tuple(int(v) for v in m.split(",")) for m in re.findall(r"\{([\d, ]+)\}", body)][1:]
    model = torchvision.models.efficientnet_b0()
    sizes = {"2.0": 56, "2.1": 56, "3.0": 28, "3.1": 28}
    for i, (path, hw) in enumerate(sizes.items()):
        stage, index = (int(v) for v in path.split("."))
        block = model.features[stage][index]
        project = block.block[-1][0]
        assert table[i] == (hw, project.in_channels, project.out_channels, int(block.use_res_connect)), path
    assert len(table) == 4


def test_the_switch_and_the_matcher():
    assert mb.PROJ_STATIC_SWITCH == "CUDA_KERNELS_PROJ_STATIC"
    assert 'const char* v = std::getenv("CUDA_KERNELS_PROJ_STATIC");\n  if (v == nullptr || std::strcmp(v, "1") != 0) ' \
           'return 0;' in SOURCE
    for field in ("p.Ho == s.HW", "p.Wo == s.HW", "p.hidden == s.hidden", "p.hid_pad == s.hidden",
                  "p.hk_pad == v9_static_k_pad(s.hidden)", "p.C_out == s.C_out",
                  "(p.residual != 0) == (s.residual != 0)"):
        assert field in SOURCE, field
    kernel = SOURCE.split("project_v9ss_kernel(const Params p_in) {")[1].split("\n}")[0]
    assert set(re.findall(r"p\.(\w+) =", kernel)) == {"Ho", "Wo", "hidden", "hid_pad", "hk_pad", "C_out", "residual"}
    assert "return round_up(hidden, kProjectBK);" in SOURCE and mb.PROJECT_TILE_K == 32  # hk_pad, as prepare_weights


# ---- GPU ----

B0_KERNELS = {"features.2.0": "project_v9ss_kernel<3, 1>", "features.2.1": "project_v9ss_kernel<3, 2>",
              "features.3.0": "project_v9ss_kernel<5, 3>", "features.3.1": "project_v9ss_kernel<5, 4>"}


@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import check_switch_bitwise

    # the same products in the same order
    check_switch_bitwise(monkeypatch, name, path, batch, mb.PROJ_STATIC_SWITCH, B0_KERNELS, r"project_v9ss_kernel")


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_STATIC_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
