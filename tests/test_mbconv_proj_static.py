"""B0's projections compiled for their shapes (CUDA_KERNELS_PROJ_STATIC, off until measured, NOTES.md "Session 26"),
as kernel 1's static shapes (test_mbconv_k1_static.py): the early ones (csrc/mbconv_v3.cu kV9Static,
project_v9ss_kernel at 2.0-3.1) and the wgmma ones (csrc/mbconv_proj_wg.cu kWgStatic, project_wg_s_kernel /
project_wg_sks_kernel at 4.0-7.0), with the block's output size, hidden, C_out and shortcut as constants, so that their
loops over hidden unroll or count constant trips and the row, column and image indices fold (2.1's task loop 657 -> 369
static SASS instructions, 4.1's tile loop 945 -> 745). The same products in the same order: bit for bit.

CPU: the tables hold B0's blocks as torchvision builds them; the switch and the matchers as the source reads them.
GPU (@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5, 128 against float64 (poisoned output), bit for
bit the switch-off output, the profiler naming the static kernel at B0's 2.0-7.0 (at batch 128); B0 end to end."""

import re
from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v3.cu").read_text()
WG_SOURCE = (CSRC / "mbconv_proj_wg.cu").read_text()


def _table(source: str, name: str) -> list[tuple[int, ...]]:
    body = source.split(f"{name}[] = {{")[1].split("};")[0]
    return [tuple(int(v) for v in m.split(",")) for m in re.findall(r"\{([\d, ]+)\}", body)][1:]


@pytest.mark.parametrize("source,name,sizes", [
    (SOURCE, "constexpr V9Static kV9Static", {"2.0": 56, "2.1": 56, "3.0": 28, "3.1": 28}),
    (WG_SOURCE, "constexpr WgStatic kWgStatic",
     {"4.0": 14, "4.1": 14, "5.0": 14, "5.1": 14, "6.0": 7, "6.1": 7, "7.0": 7}),
], ids=["v9s", "wg"])
def test_the_tables_are_b0s_projections(source, name, sizes):
    """B0 at 224 x 224, each block's output H = W, its projection's hidden -> C_out and whether the shortcut is added:
    2.0 56, 96 -> 24, no (stride 2); 2.1 56, 144 -> 24, yes; 3.0 28, 144 -> 40, no; 3.1 28, 240 -> 40, yes; 4.0 14,
    240 -> 80, no; 4.1 14, 480 -> 80, yes; 5.0 14, 480 -> 112, no (channels change); 5.1 14, 672 -> 112, yes; 6.0 7,
    672 -> 192, no; 6.1 7, 1152 -> 192, yes; 7.0 7, 1152 -> 320, no."""
    import torchvision

    table = _table(source, name)
    model = torchvision.models.efficientnet_b0()
    for i, (path, hw) in enumerate(sizes.items()):
        stage, index = (int(v) for v in path.split("."))
        block = model.features[stage][index]
        project = block.block[-1][0]
        assert table[i] == (hw, project.in_channels, project.out_channels, int(block.use_res_connect)), path
    assert len(table) == len(sizes)


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
    # the wgmma projections': the same switch, every field set compared (hk_pad is the host's, for the weights' map)
    assert 'const char* v = std::getenv("CUDA_KERNELS_PROJ_STATIC");' in WG_SOURCE
    for field in ("p.Ho == s.HW", "p.Wo == s.HW", "p.hidden == s.hidden", "p.hid_pad == s.hidden",
                  "p.C_out == s.C_out", "(p.residual != 0) == (s.residual != 0)"):
        assert field in WG_SOURCE, field
    setter = WG_SOURCE.split("__device__ __forceinline__ void wg_static_params(Params& p) {")[1].split("\n}")[0]
    assert set(re.findall(r"p\.(\w+) =", setter)) == {"Ho", "Wo", "hidden", "hid_pad", "C_out", "residual"}


# ---- GPU ----

B0_KERNELS = {"features.2.0": "project_v9ss_kernel<3, 1>", "features.2.1": "project_v9ss_kernel<3, 2>",
              "features.3.0": "project_v9ss_kernel<5, 3>", "features.3.1": "project_v9ss_kernel<5, 4>",
              "features.4.0": "project_wg_s_kernel<80, 9, 1>", "features.4.1": "project_wg_s_kernel<80, 9, 2>",
              "features.5.0": "project_wg_s_kernel<112, 9, 3>", "features.5.1": "project_wg_s_kernel<112, 9, 4>",
              # 98 row tiles of 64 at batch 128, one column tile: at most the SMs, so the split kernel (project_wg_split)
              "features.6.0": "project_wg_sks_kernel<192, 5>", "features.6.1": "project_wg_sks_kernel<192, 6>",
              "features.7.0": "project_wg_s_kernel<160, 9, 7>"}


@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import check_switch_bitwise

    # the same products in the same order (the kernels' names at batch 128, where the split rule is as written above)
    check_switch_bitwise(monkeypatch, name, path, batch, mb.PROJ_STATIC_SWITCH, B0_KERNELS,
                         r"project_v9ss_kernel|project_wg_sk?s_kernel", min_batch=128)


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.PROJ_STATIC_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
