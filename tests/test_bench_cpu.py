"""The parts of perfmodel bench that need no GPU."""
import os
from types import SimpleNamespace

import pytest

import perfmodel
from perfmodel.bench import _spec_reference
from perfmodel.harness import latency_stats, percentile

from helpers import DATA, dynamo_graph


def test_percentile_interpolates():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 0.5) == 3.0
    assert percentile(values, 0.2) == pytest.approx(1.8)  # 1 + 0.8 * (2 - 1)
    assert percentile(values, 0.8) == pytest.approx(4.2)
    assert latency_stats(values) == {"median": 3.0, "p20": pytest.approx(1.8),
                                     "p80": pytest.approx(4.2), "min": 1.0, "repeats": 5}


def test_spec_reference_is_portable_for_builtins():
    assert _spec_reference(perfmodel.load_spec("resnet50")) == "resnet50"
    assert _spec_reference(perfmodel.load_spec(DATA / "tiny.yaml")).endswith("tiny.yaml")


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


def test_cuda_kernels_backend_swaps_every_supported_block(monkeypatch):
    """ConvFirstNet-S: widths (32, 64, 128, 256), depths (3, 4, 12, 4), alpha 6: 23 stride-1
    blocks and 3 stride-2 blocks (C -> 2C: 32 -> 64, 64 -> 128, 128 -> 256), all supported.
    ConvFirstNet-H200: widths (64, 128, 256, 512), depths (3, 4, 14, 3): 3 + 4 + 14 + 3 = 24
    stride-1 blocks and 3 stride-2 blocks, all fused with the C = 512 kernels on (the
    default); with CUDA_KERNELS_C512=0 the 256 -> 512 stride-2 block and the 3 C = 512 blocks
    stay, each with its FFN: 8 fallbacks, each with its reason."""
    import torch

    import cuda_kernels
    from cuda_kernels import convfirst_c512 as c512
    from perfmodel.zoo import FFN, MODELS, fold_batchnorm

    monkeypatch.delenv(c512.ENV_SWITCH, raising=False)
    for name, switch, expected, down, fallbacks in (("convfirstnet_s", None, 23, 3, 0),
                                                    ("convfirstnet_h200", None, 24, 3, 0),
                                                    ("convfirstnet_h200", "0", 21, 2, 8)):
        if switch is not None:
            monkeypatch.setenv(c512.ENV_SWITCH, switch)
        net = fold_batchnorm(MODELS[name]())
        swap = cuda_kernels.replace_blocks(net)
        assert swap.fused == {"ConvFirstBlock": expected + down, "FFN": 0, "Stem": 1}  # the stem: stem.py
        assert len(swap.fallback) == fallbacks
        # stride-1 blocks on the mma.sync kernel, or on the wgmma one: C = 512 and the widths it
        # takes by default (C = 64, 128 and 256: convfirst_c512.DEFAULT_WGMMA_WIDTHS)
        wgmma = [m for m in net.modules() if isinstance(m, cuda_kernels.FusedConvFirstC512)]
        assert all(m.channels in c512.wgmma_widths() + (512,) for m in wgmma)
        assert sum(isinstance(m, cuda_kernels.FusedConvFirstBlock) for m in net.modules()) + len(wgmma) == expected
        assert sum(isinstance(m, cuda_kernels.FusedConvFirstDown) for m in net.modules()) == down
    assert swap.fallback["stages.3.0"].startswith("C 256 -> 512")
    assert swap.fallback["stages.3.1"].startswith("C=512")
    ffns = fold_batchnorm(torch.nn.Sequential(FFN(64, 4), FFN(64, 4, out_channels=128), FFN(48, 2)))
    swap = cuda_kernels.replace_blocks(ffns)
    assert swap.fused == {"ConvFirstBlock": 0, "FFN": 1}
    assert swap.fallback == {"1": "out_channels 128 != channels 64",
                             "2": "C=48 (kernels for C in (32, 64, 96, 128, 192, 256))"}
    assert isinstance(ffns[0], cuda_kernels.FusedFFN) and isinstance(ffns[1], FFN)


def test_cuda_kernels_backend_refuses_a_model_without_fusable_blocks():
    import torch

    from perfmodel.bench import fused_model
    from perfmodel.errors import InputError

    with pytest.raises(InputError, match="no ConvFirst or FFN block"):
        fused_model(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3)), [torch.randn(1, 3, 8, 8)])


