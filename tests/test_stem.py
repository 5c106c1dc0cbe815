"""The fused ConvFirstNet stem (cuda_kernels/stem.py, csrc/stem.cu).

CPU: the reference against the zoo stem in float64, conv1's K ordering and its packed mma
fragments, a lane-level numpy emulation of the kernel (tests/stem_emulator.py: the tile walk,
shared-memory layout and every per-lane address) against the reference, the host checks, the
structural match, the swap behind CUDA_KERNELS_STEM and its counts, the operator's fake
implementation under torch.compile. GPU (marked cuda): C1 16 and 32, batch 1 and odd batches,
224x224 and odd sizes, the output poisoned with NaN first, error at most twice PyTorch float16's
own against float64; a 2-byte (not 4- or 16-byte) aligned input; the module in a compiled network.
Version 2 (CUDA_KERNELS_STEM_V2; tests/stem_emulator.run_v2 on the CPU) at the same shapes and W % 8 == 0
ones, batch 128, beside version 1, and its version-1 route for unaligned inputs. C1 = 48 (ConvFirstNet-L, version
2 only): the emulation with its 8-slot pixels and 12 warps (bank groups and store coverage asserted lane by lane),
the refusals of inputs version 2 cannot take and the module's PyTorch fallback for them, L's stem swapped; on the
GPU batch 1 / 3 / 128 at 224x224 and W % 8 == 0 odd sizes, the refusals, the fallback, L's stem in the network.
"""

import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import cuda_kernels
from cuda_kernels import stem
from helpers import channels_last, check_against_float64, dynamo_graph, misaligned_nhwc
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import MODELS, fold_batchnorm
from perfmodel.zoo.blocks import ConvBN


def zoo_stem(c1: int, seed: int = 0, folded: bool = True) -> nn.Module:
    """The zoo's stem (ConvFirstNet with widths[0] = 2 c1) with realistic batchnorm statistics."""
    torch.manual_seed(seed)
    s = nn.Sequential(ConvBN(3, c1, 3, stride=2), nn.ReLU(), ConvBN(c1, 2 * c1, 3, stride=2), nn.ReLU())
    s = randomize_batchnorm(s, seed=seed)
    return fold_batchnorm(s) if folded else s


# ---- CPU ----

@pytest.mark.parametrize("h,w", [(8, 8), (7, 5), (1, 1), (13, 6)])
def test_reference_is_the_zoo_stem_in_float64(h, w):
    s = zoo_stem(32).double()
    x = torch.randn(2, 3, h, w, dtype=torch.float64)
    with torch.no_grad():
        want = s(x)
        got = stem.reference(x, stem.FoldedStem.from_stem(s))
    assert got.shape == (2, 64, stem.output_size(h), stem.output_size(w))
    assert relative_error(got, want) < 1e-13


def test_output_size():
    assert [stem.output_size(n) for n in (224, 97, 61, 7, 2, 1)] == [56, 25, 16, 2, 1, 1]


