"""EfficientNet's head with its pool fused (cuda_kernels/effnet_head.py, csrc/effnet_head.cu; on by default since
session 21, CUDA_KERNELS_EFFNET_HEAD=0 turns it off): the last 1x1 convolution by cuBLAS without its bias, then one kernel for bias + SiLU + the mean
over each image's pixels.

CPU: which models have the head (torchvision's EfficientNets B0 / B2 / V2-S; not a ResNet), what the kernel refuses
and why, the swap (the layer replaced, the reference paths the check before timing runs), replace_blocks' count and
fallback under the switch, the decomposition (pixel rows grouped by image, the product, bias, SiLU, the row mean) in
float64 against the convolution and pool, the pool operator's input rules and its fake, the kernel's build for sm_80
and sm_90a. GPU (@pytest.mark.cuda): the pool against float64 at B0's, B2's and odd shapes and batches (NaN left in
the allocator first: a value not written shows), within 2x PyTorch fp16's error; B0 through the check before timing
with the switch on (17 units checked); the profiler naming the kernel."""

import os
import subprocess
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

import cuda_kernels
from cuda_kernels import effnet_head as eh
from cuda_kernels import replace_blocks

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"


def folded(name: str) -> nn.Module:
    from perfmodel.harness import randomize_batchnorm
    from perfmodel.zoo import fold_batchnorm

    torch.manual_seed(0)
    return fold_batchnorm(randomize_batchnorm(getattr(torchvision.models, name)()).eval())


@pytest.mark.parametrize("name,path,c_in,c", [("efficientnet_b0", "features.8", 320, 1280),
                                              ("efficientnet_b2", "features.8", 352, 1408),
                                              ("efficientnet_v2_s", "features.7", 256, 1280)])
def test_the_head_of_each_efficientnet(name, path, c_in, c):
    model = folded(name)
    assert eh.head_path(model) == path and eh.unsupported(model.get_submodule(path)) is None
    got_path, reason = eh.swap(model)
    assert (got_path, reason) == (path, None)
    head = model.get_submodule(path)
    assert isinstance(head, eh.FusedEffNetHead) and head.reference_paths == (path, "avgpool")
    assert tuple(head.weight.shape) == (c, c_in) and head.bias.dtype == torch.float32 and head.bias.numel() == c


def test_models_without_the_head():
    assert eh.head_path(torchvision.models.resnet18()) is None
    assert eh.swap(torchvision.models.resnet18()) == (None, eh.NOT_A_HEAD)
    model = folded("efficientnet_b0")
    model.avgpool = nn.AdaptiveAvgPool2d(2)  # not a global pool
    assert eh.head_path(model) is None


def test_what_the_kernel_refuses():
    unfolded = torchvision.models.efficientnet_b0().features[8]
    assert eh.unsupported(unfolded) == "not in inference form (fold batchnorm first)"
    strided = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=True), nn.Identity(), nn.SiLU())
    assert "plain 1x1 convolution" in eh.unsupported(strided)
    assert "odd" in eh.unsupported(nn.Sequential(nn.Conv2d(8, 15, 1, bias=True), nn.Identity(), nn.SiLU()))
    assert "no bias" in eh.unsupported(nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.Identity(), nn.SiLU()))
    assert eh.unsupported(nn.Sequential(nn.Conv2d(8, 16, 1), nn.Identity(), nn.ReLU())) == eh.NOT_A_HEAD


class TinyEffNet(nn.Module):  # torchvision's EfficientNet layout, small
    def __init__(self, c_out: int = 16):
        super().__init__()
        self.features = nn.Sequential(nn.Sequential(nn.Conv2d(8, c_out, 1, bias=True), nn.Identity(), nn.SiLU()))
        self.avgpool = nn.AdaptiveAvgPool2d(1)


def test_replace_blocks_counts_the_head_under_its_switch(monkeypatch):
    monkeypatch.setenv(eh.SWITCH, "0")
    model = TinyEffNet()
    swap = replace_blocks(model)
    assert "EffNetHead" not in swap.fused and not isinstance(model.features[0], eh.FusedEffNetHead)  # switched off
    monkeypatch.delenv(eh.SWITCH)
    swap = replace_blocks(model)  # on by default
    assert swap.fused["EffNetHead"] == 1 and isinstance(model.features[0], eh.FusedEffNetHead)
    odd = TinyEffNet(15)
    swap = replace_blocks(odd)
    assert swap.fused["EffNetHead"] == 0 and "odd" in swap.fallback["features.0"]
    assert eh.FusedEffNetHead in cuda_kernels.FUSED_MODULES  # so bench's check before timing checks it


