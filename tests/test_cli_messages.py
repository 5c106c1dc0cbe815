"""Options that take numbers reject nonsense, and messages name the real source of a value."""
import pytest

import cli

from helpers import DATA, TINY, run_main
from helpers import write_spec as spec_file


@pytest.mark.parametrize("command", ["layers", "waterline"])
def test_top_rejects_negative_counts(command, tmp_path, capsys):
    output = ["-o", str(tmp_path / "w.png")] if command == "waterline" else []
    code, _, err = run_main([command, spec_file(tmp_path), "--top", "-3"] + output, capsys)
    assert code == 2
    assert "Invalid value for '--top': -3 is not in the range x>=0." in err


def test_top_zero_is_all_kernels_and_n_the_longest(tmp_path, capsys):
    spec = spec_file(tmp_path)
    # kernels: stem conv+bn+relu (4x3x32x32 in, 4x16x32x32 out: the longest), mean, head
    _, every, _ = run_main(["layers", spec, "--top", "0"], capsys)
    _, longest, _ = run_main(["layers", spec, "--top", "1"], capsys)
    assert all(name in every for name in ("stem", "head"))
    assert "stem" in longest and "head" not in longest
    _, summary, _ = run_main(["waterline", spec, "-o", str(tmp_path / "w.png"), "--top", "0"],
                             capsys)
    assert all(name in summary for name in ("C_max (waterline)", "stem", "head"))


LINEAR = ("model: torch.nn:Linear\nkwargs: {in_features: 16, out_features: 16}\ninput: [16]\n"
          "batch: 1\nhardware: h200-sxm\n")


def test_amdahl_refuses_a_fusion_target_below_i_mem(tmp_path, capsys):
    # one memory-bound kernel: 2 x 16 x 16 + 16 = 528 ops over 2 x (16 + 256 + 16 + 16) = 608 B
    spec = spec_file(tmp_path, LINEAR)
    code, out, err = run_main(["amdahl", spec, "--fuse-to", "0.5", "-o",
                               str(tmp_path / "a.png")], capsys)
    assert code == 2 and out == ""
    assert err.strip() == (f"error: field '--fuse-to': 0.5 ops/byte is below spec's I_mem "
                           f"{528 / 608:.4f} ops/byte, the intensity its memory-bound kernels "
                           f"have now; fusion raises intensity, so give I above {528 / 608:.4f}")
    code, out, _ = run_main(["amdahl", spec, "--fuse-to", "1", "-o", str(tmp_path / "a.png")],
                            capsys)
    # f = 1: T_min falls from 608 B / B to 528 ops / R at rho: speedup 608 / 528
    assert code == 0 and f"fusing to I=1: speedup x{608 / 528:.3g}" in out  # x1.15



@pytest.mark.parametrize("where, args, text, expected", [
    ("option", ["--plan", "block:NoSuchBlock"], TINY,
     "error: field '--plan': block pattern(s) NoSuchBlock matched no module"),
    ("spec", [], TINY + "plan: block:NoSuchBlock\n",
     "error: {spec}: field 'plan': block pattern(s) NoSuchBlock matched no module"),
    ("option", ["--hardware", "h900"], TINY, "error: field '--hardware': unknown hardware 'h900'"),
    ("spec", [], TINY + "hardware: h900\n",
     "error: {spec}: field 'hardware': unknown hardware 'h900' (built-in: a100-sxm4-80gb,"),
], ids=["plan option", "plan in spec", "hardware option", "hardware in spec"])
def test_a_bad_value_is_blamed_on_where_it_came_from(where, args, text, expected, tmp_path,
                                                      capsys):
    spec = spec_file(tmp_path, text)
    code, _, err = run_main(["layers", spec] + args, capsys)
    assert code == 2 and err.startswith(expected.format(spec=spec))
    assert (spec in err) == (where == "spec")


@pytest.mark.parametrize("line, expected", [
    ("accuracy: high", "field 'accuracy': expected a number, got 'high'"),
    ("kwargs: [1, 2]", "field 'kwargs': expected a mapping, got [1, 2]"),
    ("input: 3", "field 'input': expected a list or a mapping, got 3"),
])
def test_type_errors_read_as_yaml_not_python(line, expected, tmp_path, capsys):
    spec = spec_file(tmp_path, TINY.replace("input: [3, 32, 32]\n", "") + line + "\n"
                     + ("input: [3, 32, 32]\n" if not line.startswith("input") else ""))
    code, _, err = run_main(["layers", spec], capsys)
    assert code == 2 and err.strip() == f"error: {spec}: {expected}"
    assert "<class" not in err