@pytest.mark.parametrize("c1", [16, 32, 48])
def test_conv1_matrix_order_and_fragments(c1):
    """The kernel's conv1 B matrix (k = ky * 10 + kx * 3 + ci, pads zero) times the im2col in the
    same order is the convolution; the packed fragments hold that matrix word for word."""
    torch.manual_seed(c1)
    w1 = torch.randn(c1, 3, 3, 3)
    m = stem.conv1_matrix(w1).float()
    assert m.shape == (c1, 32) and (m[:, 9::10] == 0).all() and (m[:, 30:] == 0).all()
    x = torch.randn(1, 3, 9, 11)
    xp = nn.functional.pad(x, (1, 1, 1, 1))
    cols = []  # im2col in the kernel's order, each ky row padded to 10
    for oy in range(5):
        for ox in range(6):
            win = xp[0, :, 2 * oy:2 * oy + 3, 2 * ox:2 * ox + 3].permute(1, 2, 0).reshape(3, 9)  # [ky, (kx, ci)]
            cols.append(torch.cat([torch.cat([r, torch.zeros(1)]) for r in win] + [torch.zeros(2)]))
    got = (torch.stack(cols) @ m.T).T.reshape(c1, 5, 6)
    want = nn.functional.conv2d(x, w1.half().float(), stride=2, padding=1)[0]
    assert torch.allclose(got, want, atol=1e-4)
    words = stem.pack_conv1(w1).view(c1 // 8, 2, 32, 2)
    pairs = stem.conv1_matrix(w1).view(torch.int32)  # [C1, 16]
    for nt in range(c1 // 8):
        for s in range(2):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                assert words[nt, s, lane, 0] == pairs[nt * 8 + g, s * 8 + t]
                assert words[nt, s, lane, 1] == pairs[nt * 8 + g, s * 8 + t + 4]


@pytest.mark.parametrize("c1,batch,h,w", [(32, 1, 70, 75), (16, 3, 97, 61), (32, 3, 1, 1), (16, 1, 2, 3),
                                          (32, 1, 64, 129)])
def test_emulated_kernel_matches_the_reference(c1, batch, h, w):
    """The numpy emulation of csrc/stem.cu (several tiles in both directions, ragged edges, odd
    batch, a 1x1 image) against the float64 stem: within twice PyTorch-like fp16 error."""
    import stem_emulator as emu

    s = zoo_stem(c1, seed=c1 + h)
    kw = stem.prepare_weights(stem.FoldedStem.from_stem(s))
    g = torch.Generator().manual_seed(h * w)
    x = torch.randn(batch, 3, h, w, generator=g).half()
    got = emu.run(x.permute(0, 2, 3, 1).numpy(), kw.w1.numpy(), kw.b1.numpy(), kw.w2.numpy(), kw.b2.numpy())
    assert not np.isnan(got.astype(np.float32)).any(), "unwritten outputs"
    got = torch.from_numpy(got.astype(np.float32)).permute(0, 3, 1, 2)
    with torch.no_grad():
        exact = copy.deepcopy(s).double()(x.double())
        rounded = s.half().float()(x.float())  # fp16 weights, fp32 compute
        half_mid = nn.functional.relu(s[2](s[1](s[0](x.float())).half().float()))  # + conv1 rounded to fp16
    assert got.shape == exact.shape
    err = relative_error(got, exact)
    assert err <= 2 * max(relative_error(half_mid, exact), relative_error(rounded, exact)) + 1e-6, err
    assert err < 2e-3


def test_input_window_load_mapping():
    """csrc/stem.cu's load_input / store_input: warp w, lane l, row j, chunk k hold window element
    (w + 8 j) * 204 + l + 32 k; the 8 x 32 threads cover the 35 x 204 window exactly once, and the
    chunk's global offset (row offset + 3 ix0 + l + 32 k) is the half (gy, ix0 + e // 3, e % 3)."""
    import stem_emulator as emu

    kch, rpw = (emu.ROWH + 31) // 32, (emu.RI + emu.WARPS - 1) // emu.WARPS
    assert (kch, rpw) == (7, 5) and (rpw * kch + 1) // 2 == 18
    seen = []
    n, H, W, ix0, gy = 1, 40, 50, -3, 5
    for warp in range(emu.WARPS):
        for lane in range(32):
            for j in range(rpw):
                for k in range(kch):
                    rr, e = warp + 8 * j, lane + 32 * k
                    if rr < emu.RI and e < emu.ROWH:
                        seen.append(rr * emu.ROWH + e)
                        off = (n * H + gy) * W * 3 + 3 * ix0 + lane + 32 * k
                        assert off == ((n * H + gy) * W + ix0 + e // 3) * 3 + e % 3
    assert sorted(seen) == list(range(emu.NIN))


@pytest.mark.parametrize("c1,batch,h,w", [(32, 1, 70, 72), (16, 3, 97, 64), (32, 3, 1, 8), (16, 1, 2, 8),
                                          (32, 1, 64, 136), (32, 2, 13, 16),
                                          (48, 1, 70, 72), (48, 3, 13, 16), (48, 2, 1, 8), (48, 1, 64, 136),
                                          (48, 1, 2, 8), (48, 2, 33, 24)])
def test_emulated_v2_matches_the_reference(c1, batch, h, w):
    """Version 2's numpy emulation (the cp.async window chunks and their zero fill, the +7 half shift,
    the pad-in-front K order and the block's fragment re-pack, conv1's row-wise m-tiles and the two
    last-column m-tiles, the odd plane at pixel 24, cvt.relu) against the float64 stem, as for version 1;
    every shapes' W % 8 == 0 (else the launcher runs version 1). C1 = 48: 12 warps, 6 chunks in 8 swizzled slots
    per conv1 pixel; the emulation asserts every conv2 A ldmatrix matrix and every regular conv1 store conflict-free,
    every conv1 pixel word stored once and every window chunk copied once."""
    import stem_emulator as emu

    s = zoo_stem(c1, seed=c1 + h)
    kw = stem.prepare_weights(stem.FoldedStem.from_stem(s))
    g = torch.Generator().manual_seed(h * w + 1)
    x = torch.randn(batch, 3, h, w, generator=g).half()
    got = emu.run_v2(x.permute(0, 2, 3, 1).contiguous().numpy(), kw.w1.numpy(), kw.b1.numpy(), kw.w2.numpy(),
                     kw.b2.numpy())
    assert not np.isnan(got.astype(np.float32)).any(), "unwritten outputs"
    got = torch.from_numpy(got.astype(np.float32)).permute(0, 3, 1, 2)
    with torch.no_grad():
        exact = copy.deepcopy(s).double()(x.double())
        rounded = s.half().float()(x.float())
        half_mid = nn.functional.relu(s[2](s[1](s[0](x.float())).half().float()))
    assert got.shape == exact.shape
    err = relative_error(got, exact)
    assert err <= 2 * max(relative_error(half_mid, exact), relative_error(rounded, exact)) + 1e-6, err
    assert err < 2e-3


@pytest.mark.parametrize("c1", [16, 32, 48])
def test_v2_fragment_repack_is_the_pad_front_matrix(c1):
    """The block's re-pack of version 1's conv1 fragments (stem_emulator.repack_conv1_v2, the kernel's two
    loops) holds conv1 with K ordered (ky, [pad, kx, ci]): k = 10 ky + 1 + 3 kx + ci, the pads zero, k 30 the
    bias in fp16 (A's k 30 is 1.0), k 31 zero."""
    import stem_emulator as emu

    torch.manual_seed(c1 + 1)
    w1, b1 = torch.randn(c1, 3, 3, 3), torch.randn(c1) * 3
    v1 = stem.conv1_matrix(w1)  # [C1, 32]: k = 10 ky + 3 kx + ci
    want = torch.zeros(c1, 32, dtype=torch.float16)
    for ky in range(3):
        want[:, 10 * ky + 1:10 * ky + 10] = v1[:, 10 * ky:10 * ky + 9]
    want[:, 30] = b1.half()
    words = torch.from_numpy(emu.repack_conv1_v2(stem.pack_conv1(w1).numpy(), c1, b1.numpy()).view(np.int32))
    pairs = want.contiguous().view(torch.int32)  # [C1, 16]
    words = words.view(c1 // 8, 2, 32, 2)
    for nt in range(c1 // 8):
        for s in range(2):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                assert words[nt, s, lane, 0] == pairs[nt * 8 + g, s * 8 + t]
                assert words[nt, s, lane, 1] == pairs[nt * 8 + g, s * 8 + t + 4]
    w = want.float()
    assert (w[:, 0:30:10] == 0).all() and (w[:, 31] == 0).all()


def test_v2_switch_and_applies(monkeypatch):
    monkeypatch.delenv(stem.SWITCH_V2, raising=False)
    assert stem.v2_enabled()  # the default since it measured faster on the H200
    for value in ("1", "on", "true"):
        monkeypatch.setenv(stem.SWITCH_V2, value)
        assert stem.v2_enabled()
    monkeypatch.setenv(stem.SWITCH_V2, "0")
    assert not stem.v2_enabled()
    assert stem.v2_applies(_x_cpu(1, 9, 16)) and not stem.v2_applies(_x_cpu(1, 9, 12))
    base = channels_last(torch.randn(1, 3, 8, 16).half())
    storage = torch.zeros(8 * 16 * 3 + 8).half()
    x = storage[1:1 + 8 * 16 * 3].as_strided((1, 3, 8, 16), (8 * 16 * 3, 1, 48, 3))
    assert stem.v2_applies(base) and not stem.v2_applies(x)
    kw = stem.prepare_weights(stem.FoldedStem.from_stem(zoo_stem(32)))
    with pytest.raises(ValueError, match="version must be 1 or 2"):
        stem.run(base, kw, version=3)


@pytest.mark.parametrize("env,version,called", [("0", None, "stem"), ("1", None, "stem_v2"), ("1", 1, "stem"),
                                                ("0", 2, "stem_v2")])
def test_run_picks_the_version(monkeypatch, env, version, called):
    """run() launches the extension's stem (version 1) or stem_v2 by the switch or its argument, with the
    same positional arguments (the PDL flag last)."""
    calls = []

    class Fake:
        def __getattr__(self, name):
            def call(*args):
                calls.append((name, args))
                return torch.zeros(1, 64, 4, 4, dtype=torch.float16)
            return call

    monkeypatch.setenv(stem.SWITCH_V2, env)
    monkeypatch.setattr(stem, "_extension", lambda: Fake())
    monkeypatch.setattr(stem, "check_input", lambda *a, **k: None)
    weights = stem.KernelWeights(None, None, None, None)
    stem.run(channels_last(torch.zeros(1, 3, 16, 16, dtype=torch.float16)), weights, version=version)
    (name, args), = calls
    assert name == called and len(args) == 7 and isinstance(args[-1], bool)


def _x_cpu(n=2, h=8, w=8):
    return channels_last(torch.randn(n, 3, h, w).half())


def test_host_checks():
    kw = stem.prepare_weights(stem.FoldedStem.from_stem(zoo_stem(32)))
    x = _x_cpu()
    with pytest.raises(ValueError, match="channels_last"):
        stem.check_input(torch.randn(2, 3, 8, 8).half().contiguous(), kw)  # NCHW: not channels_last
    with pytest.raises(ValueError, match="float16"):
        stem.check_input(channels_last(torch.randn(2, 3, 8, 8)), kw)
    with pytest.raises(ValueError, match="3 channels|takes 3"):
        stem.check_input(channels_last(torch.randn(2, 4, 8, 8).half()), kw)
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        stem.check_input(torch.randn(3, 8, 8).half(), kw)
    with pytest.raises(ValueError, match="empty"):
        stem.check_input(channels_last(torch.randn(0, 3, 8, 8).half()), kw)
    with pytest.raises(ValueError, match="out must be a channels_last"):
        stem.check_input(x, kw, out=channels_last(torch.empty(2, 64, 3, 2).half()))
    base = torch.zeros(2000).half()
    xb = base[:384].as_strided((2, 3, 8, 8), (192, 1, 24, 3))
    with pytest.raises(ValueError, match="out must not overlap x"):
        stem.check_input(xb, kw, out=base[100:612].as_strided((2, 64, 2, 2), (256, 1, 128, 64)))
    with pytest.raises(ValueError, match="out must not overlap w2"):
        stem.check_input(x, kw, out=kw.w2.view(-1)[:512].as_strided((2, 64, 2, 2), (256, 1, 128, 64)))
    with pytest.raises(ValueError, match="CUDA tensor"):  # the device is checked last
        stem.check_input(x, kw)
    with pytest.raises(ValueError, match="CUDA tensor"):  # a 2-byte aligned x passes every other rule
        stem.check_input(misaligned_nhwc((1, 3, 5, 7)), kw)


def test_prepare_weights_refuses_other_widths():
    assert (48, 96) in stem.SUPPORTED_WIDTHS and (48, 96) not in stem.V1_WIDTHS
    with pytest.raises(ValueError, match=r"3 -> 64 -> 128"):
        stem.prepare_weights(stem.FoldedStem(torch.zeros(64, 3, 3, 3), torch.zeros(64), torch.zeros(128, 64, 3, 3),
                                             torch.zeros(128)))
    kw = stem.prepare_weights(stem.FoldedStem(torch.zeros(48, 3, 3, 3), torch.zeros(48), torch.zeros(96, 48, 3, 3),
                                              torch.zeros(96)))
    assert kw.w1.numel() == 6 * 2 * 32 * 2 and kw.w2.shape == (96, 432) and kw.mid_channels == 48
    with pytest.raises(ValueError, match=r"\[C1, 3, 3, 3\]"):
        stem.prepare_weights(stem.FoldedStem(torch.zeros(32, 4, 3, 3), torch.zeros(32), torch.zeros(64, 32, 3, 3),
                                             torch.zeros(64)))


def test_prepare_weights_layout():
    s = zoo_stem(16)
    kw = stem.prepare_weights(stem.FoldedStem.from_stem(s))
    assert kw.w1.dtype == torch.int32 and kw.w1.numel() == 2 * 2 * 32 * 2
    assert kw.w2.shape == (32, 144) and kw.w2.dtype == torch.float16 and kw.w2.is_contiguous()
    # k = (dy * 3 + dx) * C1 + ci
    assert kw.w2[5, (1 * 3 + 2) * 16 + 7] == s[2].weight[5, 7, 1, 2].half()
    assert kw.b1.dtype == kw.b2.dtype == torch.float32 and kw.mid_channels == 16 and kw.out_channels == 32


def test_structural_match_and_reasons():
    assert stem.is_stem(zoo_stem(32)) and stem.is_stem(zoo_stem(32, folded=False))
    assert stem.unsupported(zoo_stem(32)) is None and stem.unsupported(zoo_stem(16)) is None
    assert "inference form" in stem.unsupported(zoo_stem(32, folded=False))
    assert stem.unsupported(zoo_stem(48)) is None
    torch.manual_seed(0)
    wide = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1), nn.ReLU())
    assert "3 -> 64 -> 128" in stem.unsupported(wide)
    other = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 0), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU())
    assert stem.is_stem(other) and "padding" in stem.unsupported(other)
    assert not stem.is_stem(nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU()))
    assert not stem.is_stem(nn.Sequential(nn.Conv2d(8, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU()))
    assert not stem.is_stem(nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU()))


