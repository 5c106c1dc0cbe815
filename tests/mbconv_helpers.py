"""What the MBConv test files share (tests/test_mbconv_kernels.py, test_mbconv_v7.py): torchvision's EfficientNets with
random weights and realistic batchnorm statistics, the input shape of every MBConv, the distinct block
configurations of B0 and B2, and the GPU check of one fused block against float64."""
import copy
import re
import math
import functools

import pytest
import torch
import torchvision
from torch import nn
from torchvision.models.efficientnet import MBConv

from cuda_kernels import mbconv as mb
from perfmodel.harness import randomize_batchnorm, reference_precision, relative_error
from perfmodel.zoo import fold_batchnorm

RESOLUTION = {"efficientnet_b0": 224, "efficientnet_b2": 288}  # the specs' native inputs


@functools.lru_cache(maxsize=None)
def base_model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return randomize_batchnorm(getattr(torchvision.models, name)()).eval()


def fresh_model(name: str) -> nn.Module:
    """A fresh copy of the model (random weights, realistic BN statistics, eval mode)."""
    return copy.deepcopy(base_model(name))


def block_of(name: str, path: str) -> nn.Module:
    return copy.deepcopy(base_model(name).get_submodule(path))


@functools.lru_cache(maxsize=None)
def mbconv_shapes(name: str) -> dict[str, tuple[int, int, int]]:
    """Module path -> input (C, H, W) of every MBConv, traced once on the meta device."""
    model = fresh_model(name).to("meta")
    shapes = {}
    for path, m in model.named_modules():
        if isinstance(m, MBConv):
            m.register_forward_pre_hook(functools.partial(lambda p, _m, a: shapes.__setitem__(p, tuple(a[0].shape[1:])),
                                                          path))
    size = RESOLUTION[name]
    with torch.no_grad():
        model(torch.empty(1, 3, size, size, device="meta"))
    return shapes


def folded_params(name: str, path: str) -> mb.MBConvParams:
    """The MBConvParams of model `name`'s block `path`, BN folded (on the CPU)."""
    return mb.block_params(fold_batchnorm(block_of(name, path)))


