"""Tensor-machine programs for the paper's blocks: layer-by-layer and block-fused.

Shapes follow the zoo's blocks in inference form (batchnorm folded into biases), so the
DRAM traffic of each layer-by-layer program equals the ``layer`` plan of the traced zoo
block and that of each one-kernel fused program equals the ``block`` plan (tested).
Activations are N x H x W x C (pixels P = N H W); tiles are th x tw pixels of one image.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from math import gcd
from typing import Callable, Sequence

from .errors import InputError
from .tensor_machine import (LOCAL, Kernel, Loop, Op, Program, activation, add, dram, glob,
                             grouped_conv, load, local, matmul, multiply, pool, store)

PROGRAMS: dict[str, Callable[..., Program]] = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


# Parameters whose default 0 means a value derived from the others: listed, and accepted by
# --set, as a word (a number sets them).
DERIVED = {"c_out": ("c", "the input's channels"),
           "tile": ("auto", "the largest divisor of the output side up to 8"),
           "chunk": ("all", "all hidden channels in one step")}


def _derived(p: inspect.Parameter) -> str | None:
    return DERIVED[p.name][0] if p.default == 0 and p.name in DERIVED else None


def program_lines() -> list[str]:
    """Each program's name and summary, then its parameters with their defaults."""
    lines = []
    for name, fn in PROGRAMS.items():
        params = inspect.signature(fn).parameters.values()
        sig = ", ".join(f"{p.name}={_derived(p) or p.default}" for p in params)
        lines.append(f"{name:18s} {fn.__doc__.splitlines()[0]}\n{'':18s} ({sig})")
    return lines


def derived_note() -> str:
    """What the words among the defaults mean."""
    return "; ".join(f"{key}={word}: {meaning}" for key, (word, meaning) in DERIVED.items())


def build_program(name: str, settings: Sequence[str] = ()) -> Program:
    """Program `name` with ``NAME=POSITIVE_INT`` settings checked against its parameters (or
    a derived parameter's word, as listed: its default)."""
    if name not in PROGRAMS:
        raise InputError(f"unknown program {name!r} (one of {', '.join(PROGRAMS)})",
                         field="PROGRAM")
    allowed = inspect.signature(PROGRAMS[name]).parameters
    kwargs = {}
    for item in settings:
        key, _, value = item.partition("=")
        if key in allowed and value == _derived(allowed[key]):
            continue
        if key not in allowed or not value.isdigit() or int(value) <= 0:
            words = [f"{p.name}={_derived(p)}" for p in allowed.values() if _derived(p)]
            also = f" (or {', '.join(words)})" if words else ""
            raise InputError(f"{item!r}: expected NAME=POSITIVE_INT with NAME one of "
                             f"{', '.join(allowed)}{also}", field="--set")
        kwargs[key] = int(value)
    try:
        return PROGRAMS[name](**kwargs)
    except (ValueError, ZeroDivisionError) as exc:
        raise InputError(f"{kwargs}: {exc}", field="--set") from exc


def _trips(total: int, part: int, what: str) -> int:
    """Loop trips over equal parts; a remainder would silently drop work."""
    if part <= 0 or total % part:
        raise ValueError(f"{what}: {total} is not a multiple of {part}")
    return total // part


def _tile(h: int, limit: int = 8) -> int:
    return max(d for d in range(1, limit + 1) if h % d == 0)


def _copy(src, dst) -> Op:
    return Op("copy", (src,), dst, label="←")


def _ffn_weights(c: int, alpha: int):
    hidden = alpha * c
    return (dram("U", c, hidden, weight=True), dram("a", hidden, weight=True),
            dram("V", hidden, c, weight=True), dram("b", c, weight=True))


def _cache(*tensors):
    """Load weights from DRAM into global memory (each read once)."""
    out, steps = [], []
    for t in tensors:
        g = glob(t.name + "_g", *t.shape, weight=True)
        steps.append(load(t, g))
        out.append(g)
    return out, steps