def test_switch_on_by_default_and_off_with_0(monkeypatch):
    monkeypatch.delenv(stem.SWITCH, raising=False)
    assert stem.enabled()
    for value in ("0", "off", "false", "no"):
        monkeypatch.setenv(stem.SWITCH, value)
        assert not stem.enabled()
    monkeypatch.setenv(stem.SWITCH, "0")
    net = fold_batchnorm(MODELS["convfirstnet_h200"]())
    swap = cuda_kernels.replace_blocks(net)
    assert "Stem" not in swap.fused and "stem" not in swap.fallback
    assert isinstance(net.stem, nn.Sequential)


@pytest.mark.parametrize("name,c1", [("convfirstnet_s", 16), ("convfirstnet_m", 32), ("convfirstnet_h200", 32),
                                     ("convfirstnet_l", 48)])
def test_replace_blocks_swaps_the_stem(monkeypatch, name, c1):
    monkeypatch.setenv(stem.SWITCH, "1")
    net = fold_batchnorm(MODELS[name]())
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused["Stem"] == 1 and "stem" not in swap.fallback
    assert isinstance(net.stem, cuda_kernels.FusedStem) and net.stem.mid_channels == c1
    assert isinstance(net.stem, cuda_kernels.FUSED_MODULES)
    monkeypatch.setenv(stem.SWITCH, "0")
    off = cuda_kernels.replace_blocks(fold_batchnorm(MODELS[name]()))
    assert {k: v for k, v in swap.fused.items() if k != "Stem"} == off.fused and swap.fallback == off.fallback


