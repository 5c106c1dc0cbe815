"""MBConv version 9 (NOTES.md, "MBConv version 9"; csrc/mbconv_v3.cu project_v9_kernel): version 8 with the
projection streamed by each warp from D straight into its mma fragments, in 16-channel units whose mma k order is
permuted so that a lane loads 8 contiguous bytes of each of its two rows.

CPU: the switch, which blocks run project_v9 (the Python mirror against the kernel's constants, literal shared-memory
arithmetic, the bank pattern of V's loads), and the kernel transliterated (every warp's task walk, its ring of
kProjV9Depth loads running ahead across task boundaries, the lanes' fragments placed by the PTX layout of
mma.m16n8k16, the scale per row's image, the rows past P) in float64 against the projection computed directly.
GPU (@pytest.mark.cuda): every MBConv shape of EfficientNet-B0 and -B2 at batch 1, 5 and 128 against float64 with
NaN-poisoned outputs (<= 2x PyTorch fp16's error), batch 128 against float32, odd spatial sizes (tasks across
images, a partial last task), version 9 against version 8 (bit for bit: the same products; the profiler shows
project_v9 running) and against itself, and EfficientNet-B0 swapped with CUDA_KERNELS_MBCONV_VERSION=9."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb

ROOT = Path(__file__).resolve().parents[1]
CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v3.cu").read_text()
DEPTH, WARPS = 8, 8  # kProjV9Depth, kProjV9Warps


def test_version_9_is_registered_and_wired():
    assert 9 in mb.VERSIONS and mb.KERNEL_VERSION[9] == 9
    cu = (CSRC / "mbconv.cu").read_text()
    assert "(version == 8 || (v9 && !v9_v3)) && p.ksize == 3) err = launch_expand_dw_v8_k3" in cu
    assert "const bool v9 = version >= 9 && version <= 11, v10 = version >= 10 && version <= 11, v11 = version == 11;" in cu
    assert "err = p.ksize == 3 ? launch_expand_dw_v3_k3(p, chunk, stream, pdl, v3_hf)" in " ".join(cu.split())
    assert "const bool v3_hf = v9_v3 && kernel1_v3_hfma2_requested(v11);" in cu
    assert "return p9 ? launch_project_v9(p, stream, pdl) : launch_project_v3_only(p, stream, pdl);" in cu
    assert "(version >= 5 && version <= 11)" in (CSRC / "mbconv_bindings.cpp").read_text()
    # kernel 1 of version 9 is version 8's: the same bands
    assert mb.band_rows(56, 56, 3, 1, 32, 48, True, 9, 24) == mb.band_rows(56, 56, 3, 1, 32, 48, True, 8, 24)


def test_kernel1_v9_takes_v3_mirrors_the_launcher():
    """Version 3's kernel 1 (and its bands) at k = 3, stride 1 and <= 64 output pixels: B0's features.7.0 only (B2's
    last stage is 9 x 9 = 81 pixels at 288 x 288)."""
    assert re.search(r"return ksize == 3 && stride == 1 && ho \* wo <= 64;", (CSRC / "mbconv.cuh").read_text())
    from mbconv_helpers import block_of, mbconv_shapes
    from perfmodel.zoo import fold_batchnorm

    for name, last in (("efficientnet_b0", {"features.7.0"}), ("efficientnet_b2", set())):
        takes = set()
        for path, (c, h, w) in mbconv_shapes(name).items():
            params = mb.block_params(fold_batchnorm(block_of(name, path)))
            ho, wo = mb.output_size(h, params.stride), mb.output_size(w, params.stride)
            if mb.kernel1_v9_takes_v3(params.kernel_size, params.stride, ho, wo):
                takes.add(path)
        assert takes == last, (name, takes)
    # 7 x 7, k = 3, stride 1: version 3's band (the whole image, padded E rows), not version 8's
    assert mb.kernel1_smem_bytes(7, 7, 7, 3, 1, 192, 48, True, 9, 192) == \
        mb.kernel1_smem_bytes(7, 7, 7, 3, 1, 192, 48, True, 3, 192)
    assert mb.kernel1_smem_bytes(7, 7, 7, 3, 1, 192, 48, True, 9, 192) != \
        mb.kernel1_smem_bytes(7, 7, 7, 3, 1, 192, 48, True, 8, 192)
    assert not mb.kernel1_v9_takes_v3(5, 1, 7, 7) and not mb.kernel1_v9_takes_v3(3, 1, 14, 14)
    assert mb.kernel1_v9_takes_v3(3, 1, 8, 8) and not mb.kernel1_v9_takes_v3(3, 1, 9, 8)


def test_the_python_mirror_holds_the_kernels_constants():
    assert re.search(r"kProjV9Threads = 256, kProjV9Warps = kProjV9Threads / 32, kProjV9Depth = 8;", SOURCE)
    assert f"kProjV9MaxSmem = {mb.PROJECT_V9_MAX_SMEM // 1024} * 1024;" in SOURCE
    assert "return round_up(hidden, 64) + 16;" in SOURCE
    built = sorted(int(n) for n in re.findall(r"case (\d+): return launch_project_v9_nt<\1>", SOURCE))
    assert tuple(built) == mb.PROJECT_V9_TILES


@pytest.mark.parametrize("hidden,c_out,smem,applies", [
    (32, 16, 16 * (64 + 16) * 2, True),            # B0 features.1.0: 2,560 B
    (144, 24, 24 * (192 + 16) * 2, True),          # features.2.1: 9,984 B
    (240, 80, 80 * (256 + 16) * 2, True),          # features.4.0: 43,520 B
    (480, 80, 80 * (512 + 16) * 2, True),          # features.4.1: 84,480 B
    (528, 88, 88 * (576 + 16) * 2, True),          # B2 features.4.1: 104,192 B
    (480, 112, 112 * (512 + 16) * 2, False),       # features.5.0: C_out 112 is not built (and 118,272 B)
    (1152, 192, 192 * (1152 + 16) * 2, False),     # features.6.1
    (1152, 40, 40 * (1152 + 16) * 2, True),        # 93,440 B: under the cap
    (136, 24, 24 * (192 + 16) * 2, False),         # hidden not a multiple of 16
])
def test_which_blocks_run_project_v9(hidden, c_out, smem, applies):
    assert mb.project_v9_smem_bytes(hidden, c_out) == smem
    assert mb.project_v9_applies(hidden, c_out) is applies


def test_b0_blocks_through_stage_4_run_project_v9():
    from mbconv_helpers import block_of, mbconv_shapes
    from perfmodel.zoo import fold_batchnorm

    runs = set()
    for path in mbconv_shapes("efficientnet_b0"):
        params = mb.block_params(fold_batchnorm(block_of("efficientnet_b0", path)))
        if mb.project_v9_applies(params.hidden, params.out_channels):
            runs.add(path)
    assert runs == {"features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1", "features.4.0",
                    "features.4.1", "features.4.2"}


def test_bank_pattern_of_the_v_loads():
    """A quarter warp (lanes g = 0, 1 x t = 0 .. 3 per 8-byte phase: 16 lanes, rows g .. g + 3) reads 32 bytes of each
    of four rows: with 2 x pitch = 32 mod 128 bytes they cover 32 distinct banks for every B0 / B2 hidden width."""
    for hidden in (32, 96, 144, 240, 288, 480, 528, 672, 720):
        pitch = mb.project_v9_smem_bytes(hidden, 8) // 8 // 2
        assert 2 * pitch % 128 == 32
        for u in range(hidden // 16):
            banks = [((g * pitch + u * 16 + 4 * t) * 2 + 4 * w) // 4 % 32 for g in range(4) for t in range(4)
                     for w in range(2)]
            assert len(set(banks)) == 32, (hidden, u)


def emulate_project_v9(d, scale, v, bias, x, hw, grid):
    """project_v9_kernel in float64, lane by lane: d [P, hidden] fp16 values, scale [N, hid_pad], v [C_out, hidden],
    bias [C_out], x [P, C_out] or None. Returns out [P, C_out] (NaN where never stored) and the store count."""
    P, hidden = d.shape
    c_out = v.shape[0]
    units, tasks, step = hidden // 16, -(-P // 16), grid * WARPS
    out = np.full((P, c_out), np.nan)
    stores = np.zeros((P, c_out), dtype=int)
    for cta in range(grid):
        for warp in range(WARPS):
            ctask = cta * WARPS + warp
            if ctask >= tasks:
                continue
            state = {"ltask": ctask, "lu": 0}
            buf = [None] * DEPTH

            def load(slot):
                if state["ltask"] >= tasks:
                    return
                lanes = {}
                for g in range(8):
                    for t in range(4):
                        r = state["ltask"] * 16 + g
                        c = state["lu"] * 16 + 4 * t
                        lo = d[r, c:c + 4] if r < P else np.zeros(4)
                        hi = d[r + 8, c:c + 4] if r + 8 < P else np.zeros(4)
                        lanes[g, t] = (lo, hi)
                buf[slot] = ((state["ltask"], state["lu"]), lanes)
                state["lu"] += 1
                if state["lu"] == units:
                    state["lu"], state["ltask"] = 0, state["ltask"] + step

            for s in range(DEPTH):
                load(s)
            cu, acc, done = 0, np.zeros((16, c_out)), False
            while not done:
                for s in range(DEPTH):
                    tag, lanes = buf[s]
                    assert tag == (ctask, cu)  # the slot holds the unit computed now
                    a = np.zeros((16, 16))
                    b = np.zeros((16, c_out))
                    for g in range(8):
                        for t in range(4):
                            lo, hi = lanes[g, t]
                            for row, vals in ((g, lo), (g + 8, hi)):
                                r = ctask * 16 + row
                                img = min(r // hw, scale.shape[0] - 1)
                                sc = scale[img, cu * 16 + 4 * t:cu * 16 + 4 * t + 4]
                                scaled = (vals * sc).astype(np.float16).astype(np.float64)
                                # mma A: (row, k 2t + h) <- a0 / a1, (row, k 2t + 8 + h) <- a2 / a3
                                a[row, 2 * t:2 * t + 2] = scaled[0:2]
                                a[row, 2 * t + 8:2 * t + 10] = scaled[2:4]
                            for nt in range(c_out // 8):  # B (k, n = g): b0 = V[n][4t..], b1 = V[n][4t + 2..]
                                n = nt * 8 + g
                                vv = v[n, cu * 16 + 4 * t:cu * 16 + 4 * t + 4]
                                b[2 * t:2 * t + 2, n] = vv[0:2]
                                b[2 * t + 8:2 * t + 10, n] = vv[2:4]
                    acc += a @ b
                    load(s)
                    cu += 1
                    if cu < units:
                        continue
                    for row in range(16):
                        r = ctask * 16 + row
                        if r < P:
                            val = acc[row] + bias + (x[r] if x is not None else 0)
                            out[r] = val.astype(np.float16)
                            stores[r] += 1
                    acc[:] = 0
                    cu, ctask = 0, ctask + step
                    if ctask >= tasks:
                        done = True
                        break
    return out, stores


@pytest.mark.parametrize("n,hw,hidden,c_out,residual,grid", [
    (2, 49, 32, 16, True, 1),     # 7x7: tasks across images, a partial last task (98 rows), 2 units: the ring
                                  # runs 4 tasks ahead
    (3, 25, 144, 24, False, 2),   # 9 units: the ring wraps inside a task; warps with no task
    (1, 100, 48, 40, True, 1),    # one image, 3 units, 7 tasks on 8 warps
    (4, 36, 96, 16, False, 3),    # more warps than tasks
])
def test_project_v9_transliterated_equals_the_direct_projection(n, hw, hidden, c_out, residual, grid):
    rng = np.random.default_rng(hidden + c_out)
    P = n * hw
    hid_pad = -(-hidden // 48) * 48
    d = rng.standard_normal((P, hidden)).astype(np.float16).astype(np.float64)
    scale = rng.uniform(0.1, 1.0, (n, hid_pad))
    v = rng.standard_normal((c_out, hidden)).astype(np.float16).astype(np.float64)
    bias = rng.standard_normal(c_out)
    x = rng.standard_normal((P, c_out)).astype(np.float16).astype(np.float64) if residual else None
    got, stores = emulate_project_v9(d, scale, v, bias, x, hw, grid)
    assert (stores == 1).all()  # every output written exactly once
    imgs = np.arange(P) // hw
    scaled = (d * scale[imgs, :hidden]).astype(np.float16).astype(np.float64)
    want = scaled @ v.T + bias + (x if residual else 0)
    np.testing.assert_allclose(got, want.astype(np.float16).astype(np.float64), rtol=2e-3, atol=2e-3)


# ---- GPU ----

def _distinct():
    from mbconv_helpers import DISTINCT

    return DISTINCT


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _distinct())
def test_v9_every_shape_of_b0_and_b2(name, path, batch):
    from mbconv_helpers import check_shape

    check_shape(name, path, batch, 9)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["features.1.0", "features.2.0", "features.2.1", "features.3.1", "features.4.1"])
def test_v9_batch_128_against_float32(path):
    from mbconv_helpers import block_of, check_on_gpu, gpu_input, mbconv_shapes

    torch.manual_seed(2)
    x = gpu_input(128, mbconv_shapes("efficientnet_b0")[path])
    check_on_gpu(block_of("efficientnet_b0", path), x, 9, "float32")


@pytest.mark.cuda
@pytest.mark.parametrize("path,size,batch", [("features.4.0", 13, 5), ("features.4.1", 20, 1), ("features.2.0", 9, 5),
                                             ("features.3.0", 7, 5), ("features.1.0", 5, 5), ("features.2.1", 57, 3),
                                             ("features.3.1", 2, 9), ("features.4.2", 3, 7)])
def test_v9_odd_sizes(path, size, batch):
    from mbconv_helpers import check_b0_at_size

    check_b0_at_size(path, size, batch, 9)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 128])
@pytest.mark.parametrize("path", ["features.2.0", "features.2.1", "features.3.0", "features.3.1", "features.4.0",
                                  "features.4.1", "features.5.1"])
def test_v9_equals_v8_bit_for_bit_and_runs_its_own_projection(path, batch, monkeypatch):
    """Same kernel 1 and SE as version 8, and project_v9's products are project_v3's: the same fp16 scaled A values
    and V values, 16-deep k steps in the same order; only the k order inside an mma differs, and the tensor core's
    sum of a step's 16 products does not depend on it (the first H200 run found version 9 equal to version 8 bit for
    bit at every batch-128 block: `examples/measurements/mbconv/v9/log.txt`). So equality is the check, and so that it
    is not blind, the profiler must show project_v9_kernel running (and project_v3_kernel not) where it applies."""
    from mbconv_helpers import b0_prepared, run_profiled

    monkeypatch.setenv("CUDA_KERNELS_PROJ_V10", "off")  # project_v3 where project_v9 does not apply (test_mbconv_v10)
    monkeypatch.setenv(mb.SE_V4_SWITCH, "0")  # version 8's SE: versions 9-11 take SE version 4 / 5 at hidden >= 480
    params, weights, x = b0_prepared(path, batch)
    v8 = mb.mbconv(x, params, weights, version=8)
    first, names = run_profiled(x, params, weights, v8, 9)
    applies = mb.project_v9_applies(params.hidden, params.out_channels)
    loaders = ("project_v9_kernel", "project_v9t_kernel", "project_v9s_kernel", "project_v9se_kernel")
    ran_v9 = any(k in names for k in loaders)  # any loader
    assert ran_v9 is applies and ("project_v3_kernel" in names) is not applies, names[:500]
    mb.mbconv(x[:1], params, weights, version=9)
    again = mb.mbconv(x, params, weights, version=9)
    torch.cuda.synchronize()
    assert torch.isfinite(first).all()
    assert torch.equal(first, v8)
    assert torch.equal(first, again)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 128])
def test_v9_at_features_7_0_runs_version_3s_kernel_1(batch, monkeypatch):
    """kernel1_v9_takes_v3: version 3's kernel 1 (and, C_out 320 not being a project_v9 width, version 3's SE and
    projection) at features.7.0. Version 3's pool adds with shared atomics, so its bits vary from run to run (the
    first form of this test asserted equality and failed on the H200, session 12); the profiler is the proof of which
    kernel ran, and the output agrees with version 3 to the pool's summation order."""
    from mbconv_helpers import b0_prepared, run_profiled
    from perfmodel.harness import relative_error

    monkeypatch.setenv("CUDA_KERNELS_PROJ_V10", "off")  # at batch 1 the default would take project_v10 (test_mbconv_v10)
    params, weights, x = b0_prepared("features.7.0", batch)
    v3 = mb.mbconv(x, params, weights, version=3)
    got, names = run_profiled(x, params, weights, v3, 9)
    assert "expand_dw_v2_kernel" in names and "expand_dw_v8_kernel" not in names, names[:500]
    assert "project_v3_kernel" in names, names[:500]
    assert torch.isfinite(got).all()
    assert relative_error(got, v3.double()) < 1e-4  # test_mbconv_kernels.POOL_ORDER_REL_ERROR


