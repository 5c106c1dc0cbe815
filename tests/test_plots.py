"""Plot commands: each writes an image, and the data behind it are checked with numbers."""
import re

import numpy as np
import pytest
from click.testing import CliRunner

import cli
import perfmodel
from perfmodel.analysis import c_max_at, mediant_c_max_at, sweep
from perfmodel.layer_intensity import layer_intensity

from test_cli import TINY, write_spec


@pytest.fixture(scope="module")
def convnext():
    return perfmodel.analyze_spec("convnext_tiny", batch=8)


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
    c_sweep = re.search(r"a5000-paper ([\d.]+)%", swept.output).group(1)
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
    assert f"x{t.t_min_s / t.t_ideal_s:.2f}" in result.output


def test_sweep_uses_the_byte_model_it_was_asked_for(tmp_path):
    args = ["resnet50", "-H", "h200-sxm", "--l2-carry", "--batch", "8"]
    water = CliRunner().invoke(cli.cli, ["waterline", *args, "-o", str(tmp_path / "w.png")])
    swept = CliRunner().invoke(cli.cli, ["sweep", *args, "--mark", "h200-sxm",
                                         "-o", str(tmp_path / "s.png")])
    c_water = re.search(r"C_max \(waterline\)\s+([\d.]+) %", water.output).group(1)
    assert re.search(r"h200-sxm ([\d.]+)%", swept.output).group(1) == c_water
