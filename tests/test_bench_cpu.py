"""The parts of perfmodel bench that need no GPU."""
from types import SimpleNamespace

import pytest

import perfmodel
from perfmodel.bench import _innermost_module, _spec_reference, percentile

from test_cli import DATA


def test_percentile_interpolates():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 0.5) == 3.0
    assert percentile(values, 0.2) == pytest.approx(1.8)  # 1 + 0.8 * (2 - 1)
    assert percentile(values, 0.8) == pytest.approx(4.2)


def test_spec_reference_is_portable_for_builtins():
    assert _spec_reference(perfmodel.load_spec("resnet50")) == "resnet50"
    assert _spec_reference(perfmodel.load_spec(DATA / "tiny.yaml")).endswith("tiny.yaml")


def test_kernels_are_attributed_to_the_innermost_module():
    root = SimpleNamespace(name="module:", cpu_parent=None)
    block = SimpleNamespace(name="module:layer1.0", cpu_parent=root)
    conv = SimpleNamespace(name="module:layer1.0.conv1", cpu_parent=block)
    op = SimpleNamespace(name="aten::convolution", cpu_parent=conv)
    loose = SimpleNamespace(name="aten::add_", cpu_parent=None)
    assert _innermost_module(op) == "layer1.0.conv1"
    assert _innermost_module(loose) == ""


def test_cli_offers_every_backend():
    import cli
    from perfmodel.bench import BACKENDS

    option = next(p for p in cli.bench.params if p.name == "backend")
    assert tuple(option.type.choices) == BACKENDS


def test_unknown_backend_is_bad_input(tmp_path):
    from perfmodel.bench import bench
    from perfmodel.errors import InputError

    with pytest.raises(InputError, match="unknown backend 'tensorrt'"):
        bench(perfmodel.load_spec("resnet50"), backend="tensorrt", output=tmp_path / "m.json")


def test_cuda_kernels_backend_swaps_every_supported_block():
    """ConvFirstNet-S: widths (32, 64, 128, 256), depths (3, 4, 12, 4), alpha 6: 23 stride-1
    blocks, all of supported shape; the 3 stride-2 blocks (out = 2 C) stay. ConvFirstNet-H200:
    widths (64, 128, 256, 512), depths (3, 4, 14, 3): C = 512 is not supported, 3 + 4 + 14 = 21."""
    import torch

    import cuda_kernels
    from perfmodel.zoo import FFN, MODELS, fold_batchnorm

    for name, expected in (("convfirstnet_s", 23), ("convfirstnet_h200", 21)):
        net = fold_batchnorm(MODELS[name]())
        assert cuda_kernels.replace_blocks(net) == {"ConvFirstBlock": expected, "FFN": 0}
        assert sum(isinstance(m, cuda_kernels.FusedConvFirstBlock) for m in net.modules()) == expected
    ffns = fold_batchnorm(torch.nn.Sequential(FFN(64, 4), FFN(64, 4, out_channels=128), FFN(48, 2)))
    assert cuda_kernels.replace_blocks(ffns) == {"ConvFirstBlock": 0, "FFN": 1}
    assert isinstance(ffns[0], cuda_kernels.FusedFFN) and isinstance(ffns[1], FFN)


def test_cuda_kernels_backend_refuses_a_model_without_fusable_blocks():
    import torch

    from perfmodel.bench import fused_model
    from perfmodel.errors import InputError

    with pytest.raises(InputError, match="no ConvFirst or FFN block"):
        fused_model(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3)), [torch.randn(1, 3, 8, 8)])


def _emulated_ffn(self, x):
    """What the FFN kernel computes, in float32 on the CPU, from its prepared weights."""
    import torch

    w = self.weights
    pixels = x.permute(0, 2, 3, 1).reshape(-1, w.channels).float()
    hidden = torch.relu(pixels @ w.w1.float().T + w.b1)
    y = hidden @ w.w2.float().T + w.b2 + (pixels if self.residual else 0)
    n, _, h, wd = x.shape
    return y.reshape(n, h, wd, w.channels).permute(0, 3, 1, 2)


def _ffn_net():
    import torch

    from perfmodel.zoo import FFN

    torch.manual_seed(0)
    return torch.nn.Sequential(FFN(64, 2, residual=True), torch.nn.ReLU(), FFN(64, 4)).eval()


def test_fused_model_checks_every_block(monkeypatch):
    import torch

    import cuda_kernels
    from perfmodel.bench import fused_model

    monkeypatch.setattr(cuda_kernels.FusedFFN, "forward", _emulated_ffn)
    fused, info = fused_model(_ffn_net(), [torch.randn(2, 64, 5, 5)])
    assert info["replaced_blocks"] == {"ConvFirstBlock": 0, "FFN": 2} and info["blocks_checked"] == 2
    assert info["max_block_relative_difference"] < 1e-3  # fp16 weights against fp32 ones


def test_fused_model_rejects_a_wrong_kernel(monkeypatch):
    import torch

    import cuda_kernels
    from perfmodel.bench import fused_model
    from perfmodel.errors import AnalysisError

    monkeypatch.setattr(cuda_kernels.FusedFFN, "forward", lambda self, x: torch.zeros_like(x))
    with pytest.raises(AnalysisError, match=r"fused block 0 differs from PyTorch by 1 .* and 1 more"):
        fused_model(_ffn_net(), [torch.randn(2, 64, 5, 5)])


def test_ncu_worker_gets_the_overridden_batch_and_dtype():
    from perfmodel.ncu import ncu_command

    cmd = ncu_command("resnet50", 64, "float32", "/tmp/report")
    assert cmd[cmd.index("perfmodel.ncu"):] == ["perfmodel.ncu", "resnet50", "64", "float32"]
    assert cmd[cmd.index("--clock-control") + 1] == "none"


def test_ncu_is_refused_for_other_backends(tmp_path):
    from perfmodel.bench import bench
    from perfmodel.errors import InputError

    with pytest.raises(InputError, match="--ncu profiles the eager model only"):
        bench(perfmodel.load_spec("resnet50"), backend="inductor", ncu=True, output=tmp_path / "m.json")