def test_replace_blocks_swaps_the_l_stem_unless_stem48_is_off(monkeypatch):
    """ConvFirstNet-L's stem (3 -> 48 -> 96; built on the CPU: the weight packing needs data) becomes a FusedStem;
    the stem is no longer among its fallbacks. CUDA_KERNELS_STEM48=0 leaves it in PyTorch with that reason."""
    monkeypatch.setenv(stem.SWITCH, "1")
    monkeypatch.delenv(stem.SWITCH_48, raising=False)
    assert stem.stem48_enabled()
    net = fold_batchnorm(MODELS["convfirstnet_l"]())
    assert stem.is_stem(net.stem) and net.stem[0].out_channels == 48 and net.stem[2].out_channels == 96
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused["Stem"] == 1 and "stem" not in swap.fallback
    assert isinstance(net.stem, cuda_kernels.FusedStem) and net.stem.mid_channels == 48 and net.stem.out_channels == 96
    monkeypatch.setenv(stem.SWITCH_48, "0")
    assert not stem.stem48_enabled()
    net = fold_batchnorm(MODELS["convfirstnet_l"]())
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused["Stem"] == 0 and "CUDA_KERNELS_STEM48=0" in swap.fallback["stem"]
    assert isinstance(net.stem, nn.Sequential)
    assert stem.unsupported(zoo_stem(32)) is None  # the switch touches C1 = 48 only


