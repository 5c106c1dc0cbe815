"""The calibrated latency estimate: literal arithmetic on hand-made calibrations,
interpolation, the invariants ideal <= T_min <= estimate, bad calibration files, the command
line, and the calibration runner's plumbing (on the CPU, tiny shapes)."""
import math

import pytest
import torch
import yaml
from click.testing import CliRunner
from helpers import make_case, run_main
from torch import nn

import perfmodel
import perfmodel.api
from perfmodel.calibration import Table, load_calibration, parse_calibration
from perfmodel.errors import InputError
from perfmodel.estimate import _Interpolator, estimate
from perfmodel.hardware import Hardware, load_hardware

HW = Hardware(name="test-gpu", vendor="", peak_tflops={"float16": 1000.0}, dram_gbps=10000.0)


def calibration_doc(**tables) -> dict:
    """A calibration: a tiny kernel takes 1 us in a graph and 4 us on a stream (3 us more)."""
    return {"schema": "perfmodel.calibration/1", "dtype": "float16",
            "launch": {"graph_kernel_us": 1.0, "stream_kernel_us": 4.0, "eager_issue_us": 0.5},
            "tables": tables}


def gemm_table(us: float) -> dict:
    # one product: 1000 x 1000 x 500 (1 GFLOP), 4 MB moved, `us` per call
    return {"features": ["m", "n", "k"], "rows": [[1000, 1000, 500, 1e9, 4e6, us]]}


def test_gemm_at_half_of_peak_plus_launch():
    """A 1 GFLOP product takes 1 us at 1000 TFLOP/s; the calibrated one took 2 us (50%), and
    a stream launch costs 3 us over a graph's: 2 + 3 = 5 us."""
    cal = parse_calibration(calibration_doc(matmul=gemm_table(2.0)), "cal.yaml")
    x = torch.empty(1000, 500)
    result = perfmodel.analyze(nn.Linear(500, 1000, bias=False), [x], hardware=HW, plan="op")
    [k] = estimate(result, cal).kernels
    assert k.timed.kernel.flops == 2 * 1000 * 500 * 1000
    assert k.t_min_s == pytest.approx(1e-6)
    assert k.efficiency == pytest.approx(0.5)
    assert k.t_est_s == pytest.approx(5e-6)


def test_model_estimate_is_a_host_device_pipeline():
    cal = parse_calibration(calibration_doc(matmul=gemm_table(2.0)), "cal.yaml")
    x = torch.empty(1000, 500)
    two = nn.Sequential(nn.Linear(500, 500, bias=False), nn.Linear(500, 1000, bias=False))
    est = estimate(perfmodel.analyze(two, [x], hardware=HW, plan="op"), cal)
    # 0.5 GFLOP (0.5 us) at 50% and 1 GFLOP (1 us) at 50%, each + 3 us of stream launch;
    # each is issued in 0.5 us (eager_issue_us: the library time defaults to it)
    assert est.t_kernels_s == pytest.approx((1 + 3 + 2 + 3) * 1e-6)
    assert est.t_host_s == pytest.approx(2 * 0.5e-6)
    assert est.t_est_s == pytest.approx((0.5 + 4 + 5) * 1e-6)  # the first waits for its issue
    slow_host = calibration_doc(matmul=gemm_table(2.0))
    slow_host["launch"]["eager_library_issue_us"] = 10.0
    est = estimate(perfmodel.analyze(two, [x], hardware=HW, plan="op"),
                   parse_calibration(slow_host, "cal.yaml"))
    # issued at 10 and 20 us; the second runs 5 us once issued: the host is the bottleneck
    assert est.t_est_s == pytest.approx(25e-6)
    compiled = estimate(perfmodel.analyze(two, [x], hardware=HW, plan="inductor"), cal)
    assert compiled.t_est_s == pytest.approx(9e-6)  # no compiled_issue_us: no host time
    # replayed as a CUDA graph: no stream gap, nothing issued by the host
    replayed = estimate(perfmodel.analyze(two, [x], hardware=HW, plan="op"),
                        parse_calibration(slow_host, "cal.yaml"), graphs=True)
    assert replayed.t_est_s == pytest.approx((1 + 2) * 1e-6)


