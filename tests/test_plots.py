"""Plot commands: each writes an image, and the data behind it are checked with numbers."""
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import cli
import perfmodel
from matplotlib.text import Text
from perfmodel.analysis import c_max_at, mediant_c_max_at, sweep
from perfmodel.layer_intensity import layer_intensity
from perfmodel.plots import INTENSITY_FLOOR, ellipsize
from perfmodel.plots.roofline import amdahl_figure, roofline_figure
from perfmodel.plots.sweep import sweep_figure
from perfmodel.plots.waterline import waterline_figure

from helpers import TINY, write_spec

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def convnext():
    return perfmodel.analyze_spec("convnext_tiny", batch=8)


MAXVIT = "name: MaxViT-T\nmodel: torchvision.models:maxvit_t\ninput: [3, 224, 224]\nbatch: 2\n"


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """The issue's stack: a plain CNN, an MBConv net with near-zero-intensity kernels, and
    MaxViT with long module paths."""
    spec = write_spec(tmp_path_factory.mktemp("maxvit"), MAXVIT)
    return [perfmodel.analyze_spec(m, batch=2, hardware="h200-sxm")
            for m in ("resnet101", "efficientnet_b5", spec)]


def drawn_texts(fig) -> list[Text]:
    """The texts a reader sees: in the axes, titles, legends and the figure's own."""
    fig.draw_without_rendering()
    texts = list(fig.texts)  # the suptitle is among them
    for ax in fig.axes:
        texts += ax.texts + [ax.title, ax._left_title, ax._right_title]
        texts += ax.get_legend().get_texts() if ax.get_legend() else []
    for legend in fig.legends:
        texts += legend.get_texts()
    return [t for t in dict.fromkeys(texts) if t.get_visible() and t.get_text().strip()]


def assert_apart(texts):
    boxes = [(t.get_text(), t.get_window_extent()) for t in texts]
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"


def assert_inside(texts, box, pad=1.0):
    for t in texts:
        e = t.get_window_extent()
        assert (e.x0 >= box.x0 - pad and e.x1 <= box.x1 + pad and e.y0 >= box.y0 - pad
                and e.y1 <= box.y1 + pad), f"{t.get_text()!r} outside {box}"


def tick_labels(ax) -> list[str]:
    return [t.get_text() for axis in (ax.xaxis, ax.yaxis) for minor in (False, True)
            for t in axis.get_ticklabels(minor=minor) if t.get_text()]


def test_stacked_waterline_labels_stay_inside_and_apart(three):
    fig = waterline_figure(three)
    texts = drawn_texts(fig)
    assert_inside(texts, fig.bbox)
    assert_apart(texts)
    for ax in fig.axes:  # kernel labels (rotated) inside their own axes, short enough
        labels = [t for t in ax.texts if t.get_rotation() == 90]
        assert labels
        assert_inside(labels, ax.get_window_extent())
        assert all(len(t.get_text()) <= 28 for t in labels)
    assert len({ax.get_ylim() for ax in fig.axes}) == 1  # one intensity range for the stack
    assert ellipsize("blocks.0.layers.0.layers.MBconv.layers.conv_a.0", 18) == "blocks.0…conv_a.0"


def test_waterline_says_where_low_intensity_kernels_are_drawn(three):
    legend = " ".join(t.get_text() for t in drawn_texts(waterline_figure(three[1])))
    assert any(k.intensity < INTENSITY_FLOOR for k in three[1].kernels)
    assert f"drawn at {INTENSITY_FLOOR:g}" in legend


def test_roofline_labels_roofs_ticks_plainly_and_counts_kernels_without_ops(three):
    for result in three:
        fig = roofline_figure(result)
        texts = drawn_texts(fig)
        words = " ".join(t.get_text() for t in texts)
        assert "TFLOP/s" in words and "TB/s" in words  # both roofs named on the plot
        hidden = sum(k.intensity <= 0 for k in result.kernels)
        assert hidden and f"not shown: {hidden} kernels with 0 ops" in words
        labels = tick_labels(fig.axes[0])
        assert labels and not any("10^" in t or "×10" in t or "$" in t for t in labels)
        assert_inside(texts, fig.bbox)
        assert_apart(texts)


