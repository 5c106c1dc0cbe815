"""What the calibration runner times (perfmodel.calibrate): the grid of shapes and, per
section, the cases: one kernel kind at one shape, its features, its matrix ops and DRAM bytes
counted as the plans count them (eq. 22; compulsory loads, eq. 23, and the eager rules where
a kernel really moves more), and a function that allocates one input set and returns the call
to time. Nothing here times anything."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F


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
BUDGET_S = {"pointwise": 6, "broadcast": 5, "norms": 8, "matmul": 12, "conv": 28, "grouped": 45,
            "compiled": 50}
