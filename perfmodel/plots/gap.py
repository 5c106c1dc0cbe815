"""The efficiency-gap plot (paper Figure 1, panels a-d) with the waterline decomposition,
and panel e, latency against arithmetic complexity, which needs no accuracy: untrained
networks (the zoo's ConvFirstNets) are drawn there.

Colour is the model family; marker shape and line style are the backend with its settings
(eager, inductor, cuda_kernels ...); open markers are predictions (ideal latency, the
waterline bound), filled ones measurements. One legend serves every panel.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from . import PALETTE, plain_log_ticks

if TYPE_CHECKING:
    from ..gap import GapPoint

PANELS = ("a", "b", "c", "d", "e")
ACCURACY_PANELS = ("a", "b", "c", "d")
# marker and line style per backend, the same in every figure; others take the spares in turn
BACKEND_STYLE = {"eager": ("o", "-"), "inductor": ("s", "--"), "cuda_kernels": ("D", "-.")}
SPARE_STYLES = (("^", ":"), ("v", "-."), ("P", ":"), ("X", "--"), ("*", "-"), ("h", ":"))
OPEN = dict(markerfacecolor="white", markeredgewidth=1.1)


class Styles:
    """Colours of families and marker/line styles of backends, fixed for the whole figure."""

    def __init__(self, points: "Sequence[GapPoint]"):
        families = list(dict.fromkeys(p.family for p in points))
        backends = list(dict.fromkeys(_setting(p) for p in points))
        self.color = {f: PALETTE[i % len(PALETTE)] for i, f in enumerate(families)}
        others = [b for b in backends if b not in BACKEND_STYLE]
        self.style = {b: BACKEND_STYLE.get(b) or SPARE_STYLES[others.index(b) % len(SPARE_STYLES)]
                      for b in backends}

    def series(self, points):
        """(family, backend, members sorted by size) for every line to draw."""
        groups: dict[tuple[str, str], list] = {}
        for p in points:
            groups.setdefault((p.family, _setting(p)), []).append(p)
        for (family, backend), members in groups.items():
            yield family, backend, sorted(members, key=lambda p: p.gmacs_per_image)

    def measured(self, family: str, backend: str) -> dict:
        marker, line = self.style[backend]
        return dict(color=self.color[family], marker=marker, linestyle=line, markersize=5.5)


def _setting(p) -> str:
    """What tells two measurements of a model apart: the backend with its settings."""
    return p.setting or p.backend


def default_panels(points: "Sequence[GapPoint]") -> tuple[str, ...]:
    """Panels a-d (accuracy on the y axis) for trained models, and e when some model has no
    accuracy; only e when none has."""
    ranked = [p for p in points if p.accuracy is not None]
    if len(ranked) == len(points):
        return ACCURACY_PANELS
    return PANELS if ranked else ("e",)


def _models(points):
    """One point per model (backends share size, accuracy and predictions)."""
    return list({p.model: p for p in points}.values())


def _panel_a(ax, points, st: Styles, peak_ops: float, batch: int):
    # one line a family: size and accuracy do not depend on the backend a model was measured with
    families: dict[str, list] = {}
    for p in _models(points):
        families.setdefault(p.family, []).append(p)
    for family, members in families.items():
        members.sort(key=lambda p: p.gmacs_per_image)
        ax.plot([p.gmacs_per_image for p in members], [p.accuracy for p in members], marker="o",
                color=st.color[family], markersize=5)
    ax.set_xlabel("GMACs per image")
    ax.set_title("(a) accuracy vs arithmetic complexity", fontsize=9)
    # ideal latency N/R of a batch is proportional to MACs: a second axis on the same scale
    scale = 2e9 * batch / peak_ops * 1e3
    twin = ax.secondary_xaxis("top", functions=(lambda g: g * scale, lambda t: t / scale))
    twin.set_xlabel(f"ideal latency N/R (ms, batch {batch})", fontsize=8)


def _panel_b(ax, points, st: Styles):
    for family, backend, members in st.series(points):
        ax.plot([p.t_actual_ms for p in members], [p.accuracy for p in members],
                **st.measured(family, backend))
    ax.set_xlabel("measured latency (ms)")
    ax.set_title("(b) accuracy vs measured latency", fontsize=9)


def _panel_c(ax, points, st: Styles):
    """Ideal, waterline and measured latency on a log axis: every factor of the gap shows."""
    for p in points:
        ax.plot([p.t_ideal_ms, p.t_actual_ms], [p.accuracy] * 2, color=st.color[p.family],
                linewidth=0.8, alpha=0.45)
    for p in _models(points):
        ax.plot([p.t_min_ms], [p.accuracy], marker="|", markersize=10, color="black")
        ax.plot([p.t_ideal_ms], [p.accuracy], marker="o", color=st.color[p.family],
                markersize=5.5, **OPEN)
    _estimates(ax, points, st, lambda p: (p.t_estimate_ms, p.accuracy))
    for family, backend, members in st.series(points):
        ax.plot([p.t_actual_ms for p in members], [p.accuracy for p in members],
                **st.measured(family, backend))
    ax.set_xscale("log")
    plain_log_ticks(ax, "x")
    ax.set_xlabel("latency (ms, log): ideal N/R, waterline T_min, estimate, measured")
    ax.set_title("(c) ideal, waterline and measured latency", fontsize=9)


def _estimates(ax, points, st: Styles, where) -> None:
    """The calibrated estimate of each measurement's runtime plan, an x in the family's colour
    at `where(point)` (x, y), where the hardware has a calibration."""
    for p in points:
        if p.t_estimate_ms:
            x, y = where(p)
            ax.plot([x], [y], marker="x", color=st.color[p.family], markersize=6,
                    markeredgewidth=1.3, linestyle="none")


def _panel_d(ax, points, st: Styles):
    """The gap as efficiencies: C = C_max x C_impl, read off the axis, no labels needed."""
    for p in points:
        ax.plot([100 * p.c, 100 * p.c_max], [p.accuracy] * 2, color=st.color[p.family],
                linewidth=0.8, alpha=0.45)
    for p in _models(points):
        ax.plot([100 * p.c_max], [p.accuracy], marker="o", color=st.color[p.family],
                markersize=5.5, **OPEN)
    for family, backend, members in st.series(points):
        ax.plot([100 * p.c for p in members], [p.accuracy for p in members],
                **st.measured(family, backend))
    ax.set_xscale("log")
    plain_log_ticks(ax, "x")
    ax.set_xlabel("computational efficiency (%, log): bound C_max, measured C")
    ax.set_title("(d) efficiency gap: C = C_max x C_impl", fontsize=9)


def _panel_e(ax, points, st: Styles):
    """Latency against GMACs per image, every model (accuracy not needed): the ideal N/R and
    the waterline T_min predicted, each measurement beside them."""
    for p in points:
        ax.plot([p.gmacs_per_image] * 2, [p.t_ideal_ms, p.t_actual_ms], color=st.color[p.family],
                linewidth=0.8, alpha=0.45)
    _estimates(ax, points, st, lambda p: (p.gmacs_per_image, p.t_estimate_ms))
    for p in _models(points):
        ax.plot([p.gmacs_per_image], [p.t_min_ms], marker="_", markersize=12, color="black")
        ax.plot([p.gmacs_per_image], [p.t_ideal_ms], marker="o", color=st.color[p.family],
                markersize=5.5, **OPEN)
    settings = list(st.style)
    for family, backend, members in st.series(points):
        # dodge: each setting a little to the side, so measurements of one model do not hide
        # each other (the x axis is logarithmic, so a factor is a fixed offset)
        dodge = 1 + 0.025 * (settings.index(backend) - (len(settings) - 1) / 2)
        ax.plot([p.gmacs_per_image * dodge for p in members], [p.t_actual_ms for p in members],
                **{**st.measured(family, backend), "linestyle": "none"})
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax, "x")
    plain_log_ticks(ax, "y")
    ax.set_xlabel("GMACs per image (log)")
    ax.set_ylabel("latency (ms, log)")
    untrained = sorted({p.model for p in points if p.accuracy is None})
    note = f"; untrained: {', '.join(untrained)}" if untrained else ""
    ax.set_title(f"(e) latency vs complexity{note}", fontsize=9)


def _legend(fig, points, st: Styles, panels, unranked: int) -> None:
    handles = [Line2D([], [], color=c, linewidth=2, label=f) for f, c in st.color.items()]
    if set(panels) & {"b", "c", "d", "e"}:
        handles += [Line2D([], [], color="black", marker=m, linestyle=ls, markersize=5.5,
                           label=f"{b}, measured") for b, (m, ls) in st.style.items()]
    if "c" in panels or "e" in panels:
        which = ", ".join(x for x in ("c", "e") if x in panels)
        handles.append(Line2D([], [], color="black", marker="o", linestyle="none",
                              markersize=5.5, label=f"ideal latency N/R ({which})", **OPEN))
        handles.append(Line2D([], [], color="black", marker="|" if "c" in panels else "_",
                              linestyle="none", markersize=10, label=f"waterline T_min ({which})"))
    if ("c" in panels or "e" in panels) and any(p.t_estimate_ms for p in points):
        which = ", ".join(x for x in ("c", "e") if x in panels)
        handles.append(Line2D([], [], color="black", marker="x", linestyle="none",
                              markersize=6, label=f"calibrated estimate ({which})"))
    if "d" in panels:
        handles.append(Line2D([], [], color="black", marker="o", linestyle="none",
                              markersize=5.5, label="waterline bound C_max (d)", **OPEN))
    if unranked and "e" not in panels:  # panels a-d have top-1 accuracy on the y axis
        handles.append(Line2D([], [], linestyle="none",
                              label=f"not shown: {unranked} model{'s' * (unranked > 1)} "
                                    "without a top-1 accuracy"))
    fig.legend(handles=handles, loc="outside lower center",
               ncol=min(len(handles), 5 if len(panels) > 1 else 3),
               fontsize=7.5, frameon=False)


def gap_figure(points: "Sequence[GapPoint]", *, peak_ops: float, batch: int, title: str,
               panels: Sequence[str] | None = None) -> Figure:
    panels = tuple(panels or default_panels(points))
    n = len(panels)
    cols = 2 if n > 1 else 1
    rows = (n + 1) // 2 if n > 1 else 1
    fig = Figure(figsize=(5.2 * cols, 3.9 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    st = Styles(points)
    unranked = len({p.model for p in points if p.accuracy is None})  # untrained networks
    ranked = [p for p in points if p.accuracy is not None]
    draw = {"a": lambda ax: _panel_a(ax, ranked, st, peak_ops, batch),
            "b": lambda ax: _panel_b(ax, ranked, st),
            "c": lambda ax: _panel_c(ax, ranked, st),
            "d": lambda ax: _panel_d(ax, ranked, st),
            "e": lambda ax: _panel_e(ax, points, st)}
    for ax, panel in zip(axes, panels):
        draw[panel](ax)
        if panel in ACCURACY_PANELS:
            ax.set_ylabel("ImageNet top-1 (%)")
        ax.grid(linewidth=0.3, alpha=0.5)
    for ax in axes[n:]:
        ax.set_visible(False)
    _legend(fig, points, st, panels, unranked)
    fig.suptitle(title, fontsize=10)
    return fig
