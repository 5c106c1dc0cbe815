"""Tensor-machine diagrams in the spirit of paper Figures 5 and 7.

Memory spaces are horizontal regions (DRAM, global, local); tensors are boxes in their
region; operations are round glyphs; arrows move data; loops are dashed frames.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Rectangle

from ..tensor_machine import DRAM, GLOBAL, LOCAL, Loop
from . import COMPUTE_COLOR, MEMORY_COLOR

if TYPE_CHECKING:
    from ..tensor_machine import Kernel, ProgramReport

BAND_Y = {DRAM: 3.0, GLOBAL: 2.0, LOCAL: 0.0}  # bottom of each region; local is 2 high
REGION_COLOR = {DRAM: "#f2f2f2", GLOBAL: "#e3f1fa", LOCAL: "#fdf0dc"}
TENSOR_Y = {DRAM: 3.5, GLOBAL: 2.5, LOCAL: 0.45}
OP_Y = 1.35
MOVES = ("load", "store", "copy")


def _flatten(steps, depth=0, path=()):
    for s in steps:
        if isinstance(s, Loop):
            yield from _flatten(s.body, depth + 1, path + (s,))
        else:
            yield s, path


def _layout(kernel: "Kernel"):
    ops = list(_flatten(kernel.body))
    pos: dict[str, tuple[float, float]] = {}
    next_free = {DRAM: 0.0, GLOBAL: 0.0, LOCAL: 0.0}
    op_x = []
    for i, (op, _) in enumerate(ops):
        x = float(i)
        for t in op.inputs + (op.output,):
            if t.name not in pos:
                px = max(x, next_free[t.space])
                pos[t.name] = (px, TENSOR_Y[t.space])
                next_free[t.space] = px + 1.0
        op_x.append(x)
    return ops, op_x, pos


def _tensor_box(ax, name, shape, x, y, weight):
    label = f"{name}\n{'×'.join(map(str, shape))}"
    ax.add_patch(FancyBboxPatch((x - 0.42, y - 0.28), 0.84, 0.56, boxstyle="round,pad=0.02",
                                facecolor="white", edgecolor="#7a7a7a" if weight else "black",
                                linewidth=0.8, linestyle="--" if weight else "-"))
    ax.text(x, y, label, ha="center", va="center", fontsize=5.6)


def _arrow(ax, a, b, color="#444444"):
    ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="-|>", color=color,
                                                    linewidth=0.6, shrinkA=9, shrinkB=9))


def draw_kernel(ax, kernel: "Kernel", subtitle: str = "") -> None:
    ops, op_x, pos = _layout(kernel)
    width = max([x for x, _ in pos.values()] + op_x + [1]) + 1
    for space, y0 in BAND_Y.items():
        height = 2.0 if space == LOCAL else 1.0
        ax.add_patch(Rectangle((-0.8, y0), width + 0.6, height, facecolor=REGION_COLOR[space],
                               edgecolor="none", zorder=0))
        ax.text(-0.75, y0 + height - 0.08, space, fontsize=7, va="top", style="italic",
                color="#555555")
    tensors = kernel.tensors()
    for name, (x, y) in pos.items():
        _tensor_box(ax, name, tensors[name].shape, x, y, tensors[name].weight)
    # loops: dashed frames around the slots of their ops, inner loops inset
    loops: dict[int, tuple[Loop, int, list[float]]] = {}
    for (op, path), x in zip(ops, op_x):
        for depth, loop in enumerate(path):
            loops.setdefault(id(loop), (loop, depth, []))[2].append(x)
    for loop, depth, xs in loops.values():
        inset = 0.12 * depth
        ax.add_patch(Rectangle((min(xs) - 0.5 + inset, 0.05 + inset),
                               max(xs) - min(xs) + 1 - 2 * inset, 1.85 - 2 * inset, fill=False,
                               linestyle=(0, (4, 2)), edgecolor="#333333", linewidth=0.7))
        ax.text(min(xs) - 0.45 + inset, 1.87 - inset, f"for {loop.name} ×{loop.trips}",
                fontsize=5.6, va="top", color="#333333")
    for (op, _), x in zip(ops, op_x):
        src, dst = pos[op.inputs[0].name], pos[op.output.name]
        if op.kind in MOVES:
            color = MEMORY_COLOR if DRAM in (op.inputs[0].space, op.output.space) else "#777777"
            _arrow(ax, src, dst, color)
            continue
        glyph = (x, OP_Y)
        ax.add_patch(FancyBboxPatch((x - 0.2, OP_Y - 0.2), 0.4, 0.4,
                                    boxstyle="circle,pad=0.02", facecolor="white",
                                    edgecolor=COMPUTE_COLOR if op.macs else "#555555",
                                    linewidth=1.0))
        ax.text(x, OP_Y, op.label, ha="center", va="center", fontsize=6.5)
        for t in op.inputs:
            _arrow(ax, pos[t.name], glyph)
        if op.output.name not in {t.name for t in op.inputs}:
            _arrow(ax, glyph, dst)
    ax.set_xlim(-0.9, width)
    ax.set_ylim(-0.05, 4.05)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{kernel.name}{subtitle}", fontsize=8, loc="left")


def machine_figure(report: "ProgramReport") -> Figure:
    kernels = report.program.kernels
    widths = [len(list(_flatten(k.body))) + 2 for k in kernels]
    fig = Figure(figsize=(min(max(widths) * 0.75, 18), 2.9 * len(kernels) + 0.6),
                 layout="constrained")
    axes = fig.subplots(len(kernels), 1, squeeze=False)[:, 0]
    for ax, r in zip(axes, report.kernels):
        k = r.kernel
        draw_kernel(ax, k, f"   {k.flops / 1e9:.2f} GFLOP, DRAM {k.dram_bytes / 1e6:.1f} MB, "
                           f"local {k.local_bytes / 1024:.1f} KiB, t_min "
                           f"{r.t_min_s * 1e6:.1f} us ({'memory' if r.memory_bound else 'compute'}"
                           f"-bound)")
    p = report.program
    fig.suptitle(f"{p.description or p.name} on {report.hardware.name}: T_min "
                 f"{report.t_min_s * 1e6:.1f} us, C_max {100 * report.c_max:.1f}%", fontsize=10)
    return fig