@pytest.mark.cuda
def test_efficientnet_b0_swapped_with_version_9():
    """`perfmodel bench --backend cuda_kernels`'s mechanism with CUDA_KERNELS_MBCONV_VERSION=9."""
    code = """
import torch
from cuda_kernels import mbconv as mb
from mbconv_helpers import fresh_model, gpu_input
from perfmodel.bench import fused_model
from perfmodel.harness import relative_error
from perfmodel.zoo import fold_batchnorm
assert mb.DEFAULT_VERSION == 9
model = fresh_model("efficientnet_b0").cuda().half().to(memory_format=torch.channels_last)
x = gpu_input(4, (3, 224, 224))
fused, info = fused_model(model, [x])
assert info["fused_blocks"]["MBConv"] == 15 and info["fused_blocks"]["StemMBConv"] == 1, info
assert info["fallback_count"] == 0, info
assert info["check"]["blocks_checked"] == 17  # 15 MBConv + the stem with block 1.0 (stem_mbconv) + the head
with torch.no_grad():
    expected = fold_batchnorm(model)(x)
    got = fused(x)
err = relative_error(got, expected.double())
print("V9 network rel error", err)
assert err < 5e-2
"""
    env = {**os.environ, "CUDA_KERNELS_MBCONV_VERSION": "9",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
