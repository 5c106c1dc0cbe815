"""The command line: happy paths through CliRunner, bad input as one line and exit code 2."""
import json

import pytest
from click.testing import CliRunner

import cli
from perfmodel.errors import PerfmodelError

from helpers import DATA, TINY, run_main, write_spec


def test_waterline_writes_plot_and_summary(tmp_path):
    out = tmp_path / "w.png"
    result = CliRunner().invoke(cli.cli, ["waterline", write_spec(tmp_path, TINY), "-o", str(out),
                                          "--hardware", "h200-sxm"])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000
    assert "C_max (waterline)" in result.output and "h200-sxm" in result.output
    # stem conv 3->16 at 32x32 plus the head 16->10, per image: 442,528 MACs
    assert 32 * 32 * 16 * 3 * 9 + 16 * 10 == 442_528
    assert "MACs per image            442.5 k" in result.output


@pytest.mark.parametrize("suffix", [".svg", ".pdf"])
def test_waterline_formats(tmp_path, suffix):
    out = tmp_path / f"w{suffix}"
    result = CliRunner().invoke(cli.cli, ["waterline", write_spec(tmp_path, TINY), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1000


def test_layers_exports_csv_and_json(tmp_path):
    spec = write_spec(tmp_path, TINY)
    csv_path, json_path = tmp_path / "k.csv", tmp_path / "k.json"
    result = CliRunner().invoke(cli.cli, ["layers", spec, "--csv", str(csv_path),
                                          "--json", str(json_path)])
    assert result.exit_code == 0, result.output
    data = json.loads(json_path.read_text())
    stem = data["kernels"][0]
    assert stem["macs"] == 4 * 32 * 32 * 16 * 3 * 9
    assert stem["ops"] == "conv+bn+relu"
    assert csv_path.read_text().splitlines()[0].startswith("index,module,ops")
    assert sum(k["macs"] for k in data["kernels"]) == 4 * (32 * 32 * 16 * 27 + 160)


@pytest.mark.parametrize("option", ["--csv", "--json"])
def test_layers_makes_the_missing_folder_of_a_data_file(tmp_path, option):
    out = tmp_path / "new" / "deeper" / f"k.{option[2:]}"
    result = CliRunner().invoke(cli.cli, ["layers", write_spec(tmp_path, TINY), option, str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    if option == "--csv":
        assert text.splitlines()[0].startswith("index,module,ops,output_shape,macs")
    else:
        data = json.loads(text)
        assert data["summary"]["model"] == "Tiny" and data["kernels"][0]["ops"] == "conv+bn+relu"


@pytest.mark.parametrize("option", ["--csv", "--json"])
def test_a_data_file_that_cannot_be_written_is_one_line_exit_2(tmp_path, capsys, option):
    (tmp_path / "afile").write_text("")  # a file where the folder should be
    out = tmp_path / "afile" / "k.out"
    code, stdout, err = run_main(["layers", write_spec(tmp_path, TINY), option, str(out)], capsys)
    assert code == 2 and stdout == ""  # refused before the analysis
    assert err.startswith(f"error: {out}: field '{option}': cannot create the folder "
                          f"{out.parent}: {out.parent} is a file")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_hardware_list_and_show():
    runner = CliRunner()
    listed = runner.invoke(cli.cli, ["hardware", "list"])
    assert listed.exit_code == 0
    for name in ("a5000-paper", "h200-sxm", "h200-sxm-measured", "rtx4090", "l4"):
        assert name in listed.output
    shown = runner.invoke(cli.cli, ["hardware", "show", "h200-sxm"])
    assert "989.4" in shown.output and "4800" in shown.output
    assert f"{989.4e12 / 4800e9:.1f}" in shown.output  # op:byte 206.1


BAD_SPECS = {
    "missing field": ("name: X\ninput: [3, 8, 8]\n", "field 'model': missing"),
    "unknown field": (TINY + "bacth: 3\n", "field 'bacth': unknown field (did you mean 'batch'?"),
    "unknown field, nothing close": (TINY + "qqqq: 3\n", "field 'qqqq': unknown field (allowed: "),
    "mistyped field": (TINY.replace("batch: 4", "batch: four"),
                       "field 'batch': expected an integer, got 'four'"),
    "unknown dtype": (TINY + "dtype: float12\n", "field 'dtype': unknown dtype 'float12'"),
    "unknown hardware": (TINY + "hardware: h900\n", "unknown hardware 'h900'"),
    "unimportable model": (TINY.replace(f"{DATA / 'tiny_net.py'}:build", "no_such_pkg.models:net"),
                           "field 'model': cannot import 'no_such_pkg.models'"),
    "bad input shape": (TINY.replace("[3, 32, 32]", "[5, 32, 32]"),
                        "field 'input': cannot trace {model} with input [5, 32, 32]: "),
    "inputs as written": (TINY.replace("[3, 32, 32]", "[[3, 32, 32], {shape: [8], dtype: int64}]"),
                          "cannot trace {model} with input [[3, 32, 32], {{shape: [8], dtype: "
                          "int64}}]: "),
    "untraceable model": (TINY.replace(":build", ":untraceable"), "cannot be traced"),
    "bad plan": (TINY + "plan: fused\n", "field 'plan': unknown plan 'fused'"),
    "model without module": (TINY.replace(f"{DATA / 'tiny_net.py'}:build", "resnet18"),
                             "field 'model': expected 'module:callable'"),
    "model one module up": (TINY.replace(f"{DATA / 'tiny_net.py'}:build", "torchvision:resnet18"),
                            "field 'model': 'torchvision' has no callable 'resnet18'; "
                            "did you mean 'torchvision.models:resnet18'?"),
    "model misspelt": (TINY.replace(f"{DATA / 'tiny_net.py'}:build", "torchvision.models:resnet81"),
                       "has no callable 'resnet81'; did you mean 'torchvision.models:resnet18'?"),
    "model nothing close": (TINY.replace(f"{DATA / 'tiny_net.py'}:build", "torchvision.models:qqqqqq"),
                            "'torchvision.models' has no callable 'qqqqqq'\n"),
}


@pytest.mark.parametrize("case", BAD_SPECS, ids=list(BAD_SPECS))
def test_bad_spec_is_one_line_exit_2(case, tmp_path, capsys):
    text, expected = BAD_SPECS[case]
    spec = write_spec(tmp_path, text)
    code, out, err = run_main(["waterline", spec, "-o", str(tmp_path / "w.png")], capsys)
    assert code == 2
    assert expected.format(model=f"{DATA / 'tiny_net.py'}:build") in err
    assert spec in err or "unknown hardware" in err  # names the file
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_hardware_config(tmp_path, capsys):
    hw = tmp_path / "hw.yaml"
    hw.write_text("name: broken\npeak_tflops: {float16: 100}\ndram_gbps: -5\nsource: test\n")
    code, _, err = run_main(["hardware", "show", str(hw)], capsys)
    assert code == 2
    assert err.strip() == f"error: {hw}: field 'dram_gbps': must be a positive number, got -5"


def test_missing_file(capsys, tmp_path):
    code, _, err = run_main(["layers", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2 and "nope.yaml: file not found" in err


def test_unknown_figure_format(tmp_path, capsys):
    code, _, err = run_main(["waterline", write_spec(tmp_path, TINY), "-o", "plot.bmp"], capsys)
    assert code == 2 and "unsupported figure format '.bmp'" in err


def test_dtype_option_is_parsed_where_it_enters(tmp_path, capsys):
    code, _, err = run_main(["layers", write_spec(tmp_path, TINY), "--dtype", "float12"], capsys)
    assert code == 2 and "Invalid value for '--dtype': unknown dtype 'float12'" in err
    code, out, _ = run_main(["layers", write_spec(tmp_path, TINY), "--dtype", "fp32", "-H",
                             "a5000"], capsys)
    assert code == 0 and "float32" in out


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_traceback(tmp_path, where):
    spec = write_spec(tmp_path, TINY + "dtype: float12\n")
    args = ["--debug", "layers", spec] if where == "before" else ["layers", spec, "--debug"]
    with pytest.raises(PerfmodelError) as exc:  # raised, not turned into a line and exit 2
        cli.main(args)
    assert "float12" in str(exc.value)


def test_debug_after_a_subgroups_command(capsys):
    with pytest.raises(PerfmodelError, match="unknown hardware 'nope'"):
        cli.main(["hardware", "show", "nope", "--debug"])
    code, _, err = run_main(["hardware", "show", "nope"], capsys)  # and off again without it
    assert code == 2 and err.startswith("error: ")


def test_strict_fails_on_unsupported_ops(tmp_path, capsys):
    net = tmp_path / "cumsum_net.py"
    net.write_text("import torch\nclass M(torch.nn.Module):\n"
                   "    def forward(self, x):\n        return torch.cumsum(x, 1)\n"
                   "def build():\n    return M()\n")
    spec = write_spec(tmp_path, f"model: {net}:build\ninput: [8]\nbatch: 2\n")
    code, out, _ = run_main(["layers", spec], capsys)
    assert code == 0 and "aten.cumsum" in out  # reported, not silently zero
    code, _, err = run_main(["layers", spec, "--strict"], capsys)
    assert code == 1 and "aten.cumsum.default x1" in err


def test_block_pattern_that_matches_nothing(tmp_path, capsys):
    code, _, err = run_main(["layers", write_spec(tmp_path, TINY), "--plan", "block:Bottleneck"],
                            capsys)
    assert code == 2
    assert "block pattern(s) Bottleneck matched no module (module classes here:" in err
    assert "Conv2d" in err


def test_unsupported_ops_are_reported_by_plot_commands_too(tmp_path):
    net = tmp_path / "cumsum_net.py"
    net.write_text("import torch\nclass M(torch.nn.Module):\n"
                   "    def forward(self, x):\n        return torch.cumsum(x, 1)\n"
                   "def build():\n    return M()\n")
    spec = write_spec(tmp_path, f"model: {net}:build\ninput: [8]\nbatch: 2\n")
    result = CliRunner().invoke(cli.cli, ["amdahl", spec, "-o", str(tmp_path / "a.png")])
    assert result.exit_code == 0, result.output
    assert "unsupported ops (bytes counted, arithmetic not): aten.cumsum.default x1" in result.output