def test_default_figure_names_carry_the_plan(tmp_path, monkeypatch, capsys):
    spec = spec_file(tmp_path)  # spec.yaml, plan layer
    monkeypatch.chdir(tmp_path)
    for args, name in [([], "spec_waterline.png"), (["--plan", "op"], "spec_op_waterline.png"),
                       (["--plan", "block:stem,head"], "spec_block-stem-head_waterline.png")]:
        code, out, _ = run_main(["waterline", spec] + args, capsys)
        assert code == 0 and out.strip().endswith(f"wrote {name}")
        assert (tmp_path / name).stat().st_size > 10_000
    code, out, _ = run_main(["amdahl", spec, "--plan", "op"], capsys)
    assert code == 0 and out.strip().endswith("wrote amdahl_op_roofline.png")


def test_help_says_which_hardware_each_command_defaults_to():
    from click.testing import CliRunner

    top = " ".join(CliRunner().invoke(cli.cli, ["--help"]).output.split())
    assert ("commands that analyse a model use the spec's `hardware` (a5000-paper, the paper's "
            "GPU, where the spec names none); machine, gap, compare and kernels default to "
            "h200-sxm") in top
    layers = CliRunner().invoke(cli.cli, ["layers", "--help"]).output
    assert "Overrides the spec's `hardware`" in layers


def test_l2_probe_without_nsight_compute_names_the_command_not_an_option(tmp_path, monkeypatch,
                                                                          capsys):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda _name: None)  # no ncu, on any machine
    code, _, err = run_main(["l2-probe", "-o", str(tmp_path / "p.json")], capsys)
    assert code == 2
    assert err.strip() == "error: l2-probe needs Nsight Compute's `ncu` on the PATH"


@pytest.mark.parametrize("args, option", [
    (["intensity", "--mark", "bogus"], "--mark"),
    (["sweep", "{spec}", "--mark", "bogus"], "--mark"),
    (["machine", "ffn_fused", "--hardware", "bogus"], "--hardware"),
    (["gap", "{spec}", "--hardware", "bogus"], "--hardware"),
    (["estimate", "{spec}", "--hardware", "bogus"], "--hardware"),
], ids=["intensity --mark", "sweep --mark", "machine --hardware", "gap --hardware",
        "estimate --hardware"])
def test_an_unknown_hardware_is_blamed_on_the_flag_typed(args, option, tmp_path, capsys):
    spec = spec_file(tmp_path)
    code, out, err = run_main([a.format(spec=spec) for a in args], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"error: field '{option}': unknown hardware 'bogus' (built-in: ")


@pytest.mark.parametrize("args, option, text", [
    (["intensity", "--channels", "1024:8"], "--channels", "1024:8"),
    (["sweep", "{spec}", "--opbyte", "0:10"], "--opbyte", "0:10"),
])
def test_a_bad_range_names_its_option(args, option, text, tmp_path, capsys):
    code, _, err = run_main([a.format(spec=spec_file(tmp_path)) for a in args], capsys)
    assert code == 2
    assert (f"Error: Invalid value for '{option}': expected LOW:HIGH with 0 < LOW < HIGH, "
            f"got '{text}'") in err


def test_machine_lists_derived_defaults_as_the_words_it_accepts(tmp_path, capsys):
    code, listing, _ = run_main(["machine"], capsys)
    assert code == 0 and "=0" not in listing
    assert "stride=1, c_out=c, tile=auto, chunk=all)" in listing
    assert "c_out=c: the input's channels" in listing
    reports = []
    for i, settings in enumerate([[], ["c_out=c", "tile=auto"], ["c_out=24"]]):  # c is 24
        args = [a for s in settings for a in ("--set", s)]
        code, out, _ = run_main(["machine", "mbconv_layer", *args, "-o",
                                 str(tmp_path / f"m{i}.svg")], capsys)
        assert code == 0
        reports.append(out.rpartition("wrote")[0])
    assert reports[0] == reports[1] == reports[2] and "mbconv_layer: " in reports[0]
    code, _, err = run_main(["machine", "mbconv_layer", "--set", "c_out=0"], capsys)
    assert code == 2 and err.strip().endswith("(or c_out=c, tile=auto)")