def test_amdahl_arrows_leave_the_dots_and_labels_clear_the_markers(three):
    fig = amdahl_figure(three, fuse_to=400)
    ax = fig.axes[0]
    texts = drawn_texts(fig)
    assert_inside(texts, fig.bbox)
    assert_apart(texts)
    dots = [line.get_xydata()[0] for line in ax.lines if line.get_marker() in ("o", "*")]
    arrows = [a for a in ax.texts if getattr(a, "arrow_patch", None) and not a.get_text()]
    assert len(arrows) == 3
    for arrow in arrows:  # each starts at a model's dot
        assert any(np.allclose(arrow.xyann, d) for d in dots)
    speedups = [t for t in ax.texts if t.get_text().startswith("x")]
    assert len(speedups) == 3
    for t in speedups:
        box = t.get_window_extent()
        assert not any(box.contains(*ax.transData.transform(d)) for d in dots)
    legend = fig.legends[0]
    assert not legend.get_title().get_text()
    assert "I_mem" in " ".join(t.get_text() for t in legend.get_texts())


def test_sweep_hardware_names_apart_and_off_the_curves(convnext):
    kernels = [k.kernel for k in convnext.kernels]
    op_bytes = np.logspace(1, 3.3, 20)
    marks = [perfmodel.load_hardware(h) for h in ("a5000-paper", "a100-sxm4-80gb", "h200-sxm",
                                                  "l4")]
    fig = sweep_figure([convnext], op_bytes, [sweep(kernels, op_bytes)], marks)
    ax = fig.axes[0]
    names = [t for t in ax.texts if any(hw.name in t.get_text() for hw in marks)]
    assert len(names) == 4
    assert_apart(drawn_texts(fig))
    top = ax.get_window_extent().y1
    assert all(t.get_window_extent().y0 >= top for t in names)  # above the axes, off the curves
    assert not any("×10" in t or "$" in t for t in tick_labels(ax))


def test_sweep_at_a5000_equals_waterline_c_max(convnext):
    kernels = [k.kernel for k in convnext.kernels]
    rho = perfmodel.load_hardware("a5000-paper").op_byte("float16")
    assert c_max_at(kernels, rho) == pytest.approx(convnext.totals.c_max, rel=1e-12)
    water, mediant = sweep(kernels, np.logspace(1, 3.3, 40))
    assert all(m >= w - 1e-12 for w, m in zip(water, mediant))  # the roofline never underestimates
    assert all(a >= b for a, b in zip(water, water[1:]))  # C_max falls as op:byte rises
    assert mediant_c_max_at(kernels, rho) == pytest.approx(convnext.totals.mediant_c_max)


def test_intensity_equals_eq_24_literal():
    n, h = 128, 56
    c = 64  # 3x3 conv, K = C, with bias: (2 NHWK CRS + K) / 2 (NHWC + NHWK + KCRS + K)
    ops = 2 * n * h * h * c * c * 9 + c
    elements = n * h * h * c * 2 + c * c * 9 + c
    assert layer_intensity("conv 3x3", c) == pytest.approx(ops / (2 * elements))
    # depthwise: T = 1
    ops = 2 * n * h * h * c * 9 + c
    elements = n * h * h * c * 2 + c * 9 + c
    assert layer_intensity("depthwise 3x3", c) == pytest.approx(ops / (2 * elements))
    # block-fused FFN (alpha 4): hidden tensor on chip; bytes = X, Z, U, a, V, b
    ops = 2 * (n * h * h * c * 4 * c) * 2 + 4 * c + c
    elements = 2 * n * h * h * c + 2 * 4 * c * c + 4 * c + c
    assert layer_intensity("FFN block-fused a=4", c) == pytest.approx(ops / (2 * elements))