def test_interpolation_is_geometric_between_rows_and_exact_on_them():
    # elements 2^10 at 10% of the roofline, 2^14 at 40% (a tiny kernel of 0 us in a graph)
    bw = 1e12
    rows = ((2 ** 10, 0, 1e6, 1e6 / bw / 0.1 * 1e6), (2 ** 14, 0, 1e6, 1e6 / bw / 0.4 * 1e6))
    interp = _Interpolator(Table("t", ("elements",), rows), 1e15, bw, 0.0)
    assert interp.efficiency({"elements": 2 ** 10}) == pytest.approx(0.1)
    assert interp.efficiency({"elements": 2 ** 14}) == pytest.approx(0.4)
    assert interp.efficiency({"elements": 2 ** 12}) == pytest.approx(math.sqrt(0.1 * 0.4))
    inside = [interp.efficiency({"elements": 2 ** e}) for e in (10.5, 11, 12, 13, 13.5)]
    assert inside == sorted(inside) and 0.1 < inside[0] and inside[-1] < 0.4


def test_efficiency_never_exceeds_the_roofline_and_calls_of_several_kernels_are_split():
    # a row faster than its roofline (cache hits) counts as 100%, so estimate >= T_min
    fast = _Interpolator(Table("t", ("elements",), ((1024, 0, 1e6, 0.5),)), 1e15, 1e12, 0.0)
    assert fast.efficiency({"elements": 1024}) == 1.0
    # eager batchnorm: one call is three kernels; the two tiny ones (2 us each) are not its own
    bn = Table("eager_batchnorm", ("elements", "c"), ((1024, 64, 0, 1e6, 5.0),), 3)
    assert _Interpolator(bn, 1e15, 1e12, 2e-6).efficiency({"elements": 1024, "c": 64}) \
        == pytest.approx(1.0)  # 5 - 2 x 2 = 1 us for 1 MB at 1 TB/s
    bn = Table("eager_batchnorm", ("elements", "c"), ((1024, 64, 0, 1e6, 8.0),), 3)
    assert _Interpolator(bn, 1e15, 1e12, 2e-6).efficiency({"elements": 1024, "c": 64}) \
        == pytest.approx(0.25)


def committed():
    return load_hardware("h200-sxm")


@pytest.mark.parametrize("plan", ["op", "eager", "inductor"])
def test_ideal_le_t_min_le_estimate_per_kernel_and_in_total(plan, tmp_path):
    hw = committed()
    if not hw.calibration:
        pytest.skip("h200-sxm has no calibration file yet")
    result = perfmodel.analyze_spec(make_case_spec(tmp_path), hardware=hw, plan=plan)
    est = estimate(result)
    peak = hw.peak_ops("float16")
    for k in est.kernels:
        assert k.timed.kernel.flops / peak <= k.t_min_s <= k.t_est_s
    assert est.t_ideal_s <= est.t_min_s <= est.t_est_s
    assert est.t_min_s == pytest.approx(sum(k.t_min_s for k in est.kernels))


def make_case_spec(tmp_path) -> str:
    make_case(tmp_path, 32, 70.0, 50.0)
    return str(tmp_path / "tiny32.yaml")


# ---------------------------------------------------------------- bad files
def write_calibration(tmp_path, doc) -> str:
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("change, field", [
    (lambda d: d["launch"].pop("stream_kernel_us"), "launch.stream_kernel_us"),
    (lambda d: d["launch"].update(graph_kernel_us=-1), "launch.graph_kernel_us"),
    (lambda d: d["tables"]["matmul"]["rows"][0].pop(), "tables.matmul.rows[0]"),
    (lambda d: d["tables"]["matmul"]["rows"][0].__setitem__(5, 0), "tables.matmul.rows[0]"),
    (lambda d: d["tables"]["matmul"].update(kernels_per_call=0), "tables.matmul.kernels_per_call"),
    (lambda d: d.update(schema="other/2"), "schema"),
    (lambda d: d.update(extra=1), "extra"),
])
def test_bad_calibration_names_file_and_field(tmp_path, change, field):
    doc = calibration_doc(matmul=gemm_table(2.0))
    change(doc)
    path = write_calibration(tmp_path, doc)
    with pytest.raises(InputError) as exc:
        load_calibration(path)
    assert exc.value.file == path and exc.value.field == field