def block_widths(name: str, path: str) -> tuple[int, int, int]:
    """(hidden, C_out, output H x W) of model `name`'s block `path`: what the projections' rules read."""
    params = folded_params(name, path)
    _, h, w = mbconv_shapes(name)[path]
    stride = params.stride
    return params.hidden, params.out_channels, -(-h // stride) * -(-w // stride)


def distinct_blocks():
    """(model, path) of each distinct MBConv configuration (and input size) of B0 and B2."""
    seen, cases = set(), []
    for name in RESOLUTION:
        for path, shape in mbconv_shapes(name).items():
            block = block_of(name, path)
            dw = block.block[-3][0]
            key = (shape, dw.kernel_size, dw.stride, block.out_channels, len(block.block))
            if key not in seen:
                seen.add(key)
                cases.append((name, path))
    return cases


DISTINCT = distinct_blocks()


def on_every_distinct_block(test):
    """A GPU test over every distinct B0 / B2 block (DISTINCT) at batches 1, 5 and 128: the parametrization the
    kernel-1 switch tests share (test ids name-path-batch)."""
    test = pytest.mark.parametrize("name,path", DISTINCT)(test)
    return pytest.mark.cuda(pytest.mark.parametrize("batch", [1, 5, 128])(test))


def check_on_gpu(block: nn.Module, x: torch.Tensor, version: int, exact: str = "float64") -> tuple[float, float]:
    """Kernel vs PyTorch fp16, both against the folded block in `exact` precision; the output
    (and, through the caching allocator, the scratch tensors) poisoned with NaN first."""
    block = fold_batchnorm(block).cuda()
    params = mb.block_params(block)
    dtype = getattr(torch, exact)
    with torch.no_grad(), reference_precision():
        ref = mb.reference(x.to(dtype), mb.block_params(copy.deepcopy(block).to(dtype)))
        torch_fp16 = copy.deepcopy(block).half()(x)
    weights = mb.prepare_weights(params)
    n, _, h, w = x.shape
    ho, wo = mb.output_size(h, params.stride), mb.output_size(w, params.stride)
    poison = torch.full((64 << 20,), float("nan"), device="cuda", dtype=torch.float16)
    del poison  # its memory returns to the cache, NaN-filled, for the kernels' scratch tensors
    out = torch.full((n, params.out_channels, ho, wo), float("nan"), device="cuda", dtype=torch.float16)
    out = out.contiguous(memory_format=torch.channels_last)
    got = mb.mbconv(x, params, weights, out=out, version=version)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr()
    err, torch_err = relative_error(got, ref), relative_error(torch_fp16, ref)
    assert torch_err > 0, "PyTorch fp16 equals the reference: the check would be blind"
    assert err <= 2 * torch_err, f"kernel error {err:.3g} > 2 x PyTorch fp16 error {torch_err:.3g}"
    return err, torch_err


def run_profiled(x: torch.Tensor, params, weights, like: torch.Tensor, version: int) -> tuple[torch.Tensor, str]:
    """mb.mbconv into a NaN-poisoned output shaped like `like`, under the profiler: the output and the names of the
    kernels that ran (space-separated), to prove which kernel a switch selected."""
    from torch.profiler import ProfilerActivity, profile

    out = torch.full_like(like, float("nan"))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = mb.mbconv(x, params, weights, out=out, version=version)
        torch.cuda.synchronize()
    assert torch.isfinite(got).all()
    return got, " ".join(e.name for e in prof.events())


def assert_repeatable(got: torch.Tensor, x: torch.Tensor, params, weights, version: int) -> None:
    """A second run gives the same bits (no atomics in the sums: not for version 3's kernel 1, which pools through
    shared-memory atomics)."""
    again = mb.mbconv(x, params, weights, version=version)
    torch.cuda.synchronize()
    assert torch.equal(got, again)


def check_shape(name: str, path: str, batch: int, version: int) -> tuple[float, float]:
    """check_on_gpu for block `path` of model `name` at its input shape in the network, batch `batch` (seeded by it)."""
    torch.manual_seed(batch)
    return check_on_gpu(block_of(name, path), gpu_input(batch, mbconv_shapes(name)[path]), version)


def check_b0_at_size(path: str, size: int, batch: int, version: int) -> tuple[float, float]:
    """check_on_gpu for EfficientNet-B0's block `path` on a batch x C x size x size input (odd spatial sizes)."""
    c = mbconv_shapes("efficientnet_b0")[path][0]
    return check_on_gpu(block_of("efficientnet_b0", path), gpu_input(batch, (c, size, size)), version)


def gpu_input(batch: int, shape: tuple[int, int, int]) -> torch.Tensor:
    x = torch.randn(batch, *shape, device="cuda", dtype=torch.float16)
    return x.contiguous(memory_format=torch.channels_last)


def b0_block_case(path: str):
    """EfficientNet-B0's block `path` (random BN, folded) on a 2 x C x 14 x 14 fp16 input: x, its
    parameters, the packed weights (from float32), the float64 reference and PyTorch fp16's error."""
    import torchvision

    from perfmodel.harness import randomize_batchnorm, relative_error
    from perfmodel.zoo import fold_batchnorm

    torch.manual_seed(0)
    model = randomize_batchnorm(torchvision.models.efficientnet_b0()).eval()
    block = fold_batchnorm(model.get_submodule(path))
    c = block.block[0][0].in_channels
    x = torch.randn(2, c, 14, 14, generator=torch.Generator().manual_seed(1)).half()
    params = mb.block_params(block)
    with torch.no_grad():
        ref = mb.reference(x.double(), mb.block_params(block.double()))
        torch_err = relative_error(block.half()(x), ref)
        weights = mb.prepare_weights(mb.block_params(block.float()))
    return x, params, weights, ref, torch_err


def se_fc1_float64(partial: torch.Tensor, hw: int, w1, b1, warps: int) -> list[float]:
    """The SE's first layer as the kernels partition it (se_v3_kernel: 16 warps; version 7's last CTA: 8), float64:
    pooled = the partial sums' total / hw; warp w, lane l computes rows jb + w + u * warps (u < 4) over the float4
    column groups l, l + 32 (of every 64), each (row, column) exactly once; then SiLU. Returns the squeezed vector."""
    sq, hidden = w1.shape
    pooled = partial[:, :hidden].sum(0) / hw
    h4, squeezed = hidden // 4, [math.nan] * sq
    touched = torch.zeros(sq, hidden, dtype=torch.int64)
    for jb in range(0, sq, 4 * warps):
        for warp in range(warps):
            acc = [0.0] * 4
            for lane in range(32):
                for c0 in range(lane, h4, 64):
                    for t in range(2):
                        for u in range(4):
                            j, c = jb + warp + u * warps, c0 + t * 32
                            if j < sq and c < h4:
                                acc[u] += float(w1[j, 4 * c:4 * c + 4] @ pooled[4 * c:4 * c + 4])
                                touched[j, 4 * c:4 * c + 4] += 1
            for u in range(4):
                j = jb + warp + u * warps
                if j < sq:
                    v = acc[u] + float(b1[j])
                    squeezed[j] = v / (1 + math.exp(-v))
    assert (touched == 1).all()
    return squeezed


def nvcc_path() -> str | None:
    """nvcc under CUDA_HOME / CUDA_PATH (else /usr/local/cuda), or on PATH; None where there is none."""
    import os
    import shutil

    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = os.path.join(home, "bin", "nvcc")
    return candidate if os.path.exists(candidate) else shutil.which("nvcc")


def torch_includes() -> list[str]:
    from torch.utils import cpp_extension

    return [f"-I{p}" for p in cpp_extension.include_paths()]


def host_run(nvcc: str, source) -> list[tuple[int, ...]]:
    """Compile `source` (a Path; the kernels' headers on the include path) for the host, run it, and return its
    output lines as tuples of integers."""
    import subprocess
    from pathlib import Path

    csrc = Path(mb.__file__).resolve().parent / "csrc"
    exe = source.with_suffix("")
    cmd = [nvcc, "-std=c++17", "-O1", "-DBF_SM90A", f"-I{csrc}", *torch_includes(), str(source), "-o", str(exe)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return [tuple(map(int, line.split())) for line in out.split("\n") if line]


def block_prepared(name: str, path: str, batch: int, seed: int = 1):
    """(params, packed weights, GPU input at `batch`) of model `name`'s block `path`, BN folded."""
    torch.manual_seed(seed)
    block = fold_batchnorm(block_of(name, path)).cuda()
    params = mb.block_params(block)
    return params, mb.prepare_weights(params), gpu_input(batch, mbconv_shapes(name)[path])


def b0_prepared(path: str, batch: int, seed: int = 1):
    """block_prepared for EfficientNet-B0."""
    return block_prepared("efficientnet_b0", path, batch, seed)


def assert_switch_keeps_the_bits(monkeypatch, name: str, path: str, batch: int, switch: str, kernel: str) -> None:
    """Version 11 on block `path` of model `name` at `batch`: switching `switch` on runs `kernel` (the profiler names
    it) and gives the switch-off output bit for bit (the same arithmetic, other data movement or scheduling)."""
    params, weights, x = block_prepared(name, path, batch)
    monkeypatch.setenv(switch, "0")
    base = mb.mbconv(x, params, weights, version=11)
    monkeypatch.setenv(switch, "1")
    got, names = run_profiled(x, params, weights, base, 11)
    assert kernel in names, names[:600]
    assert torch.equal(got, base)


def switched_against_float64(monkeypatch, name: str, path: str, batch: int, switch: str, on: str, off: str = "0"):
    """Version 11 on block `path` of model `name` at `batch` with `switch` = `on`: check_shape (float64, poisoned), then
    the same input with the switch `off` and `on` again under the profiler. Returns (on's output, off's output, the
    kernels' names, params, weights, x) for the caller's closeness and which-kernel-ran checks."""
    monkeypatch.setenv(switch, on)
    check_shape(name, path, batch, 11)
    params, weights, x = block_prepared(name, path, batch)
    monkeypatch.setenv(switch, off)
    base = mb.mbconv(x, params, weights, version=11)
    monkeypatch.setenv(switch, on)
    got, names = run_profiled(x, params, weights, base, 11)
    return got, base, names, params, weights, x


def check_switch_keeps_the_bits(monkeypatch, name: str, path: str, batch: int, switch: str, kernel: str,
                                on: str = "1", expect_kernel: bool = True) -> None:
    """switched_against_float64 with `switch` = `on` (float64, poisoned output), the profiler naming `kernel` (a name
    prefix; where `expect_kernel`), and where it ran the switch-off output bit for bit (the same arithmetic, other
    data movement or scheduling); where it did not, the switch changes nothing but the last bits of the SE's pool
    sums at most."""
    got, off, names, *_ = switched_against_float64(monkeypatch, name, path, batch, switch, on)
    if expect_kernel:
        assert kernel in names, names[:600]
    if kernel in names:
        assert torch.equal(got, off)
    else:
        assert relative_error(got, off.double()) < 1e-4


def assert_bits_where_it_ran(got: torch.Tensor, base: torch.Tensor, names: str, kernel_pattern: str) -> None:
    """A kernel-1 switch that keeps the arithmetic: bit for bit the switch-off output where a kernel matching
    `kernel_pattern` (a regular expression) ran; elsewhere the switch changes nothing, but blocks without an expand
    conv run version 3's kernel 1, whose pool adds with atomics, so two runs differ in the last bits: within 1e-4."""
    if re.search(kernel_pattern, names):
        assert torch.equal(got, base)
    else:
        assert relative_error(got, base.double()) < 1e-4


def check_switch_bitwise(monkeypatch, name: str, path: str, batch: int, switch: str, b0_kernels: dict[str, str],
                         pattern: str, min_batch: int = 1) -> None:
    """A kernel-1 switch that keeps the arithmetic, on block `path` of model `name` at `batch`: switched_against_float64
    with `switch` = 1, the profiler naming b0_kernels[path] at B0's blocks listed there (from `min_batch` images), and
    bit for bit the switch-off output where a kernel matching `pattern` ran (assert_bits_where_it_ran)."""
    got, default, names, *_ = switched_against_float64(monkeypatch, name, path, batch, switch, "1")
    if name == "efficientnet_b0" and path in b0_kernels and batch >= min_batch:
        assert b0_kernels[path] in names, names[:600]
    assert_bits_where_it_ran(got, default, names, pattern)


def assert_loader_output_kept(got: torch.Tensor, base: torch.Tensor, path: str) -> None:
    """A projection loader switched on keeps the switch-off output: bit for bit (the same products in the same order),
    within 1e-4 at the blocks without an expand (features.1.*), whose kernel 1 (version 3's) pools with atomics, so that
    two runs differ in the last bits of the SE scale (as POOL_ORDER_REL_ERROR in test_mbconv_v8)."""
    if path.startswith("features.1."):
        assert relative_error(got, base.double()) < 1e-4
    else:
        assert torch.equal(got, base)


def check_fused_b0(monkeypatch, switches: dict[str, str], fused: dict[str, int], blocks_checked: int) -> dict:
    """fused_b0_info under `switches` (environment variables), asserting the fused counts `fused` (by family), no
    fallback, `blocks_checked` units checked and every one within 2x PyTorch fp16's error; returns the record. The
    fused head is off unless `switches` turn it on, so that the counts do not follow its default."""
    from cuda_kernels import effnet_head

    monkeypatch.setenv(effnet_head.SWITCH, "0")
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    info = fused_b0_info()
    assert {k: info["fused_blocks"].get(k) for k in fused} == fused and info["fallback_count"] == 0, info
    assert info["check"]["blocks_checked"] == blocks_checked and info["check"]["worst_error_ratio"] <= 2
    return info


def fused_b0_info(batch: int = 8) -> dict:
    """fused_model's record for EfficientNet-B0 (random weights, realistic BN statistics, fp16, channels-last) on a
    random batch: what `perfmodel bench --backend cuda_kernels` checks before timing (set the switches first)."""
    from perfmodel.bench import fused_model

    torch.manual_seed(0)
    model = randomize_batchnorm(torchvision.models.efficientnet_b0()).eval().cuda().half()
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    return fused_model(model, [x])[1]


def emulated_mbconv(self, x):
    """What the kernels compute, from the module's packed (zero-padded) weights: float32
    arithmetic, rounded to fp16 where the kernels store (E, D, the scaled D, the output)."""
    f = torch.nn.functional
    hidden, c_out, k = self.w_se2.shape[0], self.out_channels, self.kernel_size
    xf = x.float()
    e = xf
    if self.w_exp.numel():
        w_exp = self.w_exp[:hidden, :x.shape[1]].float()[:, :, None, None]
        e = f.silu(f.conv2d(xf, w_exp, self.b_exp[:hidden])).half().float()
    w_dw = self.w_dw[:, :hidden].t().reshape(hidden, 1, k, k)
    d = f.silu(f.conv2d(e, w_dw, self.b_dw[:hidden], self.stride, k // 2, groups=hidden)).half().float()
    b_se1 = self.b_se1[: self.w_se1.shape[0]]  # padded past the squeeze width (mbconv.SE1_BIAS_MIN)
    scale = torch.sigmoid(f.silu(d.mean((2, 3)) @ self.w_se1.t() + b_se1) @ self.w_se2.t() + self.b_se2)
    scaled = (d * scale[:, :, None, None]).half().float()
    y = f.conv2d(scaled, self.w_proj[:c_out, :hidden].float()[:, :, None, None], self.b_proj[:c_out])
    y = y + xf if self.residual else y
    return y.half().contiguous(memory_format=torch.channels_last)


# ---- float64 models of kernel 1's depthwise numerics (tests/test_mbconv_hfma2.py, test_mbconv_k1_dh2.py) ----

def r16(t: torch.Tensor) -> torch.Tensor:
    """t rounded to fp16, kept in float64."""
    return t.half().double()


def depthwise_fp16_taps(e, w, b, stride: int, from_bias: bool):
    """The kernel's order: taps dy outer, dx inner, each fma rounded to fp16 (w, b already fp16); the sum starts from
    zero and the bias is added (unrounded) at the end, or it starts from the bias (the first form)."""
    import torch.nn.functional as F

    ks = w.shape[-1]
    pad = ks // 2
    n, c, h, wd = e.shape
    ho, wo = (h + 2 * pad - ks) // stride + 1, (wd + 2 * pad - ks) // stride + 1
    ep = F.pad(e, (pad,) * 4)
    bias = b.view(1, -1, 1, 1).expand(n, c, ho, wo)
    acc = bias.clone() if from_bias else torch.zeros_like(bias)
    for dy in range(ks):
        for dx in range(ks):
            win = ep[:, :, dy:dy + stride * (ho - 1) + 1:stride, dx:dx + stride * (wo - 1) + 1:stride]
            acc = r16(acc + win * w[:, 0, dy, dx].view(1, -1, 1, 1))
    return acc if from_bias else acc + bias


def row_sums_fp16(d: torch.Tensor, ow: int = 4) -> torch.Tensor:
    """Per image and channel, the sum over pixels of d as kernel 1's packed-fp16 epilogue forms it: each output row's
    runs of `ow` columns summed left to right in fp16, the runs' sums added in float64."""
    import torch.nn.functional as F

    w = d.shape[-1]
    runs = F.pad(d, (0, -w % ow)).unflatten(-1, (-1, ow))
    s = runs[..., 0]
    for u in range(1, ow):
        s = r16(s + runs[..., u])
    return s.sum((2, 3))


@functools.lru_cache(maxsize=None)
def b0_block_inputs() -> tuple[nn.Module, dict]:
    """EfficientNet-B0 (random weights, realistic BN statistics) in float64 on one random image: the model and the
    inputs of blocks 2.1, 3.0 and 3.1."""
    torch.manual_seed(0)
    model = randomize_batchnorm(torchvision.models.efficientnet_b0()).eval().double()
    seen = {}
    for path in ("features.3.0", "features.3.1", "features.2.1"):
        model.get_submodule(path).register_forward_pre_hook(lambda m, a, path=path: seen.__setitem__(path, a[0]))
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224, dtype=torch.float64))
    return model, seen


def depthwise_model_error(path: str, depthwise: str) -> float:
    """The block's relative error against float64 on its real input (b0_block_inputs) with every op's output rounded
    to fp16 as `depthwise` says: "pytorch" (PyTorch fp16: fp32 sums inside each conv, each output rounded), "fp32"
    (the kernel's depthwise in fp32), "fp16" (HFMA2 sums from zero, the bias, SiLU and pool in fp32: the default),
    "fp16_from_bias" (HFMA2 sums started from the bias) or "dh2" (HFMA2 sums from zero, the bias added and rounded to
    fp16, SiLU(2h) = h + h tanh(h) with tanh rounded to fp16 and one rounding of the fma, the pool over fp16 row runs:
    CUDA_KERNELS_K1_DH2)."""
    import torch.nn.functional as F

    model, seen = b0_block_inputs()
    blk = fold_batchnorm(model.get_submodule(path))
    exp, dw, se1, se2, proj = [m for m in blk.modules() if isinstance(m, nn.Conv2d)]
    x = r16(seen[path])
    pytorch = depthwise == "pytorch"
    with torch.no_grad():
        ref = blk(x)
        h = F.conv2d(x, r16(exp.weight), r16(exp.bias))
        e = r16(F.silu(r16(h) if pytorch else h))
        wd, bd = r16(dw.weight), r16(dw.bias)
        if depthwise in ("pytorch", "fp32"):
            a = F.conv2d(e, wd, bd, dw.stride, dw.padding, groups=dw.groups)
            a = r16(a) if pytorch else a
        else:
            a = depthwise_fp16_taps(e, wd, bd, dw.stride[0], depthwise == "fp16_from_bias")
        if depthwise == "dh2":
            half = r16(a) / 2  # the kernel's halved pre-activation (halving is exact in fp16)
            d = r16(half + half * r16(torch.tanh(half)))
            pool = row_sums_fp16(d).view(*d.shape[:2], 1, 1) / (d.shape[2] * d.shape[3])
        else:
            d = r16(F.silu(a))
            pool = d.mean((2, 3), keepdim=True)
        s = torch.sigmoid(se2(F.silu(se1(pool))))
        ds = r16(r16(s) * d) if pytorch else r16(d * s)
        y = F.conv2d(ds, r16(proj.weight), r16(proj.bias))
        return relative_error(r16(y + x if blk.use_res_connect else y), ref)


def depthwise_walk(ng: int, rows: int, wo: int, R: int, OW: int, groups: int):
    """expand_dw_v8_kernel<..., G>'s depthwise item walk, thread group by thread group, as the kernel steps it (seg /
    og by dq / dr without division, the image by subtracting nseg, the sums flushed to a slot when the image changes,
    the last flush only for an image of the item): (items per group, slot writes as (image, group, items summed))."""
    nseg, ngroups = -(-rows // R), -(-wo // OW)
    items = nseg * ngroups * ng
    dq, dr = groups // ngroups, groups % ngroups
    visits, writes = [], []
    for group in range(groups):
        seg, og = group // ngroups, group % ngroups
        m = 0
        while seg >= nseg:
            seg -= nseg
            m += 1
        m_sum, summed = m, []
        for j in range(group, items, groups):
            orow0, ow0, mi = seg * R, og * OW, m
            seg += dq
            og += dr
            if og >= ngroups:
                og -= ngroups
                seg += 1
            while seg >= nseg:
                seg -= nseg
                m += 1
            if mi != m_sum:
                writes.append((m_sum, group, tuple(summed)))
                summed, m_sum = [], mi
            assert j == (mi * nseg + orow0 // R) * ngroups + ow0 // OW  # the stepping is j's decomposition
            visits.append((mi, orow0, ow0))
            summed.append((mi, orow0, ow0))
        if m_sum < ng:
            writes.append((m_sum, group, tuple(summed)))
    return visits, writes