def test_waterline_c_max_printed_equals_sweep(tmp_path):
    spec = write_spec(tmp_path, TINY)
    runner = CliRunner()
    water = runner.invoke(cli.cli, ["waterline", spec, "-o", str(tmp_path / "w.png")])
    swept = runner.invoke(cli.cli, ["sweep", spec, "--mark", "a5000-paper",
                                    "-o", str(tmp_path / "s.png")])
    assert water.exit_code == 0 and swept.exit_code == 0, swept.output
    c_water = re.search(r"C_max \(waterline\)\s+([\d.]+) %", water.output).group(1)
    c_sweep = re.search(r"a5000-paper ([\d.]+) ?%", swept.output).group(1)
    assert c_water == c_sweep
    assert (tmp_path / "s.png").stat().st_size > 10_000


@pytest.mark.parametrize("args", [
    ["roofline", "{spec}", "-o", "{out}"],
    ["amdahl", "{spec}", "--fuse-to", "400", "-o", "{out}"],
    ["intensity", "--channels", "8:64", "--batch", "2", "--resolution", "8", "-o", "{out}"],
])
def test_plot_commands_write_images(args, tmp_path):
    out = tmp_path / "fig.png"
    spec = write_spec(tmp_path, TINY)
    result = CliRunner().invoke(cli.cli, [a.format(spec=spec, out=out) for a in args])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000


def test_fuse_to_prints_amdahl_speedup(tmp_path):
    spec = write_spec(tmp_path, TINY)
    result = CliRunner().invoke(cli.cli, ["amdahl", spec, "--fuse-to", "1e6", "-o",
                                          str(tmp_path / "a.png")])
    r = perfmodel.analyze_spec(spec)
    t = r.totals
    # lifted far above the waterline, every kernel is compute-bound: T_min becomes N/R
    printed = float(re.search(r"speedup x([\d.]+)", result.output).group(1))
    assert printed == pytest.approx(t.t_min_s / t.t_ideal_s, rel=5e-3)


def test_sweep_uses_the_byte_model_it_was_asked_for(tmp_path):
    args = ["resnet50", "-H", "h200-sxm", "--l2-carry", "--batch", "8"]
    water = CliRunner().invoke(cli.cli, ["waterline", *args, "-o", str(tmp_path / "w.png")])
    swept = CliRunner().invoke(cli.cli, ["sweep", *args, "--mark", "h200-sxm",
                                         "-o", str(tmp_path / "s.png")])
    c_water = re.search(r"C_max \(waterline\)\s+([\d.]+) %", water.output).group(1)
    assert re.search(r"h200-sxm ([\d.]+) ?%", swept.output).group(1) == c_water


def gap_points():
    """Two families, three sizes, each measured eager and compiled: two rows per accuracy."""
    from perfmodel.gap import GapPoint

    points = []
    for family, base in (("ResNet", 1.0), ("EfficientNet", 0.2)):
        for i, accuracy in enumerate((77.0, 80.0, 83.0)):
            ideal = base * (i + 1)
            for backend, slow in (("eager", 30), ("inductor", 18)):
                points.append(GapPoint(ideal, ideal * 4, ideal * slow, model=f"{family}-{i}",
                                       family=family, backend=backend, accuracy=accuracy,
                                       gmacs_per_image=ideal * 9))
    return points