def hardware_yaml(tmp_path, calibration="cal.yaml") -> str:
    path = tmp_path / "gpu.yaml"
    path.write_text("name: test-gpu\ndevice_name: NVIDIA H200\npeak_tflops: {float16: 1000}\n"
                    f"dram_gbps: 10000\nsource: a test\ncalibration: {calibration}\n")
    return str(path)


def test_hardware_names_a_calibration_that_must_exist(tmp_path):
    write_calibration(tmp_path, calibration_doc(matmul=gemm_table(2.0)))
    assert load_hardware(hardware_yaml(tmp_path)).calibration == str(tmp_path / "cal.yaml")
    with pytest.raises(InputError) as exc:
        load_hardware(hardware_yaml(tmp_path, "missing.yaml"))
    assert exc.value.field == "calibration" and "missing.yaml" in exc.value.reason


def test_cli_estimate_against_a_measurement(tmp_path):
    doc = calibration_doc(matmul=gemm_table(2.0))
    doc["tables"]["conv"] = {"features": ["m", "n", "k_red", "r", "stride"],
                             "rows": [[1000, 1000, 500, 1, 1, 1e9, 4e6, 2.0]]}
    doc["tables"]["eager_pointwise/clone"] = {"features": ["elements"],
                                              "rows": [[1024, 0, 4096, 2.0]]}
    write_calibration(tmp_path, doc)
    measured = make_case(tmp_path, 32, 70.0, 5.0)
    md = tmp_path / "new" / "table.md"  # its folder is made
    out = CliRunner().invoke(__import__("cli").cli, [
        "estimate", str(measured), "-H", hardware_yaml(tmp_path), "--markdown", str(md)])
    assert out.exit_code == 0, out.output
    assert "Tiny-W32" in out.output and "eager: 0 of 1 within +-20%" in out.output
    assert md.read_text().startswith("| model |")


def test_cli_bad_calibration_is_exit_2_naming_file_and_field(tmp_path, capsys):
    doc = calibration_doc(matmul=gemm_table(2.0))
    del doc["launch"]["eager_issue_us"]
    write_calibration(tmp_path, doc)
    measured = make_case(tmp_path, 32, 70.0, 5.0)
    code, _, err = run_main(["estimate", str(measured), "-H", hardware_yaml(tmp_path)], capsys)
    assert code == 2
    assert "cal.yaml" in err and "launch.eager_issue_us" in err


def test_cli_hardware_without_calibration_is_exit_2(tmp_path, capsys):
    measured = make_case(tmp_path, 32, 70.0, 5.0)
    code, _, err = run_main(["estimate", str(measured), "-H", "h100-sxm"], capsys)
    assert code == 2 and "calibration" in err


# ---------------------------------------------------------------- the runner
def test_runner_plumbing_on_the_cpu(tmp_path):
    from perfmodel.calibrate import run
    from perfmodel.calibration_cases import Grid

    path = tmp_path / "cal.yaml"
    run(path, grid=Grid.quick(), sections=["pointwise", "matmul", "conv"], device="cpu",
        dtype=torch.float32, log=lambda *a: None)
    cal = load_calibration(path)
    assert {"matmul", "conv", "conv_stem", "eager_pointwise/add"} <= set(cal.tables)
    assert cal.environment["torch"] == torch.__version__ and cal.dtype == "float32"
    # counted as the plans count them: linear 64 x 16 <- 8 with a bias, float32
    row = next(r for r in cal.tables["matmul"].rows if r[:3] == (64, 16, 8))
    assert row[3:5] == (2 * 64 * 16 * 8 + 16, (64 * 8 + 16 * 8 + 16 + 64 * 16) * 4)
    assert all(r[-1] > 0 for t in cal.tables.values() for r in t.rows)