def _emulated_ffn(self, x):
    """What the FFN kernel computes, from its prepared fp16 weights, accumulating in float32
    and rounding once to the input's dtype."""
    import torch

    w = self.weights
    pixels = x.permute(0, 2, 3, 1).reshape(-1, w.channels).float()
    hidden = torch.relu(pixels @ w.w1.float().T + w.b1)
    y = hidden @ w.w2.float().T + w.b2 + (pixels if self.residual else 0)
    n, _, h, wd = x.shape
    return y.reshape(n, h, wd, w.channels).permute(0, 3, 1, 2).to(x.dtype)


def _ffn_net():
    import torch

    from perfmodel.harness import randomize_batchnorm
    from perfmodel.zoo import FFN

    torch.manual_seed(0)
    net = torch.nn.Sequential(FFN(64, 2, residual=True), torch.nn.ReLU(), FFN(64, 4))
    return randomize_batchnorm(net).eval().half()


def _x():
    import torch

    return torch.randn(2, 64, 5, 5, generator=torch.Generator().manual_seed(1)).half()


def test_fused_model_checks_every_block_against_float64(monkeypatch):
    import torch

    import cuda_kernels
    from perfmodel.bench import fused_model

    monkeypatch.setattr(cuda_kernels.FusedFFN, "forward", _emulated_ffn)
    for name in [k for k in os.environ if k.startswith("CUDA_KERNELS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CUDA_KERNELS_PDL", "1")
    fused, info = fused_model(_ffn_net(), [_x()])
    assert info["fused_blocks"] == {"ConvFirstBlock": 0, "FFN": 2} and info["fallback_count"] == 0
    assert info["switches"] == {"CUDA_KERNELS_PDL": "1"}  # the kernel switches of the run are on record
    check = info["check"]
    assert check["blocks_checked"] == 2 and set(check["blocks"]) == {"0", "2"}
    for row in check["blocks"].values():
        # fp16 really differs from the float64 reference (about 2^-11 relative), and the
        # emulated kernel, rounding once, errs less than PyTorch rounding after every layer
        assert 1e-4 < row["torch_relative_error"] < 2e-3
        assert 0 < row["relative_error"] <= 2 * row["torch_relative_error"] and row["passed"]


@pytest.mark.parametrize("wrong", ["zeros", "bias", "scale"])
def test_fused_model_rejects_a_wrong_kernel(monkeypatch, wrong):
    """The check fails on a kernel that is off by a small bias or a 1% scale, not only on
    garbage: the batchnorm statistics are randomized, so biases are not zero."""
    import torch

    import cuda_kernels
    from perfmodel.bench import fused_model
    from perfmodel.errors import AnalysisError

    def forward(self, x):
        y = _emulated_ffn(self, x)
        if wrong == "zeros":
            return torch.zeros_like(y)
        if wrong == "bias":  # the output bias forgotten, as with an unfolded batchnorm shift
            return y - self.weights.b2.view(1, -1, 1, 1).to(y.dtype)
        return y * 1.01

    monkeypatch.setattr(cuda_kernels.FusedFFN, "forward", forward)
    with pytest.raises(AnalysisError, match=r"fused block 0 has relative error .* and 1 more"):
        fused_model(_ffn_net(), [_x()])


def test_ncu_worker_gets_the_overridden_batch_and_dtype():
    from perfmodel.ncu import ncu_command

    cmd = ncu_command("resnet50", 64, "float32", "/tmp/report")
    assert cmd[cmd.index("perfmodel.ncu"):] == ["perfmodel.ncu", "resnet50", "64", "float32"]
    assert cmd[cmd.index("--clock-control") + 1] == "none"


def test_ncu_worker_compiles_and_flushes_when_asked():
    from perfmodel.fidelity import cache_control
    from perfmodel.ncu import ncu_command, note

    cmd = ncu_command("resnet50", 128, "float16", "/tmp/report", "all", "inductor", freezing=True)
    assert cmd[cmd.index("--cache-control") + 1] == "all"
    assert cmd[cmd.index("perfmodel.ncu"):] == ["perfmodel.ncu", "resnet50", "128", "float16",
                                                "inductor", "freezing"]
    assert cache_control({"ncu": note("all")}) == "all"
    with pytest.raises(ValueError, match="cache_control"):
        ncu_command("resnet50", 128, "float16", "/tmp/report", "some")


@pytest.mark.parametrize("backend, mode, message", [
    ("cuda_kernels", "default", "--ncu profiles the eager or the inductor model"),
    ("inductor", "max-autotune", "--ncu compiles in the default mode only")])
def test_ncu_is_refused_where_its_worker_cannot_run_the_model(tmp_path, backend, mode, message):
    from perfmodel.bench import bench
    from perfmodel.errors import InputError

    with pytest.raises(InputError, match=message):
        bench(perfmodel.load_spec("resnet50"), backend=backend, compile_mode=mode, ncu=True,
              output=tmp_path / "m.json")


def test_fused_blocks_are_one_opaque_operator_each_under_torch_compile():
    """--compile-rest: dynamo captures ConvFirstNet-S with its 23 fused stride-1 blocks as
    block_fusion::block operators (the 4 at C = 256, the 12 at C = 128 and the 4 at C = 64 as
    convfirst_c512::block, the wgmma kernel's, while those widths are among its default widths) and its 3 stride-2 blocks as convfirst_s2::block
    operators in one graph, each output channels-last like its input
    (the operator's fake implementation; nothing runs on a GPU here)."""
    import torch

    import cuda_kernels
    from cuda_kernels import convfirst_c512 as c512
    from perfmodel.harness import randomize_batchnorm
    from perfmodel.zoo import MODELS, fold_batchnorm

    net = fold_batchnorm(randomize_batchnorm(MODELS["convfirstnet_s"]())).half()
    cuda_kernels.replace_blocks(net)
    x = torch.randn(2, 3, 64, 64).half().contiguous(memory_format=torch.channels_last)
    graph = dynamo_graph(net, x)
    fused = [n for n in graph.graph.nodes if "block_fusion" in str(n.target)]
    wgmma = [n for n in graph.graph.nodes if "convfirst_c512" in str(n.target)]
    widths = c512.wgmma_widths()
    assert len(fused) + len(wgmma) == 23
    assert len(wgmma) == 4 * (256 in widths) + 12 * (128 in widths) + 4 * (64 in widths)
    if wgmma:
        last = wgmma[-1].meta["example_value"]  # stage 3: 256 channels at 64 / 32 = 2 pixels square
        assert tuple(last.shape) == (2, 256, 2, 2) and last.stride() == (2 * 2 * 256, 1, 2 * 256, 256)
    first = fused[0].meta["example_value"]  # stage 0: 32 channels at 64 / 4 = 16 pixels square
    assert tuple(first.shape) == (2, 32, 16, 16) and first.stride() == (16 * 16 * 32, 1, 16 * 32, 32)
    down = [n for n in graph.graph.nodes if "convfirst_s2" in str(n.target)]
    assert len(down) == 3  # the stride-2 blocks, on their own operator
    half = down[0].meta["example_value"]  # 32 -> 64 channels, 16 -> 8 pixels square
    assert tuple(half.shape) == (2, 64, 8, 8) and half.stride() == (8 * 8 * 64, 1, 8 * 64, 64)


def test_a_failing_nsight_compute_run_is_an_analysis_error_not_a_traceback(monkeypatch, tmp_path):
    """ncu present but failing (no GPU, no permission to the counters): exit 1 with the
    command, instead of a CalledProcessError traceback."""
    import shutil
    import subprocess

    from perfmodel import ncu
    from perfmodel.errors import AnalysisError

    monkeypatch.setattr(shutil, "which", lambda _name: "/usr/bin/ncu")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 9))
    with pytest.raises(AnalysisError, match="Nsight Compute exited with 9"):
        ncu.collect_probe_csv("all")


def test_gpu_state_parses_nvidia_smi_and_survives_its_absence(monkeypatch):
    import subprocess

    from perfmodel import harness

    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        return SimpleNamespace(stdout="1755, 3201, 61, 512.34, 0x0000000000000004\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert harness.gpu_state() == {"clock_sm": "1755", "clock_mem": "3201", "temperature_c": "61",
                                   "power_w": "512.34", "throttle_reasons": "0x0000000000000004"}
    assert "clocks_throttle_reasons.active" in seen[0][1] and "nounits" in seen[0][2]
    # on a machine of several GPUs, the one torch measures (the first visible), not nvidia-smi's first
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    harness.gpu_state()
    assert seen[1][1:3] == ["-i", "1"]

    def missing(cmd, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(subprocess, "run", missing)
    assert harness.gpu_state()["nvidia_smi"].startswith("unavailable")