def test_gap_has_one_legend_for_all_panels_and_keys_backends_by_marker():
    from perfmodel.plots.gap import gap_figure

    fig = gap_figure(gap_points(), peak_ops=989e12, batch=128, title="gap")
    texts = drawn_texts(fig)
    assert_apart(texts)
    assert_inside(texts, fig.bbox)
    (legend,) = fig.legends  # one legend for the figure, outside every panel
    words = [t.get_text() for t in legend.get_texts()]
    assert {"ResNet", "EfficientNet", "eager, measured", "inductor, measured"} <= set(words)
    assert not any(ax.get_legend() for ax in fig.axes)
    b = fig.axes[1]  # colour is the family, marker the backend
    measured = [line for line in b.lines if len(line.get_xdata()) == 3]
    assert len({line.get_color() for line in measured}) == 2
    assert len({line.get_marker() for line in measured}) == 2
    assert len({(line.get_color(), line.get_marker()) for line in measured}) == 4
    c, d = fig.axes[2], fig.axes[3]
    assert c.get_xscale() == "log" and d.get_xscale() == "log"  # ideal and T_min spread out
    for ax in fig.axes:
        assert not any("×10" in t or "$" in t for t in tick_labels(ax))


def test_gap_panel_a_draws_one_line_a_family_whatever_the_backends():
    """A model measured only on another backend (EfficientNet-0 fused, the rest compiled) stays on its family's line
    in panel (a): size and accuracy are the model's, not the backend's."""
    from dataclasses import replace

    from perfmodel.plots.gap import gap_figure

    points = [p for p in gap_points() if p.model != "EfficientNet-0" or p.backend == "eager"]
    points = [replace(p, backend="cuda_kernels") if p.model == "EfficientNet-0" else p for p in points]
    fig = gap_figure(points, peak_ops=989e12, batch=128, title="gap", panels=("a",))
    lines = [line for line in fig.axes[0].lines if len(line.get_xdata())]
    assert sorted(len(line.get_xdata()) for line in lines) == [3, 3]  # ResNet's three, EfficientNet's three
    efficientnet = next(line for line in lines if line.get_xdata()[0] == 0.2 * 9)
    assert list(efficientnet.get_xdata()) == [0.2 * 9, 0.4 * 9, 0.2 * 3 * 9]
    assert list(efficientnet.get_ydata()) == [77.0, 80.0, 83.0]


@pytest.mark.parametrize("panel", ["a", "b", "c", "d"])
def test_each_gap_panel_alone_has_its_legend(panel):
    from perfmodel.plots.gap import gap_figure

    fig = gap_figure(gap_points(), peak_ops=989e12, batch=128, title="gap", panels=(panel,))
    (legend,) = fig.legends
    assert "ResNet" in [t.get_text() for t in legend.get_texts()]
    assert_apart(drawn_texts(fig))


def test_compare_axes_start_near_the_fastest_kernel_and_the_waterline_is_named():
    from perfmodel.compare import compare
    from perfmodel.measure import load_measurement
    from perfmodel.plots.compare import compare_figure

    m = load_measurement(EXAMPLES / "measurements" / "h200_efficientnet_b0_eager_kernels.json")
    result = perfmodel.analyze_spec("efficientnet_b0", batch=m.batch, hardware="h200-sxm",
                                    plan="op")
    cmp = compare(result, m)
    fig = compare_figure(cmp)
    bars, scatter = fig.axes
    fastest = min(x.measured_ms for x in cmp.modules)
    assert min(x.predicted_ms for x in cmp.modules) < fastest / 100  # SE scaling: ~1e-6 ms
    assert fastest / 10 < scatter.get_xlim()[0] < fastest  # not down to 1e-6 ms
    assert scatter.get_ylim()[0] == scatter.get_xlim()[0]
    words = " ".join(t.get_text() for t in drawn_texts(fig))
    assert "op:byte" in words and "drawn at the edge" in words and "beyond t_min" in words
    assert_apart(drawn_texts(fig))
    assert_inside(drawn_texts(fig), fig.bbox)


def test_kernels_figure_marks_times_without_bars_from_an_arbitrary_floor():
    from perfmodel.kernel_results import load_kernel_results
    from perfmodel.plots.kernels import kernels_figure

    hw = perfmodel.load_hardware("h200-sxm")
    cases = load_kernel_results(EXAMPLES / "measurements" / "cuda_kernels_h200.json", hw)
    fig = kernels_figure(cases, hw.name)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and not ax.patches  # markers, no bars to start anywhere
    fused = next(line for line in ax.lines if line.get_label() == "fused kernel")
    assert np.allclose(fused.get_xdata(), [c.median_us["cuda_kernels"] for c in cases])
    texts = drawn_texts(fig)
    assert_apart(texts)
    assert_inside(texts, fig.bbox)
    assert not any("×10" in t or "$" in t for t in tick_labels(ax))


