"""Tensor-machine diagrams in the spirit of paper Figures 5 and 7.

Memory spaces are horizontal regions (DRAM, global, local); tensors are boxes in their
region; operations are round glyphs; arrows move data; loops are dashed frames.

Layout: operations stand left to right in program order. The tensors an operation brings in
are placed in columns around it, one column per chain of copies (DRAM X over local X_t; a
weight over its global cache), so that loads and stores run straight up and down and each
operation's arrows stay short. A loop that only moves data gets a small move glyph, so that
no frame is empty.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Rectangle

from ..tensor_machine import DRAM, GLOBAL, LOCAL, Loop
from . import COMPUTE_COLOR, MEMORY_COLOR

if TYPE_CHECKING:
    from ..tensor_machine import Kernel, Op, ProgramReport, Tensor

MOVES = ("load", "store", "copy")
OP_Y = 1.35  # the row of operation glyphs, in the local region
LOCAL_TENSOR_Y = 0.45
LABEL_ROW = 0.2  # height of one loop label inside the local region
REGION_COLOR = {DRAM: "#f2f2f2", GLOBAL: "#e3f1fa", LOCAL: "#fdf0dc"}
UNIT_INCHES = 0.75
LEFT = -1.3  # the regions start here; their names sit left of the first column (x = 0)


@dataclass
class Layout:
    ops: list = field(default_factory=list)  # (op, loops around it, x) in program order
    pos: dict = field(default_factory=dict)  # tensor name -> (x, y)
    placed_by: dict = field(default_factory=dict)  # tensor name -> index into ops
    depth: int = 0  # deepest loop nesting

    @property
    def local_top(self) -> float:
        return OP_Y + 0.4 + LABEL_ROW * max(self.depth, 1)

    @property
    def width(self) -> float:
        return max([x for x, _ in self.pos.values()] + [x for *_, x in self.ops] + [1.0]) + 1

    def band(self, space: str) -> tuple[float, float]:
        """Bottom and height of a memory space's region."""
        top = self.local_top
        return {LOCAL: (0.0, top), GLOBAL: (top, 1.0), DRAM: (top + 1.0, 1.0)}[space]

    def tensor_y(self, space: str) -> float:
        return LOCAL_TENSOR_Y if space == LOCAL else self.band(space)[0] + 0.5


def _flatten(steps, path=()):
    for s in steps:
        if isinstance(s, Loop):
            yield from _flatten(s.body, path + (s,))
        else:
            yield s, path


def _partners(steps) -> dict[str, list["Tensor"]]:
    """Tensors joined by a load or store between memory spaces: they share a column."""
    out: dict[str, list] = {}
    for op, _ in steps:
        if op.kind in ("load", "store") and op.inputs[0].space != op.output.space:
            a, b = op.inputs[0], op.output
            out.setdefault(a.name, []).append(b)
            out.setdefault(b.name, []).append(a)
    return out


def _columns(tensor: "Tensor", partners, taken: set[str]) -> list[dict[str, str]]:
    """The new columns for `tensor` and its chain of copies: one tensor per space a column."""
    columns: list[dict[str, str]] = []
    todo = [(tensor, None)]
    while todo:
        t, column = todo.pop(0)
        if t.name in taken:
            continue
        if column is None or t.space in column:
            column = {}
            columns.append(column)
        column[t.space] = t.name
        taken.add(t.name)
        todo += [(p, column) for p in partners.get(t.name, [])]
    return columns


def _crosses(column: dict[str, str]) -> bool:
    return LOCAL in column and len(column) > 1


