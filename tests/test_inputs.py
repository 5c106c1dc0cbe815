"""Model inputs take the same forms, and are checked the same way, in a spec and in the API:
a shape, {shape, dtype} for token ids, or a list of either."""

import pytest

import perfmodel
from perfmodel.errors import InputError

from helpers import DATA

LM_MACS = 2 * 16 * (64 * 256 + 256 * 64 + 64 * 1000)  # batch 2 x 16 tokens through TinyLM


def tiny_lm():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_lm", DATA / "tiny_lm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build()


@pytest.mark.parametrize("text", ["{shape: [16], dtype: int64}", "[{shape: [16], dtype: int64}]"])
def test_spec_takes_the_readme_token_id_form(tmp_path, text):
    spec = tmp_path / "lm.yaml"
    spec.write_text(f"model: {DATA / 'tiny_lm.py'}:build\ninput: {text}\nbatch: 2\nplan: op\n")
    r = perfmodel.analyze_spec(spec)
    assert r.kernels[0].kernel.input_bytes == 2 * 16 * 8  # int64 token ids
    assert r.macs == LM_MACS


@pytest.mark.parametrize("inputs", [{"shape": [16], "dtype": "int64"},
                                    [{"shape": (16,), "dtype": "int64"}]])
def test_api_takes_the_same_forms(inputs):
    r = perfmodel.analyze(tiny_lm(), inputs, batch=2, plan="op")
    assert r.kernels[0].kernel.input_bytes == 2 * 16 * 8
    assert r.macs == LM_MACS


@pytest.mark.parametrize("kwargs, message", [
    ({"batch": 0}, "field 'batch': must be a positive integer, got 0"),
    ({"batch": -1}, "field 'batch': must be a positive integer, got -1"),
    ({"batch": 2.5}, "field 'batch': must be a positive integer, got 2.5"),
    ({"inputs": {"shap": [16]}}, "field 'inputs': unknown key 'shap' in {'shap': [16]} "
                                 "(an input takes shape and dtype)"),
    ({"inputs": [{"shape": [16], "dtype": "int4"}]}, "field 'inputs': unknown input dtype 'int4'"),
    ({"inputs": [[16], "x"]}, "field 'inputs': expected a per-sample shape of positive integers "
                              "such as [3, 224, 224], {shape: [128], dtype: int64} or a list of "
                              "them, got [[16], 'x']"),
    ({"inputs": (3, 0, 4)}, "field 'inputs': expected a per-sample shape"),
])
def test_api_rejects_what_the_spec_loader_rejects(kwargs, message):
    args = {"inputs": {"shape": [16], "dtype": "int64"}, "batch": 2} | kwargs
    with pytest.raises(InputError) as exc:
        perfmodel.analyze(tiny_lm(), args["inputs"], batch=args["batch"])
    assert str(exc.value).startswith(message)


def test_spec_and_cli_reject_the_same_batch(tmp_path, capsys):
    import cli

    spec = tmp_path / "lm.yaml"
    spec.write_text(f"model: {DATA / 'tiny_lm.py'}:build\ninput: {{shape: [16], dtype: int64}}\n")
    with pytest.raises(SystemExit) as exc:
        cli.main(["layers", str(spec), "--batch", "0"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == ("error: field '--batch': must be a positive "
                                               "integer, got 0")