def test_c1_48_refuses_what_version_2_cannot_take():
    """C1 = 48 has no version 1: check_input (before the device check, so on CPU tensors) refuses W % 8 != 0 and
    a 16-byte-misaligned x with a ValueError naming the reason; run(version=1) is a ValueError; C1 = 16 / 32 are
    unaffected (version 1 takes those inputs)."""
    kw48 = stem.prepare_weights(stem.FoldedStem.from_stem(zoo_stem(48)))
    kw32 = stem.prepare_weights(stem.FoldedStem.from_stem(zoo_stem(32)))
    for bad in (_x_cpu(1, 9, 12), misaligned_nhwc((1, 3, 8, 16))):
        assert stem.v2_only_reason(bad, kw48) is not None and stem.v2_only_reason(bad, kw32) is None
        with pytest.raises(ValueError, match="version 2 only.*16-byte aligned with W % 8 == 0"):
            stem.check_input(bad, kw48)
        with pytest.raises(ValueError, match="CUDA tensor"):
            stem.check_input(bad, kw32)
    good = _x_cpu(1, 9, 16)
    assert stem.v2_only_reason(good, kw48) is None
    with pytest.raises(ValueError, match="CUDA tensor"):  # every other rule passes
        stem.check_input(good, kw48)
    with pytest.raises(ValueError, match="no version 1 for C1 = 48"):
        stem.run(good, kw48, version=1)


@pytest.mark.parametrize("env,version,called", [("0", None, "stem_v2"), ("1", None, "stem_v2"), ("1", 2, "stem_v2")])
def test_c1_48_runs_version_2_whatever_the_switch(monkeypatch, env, version, called):
    calls = []

    class Fake:
        def __getattr__(self, name):
            def call(*args):
                calls.append(name)
                return torch.zeros(1, 96, 4, 4, dtype=torch.float16)
            return call

    monkeypatch.setenv(stem.SWITCH_V2, env)
    monkeypatch.setattr(stem, "_extension", lambda: Fake())
    monkeypatch.setattr(stem, "check_input", lambda *a, **k: None)
    kw = stem.prepare_weights(stem.FoldedStem.from_stem(zoo_stem(48)))
    stem.run(_x_cpu(1, 16, 16), kw, version=version)
    assert calls == [called]


@pytest.mark.parametrize("c1", [16, 32, 48])
def test_unpack_conv1_and_the_pytorch_stem(c1):
    """unpack_conv1 inverts pack_conv1 (fp16 weights back bit for bit); pytorch_stem (the C1 = 48 module's fallback)
    from the prepared weights is the stem with fp16-rounded weights."""
    s = zoo_stem(c1, seed=7)
    kw = stem.prepare_weights(stem.FoldedStem.from_stem(s))
    assert torch.equal(stem.unpack_conv1(kw.w1, c1), s[0].weight.detach().half())
    x = torch.randn(2, 3, 13, 18, dtype=torch.float64)
    got = stem.pytorch_stem(x, kw)
    with torch.no_grad():
        rounded = copy.deepcopy(s).double()
        for conv in (rounded[0], rounded[2]):
            conv.weight.copy_(conv.weight.half().double())
        want = rounded(x)
    assert got.shape == want.shape and got.is_contiguous(memory_format=torch.channels_last)
    assert relative_error(got, want) < 1e-6