def test_runner_counts_a_convolution_as_the_analysis_does():
    from perfmodel.calibration_cases import Ctx, Grid, conv_case

    ctx = Ctx(Grid.quick(), torch.device("cpu"), torch.float32)
    case = conv_case(ctx, "conv", ("P", 16, 72, 3, 1), 8, 16, 8, 3, 1)
    result = perfmodel.analyze(nn.Conv2d(8, 16, 3, padding=1, bias=False), (8, 8, 8), batch=2,
                               dtype="float32", plan="op", hardware="h200-sxm")
    [k] = result.kernels
    assert case.features[0] == 2 * 8 * 8
    assert (case.flops, case.dram_bytes) == (k.flops, k.dram_bytes)


@pytest.mark.cuda
def test_runner_on_the_gpu(tmp_path):
    from perfmodel.calibrate import run
    from perfmodel.calibration_cases import Grid

    path = tmp_path / "cal.yaml"
    run(path, grid=Grid.quick(), log=lambda *a: None)
    cal = load_calibration(path)
    assert "compiled_layernorm" in cal.tables and cal.launch["stream_kernel_us"] > 0


def test_waterline_prints_and_draws_the_estimate_where_the_hardware_is_calibrated(tmp_path):
    import cli

    if not committed().calibration:
        pytest.skip("h200-sxm has no calibration file yet")
    spec = make_case_spec(tmp_path)
    out = CliRunner().invoke(cli.cli, ["waterline", spec, "-H", "h200-sxm", "--plan", "eager",
                                       "-o", str(tmp_path / "w.png")])
    assert out.exit_code == 0, out.output
    assert "estimate (calibrated)" in out.output and (tmp_path / "w.png").stat().st_size > 0
    plain = CliRunner().invoke(cli.cli, ["waterline", spec, "-H", "h100-sxm",
                                         "-o", str(tmp_path / "v.png")])
    assert plain.exit_code == 0 and "estimate" not in plain.output


def test_gap_table_shows_the_estimate_beside_the_measurement():
    from perfmodel.gap import GapPoint
    from perfmodel.report import gap_lines

    with_est = GapPoint(1.0, 2.0, 8.0, model="M", backend="eager", t_estimate_ms=7.5)
    header, row = gap_lines([with_est])
    assert header.split()[8:12] == ["actual", "ms", "est.", "ms"]
    assert row.split()[6:8] == ["8.000", "7.500"]
    assert "est." not in gap_lines([GapPoint(1.0, 2.0, 8.0, model="M", backend="eager")])[0]


def test_which_table_serves_a_kernel_depends_on_the_runtime():
    """Inductor runs a 1x1 convolution as a cuBLAS product and its epilogue as a Triton
    kernel (the vectorized ATen kernel of the same traffic where no Triton table exists);
    eager runs the convolution on cuDNN, batchnorm and the activation as their own kernels."""
    pointwise = {"features": ["elements"], "rows": [[1024, 0, 4096, 2.0]]}
    doc = calibration_doc(matmul=gemm_table(2.0))
    doc["tables"].update({
        "conv": {"features": ["m", "n", "k_red", "r", "stride"],
                 "rows": [[1000, 1000, 500, 1, 1, 1e9, 4e6, 2.0]]},
        "eager_pointwise/relu": pointwise, "eager_pointwise/clone": pointwise,
        "eager_batchnorm": {"features": ["elements", "c"], "kernels_per_call": 3,
                            "rows": [[1024, 16, 0, 4096, 5.0]]}})
    net = nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
    result = perfmodel.analyze(net, (8, 8, 8), batch=2, hardware=HW, plan="inductor")
    tables = lambda cal, r: [k.table for k in estimate(r, cal).kernels]  # noqa: E731
    assert tables(parse_calibration(doc, "c.yaml"), result) == ["matmul", "eager_pointwise/relu"]
    doc["tables"]["triton_pointwise/affine_relu"] = pointwise
    assert tables(parse_calibration(doc, "c.yaml"), result) == \
        ["matmul", "triton_pointwise/affine_relu"]
    eager = perfmodel.api.reanalyze(result, plan="eager")
    assert tables(parse_calibration(doc, "c.yaml"), eager) == \
        ["conv", "eager_pointwise/clone", "eager_pointwise/clone", "eager_batchnorm",
         "eager_pointwise/relu"]


