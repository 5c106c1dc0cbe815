"""perfmodel compare on a small measurement file made for the test."""
import pytest
from click.testing import CliRunner

import cli
import perfmodel
from perfmodel.compare import compare
from perfmodel.measure import load_measurement, write_measurement

from helpers import DATA


@pytest.fixture
def measured(tmp_path):
    kernels = [{"name": "conv_kernel", "module": "stem", "duration_ms": 0.2},
               {"name": "bn_kernel", "module": "bn", "duration_ms": 0.1},
               {"name": "gemm", "module": "head", "duration_ms": 0.01},
               {"name": "gemm_epilogue", "module": "head", "duration_ms": 0.005},
               {"name": "memcpy", "module": "", "duration_ms": 0.05},
               {"name": "mystery", "module": "not.a.module", "duration_ms": 0.3}]
    return write_measurement(
        tmp_path / "m.json", command="made by the test", environment={"gpu": "TestGPU"},
        workload={"spec": str(DATA / "tiny.yaml"), "model": "Tiny", "batch": 64,
                  "dtype": "float16", "backend": "eager"},
        method={}, results={"latency_ms": {"median": 1.0, "p20": 0.9, "p80": 1.1},
                            "kernels": kernels})


def test_compare_matches_modules_and_keeps_unmatched(measured):
    m = load_measurement(measured)
    result = perfmodel.analyze_spec(m.spec, batch=64, hardware="h200-sxm", plan="op")
    cmp = compare(result, m)
    by_module = {x.module: x for x in cmp.modules}
    assert by_module["head"].measured_ms == pytest.approx(0.015)  # two kernels summed
    assert by_module["stem"].measured_ms == 0.2
    assert [k.name for k in cmp.unmatched] == ["mystery"]
    # stem conv 3->16 3x3 at 32x32, batch 64, no bias: t = max(n/R, b/B) on h200-sxm
    n = 2 * 64 * 32 * 32 * 16 * 27
    b = 2 * (64 * 32 * 32 * 3 + 64 * 32 * 32 * 16 + 16 * 27)
    assert by_module["stem"].predicted_ms == pytest.approx(max(n / 989.4e12, b / 4800e9) * 1e3)
    assert cmp.gap.c == pytest.approx(cmp.gap.c_max * cmp.gap.c_impl)
    assert cmp.gap.c == pytest.approx(cmp.gap.t_ideal_ms / 1.0)
    assert cmp.gap.c_max == pytest.approx(result.totals.c_max)


def test_compare_command(measured, tmp_path):
    out = tmp_path / "c.png"
    result = CliRunner().invoke(cli.cli, ["compare", str(DATA / "tiny.yaml"), str(measured),
                                          "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "unmatched measured kernels: 1, 0.3000 ms" in result.output
    assert out.stat().st_size > 20_000
