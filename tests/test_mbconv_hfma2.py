"""Kernel 1's depthwise in packed fp16 (CUDA_KERNELS_K1_HFMA2=1; csrc/mbconv_v8.cuh, expand_dw_v8_kernel<..., HF>;
NOTES.md, "Kernel 1's depthwise in HFMA2"): each channel pair's taps, bias and accumulators as half2, one HFMA2 per
tap for both channels, the sum rounded to fp16 at every tap, widened to fp32 for the SiLU and the pool.

CPU: the switch as the source reads it, and the numerical argument in float64: a block whose depthwise accumulates in
fp16 tap by tap stays within 2x of PyTorch fp16's error (the GPU tests' bound). GPU (@pytest.mark.cuda): every MBConv
shape of EfficientNet-B0 and -B2 at batch 1, 5 and 128 against float64 with NaN-poisoned outputs, odd spatial sizes,
2-image items, and the profiler's proof that the HFMA2 kernel ran."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import cuda_kernels
from cuda_kernels import mbconv as mb

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def test_switch_is_the_one_the_source_reads():
    assert mb.K1_HFMA2_SWITCH == "CUDA_KERNELS_K1_HFMA2"
    assert 'std::getenv("CUDA_KERNELS_K1_HFMA2")' in SOURCE and "v[0] == '1' && v[1] == '\\0'" in SOURCE
    assert "acch[o][u] = __hfma2(eh[u * S + dx], wh[dy * KS + dx], acch[o][u]);" in SOURCE


def _r16(t):
    return t.half().double()


def _depthwise_fp16_taps(e, w, b, stride):
    """The kernel's order: from the bias, taps dy outer, dx inner, each fma rounded to fp16 (w, b already fp16)."""
    ks = w.shape[-1]
    pad = ks // 2
    n, c, h, wd = e.shape
    ho, wo = (h + 2 * pad - ks) // stride + 1, (wd + 2 * pad - ks) // stride + 1
    ep = F.pad(e, (pad,) * 4)
    acc = b.view(1, -1, 1, 1).expand(n, c, ho, wo).clone()
    for dy in range(ks):
        for dx in range(ks):
            win = ep[:, :, dy:dy + stride * (ho - 1) + 1:stride, dx:dx + stride * (wo - 1) + 1:stride]
            acc = _r16(acc + win * w[:, 0, dy, dx].view(1, -1, 1, 1))
    return acc


@pytest.mark.parametrize("path,shape", [("features.3.1", (40, 14, 14)), ("features.2.0", (16, 24, 24))])
def test_fp16_tap_accumulation_stays_within_twice_pytorch_fp16_error(path, shape):
    """Float64 model of both computations: PyTorch fp16 (every op's output rounded to fp16, fp32 sums inside a
    conv) and the kernel with an fp16 depthwise sum (rounded at each of the k x k taps). The kernel's model must stay
    within the GPU tests' bound of 2x PyTorch's error, and its fp16 sums must make a difference (a blind model
    would give the same error as fp32 sums)."""
    from mbconv_helpers import block_of
    from perfmodel.harness import relative_error
    from perfmodel.zoo import fold_batchnorm

    torch.manual_seed(0)
    blk = fold_batchnorm(block_of("efficientnet_b0", path)).double()
    exp, dw, se1, se2, proj = [m for m in blk.modules() if isinstance(m, torch.nn.Conv2d)]
    x = _r16(torch.randn(2, *shape, dtype=torch.float64))
    with torch.no_grad():
        ref = blk(x)

        def model(fp16_taps: bool, pytorch: bool):
            h = F.conv2d(x, _r16(exp.weight), _r16(exp.bias))
            e = _r16(F.silu(_r16(h) if pytorch else h))
            wd, bd = _r16(dw.weight), _r16(dw.bias)
            if fp16_taps:
                a = _depthwise_fp16_taps(e, wd, bd, dw.stride[0])
            else:
                a = F.conv2d(e, wd, bd, dw.stride, dw.padding, groups=dw.groups)
                a = _r16(a) if pytorch else a
            d = _r16(F.silu(a))
            s = torch.sigmoid(se2(F.silu(se1(d.mean((2, 3), keepdim=True)))))
            ds = _r16(_r16(s) * d) if pytorch else _r16(d * s)
            y = F.conv2d(ds, _r16(proj.weight), _r16(proj.bias))
            return _r16(y + x if blk.use_res_connect else y)

        torch_err = relative_error(model(False, True), ref)
        fp32_err = relative_error(model(False, False), ref)
        fp16_err = relative_error(model(True, False), ref)
    assert fp16_err > fp32_err  # the fp16 sums are seen
    assert fp16_err <= 2 * torch_err, (fp16_err, torch_err)


@pytest.fixture
def hfma2(monkeypatch):
    monkeypatch.setenv(mb.K1_HFMA2_SWITCH, "1")


def _distinct():
    from mbconv_helpers import DISTINCT

    return DISTINCT


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _distinct())
def test_hfma2_every_shape_of_b0_and_b2(name, path, batch, hfma2):
    from mbconv_helpers import block_of, check_on_gpu, gpu_input, mbconv_shapes

    torch.manual_seed(batch)
    check_on_gpu(block_of(name, path), gpu_input(batch, mbconv_shapes(name)[path]), 9)


@pytest.mark.cuda
@pytest.mark.parametrize("path,size,batch", [("features.4.0", 13, 5), ("features.4.1", 20, 1), ("features.2.0", 9, 5),
                                             ("features.3.0", 7, 5), ("features.2.1", 57, 3), ("features.3.1", 2, 9),
                                             ("features.6.1", 5, 3), ("features.5.1", 11, 2)])
def test_hfma2_odd_sizes(path, size, batch, hfma2):
    from mbconv_helpers import block_of, check_on_gpu, gpu_input, mbconv_shapes

    c = mbconv_shapes("efficientnet_b0")[path][0]
    check_on_gpu(block_of("efficientnet_b0", path), gpu_input(batch, (c, size, size)), 9)


@pytest.mark.cuda
@pytest.mark.parametrize("images", ["1", "2"])
@pytest.mark.parametrize("path,batch", [("features.2.0", 128), ("features.3.1", 128), ("features.6.1", 127),
                                        ("features.7.0", 3)])
def test_hfma2_runs_and_is_close_to_fp32_sums(path, batch, images, hfma2, monkeypatch):
    """The profiler shows the HFMA2 instantiation; its output differs from the fp32-sum kernel's (fp16 sums round)
    but stays close (5e-3 relative), and repeats bit for bit."""
    from torch.profiler import ProfilerActivity, profile

    from mbconv_helpers import b0_prepared
    from perfmodel.harness import relative_error

    monkeypatch.setenv(mb.K1_IMAGES_SWITCH, images)
    params, weights, x = b0_prepared(path, batch)
    monkeypatch.delenv(mb.K1_HFMA2_SWITCH)
    base = mb.mbconv(x, params, weights, version=8)
    monkeypatch.setenv(mb.K1_HFMA2_SWITCH, "1")
    out = torch.full_like(base, float("nan"))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = mb.mbconv(x, params, weights, out=out, version=8)
        torch.cuda.synchronize()
    names = " ".join(e.name for e in prof.events())
    assert "expand_dw_v8_kernel<48, " in names and ", true>" in names, names[:500]
    assert torch.isfinite(got).all()
    assert 0 < relative_error(got, base.double()) < 5e-3
    again = mb.mbconv(x, params, weights, version=8)
    torch.cuda.synchronize()
    assert torch.equal(got, again)