def layout(kernel: "Kernel") -> Layout:
    steps = list(_flatten(kernel.body))
    computing = {id(loop) for op, path in steps if op.kind not in MOVES for loop in path}
    slotted = [(op, path) for op, path in steps
               if op.kind not in MOVES or (path and id(path[-1]) not in computing)]
    partners, tensors = _partners(steps), kernel.tensors()
    out = Layout(depth=max((len(path) for _, path in steps), default=0))
    taken: set[str] = set()
    col, x_prev, path_prev = 0.0, -1.0, None
    crossing: list[float] = []  # columns whose load or store runs through the op row
    for i, (op, path) in enumerate(slotted):
        if path_prev is not None and path != path_prev:
            x_prev += 0.25  # a little air where a loop ends or begins: frames stay apart
        columns = [c for t in op.inputs + (op.output,) for c in _columns(t, partners, taken)]
        k = len(columns)
        start = max(col, x_prev + 1 - (k - 1) / 2)
        x = start + (k - 1) / 2 if k else x_prev + 1
        if k % 2 and _crosses(columns[k // 2]):
            start += 0.5  # keep the middle column's move off this op's glyph
        while any(abs(x - c) < 0.3 for c in crossing):
            x += 0.5  # nor may an earlier one run through it
        for j, column in enumerate(columns):
            for name in column.values():
                out.pos[name] = (start + j, None)
                out.placed_by[name] = i
            if _crosses(column):
                crossing.append(start + j)
        col = max(start + k, x + 0.5)
        out.ops.append((op, path, x))
        x_prev, path_prev = x, path
    out.pos = {n: (x, out.tensor_y(tensors[n].space)) for n, (x, _) in out.pos.items()}
    return out


BOX_HALF = (0.44, 0.30)  # tensor boxes: half width and half height, with their rounding
GLYPH_RADIUS = 0.22


def _tensor_box(ax, name, shape, x, y, weight):
    label = f"{name}\n{'×'.join(map(str, shape))}"
    ax.add_patch(FancyBboxPatch((x - 0.42, y - 0.28), 0.84, 0.56, boxstyle="round,pad=0.02",
                                facecolor="white", edgecolor="#7a7a7a" if weight else "black",
                                linewidth=0.8, linestyle="--" if weight else "-", zorder=2))
    ax.text(x, y, label, ha="center", va="center", fontsize=5.6, zorder=3)


def _edge(centre, towards, glyph: bool):
    """Where the line from `centre` to `towards` leaves a tensor box (or an op glyph)."""
    dx, dy = towards[0] - centre[0], towards[1] - centre[1]
    if glyph:
        n = (dx * dx + dy * dy) ** 0.5 or 1.0
        return centre[0] + GLYPH_RADIUS * dx / n, centre[1] + GLYPH_RADIUS * dy / n
    t = min(BOX_HALF[0] / abs(dx) if dx else float("inf"),
            BOX_HALF[1] / abs(dy) if dy else float("inf"))
    return centre[0] + t * dx, centre[1] + t * dy


def _arrow(ax, a, b, color="#444444", *, glyph_a=False, glyph_b=False):
    """An arrow from the edge of `a` to the edge of `b` (tensor boxes unless glyph_*)."""
    ax.annotate("", xy=_edge(b, a, glyph_b), xytext=_edge(a, b, glyph_a), zorder=4,
                arrowprops=dict(arrowstyle="-|>", color=color, linewidth=0.6, shrinkA=0,
                                shrinkB=0, mutation_scale=7))


def _move(ax, op: "Op", src, dst):
    """A data move: straight between spaces; within local memory an arc from the top of one
    box to the top of the other, over the tensors between them."""
    color = MEMORY_COLOR if DRAM in (op.inputs[0].space, op.output.space) else "#777777"
    if abs(src[1] - dst[1]) > 1e-9:
        _arrow(ax, src, dst, color)
        return
    span = max(abs(dst[0] - src[0]), 1.0)
    top, side = BOX_HALF[1], 0.2 if dst[0] > src[0] else -0.2  # off the boxes' centre lines
    ax.annotate("", xy=(dst[0] - side, dst[1] + top), xytext=(src[0] + side, src[1] + top),
                zorder=4,
                arrowprops=dict(arrowstyle="-|>", color=color, linewidth=0.6, shrinkA=0,
                                shrinkB=0, mutation_scale=7, connectionstyle=
                                f"arc3,rad={-0.7 / span if dst[0] > src[0] else 0.7 / span}"))


def _regions(ax, lay: Layout) -> None:
    for space in (DRAM, GLOBAL, LOCAL):
        y0, height = lay.band(space)
        ax.add_patch(Rectangle((LEFT, y0), lay.width - LEFT - 0.2, height, edgecolor="none",
                               facecolor=REGION_COLOR[space], zorder=0))
        ax.text(LEFT + 0.05, y0 + height - 0.08, space, fontsize=7, va="top", style="italic",
                color="#555555")


def _loops(ax, lay: Layout) -> list:
    """Dashed frames over the slots of each loop's operations and the local tensors they bring
    in; nested loops inset, each label on its own row. Returns (label, left, right, loop)."""
    spans: dict[int, tuple[Loop, int, list[float]]] = {}
    for i, (_, path, x) in enumerate(lay.ops):
        own = [lay.pos[n][0] for n, j in lay.placed_by.items()
               if j == i and lay.pos[n][1] == LOCAL_TENSOR_Y]
        for depth, loop in enumerate(path):
            spans.setdefault(id(loop), (loop, depth, []))[2].extend([x] + own)
    labels = []
    for loop, depth, xs in spans.values():
        inset = 0.08 * depth
        top = lay.local_top - 0.05 - LABEL_ROW * depth
        left, right = min(xs) - 0.5 + inset, max(xs) + 0.5 - inset
        ax.add_patch(Rectangle((left, 0.05 + 0.04 * depth), right - left,
                               top - 0.05 - 0.04 * depth, fill=False, linestyle=(0, (4, 2)),
                               edgecolor="#333333", linewidth=0.7, zorder=1))
        labels.append((ax.text(left + 0.05, top - 0.03, f"for {loop.name} ×{loop.trips}",
                               fontsize=5.6, va="top", color="#333333"), left, right, loop))
    return labels


def _fit_loop_labels(ax, labels) -> None:
    """Shorten a loop's label until it fits its frame (call after the layout is drawn)."""
    for text, left, right, loop in labels:
        room = ax.transData.transform((right, 0))[0] - ax.transData.transform((left, 0))[0] - 4
        for option in (f"{loop.name} ×{loop.trips}", f"×{loop.trips}"):
            if text.get_window_extent().width <= room:
                break
            text.set_text(option)


def _glyph(ax, x: float, op: "Op") -> None:
    if op.kind in MOVES:  # a loop of moves only: the move as a small box
        ax.add_patch(FancyBboxPatch((x - 0.22, OP_Y - 0.13), 0.44, 0.26,
                                    boxstyle="round,pad=0.02", facecolor="white",
                                    edgecolor="#777777", linewidth=0.8, zorder=2))
        ax.text(x, OP_Y, op.kind, ha="center", va="center", fontsize=5.6, zorder=3)
        return
    ax.add_patch(FancyBboxPatch((x - 0.2, OP_Y - 0.2), 0.4, 0.4, boxstyle="circle,pad=0.02",
                                facecolor="white", linewidth=1.0, zorder=2,
                                edgecolor=COMPUTE_COLOR if op.macs else "#555555"))
    ax.text(x, OP_Y, op.label, ha="center", va="center", fontsize=6.5, zorder=3)


def draw_kernel(ax, kernel: "Kernel", subtitle: str = "") -> list:
    """Draw `kernel` on `ax`; returns its loop labels for _fit_loop_labels."""
    lay = layout(kernel)
    _regions(ax, lay)
    tensors = kernel.tensors()
    for name, (x, y) in lay.pos.items():
        _tensor_box(ax, name, tensors[name].shape, x, y, tensors[name].weight)
    labels = _loops(ax, lay)
    slotted = {id(op) for op, _, _ in lay.ops}
    for op, _ in _flatten(kernel.body):
        if op.kind in MOVES and id(op) not in slotted:
            _move(ax, op, lay.pos[op.inputs[0].name], lay.pos[op.output.name])
    for op, _, x in lay.ops:
        glyph = (x, OP_Y)
        _glyph(ax, x, op)
        for t in op.inputs:
            _arrow(ax, lay.pos[t.name], glyph, glyph_b=True)
        if op.output.name not in {t.name for t in op.inputs}:
            _arrow(ax, glyph, lay.pos[op.output.name], glyph_a=True)
    ax.set_xlim(LEFT - 0.1, lay.width)
    ax.set_ylim(-0.05, lay.band(DRAM)[0] + 1.05)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(subtitle or kernel.name, fontsize=8, loc="left")
    return labels


def _stats(r) -> str:
    k = r.kernel
    return (f"{k.flops / 1e9:.2f} GFLOP, DRAM {k.dram_bytes / 1e6:.1f} MB, local "
            f"{k.local_bytes / 1024:.1f} KiB, {'memory' if r.memory_bound else 'compute'}-bound")


def machine_figure(report: "ProgramReport") -> Figure:
    kernels = report.program.kernels
    lays = [layout(k) for k in kernels]
    width = max(lay.width for lay in lays) - LEFT
    heights = [lay.band(DRAM)[0] + 1.1 for lay in lays]
    scale = min(UNIT_INCHES, 18 / width)
    fig = Figure(figsize=(max(width * scale, 6), sum(heights) * scale + 0.5 * len(kernels) + 0.5),
                 layout="constrained")
    axes = fig.subplots(len(kernels), 1, squeeze=False, height_ratios=heights)[:, 0]
    single = len(kernels) == 1  # then the figure's title already names the kernel and T_min
    labels = [(ax, draw_kernel(ax, r.kernel, _stats(r) if single else
                               f"{r.kernel.name}\n{_stats(r)}, t_min {r.t_min_s * 1e6:.1f} us"))
              for ax, r in zip(axes, report.kernels)]
    p = report.program
    fig.suptitle(f"{p.description or p.name} on {report.hardware.name}: T_min "
                 f"{report.t_min_s * 1e6:.1f} us, C_max {100 * report.c_max:.1f}%", fontsize=10)
    fig.draw_without_rendering()
    for ax, loop_labels in labels:
        _fit_loop_labels(ax, loop_labels)
    return fig