def test_c1_48_module_falls_back_for_inputs_version_2_cannot_take(monkeypatch):
    """The FusedStem module (the convfirst_stem::stem operator) computes a W % 8 != 0 input with PyTorch's fp16
    convolutions, warning once with the reason; no kernel launch (on the CPU here, where the kernel cannot run)."""
    monkeypatch.setattr(stem, "_warned", set())
    monkeypatch.setattr(stem, "_extension", lambda: pytest.fail("the kernel must not run for this input"))
    s = zoo_stem(48, seed=2)
    fused = cuda_kernels.FusedStem.from_block(s)
    x = _x_cpu(2, 11, 21)
    with pytest.warns(UserWarning, match="falls back to PyTorch.*W % 8 == 0"):
        y = fused(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per reason
        fused(x)
    with torch.no_grad():
        exact = copy.deepcopy(s).double()(x.double())
    assert y.shape == (2, 96, 3, 6) and y.dtype == torch.float16 and relative_error(y, exact) < 5e-3


def test_fused_stem_is_one_opaque_operator_under_torch_compile(monkeypatch):
    """--compile-rest: dynamo captures ConvFirstNet-H200 with its stem as one convfirst_stem::stem
    operator whose fake output is channels-last [N, 64, H/4, W/4] (nothing runs on a GPU here)."""
    monkeypatch.setenv(stem.SWITCH, "1")
    net = fold_batchnorm(randomize_batchnorm(MODELS["convfirstnet_h200"]())).half()
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused["Stem"] == 1
    x = torch.randn(2, 3, 61, 97).half().contiguous(memory_format=torch.channels_last)
    graph = dynamo_graph(net, x)
    nodes = [n for n in graph.graph.nodes if "convfirst_stem" in str(n.target)]
    assert len(nodes) == 1
    out = nodes[0].meta["example_value"]
    assert tuple(out.shape) == (2, 64, 16, 25) and out.stride() == (16 * 25 * 64, 1, 25 * 64, 64)


# ---- GPU ----

CASES = [(32, 1, 224, 224), (32, 3, 97, 61), (32, 5, 7, 5), (32, 2, 1, 1), (32, 1, 64, 129),
         (16, 1, 224, 224), (16, 3, 97, 61), (16, 1, 2, 3)]
# version 2 runs where W % 8 == 0 (the rest of CASES runs version 1 through version 2's launcher): odd
# heights, partial tiles, 1 x 8, 2 x 8, batch 128
CASES_V2 = [(32, 128, 224, 224), (16, 128, 224, 224), (32, 3, 97, 64), (32, 5, 7, 8), (32, 2, 1, 8),
            (32, 1, 64, 136), (32, 3, 45, 200), (16, 3, 97, 64), (16, 1, 2, 8), (16, 5, 33, 24)]
# C1 = 48 (ConvFirstNet-L): version 2 only, W % 8 == 0
CASES_48 = [(48, 1, 224, 224), (48, 3, 224, 224), (48, 128, 224, 224), (48, 3, 97, 64), (48, 5, 7, 8), (48, 2, 1, 8),
            (48, 1, 64, 136), (48, 3, 45, 200), (48, 5, 33, 24), (48, 1, 2, 8), (48, 2, 130, 96)]


@pytest.mark.cuda
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("c1,batch,h,w", CASES + CASES_V2)
def test_kernel_against_float64(c1, batch, h, w, version):
    s = zoo_stem(c1, seed=c1 + h + w).cuda()
    fused = cuda_kernels.FusedStem.from_block(s)
    x = channels_last(torch.randn(batch, 3, h, w, device="cuda", dtype=torch.float16))
    if version == 2 and (c1, batch, h, w) in CASES_V2:
        assert stem.v2_applies(x)
    check_against_float64(s, x, lambda out: stem.run(x, fused.weights, out=out, version=version),
                          (batch, 2 * c1, stem.output_size(h), stem.output_size(w)))


@pytest.mark.cuda
@pytest.mark.parametrize("c1,batch,h,w", CASES_48)
def test_c1_48_against_float64(c1, batch, h, w):
    """C1 = 48 (version 2 only) on a NaN-poisoned output: error at most twice PyTorch fp16's against float64."""
    s = zoo_stem(c1, seed=c1 + h + w).cuda()
    fused = cuda_kernels.FusedStem.from_block(s)
    x = channels_last(torch.randn(batch, 3, h, w, device="cuda", dtype=torch.float16))
    assert stem.v2_applies(x)
    check_against_float64(s, x, lambda out: stem.run(x, fused.weights, out=out),
                          (batch, 2 * c1, stem.output_size(h), stem.output_size(w)))


@pytest.mark.cuda
def test_c1_48_deterministic_and_the_switch_v2_off_still_fused(monkeypatch):
    s = zoo_stem(48, seed=11).cuda()
    fused = cuda_kernels.FusedStem.from_block(s)
    x = channels_last(torch.randn(3, 3, 224, 224, device="cuda", dtype=torch.float16))
    y = stem.run(x, fused.weights)
    assert torch.equal(stem.run(x, fused.weights, version=2), y)
    monkeypatch.setenv(stem.SWITCH_V2, "0")
    assert torch.equal(stem.run(x, fused.weights), y) and torch.equal(fused(x), y)


@pytest.mark.cuda
def test_c1_48_refusals_and_the_module_fallback_on_the_gpu(monkeypatch):
    """W % 8 != 0 and a 16-byte-misaligned x: run raises ValueError, the raw op RuntimeError (no version 1 to take
    them); the module computes them with PyTorch (a warning), within 2x PyTorch fp16's error against float64."""
    monkeypatch.setattr(stem, "_warned", set())
    s = zoo_stem(48, seed=12).cuda()
    fused = cuda_kernels.FusedStem.from_block(s)
    odd = channels_last(torch.randn(2, 3, 37, 61, device="cuda", dtype=torch.float16))
    storage = torch.randn(3 * 3 * 45 * 32 + 8, device="cuda", dtype=torch.float16)
    shifted = storage[1:].as_strided((3, 3, 45, 32), (45 * 32 * 3, 1, 32 * 3, 3))
    ext = stem._extension()
    kw = fused.weights
    empty = torch.empty(0, device="cuda", dtype=torch.float16)
    for x in (odd, shifted):
        assert not stem.v2_applies(x)
        with pytest.raises(ValueError, match="version 2 only"):
            stem.run(x, kw)
        with pytest.raises(RuntimeError, match="version 2 only"):
            ext.stem_v2(x, kw.w1, kw.b1, kw.w2, kw.b2, empty)
        with pytest.raises(RuntimeError, match="no stem kernel for C1 = 48"):
            ext.stem(x, kw.w1, kw.b1, kw.w2, kw.b2, empty)
        with pytest.warns(UserWarning, match="falls back to PyTorch"):
            y = fused(x)
        with torch.no_grad():
            exact = copy.deepcopy(s).double()(x.double())
            torch_err = relative_error(copy.deepcopy(s).half()(x), exact)
        assert torch.isfinite(y).all() and 0 < torch_err and relative_error(y, exact) <= 2 * torch_err


@pytest.mark.cuda
def test_convfirstnet_l_stem_fused_in_the_network():
    """ConvFirstNet-L with its stem fused (replace_blocks' swap is the CPU test's; here only the stem is swapped, so
    that no other block's extension is built): checked by bench's check_blocks against the float64 PyTorch stem on
    the input it received (224x224, batch 2); under torch.compile (fullgraph) bit-identical to eager."""
    from perfmodel.bench import check_blocks

    net = fold_batchnorm(randomize_batchnorm(MODELS["convfirstnet_l"]())).cuda().half()
    fused = copy.deepcopy(net)
    assert stem.unsupported(net.stem) is None
    fused.stem = cuda_kernels.FusedStem.from_block(net.stem)
    assert fused.stem.mid_channels == 48
    x = channels_last(torch.randn(2, 3, 224, 224, device="cuda", dtype=torch.float16))
    check = check_blocks(fused, net, [x], lambda m: isinstance(m, cuda_kernels.FusedStem))
    assert check["blocks_checked"] == 1
    with torch.no_grad():
        compiled = torch.compile(fused.stem, fullgraph=True)
        assert torch.equal(compiled(x), fused.stem(x))


@pytest.mark.cuda
@pytest.mark.parametrize("c1,h,w", [(32, 224, 224), (16, 97, 64), (32, 7, 8)])
def test_v2_equals_v1_closely_and_the_switch_routes(monkeypatch, c1, h, w):
    """Both versions round conv1 to fp16 at the same points: outputs within a few fp16 ulps (the mma
    summation order over K differs); CUDA_KERNELS_STEM_V2=1 makes run() and the module take version 2."""
    s = zoo_stem(c1, seed=5).cuda()
    fused = cuda_kernels.FusedStem.from_block(s)
    x = channels_last(torch.randn(3, 3, h, w, device="cuda", dtype=torch.float16))
    y1, y2 = stem.run(x, fused.weights, version=1), stem.run(x, fused.weights, version=2)
    assert (y1.float() - y2.float()).abs().max() <= 1e-2 * max(1.0, y1.float().abs().max().item())
    monkeypatch.setenv(stem.SWITCH_V2, "1")
    assert torch.equal(stem.run(x, fused.weights), y2) and torch.equal(fused(x), y2)
    monkeypatch.setenv(stem.SWITCH_V2, "0")
    assert torch.equal(stem.run(x, fused.weights), y1)


@pytest.mark.cuda
def test_v2_unaligned_input_runs_version_1():
    """A 16-byte-misaligned x (2-byte offset) with W % 8 == 0: version 2's launcher runs version 1."""
    s = zoo_stem(32, seed=4).cuda()
    fused = cuda_kernels.FusedStem.from_block(s)
    storage = torch.randn(3 * 3 * 45 * 32 + 8, device="cuda", dtype=torch.float16)
    x = storage[1:].as_strided((3, 3, 45, 32), (45 * 32 * 3, 1, 32 * 3, 3))
    assert not stem.v2_applies(x)
    check_against_float64(s, x, lambda out: stem.run(x, fused.weights, out=out, version=2), (3, 64, 12, 8))
    assert torch.equal(stem.run(x, fused.weights, version=2), stem.run(x, fused.weights, version=1))


@pytest.mark.cuda
def test_module_forward_allocates_and_matches_run():
    s = zoo_stem(32).cuda()
    fused = cuda_kernels.FusedStem.from_block(s)
    x = channels_last(torch.randn(2, 3, 50, 37, device="cuda", dtype=torch.float16))
    y = fused(x)
    assert y.shape == (2, 64, 13, 10) and y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y, stem.run(x, fused.weights))
    with torch.no_grad():
        exact = copy.deepcopy(s).double()(x.double())
        err, torch_err = relative_error(y, exact), relative_error(s.half()(x), exact)
    assert 0 < torch_err and err <= 2 * torch_err


