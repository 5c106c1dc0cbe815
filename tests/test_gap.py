"""Measurement files and the efficiency-gap plot, from small files made for the test."""
import json

import pytest
from click.testing import CliRunner

import cli
from perfmodel.errors import InputError
from perfmodel.measure import load_measurement

from helpers import DATA, make_case

R = 989.4e12  # h200-sxm float16 peak


def tiny_flops(width, batch=32):
    # conv 3->w 3x3 at 128x128 (BN folded: w bias adds), then linear w->10 with bias
    return 2 * batch * (128 * 128 * width * 27 + width * 10) + width + 10


def test_gap_command_numbers_and_plot(tmp_path):
    files = [str(make_case(tmp_path, w, acc, 0.5)) for w, acc in ((32, 50.0), (64, 60.0))]
    out = tmp_path / "gap.png"
    result = CliRunner().invoke(cli.cli, ["gap", *files, "-H", "h200-sxm", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 20_000
    line = next(l for l in result.output.splitlines() if l.startswith("Tiny-W64"))
    ideal_ms = tiny_flops(64) / R * 1e3
    assert f" {ideal_ms:.4g} " in line  # 0.001831 ms
    assert f" {100 * ideal_ms / 0.5:.3g} % " in line  # C = t_ideal / t_actual = 0.366 %


@pytest.mark.parametrize("panel", ["a", "d"])
def test_single_panel(tmp_path, panel):
    f = str(make_case(tmp_path, 8, 50.0, 0.2))
    out = tmp_path / f"gap_{panel}.svg"
    result = CliRunner().invoke(cli.cli, ["gap", f, "--panel", panel, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<?xml")


def test_measurement_validation(tmp_path):
    path = make_case(tmp_path, 8, 50.0, 0.02)
    data = json.loads(path.read_text())
    data["results"]["latency_ms"]["p20"] = 1.0  # above the median
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="field 'results.latency_ms': expected 0 < p20"):
        load_measurement(path)
    data["workload"]["backend"] = "tensorrt"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="unknown backend 'tensorrt'"):
        load_measurement(path)


def test_accuracy_from_torchvision_metadata():
    from perfmodel.gap import accuracy_of, family_of
    from perfmodel.spec import load_spec

    assert accuracy_of(load_spec("efficientnet_b5")) == 83.444  # weights at 456 px
    assert family_of("EfficientNet-B5") == "EfficientNet"
    assert family_of("ResNeXt-101 32x8d") == "ResNeXt"


def test_untrained_models_go_on_the_latency_panel(tmp_path):
    """A model without accuracy (e.g. an untrained ConvFirstNet) is drawn on panel e,
    latency against GMACs; with trained models beside it, the figure has panels a-e."""
    from perfmodel.gap import gap_point
    from perfmodel.measured import check_measurements
    from perfmodel.plots.gap import default_panels, gap_figure

    untrained = make_case(tmp_path, 16, 50.0, 0.5)
    spec = untrained.with_suffix(".yaml")
    spec.write_text(spec.read_text().replace("accuracy: 50.0\n", ""))
    trained = make_case(tmp_path, 32, 60.0, 0.5)
    checked = check_measurements([load_measurement(untrained), load_measurement(trained)],
                                 "h200-sxm", spec_plan=True)
    points = [gap_point(c.measurement, c.spec, c.result) for c in checked]
    assert [p.accuracy for p in points] == [None, 60.0]
    assert default_panels(points) == ("a", "b", "c", "d", "e")
    assert default_panels(points[:1]) == ("e",) and default_panels(points[1:]) == ("a", "b", "c", "d")
    fig = gap_figure(points[:1], peak_ops=R, batch=32, title="t")
    [ax] = [a for a in fig.axes if a.get_visible()]
    assert ax.get_title().startswith("(e) latency vs complexity; untrained: Tiny-W16")
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"


def test_the_runtime_plan_splits_c_impl():
    from perfmodel.gap import GapPoint

    p = GapPoint(1.0, 2.0, 8.0, t_runtime_ms=4.0)  # ideal, T_min, measured; runtime T_min
    assert (p.c, p.c_max, p.c_impl) == (1 / 8, 1 / 2, 2 / 8)
    assert (p.c_boundaries, p.c_kernels) == (2 / 4, 4 / 8)
    assert p.c_boundaries * p.c_kernels == p.c_impl
    assert GapPoint(1.0, 2.0, 8.0).c_boundaries is None


def test_gap_table_splits_c_impl_for_inductor_files(tmp_path, capsys):
    from pathlib import Path

    from helpers import run_main

    file = Path(__file__).parent.parent / "examples" / "measurements" / "h200_resnet50_inductor.json"
    code, out, _ = run_main(["gap", str(file), "--panel", "a", "-o", str(tmp_path / "g.png")],
                            capsys)
    header, row = out.splitlines()[:2]
    assert code == 0 and header.split()[-2:] == ["C_bound", "C_kern"]
    # C_impl = C_bound x C_kern, as printed (three significant digits each)
    c_impl, c_bound, c_kern = (float(v) for v in row.replace("%", "").split()[-3:])
    assert c_impl == pytest.approx(c_bound * c_kern / 100, rel=2e-3)
    assert c_bound < 100  # the compiler's split epilogues cost ResNet-50 time