def test_fidelity_prints_the_estimate_beside_the_measured_median():
    import cli
    from helpers import EXAMPLES

    if not committed().calibration:
        pytest.skip("h200-sxm has no calibration file yet")
    file = EXAMPLES / "measurements" / "fidelity" / "h200_convnext_tiny_eager_ncu_none.json"
    out = CliRunner().invoke(cli.cli, ["fidelity", str(file)])
    assert out.exit_code == 0, out.output
    header = next(line for line in out.output.splitlines() if "est/meas" in line)
    assert "meas. ms" in header and "eager: 1 of 1 within +-20%" in out.output


def test_a_bad_calibration_fails_when_the_hardware_is_loaded(tmp_path):
    doc = calibration_doc(matmul=gemm_table(2.0))
    doc["tables"]["matmul"]["rows"][0][0] = "many"
    write_calibration(tmp_path, doc)
    with pytest.raises(InputError) as exc:
        load_hardware(hardware_yaml(tmp_path))
    assert exc.value.file == str(tmp_path / "cal.yaml")
    assert exc.value.field == "tables.matmul.rows[0]" and "'many'" in exc.value.reason


def test_runner_update_keeps_the_tables_it_does_not_measure(tmp_path):
    from perfmodel.calibrate import run
    from perfmodel.calibration_cases import Grid

    base = calibration_doc(matmul=gemm_table(2.0))
    base["command"] = "first"
    path = tmp_path / "cal.yaml"
    run(path, grid=Grid.quick(), sections=["broadcast"], device="cpu", dtype=torch.float32,
        command="second", base=base, log=lambda *a: None)
    cal = load_calibration(path)
    assert cal.tables["matmul"].rows == ((1000, 1000, 500, 1e9, 4e6, 2.0),)
    assert "eager_broadcast/add_channel" in cal.tables and cal.command == "first; second"
    assert cal.method["earlier_runs"][0]["command"] == "first"


def test_cli_calibrate_quick_and_bad_sections(tmp_path, capsys):
    import cli

    out = tmp_path / "new" / "cal.yaml"  # its folder is made
    result = CliRunner().invoke(cli.cli, ["calibrate", "-o", str(out), "--quick",
                                          "--sections", "broadcast"])
    assert result.exit_code == 0, result.output
    assert load_calibration(out).command == \
        f"perfmodel calibrate -o {out} --sections broadcast --quick"
    code, _, err = run_main(["calibrate", "-o", str(out), "--sections", "gemm"], capsys)
    assert code == 2 and "--sections" in err and "'gemm'" in err


def test_layers_lists_each_kernels_estimate_where_the_hardware_is_calibrated(tmp_path):
    import csv

    import cli

    if not committed().calibration:
        pytest.skip("h200-sxm has no calibration file yet")
    spec, table = make_case_spec(tmp_path), tmp_path / "k.csv"
    out = CliRunner().invoke(cli.cli, ["layers", spec, "-H", "h200-sxm", "--plan", "inductor",
                                       "--csv", str(table)])
    assert out.exit_code == 0, out.output
    assert "est. ms" in out.output
    rows = list(csv.DictReader(table.open()))
    assert all(float(r["t_est_ms"]) >= float(r["t_min_ms"]) for r in rows)
    assert {r["est_table"] for r in rows} >= {"matmul"}


@pytest.mark.filterwarnings("ignore:block plan. no module matched the default block classes")  # a tiny net
@pytest.mark.parametrize("plan", ["layer", "block"])
def test_ideal_plans_have_no_estimate(plan, tmp_path):
    """layer and block are ideals no runtime launches: no calibrated kernel corresponds to
    their fused kernels, so there is no estimate (None where it is optional, exit 2 where
    one is asked for)."""
    from perfmodel.errors import InputError
    from perfmodel.estimate import estimate_or_none

    hw = committed()
    if not hw.calibration:
        pytest.skip("h200-sxm has no calibration file yet")
    result = perfmodel.analyze_spec(make_case_spec(tmp_path), hardware=hw, plan=plan)
    assert estimate_or_none(result) is None
    with pytest.raises(InputError, match="not " + plan):
        estimate(result)