def _fused_ffn_loop(xt, u, a, v, b, zt, tile_px: int, c: int, hidden: int, chunk: int):
    """Eq. 32 on one tile: for each chunk r, Z += act(X U_r + a_r) V_r."""
    yt = local("Y_r", tile_px, chunk)
    ut, vt = local("U_r", c, chunk), local("V_r", chunk, c)
    return Loop("hidden chunks", _trips(hidden, chunk, "chunk"), (
        load(u, ut), load(v, vt),
        matmul(xt, ut, yt, bias=a), activation(yt),
        matmul(yt, vt, zt, bias=b)))


@program
def ffn_layer(n: int = 128, h: int = 28, w: int = 28, c: int = 256, alpha: int = 4) -> Program:
    """FFN layer by layer: the hidden tensor H goes to DRAM and back."""
    p, hidden, th = n * h * w, alpha * c, _tile(gcd(h, w))
    tile_px, trips = th * th, p // (th * th)
    x, hh, z = dram("X", p, c), dram("H", p, hidden), dram("Z", p, c)
    (u, a, v, b), ws = _cache(*_ffn_weights(c, alpha))
    xt, ht, ht2, zt = (local("X_t", tile_px, c), local("H_t", tile_px, hidden),
                       local("H_t", tile_px, hidden), local("Z_t", tile_px, c))
    return Program("ffn_layer", (
        Kernel("expand: H = relu(X U + a)", tuple(ws[:2]) + (Loop("pixel tiles", trips, (
            load(x, xt), matmul(xt, u, ht, bias=a), activation(ht), store(ht, hh))),)),
        Kernel("project: Z = H V + b", tuple(ws[2:]) + (Loop("pixel tiles", trips, (
            load(hh, ht2), matmul(ht2, v, zt, bias=b), store(zt, z))),)),
    ), "FFN, layer by layer")


@program
def ffn_fused(n: int = 128, h: int = 28, w: int = 28, c: int = 256, alpha: int = 4,
              chunk: int = 64) -> Program:
    """FFN loop-fused over hidden chunks (eq. 32): no hidden tensor in DRAM."""
    p, hidden, th = n * h * w, alpha * c, _tile(gcd(h, w))
    tile_px, trips = th * th, p // (th * th)
    x, z = dram("X", p, c), dram("Z", p, c)
    (u, a, v, b), ws = _cache(*_ffn_weights(c, alpha))
    xt, zt = local("X_t", tile_px, c), local("Z_t", tile_px, c)
    return Program("ffn_fused", (
        Kernel("FFN block-fused", tuple(ws) + (Loop("pixel tiles", trips, (
            load(x, xt), _fused_ffn_loop(xt, u, a, v, b, zt, tile_px, c, hidden, chunk),
            store(zt, z))),)),
    ), "FFN, loop-fused (eq. 32)")


def _convfirst_tensors(n, h, w, c, alpha, gw=8, k=3):
    p = n * h * w
    conv_w, conv_b = dram("W_conv", c, gw * k * k, weight=True), dram("b_conv", c, weight=True)
    return p, dram("X", p, c), dram("Z", p, c), conv_w, conv_b, _ffn_weights(c, alpha)


