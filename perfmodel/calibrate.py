"""GPU microbenchmarks for the calibrated latency estimate (DESIGN.md section 12).

``python -m perfmodel.calibrate -o configs/hardware/calibration/h200-sxm.yaml`` times, on
this machine's GPU, the library and compiler kernels the models' plans are made of, over a
grid of shapes, and writes a calibration file (perfmodel.calibration):

- dense, grouped and depthwise convolutions (cuDNN, channels-last, cudnn.benchmark on, as
  `perfmodel bench` runs), and matrix products with a bias (cuBLAS, as nn.Linear runs);
- eager element-wise kernels against size, per op (add, relu, silu, gelu ...), broadcast
  element-wise kernels (a per-channel scale or bias), inference batchnorm, layer norm, the
  mean over height and width, max pooling;
- Inductor's Triton kernels for a fused affine + activation (+ residual) epilogue and a layer
  norm (torch.compile, dynamic shapes: one compilation serves every size);
- launch overheads: a tiny kernel replayed in a CUDA graph, the same on a busy stream, and the
  host's time per eager op.

Every kernel is timed by the one harness Timer as CUDA-graph replays of calls back to back,
with enough input sets in rotation that a call does not find its inputs in L2. The grid
covers the sizes that convolutions and products at batch 128 produce (7 to 112 pixels a side,
16 to 2048 channels): microbenchmarks of kernel kinds, never the models the estimate predicts.
The file is written after every section, so an interrupted run keeps what it measured.
"""
from __future__ import annotations

import argparse
import math
import random
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
import yaml

from .calibration import SCHEMA, dump_calibration

TARGET_MS = 0.3  # a timed graph replay lasts about this long
MAX_CALLS = 64  # calls per graph
ROTATE_BYTES = 256 << 20  # input sets in rotation move at least this much (about 5x L2)
MAX_SETS = 16


@dataclass(frozen=True)
class Grid:
    """The shapes to time. `full()` is the committed calibration's; `quick()` a tiny one for
    checking the plumbing (on a CPU too)."""

    batch: int = 128
    channels: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048)
    conv3_channels: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)
    spatial: tuple[int, ...] = (7, 14, 28, 56, 112)
    matmul_m: tuple[int, ...] = (128, 6272, 25088, 100352, 401408)
    matmul_nk: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048, 4096)
    group_widths: tuple[int, ...] = (4, 8, 16, 32, 64)
    grouped_at: tuple[tuple[int, int], ...] = ((56, 128), (56, 256), (28, 256), (28, 512),
                                               (14, 512), (14, 1024), (7, 1024), (7, 2048))
    dw_kernels: tuple[tuple[int, int], ...] = ((3, 1), (3, 2), (5, 1), (5, 2), (7, 1))
    dw_channels: tuple[int, ...] = (32, 64, 128, 256, 512, 1024, 2048)
    stems: tuple[tuple[int, int], ...] = ((3, 2), (4, 4), (7, 2))
    stem_channels: tuple[int, ...] = (32, 64, 128)
    stem_inputs: tuple[int, ...] = (224, 320, 448)
    elements: tuple[int, ...] = tuple(2 ** k for k in range(10, 29, 2))
    norm_channels: tuple[int, ...] = (64, 96, 128, 192, 256, 384, 512, 768, 1024)
    norm_elements: tuple[int, ...] = (2 ** 20, 2 ** 23, 2 ** 26, 2 ** 28)
    compiled_norm_channels: tuple[int, ...] = (64, 128, 256, 512, 1024)
    triton_elements: tuple[int, ...] = tuple(2 ** k for k in (12, 16, 20, 22, 24, 26, 28))
    triton_channels: int = 96
    triton_reduce_channels: tuple[int, ...] = (32, 128, 512)
    triton_reduce_spatial: tuple[int, ...] = (7, 28, 112)
    map_channels: tuple[int, ...] = (32, 128, 512, 2048)
    broadcast_channels: tuple[int, ...] = (64, 256, 1024)
    broadcast_spatial: tuple[int, ...] = (2, 7, 14, 28, 56)
    pool_channels: tuple[int, ...] = (32, 64, 128)
    pool_inputs: tuple[int, ...] = (56, 112, 224)
    max_tensor_bytes: int = 1 << 30

    @classmethod
    def full(cls) -> "Grid":
        return cls()

    @classmethod
    def quick(cls) -> "Grid":
        return cls(batch=2, channels=(8, 16), conv3_channels=(8,), spatial=(4, 8),
                   matmul_m=(16, 64), matmul_nk=(8, 16), group_widths=(4,),
                   grouped_at=((4, 16),), dw_kernels=((3, 1),), dw_channels=(8,),
                   stems=((3, 2),), stem_channels=(8,), stem_inputs=(16,),
                   elements=(2 ** 10, 2 ** 12), norm_channels=(16,), norm_elements=(2 ** 12,),
                   compiled_norm_channels=(16,), triton_elements=(2 ** 10,), triton_channels=8,
                   triton_reduce_channels=(8,), triton_reduce_spatial=(4,),
                   map_channels=(8,), broadcast_channels=(8,),
                   broadcast_spatial=(4,), pool_channels=(8,), pool_inputs=(16,))