def _segments(ax):
    """Straight arrows as (start, end) in data coordinates."""
    return [(np.array(t.xyann), np.array(t.xy)) for t in ax.texts
            if getattr(t, "arrow_patch", None) is not None
            and "rad=0" in t.arrowprops.get("connectionstyle", "arc3,rad=0")]


def _cross(a, b) -> bool:
    side = lambda p, q, r: (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])  # noqa
    (p1, p2), (p3, p4) = a, b
    return (side(p3, p4, p1) * side(p3, p4, p2) < -1e-12
            and side(p1, p2, p3) * side(p1, p2, p4) < -1e-12)


@pytest.mark.parametrize("name", ["convfirst_fused", "convfirst_split", "mbconv_two_pass",
                                  "convfirst_layer"])
def test_machine_diagram_reads_cleanly(name):
    from matplotlib.patches import Rectangle
    from perfmodel.machine_programs import build_program
    from perfmodel.plots.machine import machine_figure

    report = build_program(name).analyze(perfmodel.load_hardware("h200-sxm"))
    fig = machine_figure(report)
    texts = drawn_texts(fig)
    assert_apart(texts)  # loop labels on their own rows, tensor names in their boxes
    assert_inside(texts, fig.bbox)
    crossings = 0
    for ax in fig.axes:
        segments = _segments(ax)
        crossings += sum(_cross(a, b) for i, a in enumerate(segments) for b in segments[i + 1:])
        frames = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
        glyphs = [t.get_position()[0] for t in ax.texts if not getattr(t, "arrow_patch", None)
                  and t.get_position()[1] == pytest.approx(1.35)]
        assert frames and glyphs
        for frame in frames:  # no empty loop: an operation in every frame
            assert any(frame.get_x() < x < frame.get_x() + frame.get_width() for x in glyphs)
        labels = [t for t in ax.texts if "×" in t.get_text() and "\n" not in t.get_text()]
        for label, frame in zip(labels, frames):  # loop labels fit their frames
            box, inner = label.get_window_extent(), frame.get_window_extent()
            assert inner.x0 <= box.x0 and box.x1 <= inner.x1, label.get_text()
    assert crossings <= 2  # 26, 35, 22 and 11 when tensors were packed to the left
    if len(report.kernels) == 1:  # the axes title does not repeat the figure's
        subtitle = fig.axes[0].get_title(loc="left")
        assert "t_min" not in subtitle and report.kernels[0].kernel.name not in subtitle


def test_gap_says_how_many_models_have_no_accuracy():
    from dataclasses import replace

    from perfmodel.plots.gap import gap_figure

    points = [replace(p, accuracy=None) if p.model == "ResNet-0" else p for p in gap_points()]
    fig = gap_figure(points, peak_ops=989e12, batch=128, title="gap", panels="abcd")
    words = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "not shown: 1 model without a top-1 accuracy" in words
    # by default the model without accuracy gets panel e (latency vs GMACs) instead
    fig = gap_figure(points, peak_ops=989e12, batch=128, title="gap")
    assert [a.get_title()[:3] for a in fig.axes if a.get_visible()] == [
        "(a)", "(b)", "(c)", "(d)", "(e)"]


def test_an_unwritable_figure_path_is_bad_input_before_any_analysis(tmp_path, capsys):
    from helpers import run_main

    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    target = blocker / "w.png"
    code, out, err = run_main(["waterline", "resnet50", "-o", str(target)], capsys)
    assert code == 2 and out == ""  # refused before the model is analysed
    assert err.startswith(f"error: {target}: field '--output': cannot create the folder")