@pytest.mark.cuda
def test_two_byte_aligned_input():
    """A 3-channel channels-last tensor at an odd half offset (2-byte, not 4-byte aligned)."""
    s = zoo_stem(32, seed=3).cuda()
    fused = cuda_kernels.FusedStem.from_block(s)
    storage = torch.randn(3 * 3 * 45 * 33 + 8, device="cuda", dtype=torch.float16)
    x = storage[1:].as_strided((3, 3, 45, 33), (45 * 33 * 3, 1, 33 * 3, 3))
    assert x.data_ptr() % 4 == 2 and x.is_contiguous(memory_format=torch.channels_last)
    check_against_float64(s, x, lambda out: stem.run(x, fused.weights, out=out), (3, 64, 12, 9))


@pytest.mark.cuda
def test_raw_op_refuses_bad_tensors():
    s = zoo_stem(32).cuda()
    kw = cuda_kernels.FusedStem.from_block(s).weights
    storage = torch.randn(8192, device="cuda", dtype=torch.float16)
    x = storage[:768].as_strided((1, 3, 16, 16), (768, 1, 48, 3))  # channels_last
    bad = storage[500:1524].as_strided((1, 64, 4, 4), (1024, 1, 256, 64))  # overlaps x
    with pytest.raises(ValueError, match="channels_last"):
        stem.run(x.contiguous(), kw)
    with pytest.raises(ValueError, match="overlap"):
        stem.run(x, kw, out=bad)
    ext = stem._extension()
    with pytest.raises(RuntimeError, match="channels_last"):
        ext.stem(x.contiguous(), kw.w1, kw.b1, kw.w2, kw.b2, torch.empty(0, device="cuda", dtype=torch.float16))
    with pytest.raises(RuntimeError, match="overlap"):
        ext.stem(x, kw.w1, kw.b1, kw.w2, kw.b2, bad)
    with pytest.raises(RuntimeError, match="dtype"):
        ext.stem(x.float(), kw.w1, kw.b1, kw.w2, kw.b2, torch.empty(0, device="cuda", dtype=torch.float16))


@pytest.mark.cuda
def test_network_with_the_stem_fused_and_the_stem_compiled():
    """ConvFirstNet-H200 with its stem fused passes the check bench uses (the stem against the float64
    PyTorch stem on the input it received); the fused stem under torch.compile (fullgraph: one opaque
    operator) gives the eager op's output bit for bit."""
    from perfmodel.bench import check_blocks

    net = fold_batchnorm(randomize_batchnorm(MODELS["convfirstnet_h200"]())).cuda().half()
    fused = copy.deepcopy(net)
    fused.stem = cuda_kernels.FusedStem.from_block(net.stem)
    x = channels_last(torch.randn(3, 3, 96, 96, device="cuda", dtype=torch.float16))
    check = check_blocks(fused, net, [x], lambda m: isinstance(m, cuda_kernels.FusedStem))
    assert check["blocks_checked"] == 1
    with torch.no_grad():
        compiled = torch.compile(fused.stem, fullgraph=True)
        assert torch.equal(compiled(x), fused.stem(x))