@dataclass(frozen=True)
class Case:
    """One shape of one kernel kind: its features, counted ops and bytes, and `make`, which
    allocates one input set and returns the call to time."""

    table: str
    features: tuple[float, ...]
    flops: int
    dram_bytes: int
    make: Callable[[], Callable[[], object]]


@dataclass(frozen=True)
class Ctx:
    grid: Grid
    device: torch.device
    dtype: torch.dtype

    @property
    def size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def fits(self, *elements: int) -> bool:
        return all(e * self.size <= self.grid.max_tensor_bytes for e in elements)

    def rand(self, *shape: int, channels_last: bool = False) -> torch.Tensor:
        x = torch.randn(shape, device=self.device, dtype=self.dtype)
        return x.contiguous(memory_format=torch.channels_last) if channels_last else x


# ---------------------------------------------------------------- sections: products
FEATURES = {
    "conv": ("m", "n", "k_red", "r", "stride"),
    "conv_stem": ("m", "n", "r", "stride"),
    "conv_grouped": ("m", "c", "group_width", "r"),
    "conv_depthwise": ("m", "c", "r", "stride"),
    "matmul": ("m", "n", "k"),
    "eager_pointwise": ("elements",),
    "eager_broadcast": ("elements", "c"),
    "eager_batchnorm": ("elements", "c"),
    "eager_layernorm": ("rows", "c"),
    "reduce": ("elements", "spatial"),
    "pool": ("elements", "c"),
    "triton_pointwise": ("elements",),
    "triton_reduce": ("elements", "spatial"),
    "compiled_layernorm": ("rows", "c"),
}
KERNELS_PER_CALL = {"eager_batchnorm": 3}  # a copy and a transform of the parameters first


