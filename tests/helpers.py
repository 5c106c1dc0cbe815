"""Helpers that several test files share (imported as `from helpers import ...`; tests/ is
on the path through conftest.py). Test files import this module, never each other."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).parent.parent / "examples"

TINY = textwrap.dedent(f"""\
    name: Tiny
    model: {DATA / 'tiny_net.py'}:build
    input: [3, 32, 32]
    batch: 4
""")


def run_main(args, capsys):
    """Run the real entry point (error handling included) and return code, stdout, stderr."""
    import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def write_spec(tmp_path, text=TINY, name="spec.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def make_case(tmp_path, width, accuracy, latency_ms, batch=32, gpu="NVIDIA H200"):
    """A measurement file of the tiny net at `width`, with its spec beside it."""
    from perfmodel.measure import write_measurement

    spec = tmp_path / f"tiny{width}.yaml"
    spec.write_text(f"name: Tiny-W{width}\nmodel: {DATA / 'tiny_net.py'}:build\n"
                    f"kwargs: {{width: {width}}}\ninput: [3, 128, 128]\nbatch: {batch}\n"
                    f"accuracy: {accuracy}\n")
    return write_measurement(
        tmp_path / f"tiny{width}.json", command="made by the test", environment={"gpu": gpu},
        workload={"spec": str(spec), "model": f"Tiny-W{width}", "batch": batch,
                  "dtype": "float16", "backend": "eager"},
        method={"repeats": 20, "statistic": "median"},
        results={"latency_ms": {"median": latency_ms, "p20": latency_ms * 0.99,
                                "p80": latency_ms * 1.01}})


def randomize_batchnorm(model, seed: int = 0):
    """Give every BatchNorm non-trivial running statistics and affine parameters."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.5)
            m.running_var.copy_(torch.rand(n, generator=g) * 2 + 0.1)
            m.weight.data.copy_(torch.randn(n, generator=g))
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.3)
    return model.eval()


def dynamo_graph(net, x):
    """The one graph torch.compile captures of `net` on `x` (fullgraph), without compiling or
    running it: what a fused block looks like to Inductor (its fake implementation)."""
    import torch

    graphs = []

    def record(gm, _example_inputs):
        graphs.append(gm)

        def refuse(*_args):
            raise RuntimeError("recorded only")
        return refuse

    with pytest.raises(RuntimeError, match="recorded only"):
        torch.compile(net, backend=record, fullgraph=True)(x)
    [graph] = graphs
    return graph


# ---- fused kernels (tests/test_convfirst_s2.py, tests/test_convfirst_c512.py, tests/test_convfirst_c768.py) ----

def channels_last(x):
    import torch

    return x.contiguous(memory_format=torch.channels_last)


def misaligned_nhwc(shape):
    """A float16 channels_last tensor of `shape` 2 bytes past a 16-byte boundary (CPU)."""
    import torch

    n, c, h, w = shape
    storage = torch.zeros(n * c * h * w + 8, dtype=torch.float16)
    return storage[1:].as_strided(shape, (h * w * c, 1, w * c, c))


def stride1_host_check_cases(channels: int, other_channels: int, channels_message: str) -> list[tuple]:
    """(make, message) pairs for the stride-1 wgmma kernels' ``check_input`` tests (convfirst_c512,
    convfirst_c768) at `channels`: what each input breaks and the error it must raise (not 4-D, NCHW memory,
    float32, `other_channels` channels (`channels_message`), W = 29, misaligned, and last a valid input on
    the CPU: the device is checked last)."""
    import torch

    return [
        (lambda: torch.zeros(channels, 7, 7, dtype=torch.float16), r"\[N, C, H, W\]"),
        (lambda: torch.zeros(1, channels, 7, 7, dtype=torch.float16), "channels_last"),
        (lambda: channels_last(torch.zeros(1, channels, 7, 7)), "float16"),
        (lambda: channels_last(torch.zeros(1, other_channels, 7, 7, dtype=torch.float16)), channels_message),
        (lambda: channels_last(torch.zeros(1, channels, 7, 29, dtype=torch.float16)), "W <= 28"),
        (lambda: misaligned_nhwc((1, channels, 2, 2)), "16-byte aligned"),
        (lambda: channels_last(torch.zeros(1, channels, 7, 7, dtype=torch.float16)), "CUDA tensor"),
    ]


def swap_against_float64(net, x) -> tuple:
    """`net`'s blocks swapped for the fused kernels (``cuda_kernels.replace_blocks``) and run on x, beside the
    unswapped net in float64: (swap report, output, float64 output)."""
    import copy

    import torch

    import cuda_kernels

    with torch.no_grad():
        exact = copy.deepcopy(net).double()(x.double())
        swap = cuda_kernels.replace_blocks(net)
        got = net(x)
    return swap, got, exact


def check_against_float64(block, x, run, out_shape: tuple) -> float:
    """Run a kernel (`run(out)`) on a NaN-poisoned output and compare against the float64 zoo
    block: its error must be at most twice PyTorch float16's (and PyTorch's nonzero, else the
    check would be blind). Leaves `block` in float16."""
    import copy

    import torch

    from perfmodel.harness import relative_error

    with torch.no_grad():
        exact = copy.deepcopy(block).double()(x.double())
        torch_fp16 = block.half()(x)
    out = channels_last(torch.full(out_shape, float("nan"), device="cuda", dtype=torch.float16))
    got = run(out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr() and got.shape == exact.shape
    assert torch.isfinite(got).all(), "unwritten or non-finite outputs"
    err, torch_err = relative_error(got, exact), relative_error(torch_fp16, exact)
    assert torch_err > 0, "PyTorch matched float64 exactly: the check is blind"
    assert err <= 2 * torch_err, f"kernel error {err:.3g} > 2 x PyTorch fp16 error {torch_err:.3g}"
    return err


def strip_comments(source: str) -> str:
    """C++ source without its /* */ and // comments."""
    source = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    return re.sub(r"//[^\n]*", "", source)


def kernel_body(source: str, name: str) -> str:
    """The body of the __global__ (or __device__) function `name` in CUDA `source`, from its opening brace to the
    matching one."""
    match = re.search(r"(?:__global__|__device__)[^;{}]*?\b" + re.escape(name) + r"\s*\(", source)
    if match is None:
        raise ValueError(f"no __global__ or __device__ function {name}")
    open_ = source.index("{", match.end())
    depth = 0
    for i in range(open_, len(source)):
        depth += {"{": 1, "}": -1}.get(source[i], 0)
        if depth == 0:
            return source[open_:i + 1]
    raise AssertionError(f"unbalanced body of {name}")