@program
def convfirst_layer(n: int = 128, h: int = 56, w: int = 56, c: int = 64, alpha: int = 4,
                    group_width: int = 8) -> Program:
    """ConvFirst layer by layer (paper Fig. 7a): grouped conv, expand, project + shortcut."""
    p, x, z, cw, cb, ffn = _convfirst_tensors(n, h, w, c, alpha, group_width)
    hidden, th = alpha * c, _tile(gcd(h, w))
    tile_px, trips = th * th, p // (th * th)
    y, hh = dram("Y", p, c), dram("H", p, hidden)
    (cw, cb, u, a, v, b), ws = _cache(cw, cb, *ffn)
    xt = local("X_t+halo", (th + 2) * (th + 2), c)
    yt, yt2, ht, ht2, zt, xs = (local("Y_t", tile_px, c), local("Y_t", tile_px, c),
                                local("H_t", tile_px, hidden), local("H_t", tile_px, hidden),
                                local("Z_t", tile_px, c), local("X_t", tile_px, c))
    return Program("convfirst_layer", (
        Kernel("grouped conv 3x3: Y", tuple(ws[:2]) + (Loop("pixel tiles", trips, (
            load(x, xt), grouped_conv(xt, cw, yt, group_width, 9, bias=cb), store(yt, y))),)),
        Kernel("expand: H = relu(Y U + a)", tuple(ws[2:4]) + (Loop("pixel tiles", trips, (
            load(y, yt2), matmul(yt2, u, ht, bias=a), activation(ht), store(ht, hh))),)),
        Kernel("project: Z = H V + b + X", tuple(ws[4:]) + (Loop("pixel tiles", trips, (
            load(hh, ht2), load(x, xs), matmul(ht2, v, zt, bias=b), add(zt, xs, zt),
            store(zt, z))),)),
    ), "ConvFirst, layer by layer (Fig. 7a)")


@program
def convfirst_fused(n: int = 128, h: int = 56, w: int = 56, c: int = 64, alpha: int = 4,
                    group_width: int = 8, chunk: int = 64) -> Program:
    """ConvFirst block-fused (paper Fig. 7b): one kernel, input once, output once."""
    p, x, z, cw, cb, ffn = _convfirst_tensors(n, h, w, c, alpha, group_width)
    hidden, th = alpha * c, _tile(gcd(h, w))
    tile_px, trips = th * th, p // (th * th)
    (cw, cb, u, a, v, b), ws = _cache(cw, cb, *ffn)
    xt = local("X_t+halo", (th + 2) * (th + 2), c)
    yt, zt = local("Y_t", tile_px, c), local("Z_t", tile_px, c)
    return Program("convfirst_fused", (
        Kernel("ConvFirst block-fused", tuple(ws) + (Loop("pixel tiles", trips, (
            load(x, xt), grouped_conv(xt, cw, yt, group_width, 9, bias=cb),
            _copy(xt, zt),  # the shortcut initialises the output accumulators
            _fused_ffn_loop(yt, u, a, v, b, zt, tile_px, c, hidden, chunk),
            store(zt, z))),)),
    ), "ConvFirst, block-fused (Fig. 7b)")


@program
def convfirst_split(n: int = 128, h: int = 14, w: int = 14, c: int = 512, alpha: int = 4,
                    group_width: int = 8, chunk: int = 64, processors: int = 2) -> Program:
    """ConvFirst block-fused with channels split across processors (paper Fig. 7c).

    Each processor convolves its share of the channels and computes partial hidden sums;
    the partials meet in a small global-memory tensor; each then projects onto its share
    of the output channels. DRAM traffic is that of the one-processor kernel."""
    p, x, z, cw, cb, ffn = _convfirst_tensors(n, h, w, c, alpha, group_width)
    hidden, th, part = alpha * c, _tile(gcd(h, w)), _trips(c, processors, "processors")
    tile_px, trips = th * th, p // (th * th)
    (cw, cb, u, a, v, b), ws = _cache(cw, cb, *ffn)
    xt = local("X_t+halo (1/s)", (th + 2) * (th + 2), part)
    yt, zt = local("Y_t (1/s)", tile_px, part), local("Z_t (1/s)", tile_px, part)
    ut, vt = local("U_r (1/s)", part, chunk), local("V_r (1/s)", chunk, part)
    partial, hg = local("H_r partial", tile_px, chunk), glob("H_r sum", tile_px, chunk)
    yr = local("Y_r", tile_px, chunk)
    conv_part = grouped_conv(xt, cw, yt, group_width, 9, bias=cb)
    return Program("convfirst_split", (
        Kernel(f"ConvFirst split over {processors}", tuple(ws) + (Loop("pixel tiles", trips, (
            Loop("processors", processors, (load(x, xt), conv_part, _copy(xt, zt))),
            Loop("hidden chunks", _trips(hidden, chunk, "chunk"), (
                Loop("processors", processors, (
                    load(u, ut), matmul(yt, ut, partial, bias=a), add(hg, partial, hg))),
                Loop("processors", processors, (
                    load(hg, yr), activation(yr), load(v, vt), matmul(yr, vt, zt, bias=b))))),
            Loop("processors", processors, (store(zt, z),)))),)),
    ), f"ConvFirst, block-fused, channels split over {processors} processors (Fig. 7c)")