def conv_case(ctx: Ctx, table: str, features, c: int, k: int, size_in: int, r: int,
              stride: int, groups: int = 1) -> Case | None:
    """A convolution of a batch of `size_in`-square images, C -> K channels, `groups` groups,
    padding r // 2; flops 2 x MACs (eq. 22), bytes input + weights + output (eq. 23)."""
    n, pad = ctx.grid.batch, r // 2
    p = (size_in + 2 * pad - r) // stride + 1
    x_el, w_el, y_el = n * c * size_in ** 2, k * (c // groups) * r * r, n * k * p * p
    if p < 1 or not ctx.fits(x_el, y_el):
        return None
    flops = 2 * n * p * p * k * (c // groups) * r * r

    def make():
        x = ctx.rand(n, c, size_in, size_in, channels_last=True)
        w = ctx.rand(k, c // groups, r, r, channels_last=True)
        return lambda: F.conv2d(x, w, None, stride, pad, 1, groups)

    feats = tuple(v if v != "P" else n * p * p for v in features)
    return Case(table, feats, flops, (x_el + w_el + y_el) * ctx.size, make)


def dense_convs(ctx: Ctx) -> Iterator[Case]:
    g = ctx.grid
    for s in (1,) + g.spatial:  # 1x1 spatial: the squeeze-excitation convolutions
        for c in g.channels:
            for k in g.channels:
                yield conv_case(ctx, "conv", ("P", k, c, 1, 1), c, k, s, 1, 1)
    for s in g.spatial:
        for c in g.conv3_channels:
            yield conv_case(ctx, "conv", ("P", c, 9 * c, 3, 1), c, c, s, 3, 1)
            if s <= g.spatial[-2]:
                yield conv_case(ctx, "conv", ("P", c, 9 * c, 3, 2), c, c, 2 * s, 3, 2)
    for r, stride in g.stems:
        for k in g.stem_channels:
            for size in g.stem_inputs:
                yield conv_case(ctx, "conv_stem", ("P", k, r, stride), 3, k, size, r, stride)


def grouped_convs(ctx: Ctx) -> Iterator[Case]:
    g = ctx.grid
    for s, c in g.grouped_at:
        for t in g.group_widths:
            yield conv_case(ctx, "conv_grouped", ("P", c, t, 3), c, c, s, 3, 1, groups=c // t)
    for r, stride in g.dw_kernels:
        for s in g.spatial:
            for c in g.dw_channels:
                yield conv_case(ctx, "conv_depthwise", ("P", c, r, stride), c, c, s * stride, r,
                                stride, groups=c)


def matmuls(ctx: Ctx) -> Iterator[Case]:
    """nn.Linear with a bias: addmm(bias, x, W^T) on cuBLAS."""
    for m in ctx.grid.matmul_m:
        for n in ctx.grid.matmul_nk:
            for k in ctx.grid.matmul_nk:
                if not ctx.fits(m * n, m * k):
                    continue

                def make(m=m, n=n, k=k):
                    x, w, b = ctx.rand(m, k), ctx.rand(n, k), ctx.rand(n)
                    return lambda: F.linear(x, w, b)

                yield Case("matmul", (m, n, k), 2 * m * n * k + n,
                           (m * k + n * k + n + m * n) * ctx.size, make)


# ---------------------------------------------------------------- sections: memory-bound
UNARY = {"relu": torch.relu, "silu": F.silu, "gelu": F.gelu, "hardtanh": F.hardtanh,
         "sigmoid": torch.sigmoid, "clone": torch.clone}


def _image(ctx: Ctx, elements: int, c: int = 64) -> tuple[int, int, int]:
    """(n, c, side) of a channels-last batch of about `elements` elements."""
    side = max(1, round(math.sqrt(elements / (ctx.grid.batch * c))))
    n = max(1, elements // (c * side * side))
    return n, c, side


def eager_pointwise(ctx: Ctx) -> Iterator[Case]:
    for e in ctx.grid.elements:
        n, c, side = _image(ctx, e)
        el = n * c * side * side

        def add(n=n, c=c, side=side):
            a, b = (ctx.rand(n, c, side, side, channels_last=True) for _ in range(2))
            return lambda: torch.add(a, b)

        yield Case("eager_pointwise/add", (el,), 0, 3 * el * ctx.size, add)
        for name, fn in UNARY.items():
            def make(fn=fn, n=n, c=c, side=side):
                x = ctx.rand(n, c, side, side, channels_last=True)
                return lambda: fn(x)

            yield Case(f"eager_pointwise/{name}", (el,), 0, 2 * el * ctx.size, make)


def eager_broadcast(ctx: Ctx) -> Iterator[Case]:
    """x * w[C] (a layer scale), x + b[C] (a bias), x * s[N, C] (squeeze-excitation)."""
    n = ctx.grid.batch
    for c in ctx.grid.broadcast_channels:
        for s in ctx.grid.broadcast_spatial:
            el = n * c * s * s
            if not ctx.fits(el):
                continue
            for name, per_sample, op in (("mul_channel", False, torch.mul),
                                         ("add_channel", False, torch.add),
                                         ("mul_sample_channel", True, torch.mul)):
                def make(c=c, s=s, per_sample=per_sample, op=op):
                    x = ctx.rand(n, c, s, s, channels_last=True)
                    w = ctx.rand(n if per_sample else 1, c, 1, 1)
                    return lambda: op(x, w)

                params = (n if per_sample else 1) * c
                yield Case(f"eager_broadcast/{name}", (el, c), 0,
                           (2 * el + params) * ctx.size, make)


def _maps(ctx: Ctx) -> Iterator[tuple[int, int, int]]:
    for c in ctx.grid.map_channels:
        for s in ctx.grid.spatial:
            if ctx.fits(ctx.grid.batch * c * s * s):
                yield ctx.grid.batch, c, s


def eager_norms(ctx: Ctx) -> Iterator[Case]:
    for n, c, s in _maps(ctx):
        el = n * c * s * s

        def bn(c=c, s=s, n=n):
            x = ctx.rand(n, c, s, s, channels_last=True)
            mean, w, b = ctx.rand(c), ctx.rand(c), ctx.rand(c)
            var = torch.rand(c, device=ctx.device, dtype=ctx.dtype) + 0.5
            return lambda: F.batch_norm(x, mean, var, w, b, False)

        yield Case("eager_batchnorm", (el, c), 0, (2 * el + 4 * c) * ctx.size, bn)

        def mean(c=c, s=s, n=n):
            x = ctx.rand(n, c, s, s, channels_last=True)
            return lambda: x.mean((2, 3), keepdim=True)

        yield Case("reduce", (el, s * s), 0, (el + n * c) * ctx.size, mean)
    for c in ctx.grid.norm_channels:
        for e in ctx.grid.norm_elements:
            rows = max(1, e // c)

            def ln(c=c, rows=rows):
                x, w, b = ctx.rand(rows, c), ctx.rand(c), ctx.rand(c)
                return lambda: F.layer_norm(x, (c,), w, b)

            yield Case("eager_layernorm", (rows, c), 0, (2 * rows * c + 2 * c) * ctx.size, ln)
    n = ctx.grid.batch
    for c in ctx.grid.pool_channels:
        for s in ctx.grid.pool_inputs:
            p = (s + 2 - 3) // 2 + 1
            if not ctx.fits(n * c * s * s):
                continue

            def pool(c=c, s=s):
                x = ctx.rand(n, c, s, s, channels_last=True)
                return lambda: F.max_pool2d(x, 3, 2, 1)

            # eager max pooling also writes its int64 indices (the eager plan's rule
            # dead-outputs-written counts them too)
            yield Case("pool", (n * c * s * s, c), 0,
                       n * c * (s * s + p * p) * ctx.size + n * c * p * p * 8, pool)


# ---------------------------------------------------------------- sections: Inductor
def _affine_relu(x, scale, shift):
    return torch.relu(x * scale + shift)


def _affine_add_relu(x, scale, shift, r):
    return torch.relu(x * scale + shift + r)


def _spatial_mean(x):
    return x.mean((2, 3), keepdim=True)


def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def _mm_relu_chain(x, w):
    for _ in range(CHAIN):
        x = torch.relu(torch.mm(x, w))
    return x


def _mm_relu_once(x, w):
    return torch.relu(torch.mm(x, w))


CHAIN = 16


def _host_us(fn, calls: int = 10, repeats: int = 7) -> float:
    """Host time of one call (microseconds): the calls only queue tiny kernels, so the host
    clock reads the cost of issuing them, not the GPU's work."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def compiled_issue_us(ctx: Ctx) -> float:
    """Host time per kernel of Inductor's generated code (no CUDA graphs): a chain of CHAIN
    library products each followed by a Triton kernel, less the same with one link, over the
    2 x (CHAIN - 1) kernels between them."""
    x, w = ctx.rand(64, 64), ctx.rand(64, 64) * 0.1
    chain, once = torch.compile(_mm_relu_chain), torch.compile(_mm_relu_once)
    return (_host_us(lambda: chain(x, w)) - _host_us(lambda: once(x, w))) / (2 * (CHAIN - 1))


def _scale_sample_channel(x, s):
    return x * torch.sigmoid(s)


def compiled_kernels(ctx: Ctx) -> Iterator[Case]:
    """Inductor's Triton kernels. Element-wise kernels (the epilogue after a library
    convolution: batchnorm as an affine map, activation, residual add; a squeeze-excitation
    scale of a channels-last batch) and the mean over height and width are compiled for each
    static shape, as a model compiles them (an earlier version compiled them once for dynamic
    row counts, and those kernels ran at 0.2 TB/s on the H200). The layer norm has dynamic
    rows and static channels, one compilation per channel count. Without automatic dynamic
    shapes a new shape is a recompilation, not a switch to dynamic sizes."""
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.cache_size_limit = max(256, torch._dynamo.config.cache_size_limit)
    affine, affine_add = torch.compile(_affine_relu), torch.compile(_affine_add_relu)
    scale = torch.compile(_scale_sample_channel)
    mean = torch.compile(_spatial_mean)
    n = ctx.grid.batch
    for e in ctx.grid.triton_elements:
        img = _image(ctx, e, ctx.grid.triton_channels)
        el, c = math.prod(img) * img[2], img[1]

        def one(img=img):
            x = ctx.rand(*img, img[2], channels_last=True)
            sc, sh = ctx.rand(img[1], 1, 1), ctx.rand(img[1], 1, 1)
            return lambda: affine(x, sc, sh)

        def two(img=img):
            x, r = (ctx.rand(*img, img[2], channels_last=True) for _ in range(2))
            sc, sh = ctx.rand(img[1], 1, 1), ctx.rand(img[1], 1, 1)
            return lambda: affine_add(x, sc, sh, r)

        def se(img=img):
            x = ctx.rand(*img, img[2], channels_last=True)
            s = ctx.rand(img[0], img[1], 1, 1)
            return lambda: scale(x, s)

        yield Case("triton_pointwise/affine_relu", (el,), 0, (2 * el + 2 * c) * ctx.size, one)
        yield Case("triton_pointwise/affine_add_relu", (el,), 0, (3 * el + 2 * c) * ctx.size,
                   two)
        yield Case("triton_pointwise/scale_sample_channel", (el,), 0,
                   (2 * el + img[0] * c) * ctx.size, se)
    for c in ctx.grid.triton_reduce_channels:
        for side in ctx.grid.triton_reduce_spatial:
            if not ctx.fits(n * c * side * side):
                continue

            def red(c=c, side=side):
                x = ctx.rand(n, c, side, side, channels_last=True)
                return lambda: mean(x)

            el = n * c * side * side
            yield Case("triton_reduce", (el, side * side), 0, (el + n * c) * ctx.size, red)
    ln = torch.compile(_layer_norm)
    for c in ctx.grid.compiled_norm_channels:
        for e in ctx.grid.norm_elements:
            rows = max(1, e // c)

            def make(c=c, rows=rows):
                x, w, b = ctx.rand(rows, c), ctx.rand(c), ctx.rand(c)
                torch._dynamo.mark_dynamic(x, 0)
                return lambda: ln(x, w, b)

            yield Case("compiled_layernorm", (rows, c), 0, (2 * rows * c + 2 * c) * ctx.size, make)


SECTIONS: dict[str, Callable[[Ctx], Iterator[Case]]] = {
    "pointwise": eager_pointwise,
    "broadcast": eager_broadcast,
    "norms": eager_norms,
    "matmul": matmuls,
    "conv": dense_convs,
    "grouped": grouped_convs,
    "compiled": compiled_kernels,
}
CUDA_ONLY = ("compiled",)
# Seconds each section may take on the GPU (the whole run stays under about 150 s). Cases run
# in a fixed shuffled order, so a section cut short still covers its grid evenly: the
# estimate interpolates between whatever rows there are.
BUDGET_S = {"pointwise": 6, "broadcast": 5, "norms": 8, "matmul": 12, "conv": 30, "grouped": 50,
            "compiled": 40}


# ---------------------------------------------------------------- timing
class WallTimer:
    """Host-clock stand-in for harness.Timer where there is no GPU (the plumbing tests): the
    same call and result, median in milliseconds."""

    def __init__(self, warmup: int = 1, repeats: int = 3):
        self.warmup, self.repeats = warmup, repeats

    def __call__(self, fn) -> dict:
        for _ in range(self.warmup):
            fn()
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return {"median": statistics.median(times)}


def _timer(ctx: Ctx, warmup: int, repeats: int):
    if ctx.device.type == "cuda":
        from .harness import Timer

        return Timer(warmup, repeats)
    return WallTimer(warmup, repeats)


def per_call_us(ctx: Ctx, case: Case, repeats: int = 5) -> float:
    """Time of one call in microseconds: CUDA-graph replays of k calls over rotating inputs."""
    sets = max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / max(case.dram_bytes, 1))))
    calls = [case.make() for _ in range(sets)]
    for call in calls[:2]:
        call()  # cudnn.benchmark chooses its algorithm here; Triton compiles
    rough_ms = _timer(ctx, 1, 3)(calls[0])["median"]
    k = max(sets, min(MAX_CALLS, math.ceil(TARGET_MS / max(rough_ms, 1e-4))))
    seq = [calls[i % sets] for i in range(k)]
    timer = _timer(ctx, 2, repeats)
    if ctx.device.type != "cuda":
        return timer(lambda: [c() for c in seq])["median"] * 1e3 / k
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [c() for c in seq]  # kept alive: every call writes its own output
    median = timer(graph.replay)["median"]
    del outs, graph
    return median * 1e3 / k


def launch_overheads(ctx: Ctx, n: int = 200) -> dict:
    """Per-kernel costs of tiny kernels: replayed in a CUDA graph, on a stream the host has
    filled ahead of the GPU (behind a sleep kernel), and the host's issue time per eager op."""
    x = torch.zeros(8, device=ctx.device, dtype=ctx.dtype)
    tiny = Case("launch", (), 0, 0, lambda: (lambda: x.add(1)))
    graph_us = per_call_us(ctx, tiny)
    issue_us = _timer(ctx, 3, 7)(lambda: [x.add(1) for _ in range(n)])["median"] * 1e3 / n
    img, w = ctx.rand(1, 8, 8, 8, channels_last=True), ctx.rand(8, 8, 3, 3, channels_last=True)
    library_us = _timer(ctx, 3, 7)(lambda: [F.conv2d(img, w, None, 1, 1)
                                            for _ in range(n)])["median"] * 1e3 / n
    stream_us = graph_us
    if ctx.device.type == "cuda" and hasattr(torch.cuda, "_sleep"):
        cycles = 40_000_000  # about 20 ms at 2 GHz: long enough for the host to queue n ops
        timer = _timer(ctx, 2, 7)
        busy = timer(lambda: [torch.cuda._sleep(cycles)] + [x.add(1) for _ in range(n)])
        alone = timer(lambda: torch.cuda._sleep(cycles))
        stream_us = max(graph_us, (busy["median"] - alone["median"]) * 1e3 / n)
    return {"graph_kernel_us": round(graph_us, 3), "stream_kernel_us": round(stream_us, 3),
            "eager_issue_us": round(issue_us, 3), "eager_library_issue_us": round(library_us, 3)}


# ---------------------------------------------------------------- the run
def _environment(ctx: Ctx) -> dict:
    if ctx.device.type == "cuda":
        from .harness import environment

        return environment()
    import platform

    return {"gpu": None, "device": "cpu", "torch": torch.__version__,
            "python": platform.python_version()}


def run(output: str | Path, *, grid: Grid | None = None, sections: list[str] | None = None,
        device: str | None = None, dtype: torch.dtype = torch.float16, hardware: str = "",
        command: str = "", budget_scale: float = 1.0, base: dict | None = None,
        log=print) -> dict:
    """Time every section and write the calibration file after each; returns the document.

    With `base` (an earlier calibration document), its tables that these sections do not
    measure are kept, and the commands are listed in order, separated by '; '."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    ctx = Ctx(grid or Grid.full(), dev, dtype)
    names = sections or [s for s in SECTIONS if dev.type == "cuda" or s not in CUDA_ONLY]
    unknown = [s for s in names if s not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown section {unknown[0]!r} (choose from {', '.join(SECTIONS)})")
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    start = time.perf_counter()
    doc = {"schema": SCHEMA, "hardware": hardware, "command": command,
           "environment": _environment(ctx),
           "method": {"timer": "perfmodel.harness.Timer (CUDA events)" if dev.type == "cuda"
                      else "host clock (no GPU)", "graphs": dev.type == "cuda",
                      "per_call": "median of 5 replays of a graph of calls back to back / calls",
                      "rotation_bytes": ROTATE_BYTES, "cudnn_benchmark": dev.type == "cuda",
                      "memory_format": "channels_last", "batch": ctx.grid.batch,
                      "seconds": None},
           "dtype": str(dtype).removeprefix("torch."), "launch": {}, "tables": {}}
    with torch.inference_mode():
        doc["launch"] = launch_overheads(ctx)
        if dev.type == "cuda" and "compiled" in names:
            doc["launch"]["compiled_issue_us"] = round(compiled_issue_us(ctx), 3)
        log(f"launch {doc['launch']}")
        for name in names:
            t0 = time.perf_counter()
            count = failed = 0
            cases = [c for c in SECTIONS[name](ctx) if c is not None]
            if name not in CUDA_ONLY:  # compiled kernels: one compilation serves a sequence
                random.Random(0).shuffle(cases)
            for i, case in enumerate(cases):
                if time.perf_counter() - t0 > BUDGET_S[name] * budget_scale:
                    log(f"{name}: time budget spent, {len(cases) - i} of {len(cases)} left out")
                    break
                try:
                    us = per_call_us(ctx, case)
                except Exception as exc:  # one shape a library rejects must not end the run
                    failed += 1
                    log(f"{case.table} {case.features}: {type(exc).__name__}: {exc}"[:300])
                    continue
                kind = case.table.split("/")[0]
                table = doc["tables"].setdefault(case.table, {
                    "features": list(FEATURES[kind]),
                    "kernels_per_call": KERNELS_PER_CALL.get(kind, 1), "rows": []})
                table["rows"].append([*case.features, case.flops, case.dram_bytes, round(us, 3)])
                count += 1
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            doc["method"]["seconds"] = round(time.perf_counter() - start, 1)
            dump_calibration(_merged(base, doc), output)
            log(f"{name}: {count} kernels ({failed} failed) in {time.perf_counter() - t0:.1f} s "
                f"(total {time.perf_counter() - start:.1f} s)")
    return doc


def _merged(base: dict | None, doc: dict) -> dict:
    """`doc` over `base`: base's tables that doc does not have, doc's launch keys over base's,
    both commands and both runs' environment and method."""
    if not base:
        return doc
    out = dict(doc)
    out["command"] = f"{base.get('command', '')}; {doc['command']}"
    out["launch"] = {**base.get("launch", {}), **doc["launch"]}
    out["tables"] = {**{k: v for k, v in base.get("tables", {}).items()
                        if k not in doc["tables"]}, **doc["tables"]}
    out["method"] = {**doc["method"], "earlier_runs": [
        {"command": base.get("command"), "environment": base.get("environment"),
         "method": {k: v for k, v in base.get("method", {}).items() if k != "earlier_runs"}}]
        + base.get("method", {}).get("earlier_runs", [])}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfmodel.calibrate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", required=True, help="calibration file to write (.yaml)")
    parser.add_argument("--hardware", default="", help="the hardware config it calibrates")
    parser.add_argument("--sections", help=f"comma-separated subset of: {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="a tiny grid (checks the plumbing)")
    parser.add_argument("--device", help="cuda (default where available) or cpu")
    parser.add_argument("--update", action="store_true", help="keep the tables of an existing "
                        "OUTPUT that --sections does not measure (the command is appended)")
    args = parser.parse_args(argv)
    command = "python -m perfmodel.calibrate " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    base = yaml.safe_load(Path(args.output).read_text()) if args.update else None
    run(args.output, grid=Grid.quick() if args.quick else Grid.full(),
        sections=args.sections.split(",") if args.sections else None, device=args.device,
        dtype=torch.float16 if (args.device or "cuda") == "cuda" and torch.cuda.is_available()
        else torch.float32, hardware=args.hardware, command=command, base=base)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