@pytest.mark.parametrize("n,h,w", [(3, 7, 7), (2, 1, 1), (4, 5, 3)])
def test_the_decomposition_is_the_head(n, h, w):
    """What FusedEffNetHead.forward and the kernel compute, in float64: rows of a channels-last x (each image's pixels
    consecutive), the product with the weight, + bias, SiLU, the mean of each image's rows."""
    torch.manual_seed(n)
    conv = nn.Conv2d(24, 10, 1).double()
    x = torch.randn(n, 24, h, w, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    rows = x.permute(0, 2, 3, 1).reshape(n * h * w, 24)
    y = rows @ conv.weight.reshape(10, 24).t()
    pooled = torch.nn.functional.silu(y + conv.bias).reshape(n, h * w, 10).mean(dim=1)
    expected = eh.reference(x, conv.weight, conv.bias)
    assert expected.shape == (n, 10, 1, 1)
    torch.testing.assert_close(pooled.view(n, 10, 1, 1), expected, rtol=1e-12, atol=1e-12)


def test_pool_input_rules():
    y, b = torch.zeros(6, 4, dtype=torch.float16), torch.zeros(4)
    with pytest.raises(ValueError, match="not N \\* HW"):
        eh.check_pool_input(y, b, 4)
    with pytest.raises(ValueError, match="even"):
        eh.check_pool_input(torch.zeros(6, 3, dtype=torch.float16), torch.zeros(3), 2)
    with pytest.raises(ValueError, match="float16"):
        eh.check_pool_input(y.float(), b, 2)
    with pytest.raises(ValueError, match="bias"):
        eh.check_pool_input(y, torch.zeros(4, dtype=torch.float16), 2)
    with pytest.raises(ValueError, match="CUDA"):
        eh.check_pool_input(y, b, 2)  # every other rule holds: only the device is wrong


def test_the_operators_fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        out = eh.head_pool_op(torch.empty(5 * 49, 1280, dtype=torch.float16), torch.empty(1280), 5)
    assert tuple(out.shape) == (5, 1280) and out.dtype == torch.float16


@pytest.mark.parametrize("arch", ["compute_80,code=sm_80", "compute_90a,code=sm_90a"])
def test_the_kernel_builds(arch, tmp_path):
    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    if not nvcc.exists():
        pytest.skip("nvcc not found (set CUDA_HOME)")
    cmd = [str(nvcc), "-std=c++17", "-O3", f"-gencode=arch={arch}", f"-I{CSRC}", "-c", str(CSRC / "effnet_head.cu"),
           "-o", str(tmp_path / "head.o")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


# ---- GPU ----

@pytest.mark.cuda
@pytest.mark.parametrize("n,hw,c_in,c", [(128, 49, 320, 1280), (1, 49, 320, 1280), (5, 81, 352, 1408),
                                         (3, 1, 64, 1000), (7, 13, 40, 258)])
def test_the_head_against_float64(n, hw, c_in, c):
    from perfmodel.harness import relative_error

    torch.manual_seed(hw + c)
    h, w = (7, 7) if hw == 49 else (9, 9) if hw == 81 else (hw, 1)
    conv = nn.Conv2d(c_in, c, 1).cuda()
    with torch.no_grad():
        conv.weight.mul_(4.0)  # pre-activations of a few units, so SiLU's curve matters
    x = torch.randn(n, c_in, h, w, device="cuda").contiguous(memory_format=torch.channels_last)
    head = eh.FusedEffNetHead(conv.half(), ("features.8", "avgpool"))
    xh = x.half()
    exact = eh.reference(xh.double(), conv.weight.double(), conv.bias.double())
    torch_fp16 = eh.reference(xh, conv.weight, conv.bias)
    torch.full((4 * n * c,), float("nan"), device="cuda", dtype=torch.float16)  # freed: its block reused below
    got = head(xh)
    assert got.shape == (n, c, 1, 1) and torch.isfinite(got).all()
    assert relative_error(got, exact) <= 2 * relative_error(torch_fp16, exact)


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    from torch.profiler import ProfilerActivity, profile

    from mbconv_helpers import check_fused_b0

    info = check_fused_b0(monkeypatch, {eh.SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15, "EffNetHead": 1}, 17)
    assert info["check"]["blocks"]["features.8"]["passed"]
    y = torch.randn(2 * 49, 1280, device="cuda", dtype=torch.float16)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        eh.head_pool_op(y, torch.zeros(1280, device="cuda"), 2)
        torch.cuda.synchronize()
    assert "effnet_head_pool_kernel" in " ".join(e.name for e in prof.events())
