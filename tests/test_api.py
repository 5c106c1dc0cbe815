"""The Python API and model specs."""
import re
import sys
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

import perfmodel
from perfmodel.errors import InputError
from perfmodel.resources import builtin_dir

from helpers import DATA, EXAMPLES


def test_analyze_module_with_shape_and_with_tensor():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 1))
    by_shape = perfmodel.analyze(net, (3, 16, 16), batch=4, hardware="h200-sxm")
    by_tensor = perfmodel.analyze(net, torch.randn(4, 3, 16, 16), hardware="h200-sxm")
    expected = 4 * 16 * 16 * 8 * (3 * 9) + 4 * 16 * 16 * 8 * 8
    assert by_shape.macs == by_tensor.macs == expected
    assert len(by_shape.kernels) == 2  # conv+relu, conv
    assert [r["ops"] for r in perfmodel.kernel_table(by_shape)] == ["conv+relu", "conv"]
    assert next(net.parameters()).device.type == "cpu"  # the user's model is untouched


def test_result_is_data_and_its_renderers_take_it(tmp_path):
    import ast
    import csv
    import json

    import perfmodel.api

    tree = ast.parse(Path(perfmodel.api.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"report", "plots"}  # no cycle api <-> report
    assert not any(hasattr(perfmodel.Result, m) for m in ("table", "to_csv", "to_json"))
    r = perfmodel.analyze(nn.Conv2d(8, 8, 1), (8, 4, 4), batch=2)
    rows = perfmodel.kernel_table(r)
    perfmodel.write_csv(r, tmp_path / "k.csv")
    perfmodel.write_json(r, tmp_path / "k.json")
    with open(tmp_path / "k.csv") as fh:
        assert [int(row["dram_bytes"]) for row in csv.DictReader(fh)] == \
            [row["dram_bytes"] for row in rows] == [2 * (2 * 2 * 4 * 4 * 8 + 8 * 8 + 8)]
    data = json.loads((tmp_path / "k.json").read_text())
    assert data["kernels"] == rows and data["summary"]["dtype"] == "float16"


def test_batch_and_dtype_scale_bytes():
    net = nn.Conv2d(16, 16, 1, bias=False)
    fp16 = perfmodel.analyze(net, (16, 8, 8), batch=2, dtype="float16")
    fp32 = perfmodel.analyze(net, (16, 8, 8), batch=2, dtype="float32", hardware="a5000")
    elements = 2 * 8 * 8 * 16 * 2 + 16 * 16
    assert fp16.totals.dram_bytes == 2 * elements
    assert fp32.totals.dram_bytes == 4 * elements


def test_dtype_is_parsed_once_and_travels_typed(monkeypatch):
    import json

    from perfmodel import dtypes

    class Counting(dict):
        calls = 0

        def get(self, *args):
            Counting.calls += 1
            return super().get(*args)

    monkeypatch.setattr(dtypes, "ALIASES", Counting(dtypes.ALIASES))
    r = perfmodel.analyze(nn.Conv2d(16, 16, 1), (16, 8, 8), batch=2, dtype="fp32",
                          hardware="a5000")
    assert Counting.calls == 1  # at analyze(); trace, plan and waterline take the DType
    assert r.dtype == "float32" and r.dtype.torch is torch.float32 and r.dtype.itemsize == 4
    assert json.loads(json.dumps(r.summary()))["dtype"] == "float32"
    d = dtypes.parse_dtype("fp8")
    assert (d, d.itemsize, d.peak_key) == ("float8_e4m3fn", 1, "float8")
    assert dtypes.parse_dtype(d) is d
    spec = perfmodel.load_spec(DATA / "tiny.yaml").with_overrides(dtype="bf16")
    assert spec.dtype.torch is torch.bfloat16 and spec.input_metas[0].dtype is torch.bfloat16


def test_spec_with_local_file_and_overrides():
    spec = perfmodel.load_spec(DATA / "tiny.yaml")
    assert spec.batch == 4 and spec.inputs == ((3, 32, 32),)
    r = perfmodel.analyze_spec(spec, batch=8, hardware="l4", plan="op")
    assert r.batch == 8 and r.hardware.name == "l4" and str(r.plan) == "op"
    assert r.macs == 8 * (32 * 32 * 16 * 27 + 16 * 10)


def test_model_may_be_written_dotted(tmp_path):
    """`torchvision.models.resnet18` means `torchvision.models:resnet18`; ResNet-18 at 224 px
    is 1.814 GMACs (torchvision's `_ops` metadata for its weights)."""
    path = tmp_path / "r18.yaml"
    path.write_text("name: r18\nmodel: torchvision.models.resnet18\ninput: [3, 224, 224]\nbatch: 1\n")
    spec = perfmodel.load_spec(path)
    assert spec.model == "torchvision.models:resnet18"
    assert abs(perfmodel.analyze_spec(spec).macs / 1e9 - 1.814) < 0.0015


def test_builtin_specs_load():
    names = perfmodel.list_models()
    for required in ("resnet50", "resnet101", "convnext_tiny", "convnext_small",
                     "efficientnet_b0", "efficientnet_b5", "mobilenet_v2",
                     "resnext101_32x8d", "vit_b_16"):
        assert required in names
        spec = perfmodel.load_spec(required)
        assert spec.batch == 128 and spec.dtype == "float16" and spec.hardware == "a5000-paper"
    assert perfmodel.load_spec("efficientnet_b5").inputs == ((3, 456, 456),)


def test_unknown_hardware_dtype():
    with pytest.raises(InputError, match="gives no peak for float32"):
        perfmodel.analyze(nn.Linear(4, 4), (4,), hardware="h200-sxm-measured", dtype="float32")


def test_the_measured_h200_vector_rate_is_the_probes_hfma2_rate():
    """h200-sxm-measured's float16 vector peak is probe_pipes' split HFMA2 rate (warp instructions a clock an SM, in
    the committed measurement file) x 32 lanes x 4 ops x the SMs x the clock; the tensor-core peak is untouched."""
    pipes = (EXAMPLES / "measurements" / "mbconv" / "s40" / "call1" / "pipes.txt").read_text()
    rate = float(re.search(r"HFMA2, ptxas's split with \.MMA\s+([\d.]+) warp instructions", pipes).group(1))
    hw = perfmodel.load_hardware("h200-sxm-measured")
    assert hw.vector_tflops["float16"] == pytest.approx(rate * 32 * 4 * 132 * 1980e6 / 1e12, abs=0.05)
    assert hw.peak_ops("float16") == 753e12


def test_installed_package_finds_its_configs(tmp_path):
    """After `pip install .` the configs ship inside the package (not only in a checkout)."""
    code = ("import perfmodel, perfmodel.resources as r; "
            "print(r.builtin_dir('hardware')); print(len(perfmodel.list_hardware()))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip("perfmodel is not installed in this environment")
    where, count = proc.stdout.split()
    assert int(count) == 8 and Path(where).is_dir()
    assert builtin_dir("models").is_dir()


def test_custom_groups_from_the_spec(tmp_path):
    spec = tmp_path / "grouped.yaml"
    spec.write_text(f"model: {DATA / 'tiny_net.py'}:build\ninput: [3, 32, 32]\nbatch: 4\n"
                    "groups: [[stem, bn]]\n")
    r = perfmodel.analyze_spec(spec)
    first = r.kernels[0].kernel
    assert first.name == "stem,bn"
    assert first.ops[:2] == ("convolution", "native_batch_norm")
    # one kernel for the group (relu fuses in), then mean, then the head: 3 kernels
    assert [k.kernel.ops[0] for k in r.kernels] == ["convolution", "mean", "addmm"]
    layer = perfmodel.analyze_spec(spec, plan="layer")  # --plan keeps the spec's groups
    assert len(layer.kernels) == 3 and str(layer.plan) == "layer+1 groups"


def test_a_group_that_waits_on_a_later_kernel_is_rejected(tmp_path):
    spec = tmp_path / "bad_group.yaml"
    spec.write_text(f"model: {DATA / 'tiny_net.py'}:build\ninput: [3, 32, 32]\nbatch: 4\n"
                    "groups: [[stem, head]]\n")
    with pytest.raises(InputError, match="fused group must be contiguous"):
        perfmodel.analyze_spec(spec)


def test_integer_inputs_and_embedding_reads_only_gathered_rows(tmp_path):
    spec = tmp_path / "lm.yaml"
    spec.write_text(f"model: {DATA / 'tiny_lm.py'}:build\ninput: [{{shape: [16], dtype: int64}}]\n"
                    "batch: 2\nplan: op\n")
    r = perfmodel.analyze_spec(spec)
    assert r.unsupported == {}
    embed = r.kernels[0].kernel
    assert embed.ops == ("embedding",)
    assert embed.input_bytes == 2 * 16 * 8  # int64 token ids
    assert embed.weight_bytes == 2 * 16 * 64 * 2  # 32 gathered rows of 64 fp16, not 1000
    assert r.macs == 2 * 16 * (64 * 256 + 256 * 64 + 64 * 1000)


def test_unknown_input_dtype(tmp_path):
    spec = tmp_path / "lm.yaml"
    spec.write_text(f"model: {DATA / 'tiny_lm.py'}:build\ninput: [{{shape: [16], dtype: int4}}]\n")
    with pytest.raises(InputError, match="field 'input': unknown input dtype 'int4'"):
        perfmodel.load_spec(spec)


def test_hardware_path_relative_to_the_spec(tmp_path):
    (tmp_path / "gpu.yaml").write_text("name: my-gpu\npeak_tflops: {float16: 100}\n"
                                       "dram_gbps: 1000\nsource: test\n")
    spec = tmp_path / "net.yaml"
    spec.write_text(f"model: {DATA / 'tiny_net.py'}:build\ninput: [3, 8, 8]\nbatch: 2\n"
                    "hardware: gpu.yaml\n")
    r = perfmodel.analyze_spec(spec)
    assert r.hardware.name == "my-gpu" and r.totals.op_byte == pytest.approx(100.0)
