"""Measurement files are checked when read: impossible, mismatched and foreign files."""
import pytest

import perfmodel
from perfmodel.errors import InputError
from perfmodel.measure import load_measurement, write_measurement
from perfmodel.measured import MeasurementWarning, check_measurements, hardware_of

from helpers import DATA, make_case, run_main


def _t_min_ms(path, plan, hardware="h200-sxm"):
    m = load_measurement(path)
    r = perfmodel.analyze_spec(m.spec, batch=m.batch, dtype=m.dtype, hardware=hardware, plan=plan)
    return r.totals.t_min_s * 1e3


def test_a_latency_below_the_backends_bound_is_bad_input_naming_the_file(tmp_path, capsys):
    path = make_case(tmp_path, 16, 50.0, 1e-4)
    code, _, err = run_main(["gap", str(path), "-o", str(tmp_path / "g.png")], capsys)
    assert code == 2
    assert err.count("\n") == 1 and str(path) in err
    assert "below T_min" in err and "op plan on h200-sxm" in err  # eager is bounded by op
    code, _, err = run_main(["compare", str(DATA.parent / "nope"), str(path)], capsys)
    assert code == 2


def test_the_bound_is_the_plan_of_the_backend_and_nothing_stricter(tmp_path):
    """Eager is bounded by the op plan, inductor by layer: a latency between the two T_min is
    impossible for eager and fine for inductor."""
    path = make_case(tmp_path, 16, 50.0, 1.0)
    op_ms, layer_ms = _t_min_ms(path, "op"), _t_min_ms(path, "layer")
    assert layer_ms < op_ms
    between = (layer_ms + op_ms) / 2
    eager = load_measurement(make_case(tmp_path, 16, 50.0, between))
    with pytest.raises(InputError, match="below T_min .* op plan"):
        check_measurements([eager], "h200-sxm")
    inductor = load_measurement(write_measurement(
        tmp_path / "ind.json", command="test", environment={"gpu": "NVIDIA H200"},
        workload={**{k: getattr(eager, k) for k in ("spec", "model", "batch")},
                  "dtype": "float16", "backend": "inductor"},
        method={}, results={"latency_ms": {"median": between, "p20": between, "p80": between}}))
    [checked] = check_measurements([inductor], "h200-sxm")
    assert checked.bound.totals.t_min_s * 1e3 == pytest.approx(layer_ms)


def test_the_bound_uses_the_config_of_the_files_gpu(tmp_path):
    m = load_measurement(make_case(tmp_path, 16, 50.0, 1.0, gpu="NVIDIA A100-SXM4-80GB"))
    h200 = perfmodel.load_hardware("h200-sxm")
    assert hardware_of(m, h200).name == "a100-sxm4-80gb"
    with pytest.warns(MeasurementWarning, match="measured on NVIDIA A100-SXM4-80GB, but h200-sxm "
                                                "describes NVIDIA H200; its bound uses a100"):
        [checked] = check_measurements([m], h200)
    assert checked.bound.hardware.name == "a100-sxm4-80gb"
    assert checked.result.hardware.name == "h200-sxm"
    # of the two H200 configs, the datasheet's (higher ceilings, lower bound) is the safe one
    h200_file = load_measurement(make_case(tmp_path, 16, 50.0, 1.0))
    assert hardware_of(h200_file, perfmodel.load_hardware("a100-sxm4-80gb")).name == "h200-sxm"


def test_an_unknown_gpu_is_a_warning_and_the_chosen_config_bounds(tmp_path):
    m = load_measurement(make_case(tmp_path, 16, 50.0, 1.0, gpu="Imaginary GPU"))
    with pytest.warns(MeasurementWarning, match="no hardware config describes GPU Imaginary"):
        [checked] = check_measurements([m], "h200-sxm")
    assert checked.bound.hardware.name == "h200-sxm"


def test_a_gpu_mismatch_warns_on_the_command_line(tmp_path, capsys):
    path = make_case(tmp_path, 16, 50.0, 1.0, gpu="NVIDIA L4")
    code, _, err = run_main(["gap", str(path), "-o", str(tmp_path / "g.png")], capsys)
    assert code == 0
    assert f"warning: {path} was measured on NVIDIA L4, but h200-sxm describes NVIDIA H200" in err


def test_comparing_a_file_with_another_model_is_bad_input(tmp_path, capsys):
    path = make_case(tmp_path, 16, 50.0, 1.0)
    code, _, err = run_main(["compare", "resnet50", str(path), "-o", str(tmp_path / "c.png")], capsys)
    assert code == 2 and str(path) in err
    assert "measures Tiny-W16" in err and "not ResNet-50" in err


def test_compare_without_per_kernel_rows_says_so(tmp_path, capsys):
    path = make_case(tmp_path, 16, 50.0, 1.0)
    spec = load_measurement(path).spec
    out = tmp_path / "c.png"
    code, stdout, _ = run_main(["compare", spec, str(path), "-o", str(out)], capsys)
    assert code == 0 and out.stat().st_size > 10_000
    assert "no per-kernel rows in this file" in stdout
    assert "module" not in stdout.splitlines()[0]


@pytest.mark.parametrize("kernels, field, reason", [
    ([{"name": "k", "module": "m"}], "results.kernels[0].duration_ms", "missing (required)"),
    ("k1,k2", "results.kernels", "expected a list of kernel rows, got str"),
    ([{"name": "k", "duration_ms": "fast"}], "results.kernels[0].duration_ms", "expected a number"),
])
def test_malformed_kernel_rows_are_one_line_naming_the_field(tmp_path, capsys, kernels, field, reason):
    import json

    path = make_case(tmp_path, 16, 50.0, 1.0)
    data = json.loads(path.read_text())
    data["results"]["kernels"] = kernels
    path.write_text(json.dumps(data))
    code, _, err = run_main(["compare", load_measurement_spec(path), str(path)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert f"{path}: field '{field}': {reason}" in err


def load_measurement_spec(path):
    import json

    return json.loads(path.read_text())["workload"]["spec"]


def test_a_bad_dtype_in_a_file_is_blamed_on_the_file(tmp_path, capsys):
    import json

    path = make_case(tmp_path, 16, 50.0, 1.0)
    data = json.loads(path.read_text())
    data["workload"]["dtype"] = "float12"
    path.write_text(json.dumps(data))
    code, _, err = run_main(["gap", str(path), "-o", str(tmp_path / "g.png")], capsys)
    assert code == 2 and f"{path}: field 'workload.dtype': unknown dtype 'float12'" in err
    assert "--dtype" not in err


@pytest.mark.parametrize("command", ["kernels", "gap", "compare"])
def test_corrupt_json_says_so(tmp_path, capsys, command):
    path = tmp_path / "broken.json"
    path.write_text('{"schema": "perfmodel.measurement/1", ')
    args = [command, str(path)] if command != "compare" else ["compare", "resnet50", str(path)]
    code, _, err = run_main(args + ["-o", str(tmp_path / "x.png")], capsys)
    assert code == 2 and f"{path}: not valid JSON" in err