@dataclass(frozen=True)
class _MBConvShape:
    """An MBConv block as torchvision builds it: expand (absent when alpha = 1), depthwise
    k x k at `stride`, squeeze-excitation, project to `c_out`; the shortcut only when the
    stride is 1 and the channels stay. Output tiles are th x th pixels of one image; the
    depthwise needs an input region of (stride (th - 1) + k)^2 pixels around each."""

    n: int
    h: int
    w: int
    c: int
    c_out: int
    alpha: int
    k: int
    stride: int
    squeeze: int
    tile: int = 0  # output tile side; 0: the largest divisor of the output size up to 8
    chunk: int = 0  # hidden channels per step of the fused designs; 0: all at once

    def __post_init__(self):
        if self.stride not in (1, 2):
            raise ValueError(f"stride must be 1 or 2, got {self.stride}")
        if self.h % self.stride or self.w % self.stride:
            raise ValueError(f"{self.h}x{self.w} is not divisible by the stride {self.stride}")
        if self.chunk:
            _trips(self.alpha * self.c, self.chunk, "chunk")
        if self.tile and ((self.h // self.stride) % self.tile or (self.w // self.stride) % self.tile):
            raise ValueError(f"tile {self.tile} does not divide the output size "
                             f"{self.h // self.stride}x{self.w // self.stride}")

    hidden = property(lambda s: s.alpha * s.c)
    shortcut = property(lambda s: s.stride == 1 and s.c_out == s.c)
    p_in = property(lambda s: s.n * s.h * s.w)
    p_out = property(lambda s: s.n * (s.h // s.stride) * (s.w // s.stride))
    th = property(lambda s: s.tile or _tile(gcd(s.h // s.stride, s.w // s.stride)))
    th_in = property(lambda s: _tile(gcd(s.h, s.w)))
    region = property(lambda s: (s.stride * (s.th - 1) + s.k) ** 2)  # input pixels per tile
    hc = property(lambda s: s.chunk or s.alpha * s.c)  # hidden channels per step

    def trips(self) -> int:
        return _trips(self.p_out, self.th * self.th, "output tiles")

    def weights(self) -> dict:
        c, hidden, k, sq = self.c, self.hidden, self.k, self.squeeze
        expand = dict(We=dram("W_expand", c, hidden, weight=True),
                      be=dram("b_expand", hidden, weight=True)) if self.alpha > 1 else {}
        return dict(**expand,
                    Wd=dram("W_dw", hidden, k * k, weight=True), bd=dram("b_dw", hidden, weight=True),
                    Wr=dram("W_se1", hidden, sq, weight=True), br=dram("b_se1", sq, weight=True),
                    Wx=dram("W_se2", sq, hidden, weight=True), bx=dram("b_se2", hidden, weight=True),
                    Wp=dram("W_project", hidden, self.c_out, weight=True),
                    bp=dram("b_project", self.c_out, weight=True))


def _mbconv(n, h, w, c, c_out, alpha, k, stride, squeeze, tile=0, chunk=0):
    shape = _MBConvShape(n, h, w, c, c_out or c, alpha, k, stride, squeeze, tile, chunk)
    wt = shape.weights()
    cached, steps = _cache(*wt.values())
    return shape, wt, dict(zip(wt, cached)), dict(zip(wt, steps))


def _se_kernel(shape, g, ws, s, s2):
    """The squeeze-excitation scales of every image from its pooled sums S."""
    st, s1t, s2t = (local("S_n", 1, shape.hidden), local("S1_n", 1, shape.squeeze),
                    local("S2_n", 1, shape.hidden))
    return Kernel("SE: reduce, expand, sigmoid", (ws["Wr"], ws["br"], ws["Wx"], ws["bx"],
        Loop("images", shape.n, (load(s, st), matmul(st, g["Wr"], s1t, bias=g["br"]),
                                 activation(s1t, fn="silu"),
                                 matmul(s1t, g["Wx"], s2t, bias=g["bx"]),
                                 activation(s2t, fn="sigmoid"), store(s2t, s2)))))


def _chunks(shape, steps):
    """`steps` once per chunk of hidden channels (no loop when one chunk holds them all)."""
    if shape.hc == shape.hidden:
        return tuple(steps)
    return (Loop("hidden chunks", shape.hidden // shape.hc, tuple(steps)),)


def _weight_slice(shape, g, name, rows, cols):
    """A chunk's slice of a cached weight in local memory (no tile when it is the whole)."""
    if shape.hc == shape.hidden:
        return g[name], ()
    tile = local(g[name].name.replace("_g", "_r"), rows, cols)
    return tile, (load(g[name], tile),)


def _expand_depthwise(shape, g, xt, dt):
    """Per chunk: expand the tile's input region (when alpha > 1), SiLU, depthwise + SiLU
    into dt (the chunk's depthwise output)."""
    et, steps = xt, []
    if shape.alpha > 1:
        et = local("E_t+halo", shape.region, shape.hc)
        we, load_we = _weight_slice(shape, g, "We", shape.c, shape.hc)
        steps += [*load_we, matmul(xt, we, et, bias=g["be"]), activation(et, fn="silu")]
    wd, load_wd = _weight_slice(shape, g, "Wd", shape.hc, shape.k * shape.k)
    return steps + [*load_wd, grouped_conv(et, wd, dt, 1, shape.k * shape.k, bias=g["bd"]),
                    activation(dt, fn="silu")]


def _project_chunk(shape, g, dt, zt):
    wp, load_wp = _weight_slice(shape, g, "Wp", shape.hc, shape.c_out)
    return [*load_wp, matmul(dt, wp, zt, bias=g["bp"])]


def _shortcut(shape, x, zt):
    """Steps that bring the shortcut into the accumulator tile zt before (`first`) and after
    (`last`) the projection: a copy when `x` is a local tile already holding the input,
    a load and an add when it is in DRAM."""
    if not shape.shortcut:
        return [], []
    if x.space == LOCAL:
        return [_copy(x, zt)], []
    xs = local("X_t", shape.th * shape.th, shape.c)
    return [load(x, xs)], [add(zt, xs, zt)]


def _project(shape, g, dt, x, z):
    """Project a scaled tile (+ the shortcut) and store it. `x` is the DRAM input, or a
    local tile that already holds it (the shortcut then starts the accumulator)."""
    zt = local("Z_t", shape.th * shape.th, shape.c_out)
    first, last = _shortcut(shape, x, zt)
    return tuple(first + [matmul(dt, g["Wp"], zt, bias=g["bp"])] + last + [store(zt, z)])


@program
def mbconv_layer(n: int = 128, h: int = 56, w: int = 56, c: int = 24, alpha: int = 6,
                 k: int = 3, squeeze: int = 6, stride: int = 1, c_out: int = 0, tile: int = 0) -> Program:
    """MBConv layer by layer: six kernels, as an inference compiler runs it.

    Expand + SiLU (absent for alpha = 1), depthwise + SiLU, the SE pool, the SE's two small
    layers, the scale, project (+ shortcut); every intermediate tensor goes to DRAM and back.
    c_out = 0 keeps the channels."""
    shape, wt, g, ws = _mbconv(n, h, w, c, c_out, alpha, k, stride, squeeze, tile)
    hidden, tile, trips = shape.hidden, shape.th * shape.th, shape.trips()
    x, d, s, s1, d2, z = (dram("X", shape.p_in, c), dram("D", shape.p_out, hidden),
                          dram("S", n, hidden), dram("S1", n, squeeze),
                          dram("D'", shape.p_out, hidden), dram("Z", shape.p_out, shape.c_out))
    tiles = lambda *steps: Loop("pixel tiles", trips, steps)  # noqa: E731
    kernels = []
    src = x
    if alpha > 1:
        tile_in = shape.th_in * shape.th_in
        e = dram("E", shape.p_in, hidden)
        xt, et = local("X_t", tile_in, c), local("E_t", tile_in, hidden)
        kernels.append(Kernel("expand + SiLU", (ws["We"], ws["be"], Loop(
            "pixel tiles", _trips(shape.p_in, tile_in, "input tiles"), (
                load(x, xt), matmul(xt, g["We"], et, bias=g["be"]), activation(et, fn="silu"),
                store(et, e))))))
        src = e
    et2, dt, dt2 = (local("E_t+halo", shape.region, hidden), local("D_t", tile, hidden),
                    local("D_t", tile, hidden))
    st, s1t, s2t = local("S_n", 1, hidden), local("S1_n", 1, squeeze), local("S2_n", 1, hidden)
    kernels += [
        Kernel("depthwise + SiLU", (ws["Wd"], ws["bd"], tiles(
            load(src, et2), grouped_conv(et2, g["Wd"], dt, 1, k * k, bias=g["bd"]),
            activation(dt, fn="silu"), store(dt, d)))),
        Kernel("SE pool", (tiles(load(d, dt2), pool(dt2, st)), store(st, s))),
        Kernel("SE reduce + SiLU", (ws["Wr"], ws["br"], Loop("images", n, (
            load(s, st), matmul(st, g["Wr"], s1t, bias=g["br"]), activation(s1t, fn="silu"),
            store(s1t, s1))))),
        Kernel("SE expand + sigmoid, scale", (ws["Wx"], ws["bx"], Loop("images", n, (
            load(s1, s1t), matmul(s1t, g["Wx"], s2t, bias=g["bx"]),
            activation(s2t, fn="sigmoid"), Loop("pixel tiles", trips // n, (
                load(d, dt2), multiply(dt2, s2t, dt2), store(dt2, d2))))))),
        Kernel("project" + (" + shortcut" if shape.shortcut else ""), (ws["Wp"], ws["bp"], tiles(
            load(d2, dt2), *_project(shape, g, dt2, x, z)))),
    ]
    return Program("mbconv_layer", tuple(kernels), "MBConv, layer by layer")


@program
def mbconv_two_pass(n: int = 128, h: int = 56, w: int = 56, c: int = 24, alpha: int = 6,
                    k: int = 3, squeeze: int = 6, stride: int = 1, c_out: int = 0, tile: int = 0,
                    chunk: int = 0) -> Program:
    """MBConv fused in two passes around squeeze-excitation's global pool.

    Pass 1 computes expand and depthwise per tile and keeps only the pooled sums; a tiny
    kernel computes the SE scales; pass 2 recomputes expand and depthwise, scales,
    projects and adds the shortcut. Recomputation costs MACs (and the halo's expand)
    and a second read of X, instead of writing and reading the hidden tensors. With
    `chunk`, both passes step through the hidden channels `chunk` at a time (depthwise and
    scale are per channel, the projection accumulates), so the tiles stay on chip."""
    shape, wt, g, ws = _mbconv(n, h, w, c, c_out, alpha, k, stride, squeeze, tile, chunk)
    hidden, trips = shape.hidden, shape.trips()
    x, s, s2, z = (dram("X", shape.p_in, c), dram("S", n, hidden), dram("S2", n, hidden),
                   dram("Z", shape.p_out, shape.c_out))
    xt, dt = local("X_t+halo", shape.region, c), local("D_t", shape.th * shape.th, shape.hc)
    st, s2t, zt = (local("S_n", 1, hidden), local("S2_n", 1, hidden),
                   local("Z_t", shape.th * shape.th, shape.c_out))
    front = [name for name in ("We", "be", "Wd", "bd") if name in wt]
    first, last = _shortcut(shape, xt, zt)
    return Program("mbconv_two_pass", (
        Kernel("pass 1: expand, depthwise, pool", (*(ws[m] for m in front),
            Loop("pixel tiles", trips, (load(x, xt),) + _chunks(
                shape, _expand_depthwise(shape, g, xt, dt) + [pool(dt, st)])),
            store(st, s))),
        _se_kernel(shape, g, ws, s, s2),
        Kernel("pass 2: recompute, scale, project", (
            *(load(wt[m], g[m]) for m in front), ws["Wp"], ws["bp"],
            Loop("pixel tiles", trips, (load(x, xt), load(s2, s2t), *first) + _chunks(
                shape, _expand_depthwise(shape, g, xt, dt) + [multiply(dt, s2t, dt)]
                + _project_chunk(shape, g, dt, zt)) + tuple(last) + (store(zt, z),)))),
    ), "MBConv, fused in two passes with recomputation")


@program
def mbconv_write_back(n: int = 128, h: int = 56, w: int = 56, c: int = 24, alpha: int = 6,
                      k: int = 3, squeeze: int = 6, stride: int = 1, c_out: int = 0,
                      tile: int = 0, chunk: int = 0) -> Program:
    """MBConv in two fused kernels around the SE, the depthwise output written once.

    Kernel 1 computes expand and depthwise per tile, writes D to DRAM and keeps the pooled
    sums; a tiny kernel computes the SE scales; kernel 3 reads D back, scales, projects and
    adds the shortcut. No recomputation; D (alpha C channels) crosses DRAM twice. `chunk`
    steps through the hidden channels as in mbconv_two_pass."""
    shape, wt, g, ws = _mbconv(n, h, w, c, c_out, alpha, k, stride, squeeze, tile, chunk)
    hidden, tile_px, trips = shape.hidden, shape.th * shape.th, shape.trips()
    x, d, s, s2, z = (dram("X", shape.p_in, c), dram("D", shape.p_out, hidden),
                      dram("S", n, hidden), dram("S2", n, hidden),
                      dram("Z", shape.p_out, shape.c_out))
    xt, dt = local("X_t+halo", shape.region, c), local("D_t", tile_px, shape.hc)
    st, s2t, zt = (local("S_n", 1, hidden), local("S2_n", 1, hidden),
                   local("Z_t", tile_px, shape.c_out))
    front = [name for name in ("We", "be", "Wd", "bd") if name in wt]
    first, last = _shortcut(shape, x, zt)
    return Program("mbconv_write_back", (
        Kernel("expand, depthwise, pool; store D", (*(ws[m] for m in front),
            Loop("pixel tiles", trips, (load(x, xt),) + _chunks(
                shape, _expand_depthwise(shape, g, xt, dt) + [pool(dt, st), store(dt, d)])),
            store(st, s))),
        _se_kernel(shape, g, ws, s, s2),
        Kernel("scale, project", (ws["Wp"], ws["bp"], Loop("pixel tiles", trips, (
            load(s2, s2t), *first) + _chunks(shape, [load(d, dt), multiply(dt, s2t, dt)]
                                              + _project_chunk(shape, g, dt, zt))
            + tuple(last) + (store(zt, z),)))),
    ), "MBConv, depthwise output written once and read back after the SE")
