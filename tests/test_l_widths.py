"""ConvFirstNet-L's widths on the mma.sync kernels: stride-1 C = 96 and 192 (ConvFirst and FFN,
csrc/block_fusion.cuh) and the stride-2 blocks 96 -> 192 and 192 -> 384 (csrc/convfirst_s2.cuh).

96 is a multiple of 32 but not of 64: the kernels keep activations and weight slices as panels of
64 fp16 columns, and C = 96 fills one and a half (Config::PARTIAL: the last panel, U slice and
shortcut slice are 32 wide). CPU: the switch (CUDA_KERNELS_L_WIDTHS, off by default), the host
policy and fallback reasons, ConvFirstNet-L's block swap, the templates' instantiations mirrored in
Python (warp tiles, shared memory, the byte budget per SM) and a dataflow emulation of one tile of
each instantiation: the kernel's loops over k-slices, warp tiles and 16x16 fragments on its
XOR-swizzled shared-memory panels, with unwritten shared memory poisoned (NaN) and every global
read checked against the row length, against the block in float64. GPU (marked cuda, the switch
on): every width and alpha at 56/28/14/7, odd sizes, odd batches, batch 1, every tile variant, the
output poisoned with NaN first; the error against float64 at most twice PyTorch fp16's. Batch 128 is
checked by the benchmarks' correctness gate before they time a variant (cuda_kernels.bench against
float32, bench_s2 against float64; a variant that fails is not timed and the file says so).
"""

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import cuda_kernels
from cuda_kernels import convfirst_s2 as s2
from cuda_kernels import ops
from helpers import channels_last, check_against_float64
from perfmodel.harness import randomize_batchnorm
from perfmodel.zoo import FFN, ConvFirstBlock, fold_batchnorm

CSRC = Path(cuda_kernels.__file__).parent / "csrc"
SWITCH = ops.L_WIDTHS_SWITCH


