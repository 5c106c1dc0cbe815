"""The committed H200 measurements: the model is a bound, and the plots regenerate on a CPU."""
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli
import perfmodel
from perfmodel.compare import compare
from perfmodel.measure import load_measurement

MEASUREMENTS = Path(__file__).parent.parent / "examples" / "measurements"
# Whole-model files, in subfolders too (convfirstnet/: random-weight models, no accuracy,
# kept apart from the gap plots' globs); per-kernel files are *_eager_kernels.json.
KERNELS = sorted(MEASUREMENTS.glob("h200_*_eager_kernels.json"))
WHOLE = sorted(p for p in MEASUREMENTS.rglob("h200_*.json") if p not in KERNELS)
# The plan whose T_min bounds a backend: eager runs every op, inductor fuses element-wise ops
# into layers at best, cuda_kernels runs whole blocks.
# The eager and inductor plans model what those runtimes launch (conv-bias-split,
# library-epilogue-split): tighter than op and layer, and every measurement still respects them.
BOUND_PLANS = {"eager": ("layer", "op", "eager"), "inductor": ("layer", "inductor"),
               "cuda_kernels": ("block",)}


def test_the_files_are_there():
    assert len([p for p in WHOLE if p.name.endswith("_eager.json")]) >= 11
    assert len([p for p in WHOLE if p.name.endswith("_inductor.json")]) >= 11
    assert len(KERNELS) == 3
    assert [p.name for p in WHOLE if p.parent.name == "convfirstnet"] == [
        "h200_convfirstnet_s_cuda_kernels.json", "h200_convfirstnet_s_eager.json"]
    assert [p.name for p in WHOLE if p.parent.name == "per_kernel"] == [
        "h200_convfirstnet_s_cuda_kernels_compiled_graphs_kernels.json",
        "h200_convfirstnet_s_cuda_kernels_kernels.json", "h200_convfirstnet_s_eager_kernels.json",
        "h200_convfirstnet_s_inductor_kernels.json", "h200_resnet50_eager_kernels.json"]
    assert len([p for p in WHOLE if p.parent.name == "convfirstnet_e2e"]) == 12


@pytest.mark.parametrize("path", WHOLE, ids=[p.stem for p in WHOLE])
def test_measured_latency_is_at_least_t_min(path):
    m = load_measurement(path)
    assert m.environment["gpu"].startswith("NVIDIA H200") and m.batch == 128
    for plan in BOUND_PLANS[m.backend]:
        r = perfmodel.analyze_spec(m.spec, hardware="h200-sxm", batch=m.batch, dtype=m.dtype,
                                   plan=plan)
        assert m.latency_ms >= r.totals.t_min_s * 1e3, (plan, m.latency_ms)


@pytest.mark.parametrize("path", KERNELS, ids=[p.stem for p in KERNELS])
def test_every_matched_kernel_is_bounded(path):
    """Per kernel, compulsory loads are not a bound on a 50 MB L2: Nsight Compute shows
    kernels reading what the previous kernel left in L2 (EfficientNet-B0's features.2.1
    add ran 0.1% faster than its compulsory-load time). The bound uses the L2-carry
    byte model, which the next test checks against Nsight Compute."""
    m = load_measurement(path)
    r = perfmodel.analyze_spec(m.spec, hardware="h200-sxm", batch=m.batch, plan="op",
                               l2_carry=True)
    cmp = compare(r, m)
    assert len(cmp.modules) > 20
    violations = [(x.module, x.predicted_ms, x.measured_ms) for x in cmp.modules if x.ratio < 1]
    assert violations == []
    matched = sum(x.measured_ms for x in cmp.modules)
    assert matched >= 0.9 * (matched + cmp.unmatched_ms)  # almost all GPU time is attributed


@pytest.mark.parametrize("path", KERNELS, ids=[p.stem for p in KERNELS])
def test_l2_carry_byte_model_against_nsight_compute(path):
    m = load_measurement(path)
    assert len(m.ncu) > 100 and all(k.module or k.name for k in m.ncu)
    r = perfmodel.analyze_spec(m.spec, hardware="h200-sxm", batch=m.batch, plan="op",
                               l2_carry=True)
    # median of measured/predicted bytes per module within 10% (compulsory loads alone:
    # 0.87, 0.61 and 0.97 for ResNet-50, EfficientNet-B0 and ConvNeXt-T)
    assert 0.9 <= compare(r, m).median_bytes_ratio <= 1.1


def test_compare_and_gap_plots_from_the_committed_files(tmp_path):
    runner = CliRunner()
    kernels = str(MEASUREMENTS / "h200_resnet50_eager_kernels.json")
    out = tmp_path / "c.png"
    result = runner.invoke(cli.cli, ["compare", "resnet50", kernels, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 30_000
    files = [str(p) for p in WHOLE if p.name.endswith("_inductor.json")]
    out = tmp_path / "g.png"
    result = runner.invoke(cli.cli, ["gap", *files, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 30_000