@pytest.fixture
def l_widths(monkeypatch):
    """The switch on, the other kernels' switches at their defaults."""
    monkeypatch.setenv(SWITCH, "1")
    for name in ("CUDA_KERNELS_C512", "CUDA_KERNELS_WGMMA_CONVFIRST", "CUDA_KERNELS_C384", "CUDA_KERNELS_C768"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_KERNELS_STEM", "0")  # L's stem has no kernel: tests/test_stem.py


@pytest.fixture
def l_widths_off(monkeypatch):
    monkeypatch.setenv(SWITCH, "0")
    for name in ("CUDA_KERNELS_C512", "CUDA_KERNELS_WGMMA_CONVFIRST", "CUDA_KERNELS_C384", "CUDA_KERNELS_C768"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_KERNELS_STEM", "0")  # L's stem has no kernel: tests/test_stem.py


def _ffn_weights(channels: int, hidden: int):
    return torch.randn(hidden, channels, 1, 1), torch.randn(hidden), torch.randn(channels, hidden, 1, 1), torch.randn(channels)


def down_block(cin: int, expansion: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return fold_batchnorm(randomize_batchnorm(ConvFirstBlock(cin, expansion, 2 * cin, stride=2), seed=seed))


# ---- the switch and the host policy (CPU) ----

@pytest.mark.parametrize("value,stride1,stride2", [
    (None, True, True), ("0", False, False), ("1", True, True), ("all", True, True), ("stride1", True, False),
    ("stride2", False, True), ("stride1, stride2", True, True), ("", False, False),
])
def test_switch(monkeypatch, value, stride1, stride2):
    if value is None:
        monkeypatch.delenv(SWITCH, raising=False)
    else:
        monkeypatch.setenv(SWITCH, value)
    assert (ops.l_widths_enabled("stride1"), ops.l_widths_enabled("stride2")) == (stride1, stride2)
    assert set(ops.supported_channels()) == set(ops.SUPPORTED_CHANNELS) | (set(ops.SWITCHED_CHANNELS) if stride1 else set())


@pytest.mark.parametrize("channels", ops.SWITCHED_CHANNELS)
def test_stride1_off_names_the_switch(l_widths_off, channels):
    with pytest.raises(ValueError, match=f"got C={channels}; .*{SWITCH}=1"):
        cuda_kernels.prepare_weights(*_ffn_weights(channels, 6 * channels))
    assert SWITCH in ffn_reason(channels)
    with pytest.raises(ValueError, match="C=48"):  # a width with no kernel keeps its old message
        cuda_kernels.prepare_weights(*_ffn_weights(48, 96))


def ffn_reason(channels: int) -> str:
    return cuda_kernels.FusedFFN.unsupported(fold_batchnorm(FFN(channels, 6)))


@pytest.mark.parametrize("channels,expansion", list(itertools.product(ops.SWITCHED_CHANNELS, ops.SUPPORTED_EXPANSIONS)))
def test_stride1_on(l_widths, channels, expansion):
    hidden = expansion * channels
    conv = torch.randn(channels, 8, 3, 3)
    w = cuda_kernels.prepare_weights(*_ffn_weights(channels, hidden), conv, torch.randn(channels))
    assert (w.channels, w.hidden) == (channels, hidden)
    assert w.conv_w.shape == (channels // 8, 9, 32) and w.wgmma.numel() == 0
    assert ops.DEFAULT_VARIANT[channels] in (0, 1)
    # every chunk of every instantiation divides the hidden width
    for cfg in stride1_configs():
        if cfg.C == channels:
            assert hidden % cfg.HC == 0
    block = fold_batchnorm(ConvFirstBlock(channels, expansion))
    assert cuda_kernels.FusedConvFirstBlock.unsupported(block) is None
    assert cuda_kernels.FusedFFN.unsupported(fold_batchnorm(FFN(channels, expansion))) is None


def test_stride2_policy(l_widths_off, monkeypatch):
    assert "switched off" in s2.unsupported_shape(96, 192, 576) and SWITCH in s2.unsupported_shape(192, 384, 1152)
    # 384 -> 768 has its kernel in the C = 768 extension, off until CUDA_KERNELS_C768 (tests/test_convfirst_c768.py)
    assert s2.unsupported_shape(384, 768, 2304).startswith("C 384 -> 768: its kernel (in the C=768 extension) is off")
    monkeypatch.setenv(SWITCH, "stride2")
    for (cin, cout), alpha in itertools.product(s2.L_WIDTHS, s2.SUPPORTED_EXPANSIONS):
        assert s2.unsupported_shape(cin, cout, alpha * cin) is None
        assert s2.default_variant(cin, 56) in s2.VARIANTS[cin] and s2.default_variant(cin, 28) in s2.VARIANTS[cin]
    assert s2.unsupported_shape(96, 192, 96 * 5).startswith("hidden 480")
    assert ops.unsupported_channels(96) is not None  # stride2 alone leaves the stride-1 widths off
    w = s2.prepare_weights(s2.FoldedWeights.from_block(down_block(96, 6)))
    assert (w.in_channels, w.out_channels, w.hidden) == (96, 192, 576)
    assert w.conv_w.shape == (12, 9, 32) and w.ws.shape == (192, 96) and w.w2.shape == (192, 576)


def _convfirstnet_l():
    from perfmodel.zoo import MODELS

    return fold_batchnorm(MODELS["convfirstnet_l"]())


def test_convfirstnet_l_swap_off(l_widths_off, monkeypatch):
    """Off, and C = 384 off on the wgmma kernel: no block of ConvFirstNet-L has a kernel; each block and its FFN is listed."""
    monkeypatch.setenv("CUDA_KERNELS_C384", "0")
    net = _convfirstnet_l()
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused == {"ConvFirstBlock": 0, "FFN": 0}
    # 24 stride-1 blocks and 3 stride-2 blocks, each with its FFN
    assert len(swap.fallback) == 2 * (3 + 4 + 14 + 3 + 3)
    assert SWITCH in swap.fallback["stages.0.0"] and SWITCH in swap.fallback["stages.1.0"]
    assert SWITCH in swap.fallback["stages.1.1.ffn"]


def test_convfirstnet_l_swap_on(l_widths, monkeypatch):
    """On, with the wgmma kernel's C = 384 off: stages 0-1 (C = 96, 192) and the stride-2 blocks 96 -> 192
    and 192 -> 384 fuse; C = 384, 768 and 384 -> 768 fall back (each block and its FFN listed)."""
    monkeypatch.setenv("CUDA_KERNELS_C384", "0")
    net = _convfirstnet_l()
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused == {"ConvFirstBlock": 3 + 4 + 2, "FFN": 0}
    assert sum(isinstance(m, cuda_kernels.FusedConvFirstBlock) for m in net.modules()) == 7
    downs = [m for m in net.modules() if isinstance(m, s2.FusedConvFirstDown)]
    assert [(m.in_channels, m.out_channels) for m in downs] == [(96, 192), (192, 384)]
    assert len(swap.fallback) == 2 * (14 + 1 + 3)
    assert swap.fallback["stages.2.1"].startswith("C=384 (kernels for C in (32, 64, 96, 128, 192, 256))")
    assert swap.fallback["stages.3.0"].startswith("C 384 -> 768")


def test_convfirstnet_l_with_c384_too(l_widths):
    """With the wgmma kernel's C = 384 on as well (its default; convfirst_c512.py): 23 of the 27 blocks
    fuse; the stride-2 384 -> 768 block and the three C = 768 blocks stay off (CUDA_KERNELS_C768 unset)."""
    net = _convfirstnet_l()
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused == {"ConvFirstBlock": 23, "FFN": 0}
    assert sorted(k for k in swap.fallback if not k.endswith(".ffn")) == ["stages.3.0", "stages.3.1", "stages.3.2",
                                                                          "stages.3.3"]
    assert all("CUDA_KERNELS_C768" in swap.fallback[f"stages.3.{i}"] for i in range(4))


def test_convfirstnet_l_every_block_with_c768(l_widths, monkeypatch):
    """With the C = 768 kernels on too (CUDA_KERNELS_C768, convfirst_c768.py): all 27 blocks fuse, 0
    fallbacks; stages.3.0 is the stride-2 384 -> 768 block, stages.3.1-3 the stride-1 C = 768 ones."""
    from cuda_kernels.convfirst_c768 import FusedConvFirstC768

    monkeypatch.setenv("CUDA_KERNELS_C768", "1")
    if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma kernels need compute capability 9.0")
    net = _convfirstnet_l()
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused == {"ConvFirstBlock": 27, "FFN": 0} and swap.fallback == {}
    assert [type(net.stages[3][i]).__name__ for i in range(4)] == ["FusedConvFirstDown"] + ["FusedConvFirstC768"] * 3
    assert isinstance(net.stages[3][1], FusedConvFirstC768) and net.stages[3][0].out_channels == 768


# ---- the templates mirrored in Python: instantiations, tiles, shared memory (CPU) ----

KB = 1024
SM_BYTES = 227 * KB  # the opt-in shared memory per block of an H200 / H100 (and per SM, less 1 KB per block)


class Stride1:
    """block_fusion.cuh's Config, as written there."""

    BM, HALO_PIXELS = 128, 336

    def __init__(self, C, HC, WM1, WM2, MINB, STAGES, CONV):
        self.C, self.HC, self.WM1, self.WM2, self.MINB, self.STAGES, self.CONV = C, HC, WM1, WM2, MINB, STAGES, CONV
        BM = self.BM
        self.WN1, self.WN2 = 8 // WM1, 8 // WM2
        self.TM1, self.TN1, self.TM2, self.TN2 = BM // WM1, HC // self.WN1, BM // WM2, C // self.WN2
        self.KP = (C + 63) // 64
        self.KW = C if C < 64 else 64
        self.KLAST = C - 64 * (self.KP - 1)
        self.PARTIAL = self.KLAST != self.KW
        self.KU, self.KV = self.KP, HC // 64
        a_bytes, h_bytes = self.KP * BM * 128, self.KV * BM * 128
        ring = STAGES * max(HC, C) * 128
        halo = (self.HALO_PIXELS + 1) * 128
        ffn = a_bytes + ring + h_bytes
        self.SEPARATE_HALO = CONV and (ffn + halo + KB) * MINB <= SM_BYTES
        if self.SEPARATE_HALO:
            r = ring + h_bytes + halo
        else:
            r = halo if CONV and halo > ring + h_bytes else ring + h_bytes
        self.SMEM = a_bytes + r

    def __repr__(self):
        return f"Config<{self.C}, {self.HC}, {self.WM1}, {self.WM2}, {self.MINB}, {self.STAGES}, {self.CONV}>"


class Stride2:
    """convfirst_s2.cuh's Config, as written there."""

    PHASE_A = (4 * 128 + 3 * 56 + 1 + 4 * 128 + 56) * 64

    def __init__(self, CIN, COUT, HC, WM1, WM2, MINB, BM=128, STAGES=3, NSPLIT=1):
        self.CIN, self.COUT, self.HC, self.WM1, self.WM2, self.MINB, self.BM, self.STAGES = \
            CIN, COUT, HC, WM1, WM2, MINB, BM, STAGES
        self.NSPLIT = NSPLIT  # thread blocks per tile, each COUT of the NSPLIT x COUT output columns
        self.C = CIN
        self.WN1, self.WN2 = 8 // WM1, 8 // WM2
        self.TM1, self.TN1, self.TM2, self.TN2 = BM // WM1, HC // self.WN1, BM // WM2, COUT // self.WN2
        self.KP = (CIN + 63) // 64
        self.KW = CIN if CIN < 64 else 64
        self.KLAST = CIN - 64 * (self.KP - 1)
        self.PARTIAL = self.KLAST != self.KW
        self.KU, self.KV = self.KP, HC // 64
        panel = BM * 128
        ring = STAGES * max(HC, COUT) * 128
        self.SMEM = self.KP * panel + max(self.KV, self.KP) * panel + max(ring, self.PHASE_A, COUT // 64 * panel)

    def __repr__(self):
        split = f", {self.NSPLIT}" if self.NSPLIT != 1 else ""
        return (f"s2::Config<{self.CIN}, {self.COUT}, {self.HC}, {self.WM1}, {self.WM2}, {self.MINB}, {self.BM}, "
                f"{self.STAGES}{split}>")


def stride1_configs() -> list[Stride1]:
    found = []
    for path in sorted(CSRC.glob("block_fusion_c*.cu")):
        for m in re.finditer(r"Config<(\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (true|false)>", path.read_text()):
            *nums, conv = m.groups()
            found.append(Stride1(*map(int, nums), conv == "true"))
    return found


def stride2_configs() -> list[Stride2]:
    found = []
    for name in ("convfirst_s2.cu", "convfirst_s2_wide.cu", "convfirst_s2_c768.cu"):
        for m in re.finditer(r"Config<(\d+), (\d+), (\d+), (\d+), (\d+), (\d+)(?:, (\d+))?(?:, (\d+))?(?:, (\d+))?>",
                             (CSRC / name).read_text()):
            found.append(Stride2(*(int(v) for v in m.groups() if v is not None)))
    return found


def test_instantiations_are_found():
    widths = {c.C for c in stride1_configs()}
    assert widths == {32, 64, 96, 128, 192, 256}
    assert {(c.CIN, c.COUT) for c in stride2_configs()} == {(32, 64), (64, 128), (96, 192), (128, 256), (192, 384),
                                                          (256, 512), (384, 384)}  # 384 -> 768 in two column halves
    assert [c.NSPLIT for c in stride2_configs() if c.CIN == 384] == [2]
    assert [c.C for c in stride1_configs() if c.PARTIAL] == [96] * 4  # the only non-power-of-two width so far
    assert [c.CIN for c in stride2_configs() if c.PARTIAL] == [96, 96]


@pytest.mark.parametrize("cfg", stride1_configs() + stride2_configs(), ids=repr)
def test_tiles_and_shared_memory(cfg):
    """The templates' static_asserts, and the new widths' byte budgets (written into NOTES.md)."""
    assert cfg.TM1 % 16 == 0 and cfg.TN1 % 16 == 0 and cfg.TM2 % 16 == 0 and cfg.TN2 % 16 == 0
    assert cfg.HC % 64 == 0 and cfg.C % 32 == 0 and cfg.KLAST in (32, 64)
    assert not cfg.PARTIAL or (cfg.C > 64 and cfg.KLAST == 32)
    assert cfg.SMEM <= SM_BYTES
    expected = {  # bytes of dynamic shared memory per block, blocks that fit per SM
        "Config<96, 64, 4, 4, 2, 3, True>": (86016, 2), "Config<96, 64, 4, 4, 1, 4, True>": (141440, 1),
        "Config<192, 128, 2, 2, 1, 3, True>": (198784, 1), "Config<192, 128, 2, 2, 1, 4, True>": (223360, 1),
        "s2::Config<96, 192, 64, 4, 2, 1, 128, 3>": (145472, 1), "s2::Config<96, 192, 64, 2, 2, 2, 64, 3>": (112704, 2),
        "s2::Config<192, 384, 128, 1, 1, 1, 64, 3>": (196608, 1),
        "s2::Config<384, 384, 128, 1, 1, 1, 64, 2, 2>": (196608, 1),
    }
    if repr(cfg) in expected:
        assert (cfg.SMEM, (SM_BYTES + KB) // (cfg.SMEM + KB)) == expected[repr(cfg)]
        assert (SM_BYTES + KB) // (cfg.SMEM + KB) >= cfg.MINB


def _nvcc():
    import os
    import shutil

    home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    path = os.path.join(home, "bin", "nvcc")
    return path if os.path.exists(path) else shutil.which("nvcc")


def test_the_mirror_is_the_cpp_config(tmp_path):
    """nvcc builds a host program that prints each instantiation's constants from the real headers:
    they must be the Python mirror's (so the emulation below runs the kernels' geometry)."""
    import subprocess

    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME)")
    lines = []
    for cfg in stride1_configs():
        t = f"bf::Config<{cfg.C}, {cfg.HC}, {cfg.WM1}, {cfg.WM2}, {cfg.MINB}, {cfg.STAGES}, {str(cfg.CONV).lower()}>"
        lines.append(f'  show<{t}>("{cfg!r}", {t}::SEPARATE_HALO);')
    for cfg in stride2_configs():
        t = f"s2::Config<{cfg.CIN}, {cfg.COUT}, {cfg.HC}, {cfg.WM1}, {cfg.WM2}, {cfg.MINB}, {cfg.BM}, {cfg.STAGES}, {cfg.NSPLIT}>"
        lines.append(f'  show<{t}>("{cfg!r}", false);')
    src = tmp_path / "mirror.cu"
    src.write_text('#include <cstdio>\n#include "block_fusion.cuh"\n#include "convfirst_s2.cuh"\n'
                   "template <class K> void show(const char* name, bool separate) {\n"
                   '  std::printf("%s|%d|%d|%d|%d|%d|%d|%d\\n", name, K::SMEM_BYTES, K::KLAST, int(K::PARTIAL), K::KP,\n'
                   "              K::TN1, K::TN2, int(separate));\n}\n"
                   "int main() {\n" + "\n".join(lines) + "\n  return 0;\n}\n")
    exe = tmp_path / "mirror"
    build = subprocess.run([nvcc, "-std=c++17", f"-I{CSRC}", "-gencode=arch=compute_90a,code=sm_90a", str(src), "-o",
                            str(exe)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    printed = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.splitlines()
    for cfg, line in zip(stride1_configs() + stride2_configs(), printed, strict=True):
        name, *values = line.split("|")
        assert name == repr(cfg)
        assert list(map(int, values)) == [cfg.SMEM, cfg.KLAST, int(cfg.PARTIAL), cfg.KP, cfg.TN1, cfg.TN2,
                                          int(getattr(cfg, "SEPARATE_HALO", False))]


# ---- dataflow: one tile of each instantiation, emulated on the swizzled panels (CPU) ----

def panel_offset(row, chunk):
    """ptx.cuh: byte offset of 16-byte chunk `chunk` of row `row` in a panel of 128-byte rows."""
    return row * 128 + (((chunk ^ row) & 7) << 4)


def panel_index(rows: int) -> np.ndarray:
    """[rows, 64] element index (in fp16 units) of each (row, column) of a panel."""
    r = np.arange(rows)[:, None]
    k = np.arange(64)[None, :]
    return panel_offset(r, k // 8) // 2 + k % 8


class Smem:
    """Shared memory in fp16 units, poisoned: a read of anything the kernel did not write is NaN."""

    def __init__(self, halves: int):
        self.mem = np.full(halves, np.nan)

    def write_cols(self, base: int, row: int, col: int, values):
        """Write values to columns col.. of `row` in the panels at base (64 columns per panel), as the
        conv phase, the blur, store_relu_half and the epilogue address them."""
        for j, v in enumerate(values):
            c = col + j
            self.mem[base + (c >> 6) * self.panel_halves + panel_offset(row, (c & 63) >> 3) // 2 + (c & 7)] = v

    def panel(self, base: int, rows: int) -> np.ndarray:
        return self.mem[base + panel_index(rows)]


def load_slice(smem: Smem, base: int, src: np.ndarray, rows: int, col0: int, kwidth: int):
    """cp.async of `rows` rows x kwidth columns from column col0 of src (a [rows, ld] matrix) into a
    slot (one panel); every global read must lie inside the row."""
    assert kwidth % 8 == 0 and col0 + kwidth <= src.shape[1], f"global read past the row: {col0} + {kwidth}"
    for c in range(kwidth // 8):
        for r in range(rows):
            off = base + panel_offset(r, c) // 2
            smem.mem[off:off + 8] = src[r, col0 + c * 8:col0 + c * 8 + 8]


def mma_slice(acc, a_panel, b_panel, tm, tn, wm_count, wn_count, kwidth):
    """Every warp's MT x NT tile, ks over kwidth / 16 steps of 16 columns (mma_slice / the loops in
    block_fusion.cuh), at the granularity of one 16 x 16 A fragment and 16 x 16 B fragment pair."""
    for wm, wn in itertools.product(range(wm_count), range(wn_count)):
        for ks in range(kwidth // 16):
            k = slice(ks * 16, ks * 16 + 16)
            for mt in range(tm // 16):
                rows = slice(wm * tm + mt * 16, wm * tm + mt * 16 + 16)
                for np_ in range(tn // 16):
                    cols = slice(wn * tn + np_ * 16, wn * tn + np_ * 16 + 16)
                    acc[rows, cols] += a_panel[rows, k] @ b_panel[cols, k].T


def k_width(cfg, t: int) -> int:
    """The k width of panel / slice t: KW, or KLAST for the last when PARTIAL (the kernels' rule)."""
    return cfg.KLAST if cfg.PARTIAL and t == cfg.KP - 1 else cfg.KW


def emulate_tile(cfg, x: np.ndarray, w1, b1, w2, b2, shortcut=None) -> np.ndarray:
    """One BM-pixel tile: x [BM, C] written into A_s panels as the conv phase / blur write it, the
    optional shortcut (xs [BM, C], ws [COUT, C]) as the stride-2 kernel's first stage-2 K-chunk, the
    hidden chunks (stage 1 on KP slices of U, ReLU into H_s as fp16, stage 2 on KV slices of V), the
    epilogue staged as fp16 panels and read back 16 bytes at a time."""
    bm, c = cfg.BM, cfg.C
    cout = w2.shape[0]
    smem = Smem(1)
    smem.panel_halves = bm * 64
    slot_halves = max(cfg.HC, cout) * 64
    # layout: A_s (KP panels), H_s (max(KV, KP) panels), one slot (reused; the ring's depth does not change
    # what a slice holds), the output staging (COUT / 64 panels)
    a_base, h_base = 0, cfg.KP * bm * 64
    slot_base = h_base + max(cfg.KV, cfg.KP) * bm * 64
    o_base = slot_base + slot_halves
    smem.mem = np.full(o_base + (cout + 63) // 64 * bm * 64, np.nan)
    for r in range(bm):
        for g in range(c // 8):  # 8 channels at a time, as the conv epilogue and the blur store them
            smem.write_cols(a_base, r, g * 8, x[r, g * 8:g * 8 + 8])
    acc2 = np.zeros((bm, cout))
    if shortcut is not None:
        xs, ws = shortcut
        for r in range(bm):
            for g in range(c // 8):
                smem.write_cols(h_base, r, g * 8, xs[r, g * 8:g * 8 + 8])
        for t in range(cfg.KP):
            smem.mem[slot_base:slot_base + slot_halves] = np.nan
            load_slice(smem, slot_base, ws, cout, t * 64, k_width(cfg, t))
            mma_slice(acc2, smem.panel(h_base + t * bm * 64, bm), smem.panel(slot_base, cout), cfg.TM2, cfg.TN2,
                      cfg.WM2, cfg.WN2, k_width(cfg, t))
    hidden = w1.shape[0]
    for chunk in range(hidden // cfg.HC):
        acc1 = np.zeros((bm, cfg.HC))
        u = w1[chunk * cfg.HC:(chunk + 1) * cfg.HC]
        for t in range(cfg.KU):
            smem.mem[slot_base:slot_base + slot_halves] = np.nan
            load_slice(smem, slot_base, u, cfg.HC, t * 64, k_width(cfg, t))
            mma_slice(acc1, smem.panel(a_base + t * bm * 64, bm), smem.panel(slot_base, cfg.HC), cfg.TM1, cfg.TN1,
                      cfg.WM1, cfg.WN1, k_width(cfg, t))
        h = np.maximum(acc1 + b1[chunk * cfg.HC:(chunk + 1) * cfg.HC], 0).astype(np.float16).astype(np.float64)
        smem.mem[h_base:h_base + cfg.KV * bm * 64] = np.nan
        for r in range(bm):
            smem.write_cols(h_base, r, 0, h[r])
        v = w2[:, chunk * cfg.HC:(chunk + 1) * cfg.HC]
        for t in range(cfg.KV):
            smem.mem[slot_base:slot_base + slot_halves] = np.nan
            load_slice(smem, slot_base, v, cout, t * 64, 64)
            mma_slice(acc2, smem.panel(h_base + t * bm * 64, bm), smem.panel(slot_base, cout), cfg.TM2, cfg.TN2,
                      cfg.WM2, cfg.WN2, 64)
    staged = (acc2 + b2).astype(np.float16).astype(np.float64)
    for r in range(bm):
        smem.write_cols(o_base, r, 0, staged[r])
    out = np.empty((bm, cout))
    for r in range(bm):  # the epilogue's 16-byte reads: chunk c of the row, panel c >> 3
        for ch in range(cout // 8):
            off = o_base + (ch >> 3) * bm * 64 + panel_offset(r, ch & 7) // 2
            out[r, ch * 8:ch * 8 + 8] = smem.mem[off:off + 8]
    return out


def _half(shape, rng, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16).astype(np.float64)


@pytest.mark.parametrize("cfg", [c for c in stride1_configs() if c.CONV] + stride2_configs(), ids=repr)
def test_tile_dataflow(cfg):
    """Every instantiation's tile against X U^T -> ReLU -> V^T (+ the shortcut): no NaN (nothing read
    that was not written), no global read past a row, and the result of the block."""
    rng = np.random.default_rng(cfg.C + cfg.HC)
    c = cfg.C
    cout = getattr(cfg, "COUT", c)
    hidden = 2 * cfg.HC  # two hidden chunks
    x = _half((cfg.BM, c), rng)
    w1, b1 = _half((hidden, c), rng, c ** -0.5), rng.standard_normal(hidden) * 0.1
    w2, b2 = _half((cout, hidden), rng, hidden ** -0.5), rng.standard_normal(cout) * 0.1
    shortcut = None
    if cout != c:
        shortcut = (_half((cfg.BM, c), rng), _half((cout, c), rng, c ** -0.5))
    got = emulate_tile(cfg, x, w1, b1, w2, b2, shortcut)
    assert np.isfinite(got).all()
    h = np.maximum(x @ w1.T + b1, 0).astype(np.float16).astype(np.float64)
    want = h @ w2.T + b2 + (shortcut[0] @ shortcut[1].T if shortcut else 0)
    assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max()


def test_dataflow_catches_a_full_width_last_slice():
    """The emulation is not blind: C = 96 with the last slice 64 wide (the power-of-two assumption the
    kernels had) reads past the weight rows."""
    cfg = next(c for c in stride1_configs() if c.C == 96 and c.CONV)
    cfg.PARTIAL = False
    rng = np.random.default_rng(0)
    with pytest.raises(AssertionError, match="global read past the row"):
        emulate_tile(cfg, _half((128, 96), rng), _half((192, 96), rng), np.zeros(192), _half((96, 192), rng),
                     np.zeros(96))


@pytest.mark.parametrize("cfg", [c for c in stride1_configs() if c.CONV], ids=repr)
def test_conv_slices_cover_every_group_once(cfg):
    """conv_phase: slices of KW channels (the last KLAST), two groups per warp pair, every 16-pixel
    m-tile of the tile by exactly one warp per pair; channels read from the halo inside C."""
    seen = []
    for s in range(cfg.KP):
        cs = k_width(cfg, s)
        chs, pairs = cs // 8, cs // 16
        assert 8 % pairs == 0
        assert s * 64 + (chs - 1) * 8 + 8 <= cfg.C  # halo source channels
        for warp in range(8):
            pair = warp % pairs
            g0 = s * 8 + pair * 2
            mt_step = 8 // pairs
            tiles = [warp // pairs + j * mt_step for j in range((cfg.BM // 16) // mt_step)]
            seen += [(g, mt) for g in (g0, g0 + 1) for mt in tiles]
    assert sorted(seen) == sorted(itertools.product(range(cfg.C // 8), range(cfg.BM // 16)))


def test_stride2_phase_a_covers_c_in():
    """Phase A works on 32-channel slices (CIN / 32 of them), so C_in = 96 and 192 need no change there;
    its blur writes column s * 32 + 8 c into panel col >> 6 (emulate_tile writes the same way)."""
    for cfg in stride2_configs():
        cols = sorted(s * 32 + c * 8 for s in range(cfg.CIN // 32) for c in range(4))
        assert cols == list(range(0, cfg.CIN, 8))


def test_new_widths_compile_without_spills(tmp_path):
    """ptxas alone, no GPU: the one-block-per-SM variants of C = 96 and 192 keep everything in registers
    (variant 0 of C = 96, at two blocks per SM and 128 registers, may spill a little: NOTES.md)."""
    import subprocess

    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME)")
    procs = {}
    for name in ("block_fusion_c96", "block_fusion_c192"):
        cmd = [nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v", f"-I{CSRC}",
               "-c", str(CSRC / f"{name}.cu"), "-o", str(tmp_path / f"{name}.o")]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name, proc in procs.items():
        report, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, report
        kernels = report.split("Compiling entry function")[1:]
        assert len(kernels) == 4, report
        for k in kernels:
            minb = int(re.search(r"ConfigILi\d+ELi\d+ELi\d+ELi\d+ELi(\d+)", k).group(1))
            spills = re.search(r"(\d+) bytes spill stores", k).group(1)
            if minb == 1 or "ELb0E" in k:
                assert spills == "0", k


# ---- GPU (the switch on) ----

def random_block(block: nn.Module) -> nn.Module:
    return fold_batchnorm(randomize_batchnorm(block))


def cuda_input(batch, channels, h, w=None):
    return channels_last(torch.randn(batch, channels, h, h if w is None else w, device="cuda", dtype=torch.float16))


def check_stride1(block, x, variant=None):
    block = block.cuda()
    conv = isinstance(block, ConvFirstBlock)
    ffn = block.ffn if conv else block
    args = (ffn.expand.weight, ffn.expand.bias, ffn.project.weight, ffn.project.bias)
    weights = cuda_kernels.prepare_weights(*args, *((block.conv.weight, block.conv.bias) if conv else ()))
    residual = True if conv else block.residual
    return check_against_float64(block, x, lambda out: cuda_kernels.run_block(x, weights, residual, variant, out),
                                 tuple(x.shape))


L1 = ops.SWITCHED_CHANNELS


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,size", list(itertools.product(L1, (2, 4, 6), (56, 28, 14, 7))))
def test_gpu_convfirst_every_shape(l_widths, channels, expansion, size):
    torch.manual_seed(channels + size)
    check_stride1(random_block(ConvFirstBlock(channels, expansion)), cuda_input(3 if size >= 28 else 5, channels, size))


@pytest.mark.cuda
@pytest.mark.parametrize("channels,batch,h,w", [(96, 1, 9, 9), (96, 7, 13, 13), (192, 3, 5, 5), (192, 11, 3, 3),
                                                (96, 2, 1, 1), (192, 3, 23, 17), (96, 1, 55, 55), (192, 5, 27, 27)])
@pytest.mark.parametrize("variant", (0, 1))
def test_gpu_convfirst_odd_sizes_and_batches(l_widths, channels, batch, h, w, variant):
    torch.manual_seed(batch + h)
    check_stride1(random_block(ConvFirstBlock(channels, 6)), cuda_input(batch, channels, h, w), variant)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,size", [(96, 56), (192, 28)])
@pytest.mark.parametrize("batch", [1, 9])  # batch 128: the benchmark's correctness gate (float32 reference)
@pytest.mark.parametrize("variant", (0, 1))
def test_gpu_convfirstnet_l_shapes(l_widths, channels, size, batch, variant):
    torch.manual_seed(batch)
    check_stride1(random_block(ConvFirstBlock(channels, 6)), cuda_input(batch, channels, size), variant)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion", list(itertools.product(L1, (2, 4, 6))))
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("variant", (0, 1))
def test_gpu_ffn(l_widths, channels, expansion, residual, variant):
    torch.manual_seed(expansion)
    check_stride1(random_block(FFN(channels, expansion, residual=residual)), cuda_input(3, channels, 13), variant)


def check_stride2(cin, expansion, batch, h, w=None, **kwargs):
    w = h if w is None else w
    block = down_block(cin, expansion, seed=cin + h).cuda()
    x = cuda_input(batch, cin, h, w)
    weights = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    shape = (batch, 2 * cin, s2.output_size(h), s2.output_size(w))
    return check_against_float64(block, x, lambda out: s2.run(x, weights, out=out, **kwargs), shape)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,expansion,size", list(itertools.product((96, 192), (2, 4, 6), (56, 28, 14, 7))))
def test_gpu_stride2_every_shape(l_widths, cin, expansion, size):
    check_stride2(cin, expansion, 3 if size >= 28 else 5, size)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,batch,h,w", [(96, 3, 13, 13), (96, 1, 7, 7), (192, 5, 9, 9), (96, 2, 55, 55),
                                           (192, 7, 10, 6), (192, 3, 2, 2), (96, 11, 3, 5), (192, 2, 27, 27)])
def test_gpu_stride2_odd_sizes_and_batches(l_widths, cin, batch, h, w):
    for variant in s2.VARIANTS[cin]:
        check_stride2(cin, 6, batch, h, w, variant=variant)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,size", [(96, 56), (192, 28)])
@pytest.mark.parametrize("batch", [1, 9])  # batch 128: the benchmark's correctness gate (float64 reference)
def test_gpu_stride2_convfirstnet_l_shapes(l_widths, cin, size, batch):
    for variant in s2.VARIANTS[cin]:
        check_stride2(cin, 6, batch, size, variant=variant)


@pytest.mark.cuda
@pytest.mark.parametrize("rows_per_tile", [1, 2, 3, 4])
@pytest.mark.parametrize("cin,size,variant", [(96, 14, 0), (96, 13, 1), (192, 7, 0), (192, 15, 0)])
def test_gpu_stride2_tiles_across_images(l_widths, cin, size, variant, rows_per_tile):
    check_stride2(cin, 4, 3, size, rows_per_tile=rows_per_tile, variant=variant)


@pytest.mark.cuda
def test_gpu_raw_ops_refuse_unknown_variants(l_widths):
    block = down_block(192, 2).cuda()
    weights = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    x = cuda_input(1, 192, 8)
    with pytest.raises(ValueError, match="no variant 1"):
        s2.run(x, weights, variant=1)
    flat = x.permute(0, 2, 3, 1).reshape(-1, 192)
    args = [weights.conv_w, weights.conv_b, weights.w1, weights.b1, weights.w2, weights.ws, weights.bo]
    with pytest.raises(RuntimeError, match="no variant 2"):
        s2._extension().convfirst_s2(flat, *args, 1, 8, 8, 0, 2, torch.empty(0, device="cuda", dtype=torch.float16))
    assert s2.shared_memory_need(192, 384) <= torch.cuda.get_device_properties(0).shared_memory_per_block_optin


@pytest.mark.cuda
def test_gpu_swapped_l_network(l_widths):
    """A short ConvFirstNet-L: stride-1 96, 96 -> 192, stride-1 192, 192 -> 384, all fused."""
    import copy

    from perfmodel.harness import relative_error

    torch.manual_seed(0)
    net = nn.Sequential(random_block(ConvFirstBlock(96, 6)), down_block(96, 6, seed=1),
                        random_block(ConvFirstBlock(192, 6)), down_block(192, 6, seed=2)).cuda().half()
    x = cuda_input(4, 96, 28)
    with torch.no_grad():
        exact = copy.deepcopy(net).double()(x.double())
        fp16 = net(x)
        swap = cuda_kernels.replace_blocks(net)
        got = net(x)
    assert swap.fused == {"ConvFirstBlock": 4, "FFN": 0} and swap.fallback == {}
    assert got.shape == (4, 384, 7, 7)
    assert relative_error(got, exact) <= 2 * relative_error(fp16, exact)
