"""The stride-1 ConvFirst kernel on wgmma (cuda_kernels/convfirst_c512.py, csrc/convfirst_c512.cu),
at C = 512 and its other instances, C = 256 and 128.

CPU: the weight packing (round trip, one element by hand), a float64 transliteration of the
kernel's dataflow over the packed slots (which warpgroup reads which rows of which slot) against
the zoo block at each width, the conv halo bound, the host checks, the off-by-default switches and
the fallback reasons, the operator's fake implementation, the pipeline protocol model-checked at
each width. GPU (marked cuda): alpha 4 and 6 at 7x7 and 14x14 (C = 512, 256) and 28x28 (C = 128)
for batch 128, 1 and an odd batch, odd sizes, the output poisoned with NaN first; the kernel's
error against the float64 zoo block must be at most twice PyTorch float16's own (and PyTorch's
nonzero, else the check would be blind).
"""

import copy
import itertools

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import cuda_kernels
from cuda_kernels import convfirst_c512 as c512
from helpers import (channels_last, check_against_float64, kernel_body, stride1_host_check_cases, strip_comments,
                     swap_against_float64)
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm


def block_c(channels: int, expansion: int, seed: int = 0) -> nn.Module:
    """Folded zoo ConvFirst block with realistic batchnorm statistics."""
    torch.manual_seed(seed)
    return fold_batchnorm(randomize_batchnorm(ConvFirstBlock(channels, expansion), seed=seed))


def block_512(expansion: int, seed: int = 0) -> nn.Module:
    return block_c(512, expansion, seed)


def _kernel_weights(block: nn.Module) -> c512.KernelWeights:
    conv, expand, project = block.conv, block.ffn.expand, block.ffn.project
    return c512.prepare_weights(conv.weight, conv.bias, expand.weight, expand.bias, project.weight, project.bias)


def _assert_launches_equal(x, weights, variant: int, want: torch.Tensor, launches: int = 3) -> None:
    """`variant` on x, into an output poisoned with NaN, `launches` times: equal to `want` bit for bit each time."""
    for _ in range(launches):
        out = channels_last(torch.full_like(x, float("nan")))
        got = c512.run(x, weights, out=out, variant=variant)
        torch.cuda.synchronize()
        assert torch.equal(got, want)


@pytest.fixture(scope="module")
def small_weights():
    return _kernel_weights(block_512(2))


# ---- CPU ----

def test_slot_order():
    order = c512.slot_order(768)
    assert len(order) == (768 // 128) * 16
    assert order[:8] == [("U", 0, k, 0) for k in range(8)]
    assert order[8:16] == [("V", 0, k, q) for k in range(2) for q in range(4)]
    assert order[16] == ("U", 1, 0, 0) and order[-1] == ("V", 5, 1, 3)


def test_slot_order_at_256_and_128():
    """C = 256: 4 U panels, then 2 k panels x 2 V blocks (8 slots per chunk); C = 128: 2 + 2 x 1."""
    assert [c512.slots_per_chunk(c) for c in (128, 256, 512)] == [4, 8, 16]
    order = c512.slot_order(1536, 256)
    assert len(order) == 12 * 8
    assert order[:8] == [("U", 0, k, 0) for k in range(4)] + [("V", 0, k, q) for k in range(2) for q in range(2)]
    assert order[-1] == ("V", 11, 1, 1)
    assert c512.slot_order(256, 128) == [("U", 0, 0, 0), ("U", 0, 1, 0), ("V", 0, 0, 0), ("V", 0, 1, 0),
                                         ("U", 1, 0, 0), ("U", 1, 1, 0), ("V", 1, 0, 0), ("V", 1, 1, 0)]


def test_slot_order_at_64():
    """C = 64: per chunk one U slot and one V slot (the chunk's two 64 x 64 k panels of V stacked)."""
    assert c512.slots_per_chunk(64) == 2
    assert c512.slot_order(384, 64) == [("U", 0, 0, 0), ("V", 0, 0, 0), ("U", 1, 0, 0), ("V", 1, 0, 0),
                                        ("U", 2, 0, 0), ("V", 2, 0, 0)]
    # alpha <= 8: a tile's slots fit the 8-slot ring (variant 3 keeps them resident); alpha 10 streams
    assert [len(c512.slot_order(64 * a, 64)) for a in (2, 4, 6, 8, 10)] == [2, 4, 6, 8, 10]


@pytest.mark.parametrize("channels,hidden", [(512, 256), (256, 1536), (128, 384), (64, 384), (64, 128), (64, 640)])
def test_pack_round_trip_and_size(channels, hidden):
    torch.manual_seed(0)
    w1, w2 = torch.randn(hidden, channels).half(), torch.randn(channels, hidden).half()
    packed = c512.pack_weights(w1, w2)
    assert packed.dtype == torch.uint8 and packed.numel() == 2 * (2 * hidden * channels) == 4 * hidden * channels
    got1, got2 = c512.unpack_weights(packed, hidden, channels)
    assert torch.equal(got1, w1) and torch.equal(got2, w2)


def test_pack_refuses_other_widths():
    with pytest.raises(ValueError, match="C in"):
        c512.pack_weights(torch.zeros(256, 32), torch.zeros(32, 256))
    with pytest.raises(ValueError, match="C in"):
        c512.pack_weights(torch.zeros(256, 192), torch.zeros(192, 256))
    with pytest.raises(ValueError, match="multiple of 128"):
        c512.pack_weights(torch.zeros(192, 256), torch.zeros(256, 192))


def test_pack_layout_by_hand_at_256():
    """C = 256, hidden 512: slot ("V", 1, 1, 1) (index 8 + 4 + 1 * 2 + 1 = 15) holds w2 rows
    128..255, columns 128 + 64 .. 128 + 127."""
    w1 = torch.arange(512 * 256, dtype=torch.float32).reshape(512, 256).half()
    w2 = torch.arange(256 * 512, dtype=torch.float32).reshape(256, 512).half()
    slots = c512.pack_weights(w1, w2).view(torch.float16).reshape(-1, 128, 64)
    assert c512.slot_order(512, 256)[15] == ("V", 1, 1, 1)
    r, col = 5, 17  # chunk 2, stored at chunk 2 ^ 5 = 7
    assert slots[15, r, 7 * 8 + 1] == w2[128 + r, 128 + 64 + col]
    assert slots[8 + 3, r, 7 * 8 + 1] == w1[128 + r, 3 * 64 + col]  # ("U", 1, 3, 0)


def test_pack_layout_by_hand_at_64():
    """C = 64, hidden 384: slot 3 is ("V", 1, 0, 0): rows 0..63 hold w2[:, 128 .. 191], rows 64..127
    w2[:, 192 .. 255]; slot 2 ("U", 1, 0, 0) holds w1 rows 128..255. Chunk c of row r at c ^ (r % 8)."""
    w1 = torch.arange(384 * 64, dtype=torch.float32).reshape(384, 64).half()
    w2 = torch.arange(64 * 384, dtype=torch.float32).reshape(64, 384).half()
    slots = c512.pack_weights(w1, w2).view(torch.float16).reshape(-1, 128, 64)
    assert slots.shape[0] == 6 and c512.slot_order(384, 64)[3] == ("V", 1, 0, 0)
    r, col = 5, 17  # chunk 2, stored at chunk 2 ^ 5 = 7
    assert slots[3, r, 7 * 8 + 1] == w2[r, 128 + col]
    assert slots[3, 64 + r, 7 * 8 + 1] == w2[r, 128 + 64 + col]  # row 69: 69 % 8 = 5 as well
    assert slots[2, r, 7 * 8 + 1] == w1[128 + r, col]


def test_pack_layout_by_hand():
    """Slot ("V", 1, 1, 2) (index 16 + 8 + 1 * 4 + 2 = 30) holds w2 rows 256..383, columns
    128 + 64 .. 128 + 127; its row r keeps 16-byte chunk c at chunk c ^ (r % 8)."""
    w1 = torch.arange(256 * 512, dtype=torch.float32).reshape(256, 512).half()
    w2 = torch.arange(512 * 256, dtype=torch.float32).reshape(512, 256).half()
    slots = c512.pack_weights(w1, w2).view(torch.float16).reshape(-1, 128, 64)
    assert c512.slot_order(256)[30] == ("V", 1, 1, 2)
    r, col = 5, 17  # element (row 5, column 17) of the block: chunk 2, stored at chunk 2 ^ 5 = 7
    assert slots[30, r, 7 * 8 + 1] == w2[256 + r, 128 + 64 + col]
    assert slots[3, r, 7 * 8 + 1] == w1[r, 3 * 64 + col]  # ("U", 0, 3, 0)


def emulate_kernel(x: torch.Tensor, block: nn.Module, weights: c512.KernelWeights) -> torch.Tensor:
    """The kernel's arithmetic in float64, read from the packed slots in stream order, with the
    kernel's split: warpgroup w computes hidden columns 64w.. of each chunk from rows 64w.. of
    the U slots, and output columns C/2 w .. from its V rows: at C >= 256 whole 128-row blocks
    (kAccs = C / 256 per warpgroup, accumulator q % kAccs), at C = 128 rows 64w.. of the one block."""
    n, c, h, w = x.shape
    X = F.conv2d(x, block.conv.weight, block.conv.bias, padding=1, groups=c // 8)
    X = X.permute(0, 2, 3, 1).reshape(-1, c)
    slots = weights.wpack.view(torch.float16).reshape(-1, 128, 64)
    b1, b2 = weights.b1.double(), weights.b2.double()
    n2 = min(c // 2, 128)  # the stage-2 wgmma's n
    accs = c // 2 // n2
    acc2 = [[torch.zeros(X.shape[0], n2, dtype=torch.float64) for _ in range(accs)] for _ in range(2)]
    if c == 384:  # warpgroup 0: [n128 (block 0), n64 (block 1 rows 0..63)]; 1: [n64 (block 1 rows 64..), n128 (block 2)]
        acc2 = [[torch.zeros(X.shape[0], 128, dtype=torch.float64), torch.zeros(X.shape[0], 64, dtype=torch.float64)],
                [torch.zeros(X.shape[0], 64, dtype=torch.float64), torch.zeros(X.shape[0], 128, dtype=torch.float64)]]
    it = 0
    if c == 64:  # ffn64_tile: stage 2 split by k, each warpgroup all 64 outputs over its own 64 hidden columns
        part = [torch.zeros(X.shape[0], 64, dtype=torch.float64) for _ in range(2)]
        for j in range(weights.hidden // 128):
            u = cuda_kernels.ops._swizzle_128b(slots[it]).double()
            v = cuda_kernels.ops._swizzle_128b(slots[it + 1]).double()
            it += 2
            for wg in range(2):
                hid = torch.relu(X @ u[64 * wg : 64 * wg + 64].T + b1[128 * j + 64 * wg : 128 * j + 64 * wg + 64])
                part[wg] += hid @ v[64 * wg : 64 * wg + 64].T
        # the two partial sums meet; warpgroup w stores columns 32w .. 32w + 31
        acc = torch.cat([part[0][:, :32] + part[1][:, :32], part[1][:, 32:] + part[0][:, 32:]], 1)
        out = acc + b2 + x.permute(0, 2, 3, 1).reshape(-1, c)
        return out.reshape(n, h, w, c).permute(0, 3, 1, 2)
    for j in range(weights.hidden // 128):
        acc1 = [torch.zeros(X.shape[0], 64, dtype=torch.float64) for _ in range(2)]
        for kp in range(c // 64):
            b = cuda_kernels.ops._swizzle_128b(slots[it]).double()
            it += 1
            for wg in range(2):
                acc1[wg] += X[:, 64 * kp : 64 * kp + 64] @ b[64 * wg : 64 * wg + 64].T
        hid = torch.cat([torch.relu(acc1[wg] + b1[128 * j + 64 * wg : 128 * j + 64 * wg + 64]) for wg in range(2)], 1)
        for kp in range(2):
            for q in range(c // 128):
                b = cuda_kernels.ops._swizzle_128b(slots[it]).double()
                it += 1
                for wg in range(2):
                    if c == 384:
                        if q == 1:
                            acc2[wg][1 - wg] += hid[:, 64 * kp : 64 * kp + 64] @ b[64 * wg : 64 * wg + 64].T
                        elif q == 2 * wg:
                            acc2[wg][wg] += hid[:, 64 * kp : 64 * kp + 64] @ b.T
                    elif c == 128:
                        acc2[wg][0] += hid[:, 64 * kp : 64 * kp + 64] @ b[64 * wg : 64 * wg + 64].T
                    elif q // accs == wg:
                        acc2[wg][q % accs] += hid[:, 64 * kp : 64 * kp + 64] @ b.T
    out = torch.cat([a for wg in range(2) for a in acc2[wg]], 1) + b2 + x.permute(0, 2, 3, 1).reshape(-1, c)
    return out.reshape(n, h, w, c).permute(0, 3, 1, 2)


@pytest.mark.parametrize("channels,expansion", [(512, 2), (512, 4), (256, 6), (256, 4), (128, 6), (128, 3), (384, 6),
                                                (384, 2), (64, 6), (64, 2), (64, 8), (64, 10)])
def test_kernel_dataflow_is_the_block(channels, expansion):
    """Weights rounded to fp16 first, so that the packed slots hold them exactly."""
    block = block_c(channels, expansion, seed=expansion).half().double()
    x = torch.randn(2, channels, 3, 5, dtype=torch.float64)
    with torch.no_grad():
        want = block(x)
        got = emulate_kernel(x, block, _kernel_weights(block))
    assert relative_error(got, want) < 1e-12


def test_conv_halo_fits_and_covers_every_tap():
    """The kernel's halo for the 64-pixel tile at p0: image rows (global n * H + h) p0 // W - 1 ..
    p_last // W + 1, clipped; it must hold at most 255 pixels and contain every in-image tap."""
    halo_pixels = 255
    for w in range(1, c512.MAX_WIDTH + 1):
        assert (63 // w + 4) * w <= halo_pixels
        for h, n in ((1, 3), (2, 2), (7, 3), (5, 4), (w, 2), (29, 1)):
            pixels, rows_total = n * h * w, n * h
            for p0 in range(0, pixels, 64):
                p_last = min(p0 + 64, pixels) - 1
                row_lo, row_hi = max(p0 // w - 1, 0), min(p_last // w + 1, rows_total - 1)
                assert (row_hi - row_lo + 1) * w <= halo_pixels
                for pix in range(p0, p_last + 1):
                    grow = pix // w
                    for dy in (-1, 0, 1):
                        if 0 <= grow % h + dy < h:
                            assert row_lo <= grow + dy <= row_hi


def test_c64_halo_window_fits_and_covers_every_tap():
    """C = 64 loads the window p0 - W - 1 .. p0 + 64 + W of the halo rows (halo_window, as conv_phase and
    conv_tile do): for every W <= 56 each index is below 255 (the zero pixel's), below 3 W + 64, and every
    in-image tap of the tile lies in the window; whole rows would not fit at W = 56 (280 pixels)."""
    assert c512.max_width(64) == 56 and c512.max_width(128) == c512.max_width(512) == 28
    assert (63 // 56 + 4) * 56 > c512.HALO_PIXELS  # why C = 64 needs the window
    for w in range(1, c512.max_width(64) + 1):
        assert 3 * w + 64 <= c512.HALO_PIXELS
        for h, n in ((1, 3), (2, 2), (7, 3), (w, 2), (29, 1), (3, 5)):
            pixels = n * h * w
            for p0 in range(0, pixels, 64):
                row_lo, first, end = c512.halo_window(p0, w, pixels)
                assert 0 <= first < end <= min(3 * w + 64, c512.HALO_PIXELS)
                for pix in range(p0, min(p0 + 64, pixels)):
                    grow, col = divmod(pix, w)
                    for dy, dx in itertools.product((-1, 0, 1), repeat=2):
                        if 0 <= grow % h + dy < h and 0 <= col + dx < w:
                            assert first <= pix + dy * w + dx - row_lo * w < end
    # the widest image whose window still fits: W = 63 (3 W + 64 = 253)
    assert max(w for w in range(1, 100) if 3 * w + 64 <= c512.HALO_PIXELS) == 63


def test_smem_budget_per_variant():
    """Shared memory per instance (the module's mirror of Shape / Shape3): within the H200's 227 KB at
    every width and variant that exists; C = 64: 173,184 B (variant 0), 205,952 (2), 205,968 (3)."""
    assert [c512.smem_bytes(64, v) for v in c512.VARIANTS] == [173184, 0, 205952, 205968, 0, 222480, 197856, 0, 0]
    assert c512.smem_bytes(256, 2) == c512.smem_bytes(512) == 230528 and c512.smem_bytes(256, 3) == 230544
    assert c512.smem_bytes(128) == 181376 and c512.smem_bytes(384) == 214144 and c512.smem_bytes(384, 2) == 0
    for channels in c512.SUPPORTED_CHANNELS:
        for variant in c512.VARIANTS:
            got = c512.smem_bytes(channels, variant)
            assert (got > 0) == (variant in c512.variants(channels)) and got <= c512.SMEM_LIMIT


@pytest.mark.parametrize("make,message", stride1_host_check_cases(512, 256, "weights take 512"))
def test_host_checks(make, message, small_weights):
    with pytest.raises(ValueError, match=message):
        c512.check_input(make(), small_weights)


def test_host_checks_at_64():
    weights = _kernel_weights(block_c(64, 6))
    with pytest.raises(ValueError, match="W <= 56"):
        c512.check_input(channels_last(torch.zeros(1, 64, 3, 57, dtype=torch.float16)), weights)
    for w in (56, 55, 29, 9):  # accepted up to the device check
        with pytest.raises(ValueError, match="CUDA tensor"):
            c512.check_input(channels_last(torch.zeros(1, 64, 3, w, dtype=torch.float16)), weights)
    with pytest.raises(ValueError, match="no variant 1 at C=64"):
        c512.run(channels_last(torch.zeros(1, 64, 3, 9, dtype=torch.float16)), weights, variant=1)


def test_host_checks_on_out(small_weights):
    x = channels_last(torch.zeros(2, 512, 7, 7, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"shape \(2, 512, 7, 7\)"):
        c512.check_input(x, small_weights, channels_last(torch.zeros(2, 512, 7, 6, dtype=torch.float16)))
    with pytest.raises(ValueError, match="overlap"):
        c512.check_input(x, small_weights, x)


def test_widths_and_weight_preparation(small_weights):
    assert c512.unsupported_shape(192, 1152).startswith("C=192")
    assert c512.unsupported_shape(384, 2304) is None and c512.unsupported_shape(384, 576).startswith("hidden 576")
    assert c512.unsupported_shape(32, 256).startswith("C=32") and c512.unsupported_shape(64, 256) is None
    assert c512.unsupported_shape(64, 192).startswith("hidden 192")
    assert c512.unsupported_shape(512, 512 * 3 // 2 + 64).startswith("hidden 832")
    assert all(c512.unsupported_shape(c, c * a) is None for c in (256, 512) for a in (2, 4, 6))
    assert c512.unsupported_shape(128, 320).startswith("hidden 320") and c512.unsupported_shape(128, 640) is None
    with pytest.raises(ValueError, match="C=32"):
        _kernel_weights(fold_batchnorm(ConvFirstBlock(32, 4)))
    w64 = _kernel_weights(block_c(64, 6))
    assert (w64.channels, w64.hidden, w64.conv_w.shape, w64.wpack.numel()) == (64, 384, (8, 9, 32), 4 * 384 * 64)
    w = small_weights
    assert w.hidden == 1024 and w.channels == 512 and w.conv_w.shape == (64, 9, 32)
    assert w.wpack.numel() == 4 * 1024 * 512
    assert {w.conv_b.dtype, w.b1.dtype, w.b2.dtype} == {torch.float32}
    w256 = _kernel_weights(block_c(256, 6))
    assert (w256.channels, w256.hidden, w256.conv_w.shape, w256.wpack.numel()) == (256, 1536, (32, 9, 32),
                                                                                 4 * 1536 * 256)


def test_switch_and_reasons(monkeypatch):
    unsupported = c512.FusedConvFirstC512.unsupported
    block = block_512(4)
    monkeypatch.delenv(c512.ENV_SWITCH, raising=False)
    assert c512.enabled() and c512.enabled("stride2")  # on by default
    monkeypatch.setenv(c512.ENV_SWITCH, "0")
    assert not c512.enabled()
    assert unsupported(block).startswith("C=512") and c512.ENV_SWITCH in unsupported(block)
    with pytest.raises(ValueError, match="switched off by CUDA_KERNELS_C512"):
        c512.FusedConvFirstC512.from_block(block)
    monkeypatch.setenv(c512.ENV_SWITCH, "1")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() == (9, 0):
        assert unsupported(block) is None
    assert unsupported(ConvFirstBlock(512, 4)) == "not in inference form (fold batchnorm first)"
    assert unsupported(fold_batchnorm(ConvFirstBlock(512, 4, 1024, stride=2))).startswith("stride 2")


def test_the_wgmma_switch_names_widths(monkeypatch):
    monkeypatch.setenv(c512.WGMMA_SWITCH, "256")
    assert c512.wgmma_widths() == (256,)
    monkeypatch.setenv(c512.WGMMA_SWITCH, "128, 256")
    assert c512.wgmma_widths() == (128, 256)
    for value in ("1", "all"):
        monkeypatch.setenv(c512.WGMMA_SWITCH, value)
        assert c512.wgmma_widths() == (64, 128, 256)
    monkeypatch.setenv(c512.WGMMA_SWITCH, "64,128,256")
    assert c512.wgmma_widths() == (64, 128, 256)
    assert c512.WGMMA_WIDTHS == c512.DEFAULT_WGMMA_WIDTHS == (64, 128, 256)  # each on since its GPU tests
    monkeypatch.setenv(c512.WGMMA_SWITCH, "0")
    assert c512.wgmma_widths() == ()
    monkeypatch.delenv(c512.WGMMA_SWITCH)
    assert c512.wgmma_widths() == c512.DEFAULT_WGMMA_WIDTHS
    monkeypatch.setenv(c512.WGMMA_SWITCH, "0")
    reason = c512.FusedConvFirstC512.unsupported(block_c(256, 6))
    assert reason.startswith("C=256: the wgmma kernel is off") and c512.WGMMA_SWITCH in reason


def test_replace_blocks_uses_the_wgmma_switch(monkeypatch):
    """C = 256 (and 128) stride-1 blocks go to the wgmma kernel only at the widths the switch names;
    otherwise they stay on the mma.sync kernel (never a fallback to PyTorch)."""
    def net():
        torch.manual_seed(0)
        return fold_batchnorm(nn.Sequential(ConvFirstBlock(128, 6), ConvFirstBlock(256, 6), ConvFirstBlock(256, 4),
                                            ConvFirstBlock(256, 6, 512, stride=2)))

    monkeypatch.delenv(c512.ENV_SWITCH, raising=False)
    monkeypatch.setenv(c512.WGMMA_SWITCH, "0")
    model = net()
    swap = cuda_kernels.replace_blocks(model)
    assert [type(m).__name__ for m in model][:3] == ["FusedConvFirstBlock"] * 3
    if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
        return
    monkeypatch.setenv(c512.WGMMA_SWITCH, "256")
    model = net()
    swap = cuda_kernels.replace_blocks(model)
    assert [type(m).__name__ for m in model][:3] == ["FusedConvFirstBlock", "FusedConvFirstC512", "FusedConvFirstC512"]
    assert (model[1].channels, model[1].hidden, model[2].hidden) == (256, 1536, 1024)
    assert swap.fused["ConvFirstBlock"] == 3 + ("3" not in swap.fallback)
    monkeypatch.setenv(c512.WGMMA_SWITCH, "1")
    model = net()
    cuda_kernels.replace_blocks(model)
    assert [type(m).__name__ for m in model][:3] == ["FusedConvFirstC512"] * 3


def test_the_switch_can_name_one_kernel(monkeypatch):
    from cuda_kernels import convfirst_s2 as s2

    monkeypatch.setenv(c512.ENV_SWITCH, "stride2")
    assert c512.enabled("stride2") and not c512.enabled("stride1") and not c512.enabled()
    assert s2.unsupported_shape(256, 512, 1536) is None
    assert c512.FusedConvFirstC512.unsupported(block_512(4)).startswith("C=512")
    monkeypatch.setenv(c512.ENV_SWITCH, "stride1, stride2")
    assert c512.enabled("stride1") and c512.enabled("stride2")
    monkeypatch.setenv(c512.ENV_SWITCH, "0")
    assert not c512.enabled("stride1") and not c512.enabled("stride2")


def test_replace_blocks_uses_the_switch(monkeypatch):
    def net():
        torch.manual_seed(0)
        return fold_batchnorm(nn.Sequential(ConvFirstBlock(256, 2), ConvFirstBlock(512, 4), ConvFirstBlock(512, 6)))

    monkeypatch.setenv(c512.ENV_SWITCH, "0")
    monkeypatch.setenv(c512.WGMMA_SWITCH, "0")
    model = net()
    swap = cuda_kernels.replace_blocks(model)
    assert swap.fused == {"ConvFirstBlock": 1, "FFN": 0}
    assert set(swap.fallback) == {"1", "1.ffn", "2", "2.ffn"}
    assert swap.fallback["1"].startswith("C=512") and c512.ENV_SWITCH in swap.fallback["1"]
    assert swap.fallback["1.ffn"].startswith("C=512 (kernels for C in")
    if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
        return
    monkeypatch.setenv(c512.ENV_SWITCH, "1")
    model = net()
    swap = cuda_kernels.replace_blocks(model)
    assert swap.fused == {"ConvFirstBlock": 3, "FFN": 0} and swap.fallback == {}
    assert [type(m).__name__ for m in model] == ["FusedConvFirstBlock", "FusedConvFirstC512", "FusedConvFirstC512"]
    assert (model[1].hidden, model[2].hidden) == (2048, 3072)


def test_fake_operator_keeps_the_channels_last_shape(small_weights):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        x = channels_last(torch.empty(3, 512, 7, 7, dtype=torch.float16))
        y = torch.ops.convfirst_c512.block(x, *(getattr(small_weights, n) for n in c512.WEIGHT_FIELDS))
    assert tuple(y.shape) == (3, 512, 7, 7) and y.stride() == x.stride() and y.dtype == torch.float16


# ---- GPU ----

def check_kernel(expansion: int, batch: int, h: int, w: int | None = None, variant: int | None = None,
                 channels: int = 512) -> float:
    w = h if w is None else w
    block = block_c(channels, expansion, seed=expansion + h).cuda()
    x = channels_last(torch.randn(batch, channels, h, w, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    return check_against_float64(block, x, lambda out: c512.run(x, weights, out=out, variant=variant),
                                 (batch, channels, h, w))


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,size,batch", list(itertools.product((4, 6), (7, 14), (128, 1, 37))))
def test_convfirstnet_shapes(expansion, size, batch):
    """ConvFirstNet-M (alpha 4) and -H200 (alpha 6) at 7x7, and 14x14; 128 pixels of 7x7 x 128
    images are 98 tiles, batch 1 one partial tile, 37 images a partial last tile."""
    check_kernel(expansion, batch, size)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,size,batch", [
    *itertools.product((256,), (4, 6), (14, 7), (128, 1, 37)), *itertools.product((128,), (4, 6), (28,), (128, 1, 37)),
    *itertools.product((64,), (4, 6), (56,), (128, 1, 37)),
])
def test_narrow_convfirstnet_shapes(channels, expansion, size, batch):
    """C = 256 (ConvFirstNet-H200 stage 2 a6 14x14, -M a4; -S's last stage at 7x7) and C = 128
    (stage 1, 28x28) on the same kernel's other instances."""
    check_kernel(expansion, batch, size, channels=channels)


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (2, 3, 13, 13), (4, 2, 9, 5), (6, 1, 1, 1), (4, 5, 28, 28), (2, 3, 28, 27), (6, 7, 3, 17), (8, 2, 11, 2),
])
@pytest.mark.parametrize("channels", [512, 256, 128, 64])
def test_odd_sizes_and_batches(channels, expansion, batch, h, w):
    check_kernel(expansion, batch, h, w, channels=channels)


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (6, 128, 7, 7), (4, 128, 7, 7), (6, 37, 7, 7), (4, 37, 14, 14), (4, 1, 7, 7), (2, 3, 13, 13), (6, 1, 1, 1),
    (4, 5, 28, 27),
])
def test_cluster_variant(expansion, batch, h, w):
    """Variant 1: two-CTA clusters multicasting the weights. 64-pixel tiles: 98, 98, 29, 114, 1, 8,
    1, 60; an odd count leaves the grid's last CTA past the end, computing nothing that is kept."""
    check_kernel(expansion, batch, h, w, variant=1)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,batch,h,w", [
    (256, 6, 128, 14, 14), (256, 4, 37, 14, 14), (256, 2, 3, 13, 13), (128, 6, 37, 28, 28), (128, 3, 1, 5, 7),
])
def test_cluster_variant_narrow(channels, expansion, batch, h, w):
    check_kernel(expansion, batch, h, w, variant=1, channels=channels)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,batch,h,w", [
    (256, 6, 128, 14, 14), (256, 4, 37, 14, 14), (256, 2, 3, 13, 13), (256, 6, 1, 1, 1), (256, 4, 5, 28, 27),
    (128, 6, 37, 28, 28), (128, 3, 1, 5, 7), (128, 4, 2, 9, 5),
])
def test_double_halo_variant(channels, expansion, batch, h, w):
    """Variant 2 (C <= 256): phase A alternates two halo buffers, slice s + 1 loading while s computes."""
    check_kernel(expansion, batch, h, w, variant=2, channels=channels)


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (6, 3, 56, 56), (6, 1, 55, 55), (4, 5, 29, 29), (2, 7, 9, 9), (8, 2, 56, 9), (6, 1, 1, 1), (6, 37, 13, 56),
    (4, 2, 31, 55), (10, 3, 56, 56), (6, 300, 7, 7),
])
@pytest.mark.parametrize("variant", [0, 2, 3], ids=["v0", "v2", "v3"])
def test_c64_variants(variant, expansion, batch, h, w):
    """C = 64 (stage 2 split by k on register A operands, the windowed halo to W = 56): widths 56, 55, 29,
    9 and 1, odd batches, alpha 8 (8 slots: variant 3's resident ring full) and 10 (10 slots: streamed)."""
    check_kernel(expansion, batch, h, w, variant=variant, channels=64)


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [(6, 37, 56, 56), (10, 5, 29, 29), (8, 3, 55, 55), (2, 1, 9, 9)])
def test_c64_variants_are_bitwise_identical(expansion, batch, h, w):
    """Variants 0, 2 and 3 do each C = 64 tile's arithmetic in the same order (the same taps, wgmma groups,
    reduction and epilogue): equal bit for bit, over repeated launches of the persistent one."""
    block = block_c(64, expansion, seed=5).cuda().half()
    x = channels_last(torch.randn(batch, 64, h, w, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    want = c512.run(x, weights, variant=0)
    _assert_launches_equal(x, weights, 2, want, launches=1)
    _assert_launches_equal(x, weights, 3, want)


@pytest.mark.cuda
def test_c64_in_the_swapped_network(monkeypatch):
    """With CUDA_KERNELS_WGMMA_CONVFIRST naming 64, a stride-1 C = 64 block at 56x56 runs on the wgmma kernel."""
    monkeypatch.setenv(c512.WGMMA_SWITCH, "64")
    torch.manual_seed(3)
    net = nn.Sequential(block_c(64, 6, seed=1), block_c(64, 6, seed=2)).cuda().half()
    x = channels_last(torch.randn(2, 64, 56, 56, device="cuda", dtype=torch.float16))
    swap, got, exact = swap_against_float64(net, x)
    assert swap.fused["ConvFirstBlock"] == 2 and all(type(m).__name__ == "FusedConvFirstC512" for m in net)
    assert relative_error(got, exact) < 5e-3


def test_variants_by_width(small_weights, monkeypatch):
    monkeypatch.delenv(c512.VARIANT_SWITCH, raising=False)
    assert c512.variants(512) == c512.variants(384) == (0, 1, 4)
    assert c512.variants(256) == (0, 1, 2, 3, 4, 7, 8) and c512.variants(128) == (0, 1, 2, 3, 4, 5, 7)
    assert c512.variants(64) == (0, 2, 3, 5, 6)
    assert [c512.default_variant(c) for c in (64, 128, 256, 384, 512)] == [6, 5, 8, 0, 0]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "64:2")
    assert c512.default_variant(64, 56) == 2
    monkeypatch.setenv(c512.VARIANT_SWITCH, "1")  # C = 64 has no variant 1: its default stays
    assert c512.default_variant(64, 56) == 6
    x = channels_last(torch.zeros(1, 512, 7, 7, dtype=torch.float16))
    with pytest.raises(ValueError, match="no variant 2 at C=512"):
        c512.run(x, small_weights, variant=2)


@pytest.mark.cuda
def test_raw_op_refuses_overlap_and_bad_shapes():
    weights = _kernel_weights(block_512(2).cuda())
    ext = c512._extension()
    x = torch.randn(2 * 7 * 7, 512, device="cuda", dtype=torch.float16)
    args = [weights.conv_w, weights.conv_b, weights.wpack, weights.b1, weights.b2]
    empty = torch.empty(0, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="overlap"):
        ext.convfirst_c512(x, *args, 7, 7, 0, x)
    with pytest.raises(RuntimeError, match="bad H, W"):
        ext.convfirst_c512(x, *args, 7, 29, 0, empty)
    with pytest.raises(RuntimeError, match="not a multiple of 128"):
        ext.convfirst_c512(x, *args[:3], weights.b1[:100].contiguous(), weights.b2, 7, 7, 0, empty)
    with pytest.raises(RuntimeError, match="no variant 2"):
        ext.convfirst_c512(x, *args, 7, 7, 2, empty)
    with pytest.raises(RuntimeError, match="no variant 3"):
        ext.convfirst_c512(x, *args, 7, 7, 3, empty)
    with pytest.raises(RuntimeError, match="C in 64, 128, 256, 384, 512"):
        ext.convfirst_c512(x[:, :320].contiguous(), *args, 7, 7, 0, empty)
    optin = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    assert all(0 < ext.smem_bytes(c) <= optin for c in (64, 128, 256, 512)) and ext.smem_bytes(32) == 0
    assert all(ext.smem_bytes(c, v) == c512.smem_bytes(c, v) for c in (32, *c512.SUPPORTED_CHANNELS) for v in range(5))
    assert ext.smem_bytes(64, 1) == ext.smem_bytes(64, 4) == 0 and ext.max_width_c64 == 56
    assert all(0 < ext.smem_bytes(c, 2) <= optin for c in (128, 256)) and ext.smem_bytes(512, 2) == 0
    assert all(0 < ext.smem_bytes(c, 3) <= optin for c in (128, 256)) and ext.smem_bytes(512, 3) == 0
    # the binding's variant count (csrc/convfirst_c512.h kVariants) against the Python side's list of variants
    assert ext.smem_bytes(256, 3) == ext.smem_bytes(256, 2) + 16 and c512.VARIANTS == tuple(range(ext.num_variants))
    assert all(ext.smem_bytes(c, 4) == ext.smem_bytes(c, 0) for c in (128, 256, 384, 512))
    with pytest.raises(RuntimeError, match="variant 4 needs W <= 18"):
        ext.convfirst_c512(x[:42].contiguous(), *args, 1, 21, 4, empty)
    assert 0 < ext.smem_bytes(384) <= optin and ext.smem_bytes(384, 2) == ext.smem_bytes(384, 3) == 0


@pytest.mark.cuda
def test_swapped_network_matches_pytorch(monkeypatch):
    monkeypatch.setenv(c512.ENV_SWITCH, "1")
    torch.manual_seed(1)
    net = nn.Sequential(block_512(4, seed=1), block_512(6, seed=2)).cuda().half()
    x = channels_last(torch.randn(4, 512, 7, 7, device="cuda", dtype=torch.float16))
    swap, got, exact = swap_against_float64(net, x)
    assert swap.fused == {"ConvFirstBlock": 2, "FFN": 0} and swap.fallback == {}
    assert relative_error(got, exact) < 5e-3


def test_bench_cases_count_the_block():
    from cuda_kernels import bench_c512

    case = bench_c512.parse_case("6:7")
    assert (case.channels, case.expansion, case.size, case.batch) == (512, 6, 7, 128)
    pixels = 128 * 7 * 7
    assert case.macs == pixels * (2 * 512 * 3072 + 512 * 8 * 9)
    assert case.dram_bytes == 2 * (2 * pixels * 512 + 2 * 512 * 3072 + 3072 + 512 + 512 * 72 + 512)
    assert bench_c512.parse_case("4:14:37").batch == 37
    case = bench_c512.parse_case("c64:6:56")
    assert (case.channels, case.expansion, case.size, case.batch) == (64, 6, 56, 128)
    assert 2 * case.macs == 2 * 128 * 56 * 56 * (2 * 64 * 384 + 64 * 72)  # 43.2 GFLOP
    assert bench_c512.case_variants(64) == (0, 2, 3, 5, 6) and bench_c512.case_variants(64, (2, 3), 56) == (2, 3)
    case = bench_c512.parse_case("c256:6:14")
    assert (case.channels, case.expansion, case.size, case.batch) == (256, 6, 14, 128)
    assert 2 * case.macs == 2 * 128 * 14 * 14 * (2 * 256 * 1536 + 256 * 72)  # 39.6 GFLOP


# ---- the stride-2 block 256 -> 512 (csrc/convfirst_s2_wide.cu, same switch) ----

def test_wide_stride_2_widths_follow_the_switch(monkeypatch):
    from cuda_kernels import convfirst_s2 as s2

    monkeypatch.setenv(c512.ENV_SWITCH, "0")
    reason = s2.unsupported_shape(256, 512, 1536)
    assert reason.startswith("C 256 -> 512") and c512.ENV_SWITCH in reason
    monkeypatch.setenv(c512.ENV_SWITCH, "1")
    assert all(s2.unsupported_shape(256, 512, 256 * a) is None for a in s2.SUPPORTED_EXPANSIONS)
    assert s2.unsupported_shape(256, 512, 256 * 3).startswith("hidden 768")
    assert s2.unsupported_shape(256, 256, 1024).startswith("C 256 -> 256")
    assert s2.VARIANTS[256] == (0,) and s2.default_variant(256, 14) == 0


@pytest.mark.parametrize("name,blocks", [("convfirstnet_h200", 3 + 4 + 14 + 3 + 3), ("convfirstnet_m", 3 + 4 + 12 + 3 + 3)])
def test_switched_on_the_whole_network_is_fused(monkeypatch, name, blocks):
    """With the switch, ConvFirstNet-H200 and -M have no fallback left: the 256 -> 512 stride-2
    block and the three C = 512 blocks run on the new kernels."""
    from cuda_kernels import convfirst_s2 as s2
    from perfmodel.zoo import MODELS

    if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the C=512 kernel is refused off compute capability 9.0")
    monkeypatch.setenv(c512.ENV_SWITCH, "1")
    monkeypatch.setenv(c512.WGMMA_SWITCH, "256")
    net = fold_batchnorm(MODELS[name]())
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fused == {"ConvFirstBlock": blocks, "FFN": 0, "Stem": 1} and swap.fallback == {}
    assert isinstance(net.stages[3][0], s2.FusedConvFirstDown) and net.stages[3][0].out_channels == 512
    assert all(isinstance(m, c512.FusedConvFirstC512) for m in list(net.stages[3])[1:])
    assert all(isinstance(m, c512.FusedConvFirstC512) and m.channels == 256 for m in list(net.stages[2])[1:])
    assert all(isinstance(m, cuda_kernels.FusedConvFirstBlock) for m in list(net.stages[1])[1:])
    # and bench.fused_model checks every one of them against PyTorch before timing
    swapped = [m for m in net.modules() if type(m).__module__.startswith("cuda_kernels")]
    assert len(swapped) == blocks + 1 and all(isinstance(m, cuda_kernels.FUSED_MODULES) for m in swapped)  # + the stem


@pytest.mark.parametrize("switch,wgmma", [(None, True), ("64,128,256", True), ("128,256", False), ("1", True)])
def test_c64_stage_0_of_convfirstnet_h200_follows_the_switch(monkeypatch, switch, wgmma):
    """ConvFirstNet-H200's stage 0 (three stride-1 C = 64 a6 blocks at 56x56) runs on the wgmma kernel by
    default and when CUDA_KERNELS_WGMMA_CONVFIRST names 64, else on the mma.sync kernel; nothing falls back."""
    from perfmodel.zoo import MODELS

    if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma kernel is refused off compute capability 9.0")
    monkeypatch.delenv(c512.ENV_SWITCH, raising=False)
    if switch is None:
        monkeypatch.delenv(c512.WGMMA_SWITCH, raising=False)
    else:
        monkeypatch.setenv(c512.WGMMA_SWITCH, switch)
    net = fold_batchnorm(MODELS["convfirstnet_h200"]())
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fallback == {} and swap.fused["ConvFirstBlock"] == 3 + 4 + 14 + 3 + 3
    stage0 = list(net.stages[0])
    assert len(stage0) == 3
    if wgmma:
        assert all(isinstance(m, c512.FusedConvFirstC512) and (m.channels, m.hidden) == (64, 384) for m in stage0)
    else:
        assert all(isinstance(m, cuda_kernels.FusedConvFirstBlock) for m in stage0)


def _check_wide(monkeypatch, expansion: int, batch: int, h: int, w: int | None = None, **kwargs) -> float:
    from cuda_kernels import convfirst_s2 as s2

    monkeypatch.setenv(c512.ENV_SWITCH, "1")
    w = h if w is None else w
    torch.manual_seed(expansion + h)
    block = ConvFirstBlock(256, expansion, 512, stride=2)
    block = fold_batchnorm(randomize_batchnorm(block, seed=expansion + h)).cuda()
    x = channels_last(torch.randn(batch, 256, h, w, device="cuda", dtype=torch.float16))
    weights = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    shape = (batch, 512, s2.output_size(h), s2.output_size(w))
    return check_against_float64(block, x, lambda out: s2.run(x, weights, out=out, **kwargs), shape)


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch", list(itertools.product((4, 6), (128, 1, 37))))
def test_wide_stride_2_convfirstnet_shapes(monkeypatch, expansion, batch):
    """ConvFirstNet-M (alpha 4) and -H200 (alpha 6) stages.3.0: 256 x 14 x 14 -> 512 x 7 x 7."""
    _check_wide(monkeypatch, expansion, batch, 14)


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (6, 3, 13, 13), (4, 2, 28, 28), (2, 5, 7, 9), (6, 1, 2, 2), (4, 3, 56, 56), (2, 7, 10, 6),
])
def test_wide_stride_2_odd_sizes(monkeypatch, expansion, batch, h, w):
    _check_wide(monkeypatch, expansion, batch, h, w)


@pytest.mark.cuda
@pytest.mark.parametrize("rows_per_tile", [1, 2, 3, 4, 9])
@pytest.mark.parametrize("size", [14, 9])
def test_wide_stride_2_tiles_across_images(monkeypatch, size, rows_per_tile):
    """Explicit tile heights (R * Wo <= 64): tiles of several output rows straddle images."""
    _check_wide(monkeypatch, 4, 3, size, rows_per_tile=rows_per_tile)


# ---- the kernel's synchronisation, model-checked on the CPU ----

def _consumer_program(wg: int, nchunks: int, channels: int = 512) -> list[tuple]:
    """csrc/convfirst_c512.cu's consumer loop for warpgroup `wg`, as a list of operations."""
    ops, it, pending = [], 0, None
    vblocks, accs = channels // 128, max(channels // 256, 1)
    if channels == 64:  # ffn64_tile: stage 2 from registers (no H, no barrier per chunk), then the reduction
        for j in range(nchunks):
            ops += [("wait_full", it), ("issue", it, None), ("wait_groups", 1)]
            ops += [("release", pending)] if pending is not None else []  # chunk j - 1's V slot
            pending, it = it, it + 1
            ops += [("wait_groups", 0), ("release", pending)]
            ops += [("wait_full", it), ("issue", it, None)]  # both warpgroups read the V slot (their k halves)
            pending, it = it, it + 1
        return ops + [("wait_groups", 0), ("release", pending), ("barrier", "reduction")]

    def uses(q):  # whether this warpgroup reads V block q of a k panel
        if channels == 384:  # block 1 split by rows, 0 warpgroup 0's, 2 warpgroup 1's
            return q == 1 or q == 2 * wg
        return vblocks == 1 or q // accs == wg

    for j in range(nchunks):
        for _ in range(channels // 64):  # stage 1: one U slot per wgmma group
            ops += [("wait_full", it), ("issue", it, None), ("wait_groups", 1)]
            ops += [("release", pending)] if pending is not None else []
            pending, it = it, it + 1
        ops += [("wait_groups", 0), ("release", pending), ("write_h", j % 2, j), ("barrier", j)]
        pending = None
        for _ in range(2):  # stage 2: per k panel the C / 128 V blocks (this warpgroup's, or at C = 128 half of it)
            for q in range(vblocks):
                ops.append(("wait_full", it))
                if uses(q):
                    ops += [("issue", it, (j % 2, j)), ("wait_groups", 1)]
                    ops += [("release", pending)] if pending is not None else []
                    pending = it
                else:
                    ops.append(("release", it))
                it += 1
    return ops + [("wait_groups", 0)]


def _enabled(programs, pc, groups, produced: int, nslots: int, stages: int, released, fills, at_barrier,
             bars=None, conv=None) -> list:
    """The actions that may run next: ("produce",) once every warpgroup has released the fill the next
    index's slot held before (released[w][slot]: releases of slot by warpgroup w); ("retire", w) while
    warpgroup w has wgmma groups in flight; ("step", w) where program w's next op may run (_may_step).
    Programs past len(groups) (the conv warpgroup's) issue no wgmma."""
    acts = []
    if produced < nslots:
        s, rnd = produced % stages, produced // stages
        if all(r[s] >= rnd for r in released):
            acts.append(("produce",))
    for w in range(len(programs)):
        if w < len(groups) and groups[w]:
            acts.append(("retire", w))
        if pc[w] < len(programs[w]) and _may_step(programs[w][pc[w]], w, stages, fills, groups, at_barrier, bars,
                                                  conv):
            acts.append(("step", w))
        if conv is not None and conv["inflight"].get(w):
            acts.append(("land", w))  # one of conv warp w's cp.async copies lands
    return acts


def _produce(produced: int, stages: int, slot_index, fills, groups) -> int:
    """The producer fills stream index `produced` into its slot, which no wgmma group in flight may
    read; returns the next index."""
    s = produced % stages
    assert all(g[0] != s for gs in groups for g in gs), "slot refilled while a wgmma reads it"
    slot_index[s], fills[s] = produced, fills[s] + 1
    return produced + 1


def _may_step(op, w: int, stages: int, fills, groups, at_barrier, bars=None, conv=None) -> bool:
    """Whether warpgroup (or program) w may run its next op: a wait on a ring slot's fill, on its
    wgmma groups in flight, on an mbarrier's parity (bars: expected arrivals, arrivals, completed
    phases; a wait on parity P passes while the completed phase count has the other parity) or at
    the named barrier (arriving, or passing once the other warpgroup is there); any other op runs."""
    if op[0] == "wait_full":
        return fills[op[1] % stages] > op[1] // stages
    if op[0] == "wait_groups":
        return len(groups[w]) <= op[1]
    if op[0] == "wait_bar":
        return bars[op[1]][2] % 2 != op[2]
    if op[0] == "barrier":
        return at_barrier[w ^ 1] == op[1] or at_barrier[w] != op[1]
    if op[0] == "cp_wait":  # cp.async.wait_group n: at most n of this warp's newest groups still in flight
        return len({unit for _, unit in conv["inflight"][w]}) <= op[1]
    if op[0] == "conv_sync":  # named barrier of the conv warps: arrive, then pass once every conv warp arrived
        return conv["arrived"][w] <= op[1] or min(conv["arrived"].values()) > op[1]
    return True


def _step_ring(op, w: int, stages: int, slot_index, released) -> None:
    """The ring checks of warpgroup w's op: a wait_full finds the index it waits for in its slot, and
    so does the wgmma group issued on it; a release counts toward the slot's current fill."""
    if op[0] == "wait_full":
        assert slot_index[op[1] % stages] == op[1], "the slot holds another index than awaited"
    elif op[0] == "issue":
        assert slot_index[op[1] % stages] == op[1]
    elif op[0] == "release":
        s = op[1] % stages
        assert released[w][s] == op[1] // stages, "release counted toward another phase"
        released[w][s] += 1


def _run_pipeline_model(nchunks: int, stages: int, seed: int, ctas: int = 1, channels: int = 512) -> None:
    """Consumer warpgroups 2c and 2c + 1 belong to CTA c (their own H buffers and named barrier);
    with ctas = 2 (variant 1) a slot is refilled, in both CTAs at once (the multicast), only once
    all four warpgroups have released it."""
    import random

    rng = random.Random(seed)
    nslots, nwg = nchunks * c512.slots_per_chunk(channels), 2 * ctas
    slot_index = [None] * stages      # which stream index each ring slot holds (the same in every CTA)
    fills = [0] * stages              # completed phases of each full barrier
    released = [[0] * stages for _ in range(nwg)]  # releases per slot per warpgroup
    h_chunk = {(cta, buf, half): None for cta in range(ctas) for buf in (0, 1) for half in (0, 1)}
    groups = [[] for _ in range(nwg)]  # in-flight wgmma groups per warpgroup: (slot, h buffer or None)
    programs = [_consumer_program(w % 2, nchunks, channels) for w in range(nwg)]
    pc, produced, at_barrier = [0] * nwg, 0, [None] * nwg

    while True:
        acts = _enabled(programs, pc, groups, produced, nslots, stages, released, fills, at_barrier)
        if not acts:
            assert produced == nslots and pc == [len(p) for p in programs], f"deadlock at {pc}, seed {seed}"
            return
        act = rng.choice(acts)
        if act[0] == "produce":
            produced = _produce(produced, stages, slot_index, fills, groups)
        elif act[0] == "retire":
            groups[act[1]].pop(0)  # groups retire in order
        else:
            w = act[1]
            op = programs[w][pc[w]]
            _step_ring(op, w, stages, slot_index, released)
            if op[0] == "issue":
                h, cta = op[2], w // 2  # (H buffer, chunk) the group reads, or None
                assert h is None or h_chunk[(cta, h[0], 0)] == h_chunk[(cta, h[0], 1)] == h[1], \
                    "H read before it was written"
                groups[w].append((op[1] % stages, op[2][0] if op[2] else None))
            elif op[0] == "write_h":
                pair = (w & ~1, w | 1)  # the CTA's two warpgroups
                assert all(g[1] != op[1] for v in pair for g in groups[v]), "H overwritten while a wgmma reads it"
                h_chunk[(w // 2, op[1], w % 2)] = op[2]
            elif op[0] == "barrier" and at_barrier[w] != op[1]:
                at_barrier[w] = op[1]
                if at_barrier[w ^ 1] != op[1]:
                    continue  # arrived; wait for the other warpgroup (pc stays)
            pc[w] += 1


@pytest.mark.parametrize("channels", [512, 384, 256, 128])
@pytest.mark.parametrize("ctas", [1, 2])
@pytest.mark.parametrize("seed", range(30))
def test_pipeline_protocol_has_no_deadlock_or_overwrite(seed, ctas, channels):
    """Producer, two consumer warpgroups per CTA (variant 1: two CTAs sharing each slot), 8 ring
    slots, wgmma groups retiring at arbitrary times: every interleaving tried finishes, never
    refills a slot a live group reads, never rewrites an H buffer a live group reads, and never
    lets a release count toward another fill."""
    _run_pipeline_model(nchunks=3, stages=8, seed=seed, ctas=ctas, channels=channels)


@pytest.mark.parametrize("nchunks", [1, 3, 4, 5, 9])
@pytest.mark.parametrize("seed", range(30))
def test_pipeline_protocol_at_64(seed, nchunks):
    """C = 64 (variants 0 and 2: one CTA): 2 slots per chunk, both warpgroups reading every slot, the
    V slot released only after the next chunk's stage 1 retires it; 5 and 9 chunks wrap the 8-slot ring."""
    _run_pipeline_model(nchunks=nchunks, stages=8, seed=seed, ctas=1, channels=64)


# ---- variant 3: persistent tiles, the next tile's conv on a fourth warpgroup ----

def test_variant_switch(monkeypatch):
    """CUDA_KERNELS_C512_VARIANT picks the drop-in module's variant where the width has it."""
    monkeypatch.setenv(c512.VARIANT_SWITCH, "3")
    assert [c512.default_variant(c) for c in (128, 256, 512)] == [3, 3, 0]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "1")
    assert [c512.default_variant(c) for c in (128, 256, 512)] == [1, 1, 1]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "9")  # no variant 9 (8 is C = 256's, variant 8 below)
    with pytest.raises(ValueError, match="CUDA_KERNELS_C512_VARIANT"):
        c512.default_variant(256)
    monkeypatch.setenv(c512.VARIANT_SWITCH, "")
    assert c512.default_variant(256) == 8
    monkeypatch.setenv(c512.VARIANT_SWITCH, "256:3, 512:4")
    assert [c512.default_variant(c, 14) for c in (128, 256, 384, 512)] == [5, 3, 4, 4]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "128:2")
    assert [c512.default_variant(c, 14) for c in (64, 128, 256)] == [6, 2, 8]
    assert c512.default_variant(512, 28) == 0  # variant 4 needs W <= 18
    monkeypatch.setenv(c512.VARIANT_SWITCH, "4")
    assert [c512.default_variant(c, 7) for c in (128, 256, 384, 512)] == [4, 4, 4, 4]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "x:3")
    with pytest.raises(ValueError, match="CUDA_KERNELS_C512_VARIANT"):
        c512.default_variant(256)


@pytest.mark.parametrize("tiles", [1, 5, 131, 132, 133, 392, 454, 1568, 6272])
def test_persistent_schedule_covers_every_tile_once(tiles):
    """min(tiles, 132) blocks; block b takes b, b + grid, ...: every tile once, in rounds."""
    schedule = c512.persistent_tiles(tiles, 132)
    assert len(schedule) == min(tiles, 132)
    assert sorted(t for blk in schedule for t in blk) == list(range(tiles))
    assert max(map(len, schedule)) - min(map(len, schedule)) <= 1
    assert max(map(len, schedule)) == -(-tiles // 132)


def _conv_warpgroup_fragments(X: torch.Tensor, channels: int):
    """conv_tile's output registers for a 64-pixel tile X [64, C]: xr[s][mt][gi][hr] of conv warp cw
    and lane holds X[16 mt + lane / 4 + 8 hr, 64 s + 8 (2 cw + gi) + 2 (lane % 4) + {0, 1}] (the mma
    m16n8k8 C fragment of m-tile mt for group 8 s + 2 cw + gi)."""
    frags = {}
    for cw, lane, s, mt, gi, hr in itertools.product(range(4), range(32), range(channels // 64), range(4), range(2),
                                                     range(2)):
        row = 16 * mt + lane // 4 + 8 * hr
        col = 64 * s + 8 * (2 * cw + gi) + 2 * (lane % 4)
        frags[cw, lane, s, mt, gi, hr] = (X[row, col].item(), X[row, col + 1].item())
    return frags


@pytest.mark.parametrize("channels", [256, 128])
def test_conv_warpgroup_writes_the_x_panels(channels):
    """store_x's addressing (panel s, row 16 mt + lane / 4 (+ 8), 16-byte chunk 2 cw + gi swizzled with
    the row, 4 bytes at (lane % 4) * 4) puts every X element where the stage-1 wgmma reads it (panel
    kp = X[:, 64 kp ..], 128-byte rows, chunk c at c ^ row % 8), each written once: the conv
    warpgroup's split (group pair cw of every slice, all four m-tiles) covers the tile."""
    torch.manual_seed(0)
    X = torch.randn(64, channels, dtype=torch.float64)
    panels = torch.full((channels // 64, 64 * 64), float("nan"), dtype=torch.float64)  # 8 KB panels as fp16 slots
    writes = torch.zeros_like(panels)
    for (cw, lane, s, mt, gi, hr), (v0, v1) in _conv_warpgroup_fragments(X, channels).items():
        row, chunk = 16 * mt + lane // 4 + 8 * hr, 2 * cw + gi
        offset = row * 128 + ((chunk ^ row) & 7) * 16 + (lane % 4) * 4  # panel_offset + within, bytes
        panels[s, offset // 2], panels[s, offset // 2 + 1] = v0, v1
        writes[s, offset // 2] += 1
        writes[s, offset // 2 + 1] += 1
    assert torch.equal(writes, torch.ones_like(writes))
    for kp in range(channels // 64):
        got = cuda_kernels.ops._swizzle_128b(panels[kp].reshape(64, 64))  # the swizzle is its own inverse
        assert torch.equal(got, X[:, 64 * kp : 64 * kp + 64])


def test_conv_warpgroup_matches_the_grouped_conv():
    """The conv warpgroup's job: warp cw computes groups 8 s + 2 cw + {0, 1} of slice s for the four
    m-tiles from the halo (taps outside the image read the zero pixel); as a float64 transliteration
    over a batch of tiles, with the halo rows of the kernel (row_lo .. row_hi), against F.conv2d."""
    torch.manual_seed(1)
    channels, n, h, w = 128, 2, 5, 13
    x = torch.randn(n, channels, h, w, dtype=torch.float64)
    weight = torch.randn(channels, 8, 3, 3, dtype=torch.float64)
    bias = torch.randn(channels, dtype=torch.float64)
    want = F.conv2d(x, weight, bias, padding=1, groups=channels // 8).permute(0, 2, 3, 1).reshape(-1, channels)
    flat = x.permute(0, 2, 3, 1).reshape(-1, channels)
    pixels, rows_total = n * h * w, n * h
    got = torch.full_like(want, float("nan"))
    for p0 in range(0, pixels, 64):
        p_last = min(p0 + 64, pixels) - 1
        row_lo, row_hi = max(p0 // w - 1, 0), min(p_last // w + 1, rows_total - 1)
        halo = flat[row_lo * w : (row_hi + 1) * w]
        assert halo.shape[0] <= 255  # the zero pixel sits at 255
        for s, cw, gi, mt in itertools.product(range(channels // 64), range(4), range(2), range(4)):
            g = 8 * s + 2 * cw + gi
            for r in range(16):
                pix = p0 + 16 * mt + r
                if pix >= pixels:
                    continue
                grow, col = divmod(pix, w)
                acc = bias[8 * g : 8 * g + 8].clone()
                for tap in range(9):
                    dy, dx = tap // 3 - 1, tap % 3 - 1
                    if 0 <= grow % h + dy < h and 0 <= col + dx < w:
                        q = (grow + dy - row_lo) * w + col + dx
                        acc += weight[8 * g : 8 * g + 8, :, dy + 1, dx + 1] @ halo[q, 8 * g : 8 * g + 8]
                got[pix, 8 * g : 8 * g + 8] = acc
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


def _consumer_program_v3(wg: int, tiles: int, nchunks: int, channels: int, x_empty_early: bool = False,
                         h_by_tile: bool = False, red_single: bool = False) -> list[tuple]:
    """The variant-3 consumer loop of warpgroup `wg` over `tiles` tiles as operations. The mutations
    (x_empty before the last stage-1 group retires; the H buffer by the chunk within the tile) are
    bugs the model must catch."""
    ops, it, pending, jg = [], 0, None, 0
    vblocks, accs = channels // 128, max(channels // 256, 1)
    ops += [("write_x", 0), ("barrier", -1)]  # tile 0: the consumers' own phase A, then their named barrier
    if channels == 64:  # ffn64_tile per tile; resident slots (restart at 0) when a tile's fit the ring
        resident = 2 * nchunks <= 8
        for k in range(tiles):
            if k:
                ops.append(("wait_bar", "x_full", (k - 1) & 1))
            if resident:
                it = 0
            rel = "release" if not resident or k == 0 else "release_resident"  # later ones: no producer waits
            for j in range(nchunks):
                ops += [("wait_full", it), ("issue", it, None, k), ("wait_groups", 1)]
                ops += [(rel, pending)] if pending is not None else []
                pending, it = it, it + 1
                ops += [("wait_groups", 0), (rel, pending)]
                if j == nchunks - 1:
                    ops.append(("arrive", "x_empty"))
                ops += [("wait_full", it), ("issue", it, None, None)]
                pending, it = it, it + 1
            buf = 0 if red_single else k & 1
            ops += [("wait_groups", 0), (rel, pending), ("write_red", buf, k), ("barrier", ("red", k)),
                    ("read_red", buf, k), ("epilogue", k)]
            pending = None
        return ops
    for k in range(tiles):
        if k:
            ops.append(("wait_bar", "x_full", (k - 1) & 1))
        for j in range(nchunks):
            for _ in range(channels // 64):
                ops += [("wait_full", it), ("issue", it, None, k), ("wait_groups", 1)]
                ops += [("release", pending)] if pending is not None else []
                pending, it = it, it + 1
            if x_empty_early and j == nchunks - 1:
                ops.append(("arrive", "x_empty"))
            ops += [("wait_groups", 0), ("release", pending)]
            if not x_empty_early and j == nchunks - 1:
                ops.append(("arrive", "x_empty"))
            buf = (j if h_by_tile else jg) % 2
            ops += [("write_h", buf, jg), ("barrier", jg)]
            pending = None
            for _ in range(2):
                for q in range(vblocks):
                    ops.append(("wait_full", it))
                    if vblocks == 1 or q // accs == wg:
                        ops += [("issue", it, (buf, jg), None), ("wait_groups", 1)]
                        ops += [("release", pending)] if pending is not None else []
                        pending = it
                    else:
                        ops.append(("release", it))
                    it += 1
            jg += 1
        ops += [("wait_groups", 0), ("release", pending), ("epilogue", k)]
        pending = None
    return ops


def _conv_program_v5(tiles: int, channels: int, halo_buffers: int = 2, refill_before_sync: bool = False,
                     wait_depth: int = 0) -> list[tuple]:
    """Variant 5's conv warp (conv_stream) as operations: units u = (k - 1) C/64 + s for tiles k >= 1; issue
    unit 0; per unit wait for this warp's copies (cp.async.wait_group 0), conv_sync, issue unit u + 1 into
    buffer (u + 1) % 2, the taps of unit u (reading every warp's copies in buffer u % 2); after a tile's last
    slice the X handoff of variant 3. The arguments are bugs the model must catch: one halo buffer, the
    refill issued before the sync, a wait_group 1 (unit u may still be in flight)."""
    slices = channels // 64
    ops, u, nsync = [("issue_halo", 0, 0 % halo_buffers)], 0, 0
    for k in range(1, tiles):
        for _ in range(slices):
            nxt = ("issue_halo", u + 1, (u + 1) % halo_buffers)
            if refill_before_sync:
                ops += [("cp_wait", wait_depth), nxt, ("conv_sync", nsync)]
            else:
                ops += [("cp_wait", wait_depth), ("conv_sync", nsync), nxt]
            ops += [("taps_begin", u, u % halo_buffers), ("taps_end", u, u % halo_buffers)]
            u, nsync = u + 1, nsync + 1
        ops += [("wait_bar", "x_empty", (k - 1) & 1), ("write_x", k), ("arrive", "x_full")]
    return ops


def _step_conv(op, w: int, conv: dict) -> bool:
    """Conv warp w's variant-5 op on the halo state (conv: buffer parts, copies in flight, readers, barrier
    arrivals); returns False where the op only arrived at the barrier (pc stays)."""
    if op[0] == "conv_sync" and conv["arrived"][w] <= op[1]:
        conv["arrived"][w] = op[1] + 1
        return min(conv["arrived"].values()) > op[1]
    if op[0] == "issue_halo":
        unit, buf = op[1], op[2]
        if unit < conv["units"]:  # past the last unit: an empty commit group
            assert all(r != buf for r in conv["reading"].values()), "halo buffer refilled while a warp reads it"
            conv["parts"][buf, w] = (unit, False)
            conv["inflight"][w].append((buf, unit))
    elif op[0] in ("taps_begin", "taps_end"):
        unit, buf = op[1], op[2]
        assert all(conv["parts"].get((buf, v)) == (unit, True) for v in conv["arrived"]), \
            "the taps read a halo whose copies have not all landed (or another unit's)"
        conv["reading"][w] = buf if op[0] == "taps_begin" else None
    return True


def _run_persistent_model(tiles: int, nchunks: int, seed: int, channels: int, stages: int = 8, prefetch: bool = False,
                          conv_warps: int = 1, conv_bug: dict | None = None, **mutation) -> None:
    """One thread block of variant 3: the producer streaming tiles x slots, the conv warpgroup
    (for tiles k >= 1: conv of tile k, wait x_empty's phase k - 1, write X, arrive x_full; tile 0's X is
    written by the consumers before their first barrier) and two consumer warpgroups,
    under random interleavings, with the mbarriers' parity waits as the hardware has them (a wait on
    parity P passes while the completed phase count has the other parity). Asserts no deadlock, X never
    rewritten while a stage-1 group reads it and always holding the tile a group reads, and the ring
    and H rules of the variant-0 model. prefetch (variant 5): `conv_warps` conv warps, each its own program
    (`_conv_program_v5`, `conv_bug` its planted bugs), with their named barrier, cp.async copies landing at
    any time, two halo buffers, and X written in parts (x_full counts every conv warp)."""
    import random

    rng = random.Random(seed)
    nslots = tiles * nchunks * c512.slots_per_chunk(channels)
    if channels == 64 and nchunks * 2 <= stages:  # the producer loads one tile's slots, once
        nslots = nchunks * 2
    red, red_read = {}, {}  # C = 64: (buffer, writer) -> tile written, and the tile the other warpgroup read
    slot_index, fills = [None] * stages, [0] * stages
    released = [[0] * stages for _ in range(2)]
    h_chunk = {(buf, half): None for buf in (0, 1) for half in (0, 1)}
    groups = [[], []]  # per warpgroup: (ring slot, H buffer or None, X tile or None)
    conv_warps = conv_warps if prefetch else 1
    bars = {"x_full": [conv_warps, 0, 0], "x_empty": [2, 0, 0]}  # expected arrivals, arrivals, completed phases
    programs = [_consumer_program_v3(w, tiles, nchunks, channels, **mutation) for w in range(2)]
    halo = None
    if prefetch:
        programs += [_conv_program_v5(tiles, channels, **(conv_bug or {})) for _ in range(conv_warps)]
        cws = range(2, 2 + conv_warps)
        halo = {"units": (tiles - 1) * (channels // 64), "parts": {}, "inflight": {w: [] for w in cws},
                "reading": {w: None for w in cws}, "arrived": {w: 0 for w in cws}}
    else:
        conv = []
        for k in range(1, tiles):  # tile 0's conv is the consumers'
            conv += [("conv", k), ("wait_bar", "x_empty", (k - 1) & 1), ("write_x", k), ("arrive", "x_full")]
        programs.append(conv)
    pc, produced, at_barrier = [0] * len(programs), 0, [None, None]
    x_part = [None] * conv_warps  # the tile whose X each conv warp's part holds (variant 3: one part)
    # each actor (producer, the wgmma retirements of a warpgroup, each program) gets a speed drawn per
    # seed, so that skewed interleavings (one warpgroup far behind the other) are tried too
    speed = {key: rng.choice([0.01, 0.2, 1.0, 5.0]) for key in ["produce", *(("retire", w) for w in range(2)),
                                                                *(("step", w) for w in range(len(programs))),
                                                                *(("land", w) for w in range(len(programs)))]}

    while True:
        acts = _enabled(programs, pc, groups, produced, nslots, stages, released, fills, at_barrier, bars, halo)
        if not acts:
            assert produced == nslots and pc == [len(p) for p in programs], f"deadlock at {pc}, seed {seed}"
            return
        act = rng.choices(acts, [speed[a if a[0] != "produce" else "produce"] for a in acts])[0]
        if act[0] == "produce":
            produced = _produce(produced, stages, slot_index, fills, groups)
            continue
        if act[0] == "retire":
            groups[act[1]].pop(0)
            continue
        if act[0] == "land":
            copies = halo["inflight"][act[1]]
            buf, unit = copies.pop(rng.randrange(len(copies)))  # copies land in any order
            halo["parts"][buf, act[1]] = (unit, True)
            continue
        w = act[1]
        op = programs[w][pc[w]]
        if halo is not None and w >= 2 and not _step_conv(op, w, halo):
            continue
        _step_ring(op, w, stages, slot_index, released)
        if op[0] == "issue":
            h = op[2]  # (H buffer, chunk) the group reads, or None
            assert h is None or h_chunk[(h[0], 0)] == h_chunk[(h[0], 1)] == h[1], "H read before it was written"
            if op[3] is not None:
                assert all(x == op[3] for x in x_part), f"stage 1 of tile {op[3]} reads X of tiles {x_part}"
            groups[w].append((op[1] % stages, op[2][0] if op[2] else None, op[3]))
        elif op[0] == "write_h":
            assert all(g[1] != op[1] for v in (0, 1) for g in groups[v]), "H overwritten while a wgmma reads it"
            h_chunk[(op[1], w)] = op[2]
        elif op[0] == "write_red":
            key = (op[1], w)
            assert red.get(key) is None or red_read.get(key) == red[key], "reduction buffer overwritten before it was read"
            red[key] = op[2]
        elif op[0] == "read_red":
            key = (op[1], w ^ 1)
            assert red.get(key) == op[2], "reduction buffer read before the other warpgroup wrote it"
            red_read[key] = op[2]
        elif op[0] == "write_x":
            assert all(g[2] is None for v in (0, 1) for g in groups[v]), "X overwritten while a wgmma reads it"
            parts = range(conv_warps) if w < 2 else [w - 2]  # the consumers write tile 0's whole X
            assert op[1] == 0 or all(x_part[i] == op[1] - 1 for i in parts), "X of a tile skipped or written twice"
            for i in parts:
                x_part[i] = op[1]
        elif op[0] == "arrive":
            bar = bars[op[1]]
            bar[1] += 1
            if bar[1] == bar[0]:
                bar[1], bar[2] = 0, bar[2] + 1
        elif op[0] == "barrier" and at_barrier[w] != op[1]:
            at_barrier[w] = op[1]
            if at_barrier[w ^ 1] != op[1]:
                continue
        pc[w] += 1


@pytest.mark.parametrize("channels,nchunks", [(256, 2), (256, 3), (128, 3), (128, 2), (64, 3), (64, 4), (64, 1),
                                             (64, 5)])
@pytest.mark.parametrize("seed", range(25))
def test_persistent_protocol_has_no_deadlock_or_overwrite(seed, channels, nchunks):
    """Variant 3 over three tiles (odd and even chunk counts per tile)."""
    _run_persistent_model(tiles=3, nchunks=nchunks, seed=seed, channels=channels)


def test_persistent_model_at_64_catches_a_single_reduction_buffer():
    """C = 64: the reduction buffer alternates by tile; with one buffer a warpgroup a tile ahead (resident
    weights couple the warpgroups only at the reduction barrier) overwrites what the other has not read."""
    failures = 0
    for seed in range(200):
        try:
            _run_persistent_model(tiles=4, nchunks=3, seed=seed, channels=64, red_single=True)
        except AssertionError as error:
            assert "reduction buffer" in str(error)
            failures += 1
    assert failures > 0


@pytest.mark.parametrize("mutation,message", [
    ({"x_empty_early": True}, "X overwritten while a wgmma reads it"),
    ({"h_by_tile": True}, "H"),
])
def test_persistent_model_catches_the_bugs(mutation, message):
    """The model is not blind: releasing X before the last stage-1 group retires, or alternating H
    by the chunk within a tile (3 chunks per tile: two neighbouring chunks share a buffer), fail."""
    failures = 0
    for seed in range(200):
        try:
            _run_persistent_model(tiles=3, nchunks=3, seed=seed, channels=128, **mutation)
        except AssertionError as error:
            assert message in str(error)
            failures += 1
    assert failures > 0


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,batch,h,w", [
    (256, 6, 128, 14, 14), (256, 4, 128, 14, 14), (256, 6, 37, 7, 7), (256, 4, 1, 14, 14), (256, 2, 3, 13, 13),
    (256, 6, 1, 1, 1), (256, 4, 5, 28, 27), (256, 4, 300, 14, 14),
    (128, 6, 128, 28, 28), (128, 4, 37, 28, 28), (128, 3, 19, 28, 28), (128, 3, 1, 5, 7), (128, 4, 2, 9, 5),
    (128, 6, 1, 28, 28),
])
def test_persistent_variant(channels, expansion, batch, h, w):
    """Variant 3: from 1 tile to 919 (7 per thread block), odd chunk counts (alpha 3 at C = 128)."""
    check_kernel(expansion, batch, h, w, variant=3, channels=channels)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,batch,size", [(256, 6, 128, 14), (256, 4, 37, 13), (128, 3, 19, 28)])
def test_persistent_variant_is_bitwise_variant_0(channels, expansion, batch, size):
    """Variant 3 does each tile's arithmetic in the same order as variant 0 (the same taps, wgmma
    groups and epilogue), so the outputs must agree bit for bit, on repeated launches too."""
    block = block_c(channels, expansion, seed=3).cuda().half()
    x = channels_last(torch.randn(batch, channels, size, size, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    _assert_launches_equal(x, weights, 3, c512.run(x, weights, variant=0))


@pytest.mark.cuda
def test_persistent_variant_in_the_swapped_network(monkeypatch):
    monkeypatch.setenv(c512.VARIANT_SWITCH, "3")
    monkeypatch.setenv(c512.WGMMA_SWITCH, "128,256")
    torch.manual_seed(2)
    net = nn.Sequential(block_c(128, 6, seed=1), block_c(256, 4, seed=2)).cuda().half()
    with torch.no_grad():
        x1 = channels_last(torch.randn(3, 128, 14, 14, device="cuda", dtype=torch.float16))
        exact = copy.deepcopy(net[0]).double()(x1.double())
        swap = cuda_kernels.replace_blocks(net)
        got = net[0](x1)
    assert swap.fused["ConvFirstBlock"] == 2 and type(net[0]).__name__ == "FusedConvFirstC512"
    assert relative_error(got, exact) < 5e-3


def test_bench_variant_selection(tmp_path):
    """bench_c512 --variants and the device script's choice of the variant and widths for the network."""
    import json

    from cuda_kernels import bench_c512

    assert bench_c512.parse_variants("0,2,3") == (0, 2, 3)
    assert bench_c512.case_variants(512, (0, 2, 3)) == (0,) and bench_c512.case_variants(256, (0, 3)) == (0, 3)
    assert bench_c512.case_variants(128) == (0, 1, 2, 3, 4, 5, 7)
    assert bench_c512.case_variants(128, None, 28) == (0, 1, 2, 3, 5, 7)
    assert bench_c512.case_variants(256, (3, 7), 14) == (3, 7) and bench_c512.case_variants(512, (3, 7)) == ()
    assert bench_c512.case_variants(512, (0, 2, 3, 4), 7) == (0, 4)

    def entry(channels, expansion, best, fused_ms, mma_ms=None):
        backends = {"cuda_kernels": {"variant": best, "latency_ms": {"median": fused_ms}}}
        if mma_ms is not None:
            backends["mma_sync"] = {"latency_ms": {"median": mma_ms}}
        return {"channels": channels, "expansion": expansion, "backends": backends}

    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"results": {"cases": [entry(256, 4, 2, 0.08), entry(256, 6, 3, 0.1),
                                                      entry(128, 6, 3, 0.11, 0.179)]}}))
    assert bench_c512.best_variant(str(path), 256, 6) == 3 and bench_c512.best_variant(str(path), 256, 4) == 2
    assert bench_c512.best_variant(str(tmp_path / "missing.json")) == 2
    assert bench_c512.wgmma_beats_mma_sync(str(path), 128)
    path.write_text(json.dumps({"results": {"cases": [entry(128, 6, 0, 0.19, 0.179)]}}))
    assert not bench_c512.wgmma_beats_mma_sync(str(path), 128)


def test_device_script_has_the_variant_3_steps():
    import pathlib
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[1] / "cuda_kernels" / "device_run_c512.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    for needle in ("has smoke3", "has tests3", "has bench3", "has e2e3", "--variants", "CUDA_KERNELS_C512_VARIANT=$choice",
                   "--case c384:6:14",
                   "compiled convfirstnet_h200", "compiled convfirstnet_m", "fused convfirstnet_m"):
        assert needle in text


def test_device_script_for_c64():
    """device_run_c64.sh: valid bash; builds without the verbose-ptxas flag (a flag change rebuilds the
    extension in the later processes); smoke, the two test processes, the bench over the passing variants
    beside the mma.sync kernel; the final lines the lead reads."""
    import pathlib
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[1] / "cuda_kernels" / "device_run_c64.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "env BLOCK_FUSION_PTXAS_VERBOSE" not in text
    for needle in ("step smoke", "step tests02", "step tests3", "--case c64:6:56", '--variants "$variants"',
                   "C64_OK=$1", "C64_VARIANT=$2", "C64_OK_V02=", "-res-usage", "load_extension as a"):
        assert needle in text, needle


# ---- C = 384 (ConvFirstNet-L stage 2): one n128 and one n64 accumulator per warpgroup ----

def test_c384_slots_and_switch(monkeypatch):
    """C = 384: 6 U panels + 2 k panels x 3 V blocks = 12 slots per chunk; variants 0, 1, 4; off by
    default (the block then goes to the mma.sync kernel, which gives its own reason)."""
    assert c512.slots_per_chunk(384) == 12 and c512.variants(384) == (0, 1, 4)
    order = c512.slot_order(2304, 384)
    assert len(order) == 18 * 12 and order[6:12] == [("V", 0, k, q) for k in range(2) for q in range(3)]
    block = block_c(384, 6)
    monkeypatch.setenv(c512.C384_SWITCH, "0")
    assert not c512.c384_enabled() and not c512.takes(block)
    reason = c512.FusedConvFirstC512.unsupported(block)
    assert reason.startswith("C=384") and c512.C384_SWITCH in reason
    monkeypatch.delenv(c512.C384_SWITCH)  # on by default
    assert c512.c384_enabled()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() == (9, 0):
        assert c512.FusedConvFirstC512.unsupported(block) is None and c512.takes(block)
    w = _kernel_weights(block)
    assert (w.channels, w.hidden, w.conv_w.shape, w.wpack.numel()) == (384, 2304, (48, 9, 32), 4 * 2304 * 384)


def test_c384_replace_blocks_follows_the_switch(monkeypatch):
    def net():
        torch.manual_seed(0)
        return fold_batchnorm(nn.Sequential(ConvFirstBlock(384, 6), ConvFirstBlock(384, 2)))

    monkeypatch.setenv(c512.C384_SWITCH, "0")
    swap = cuda_kernels.replace_blocks(net())
    assert set(swap.fallback) >= {"0", "1"} and all(swap.fallback[k].startswith("C=384") for k in ("0", "1"))
    if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
        return
    monkeypatch.delenv(c512.C384_SWITCH)  # on by default
    model = net()
    swap = cuda_kernels.replace_blocks(model)
    assert swap.fused["ConvFirstBlock"] == 2 and swap.fallback == {}
    assert [type(m).__name__ for m in model] == ["FusedConvFirstC512"] * 2


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (6, 128, 14, 14), (6, 1, 14, 14), (6, 37, 14, 14), (6, 128, 7, 7), (2, 3, 13, 13), (4, 2, 9, 5), (6, 1, 1, 1),
    (2, 5, 28, 27),
])
@pytest.mark.parametrize("variant", [0, 1])
def test_c384_shapes(expansion, batch, h, w, variant):
    """ConvFirstNet-L stage 2 (alpha 6, 14x14) for batch 128, 1 and 37, 7x7, odd sizes, both variants."""
    check_kernel(expansion, batch, h, w, variant=variant, channels=384)


# ---- variant 4: the halo double-buffered in the two halves of H (every width, W <= 18) ----

def test_split_h_halves_hold_every_halo():
    """Each 16 KB half of H holds 128 pixels; the zero pixel is the second half's last (pixel 255 of
    H, where variants 0 and 2 keep it), so a tile's halo must stay within 127 pixels: true for every
    W <= 18 and every image height and batch, false from W = 19 on."""
    def halo_pixels(n, h, w):
        most, pixels, rows_total = 0, n * h * w, n * h
        for p0 in range(0, pixels, 64):
            p_last = min(p0 + 64, pixels) - 1
            row_lo, row_hi = max(p0 // w - 1, 0), min(p_last // w + 1, rows_total - 1)
            most = max(most, (row_hi - row_lo + 1) * w)
        return most

    for w in range(1, c512.SPLIT_H_MAX_WIDTH + 1):
        assert max(halo_pixels(n, h, w) for n, h in ((1, 1), (2, 3), (3, 7), (4, 14), (2, 29), (1, 64))) <= 127
    assert halo_pixels(4, 19, 19) > 127


def test_split_h_variant_refuses_wide_images(small_weights):
    x = channels_last(torch.zeros(1, 512, 7, 21, dtype=torch.float16))
    with pytest.raises(ValueError, match="variant 4 needs W <= 18"):
        c512.run(x, small_weights, variant=4)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,batch,h,w", [
    (512, 6, 128, 7, 7), (512, 4, 37, 14, 14), (512, 2, 3, 13, 13), (512, 6, 1, 18, 11), (384, 6, 128, 14, 14),
    (384, 6, 1, 1, 1), (256, 6, 128, 14, 14), (256, 4, 5, 18, 18), (128, 6, 37, 17, 17), (128, 3, 2, 9, 5),
])
def test_split_halo_variant(channels, expansion, batch, h, w):
    """Variant 4: phase A alternates the two halves of H, slice s + 1 loading while s computes."""
    check_kernel(expansion, batch, h, w, variant=4, channels=channels)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,size", [(512, 7), (384, 14), (256, 13)])
def test_split_halo_variant_is_bitwise_variant_0(channels, size):
    block = block_c(channels, 6, seed=5).cuda().half()
    x = channels_last(torch.randn(9, channels, size, size, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    assert torch.equal(c512.run(x, weights, variant=4), c512.run(x, weights, variant=0))


# ---- variant 5 (C = 64, 128): the conv warpgroup's halo prefetched one unit ahead into two buffers ----

def test_prefetch_variant_layout_and_switch(monkeypatch):
    """Variant 5 exists at C = 64 and 128 only; its shared memory (Shape5: two 192-pixel halo buffers and a
    zero pixel instead of the 32 KB halo) fits the H200's 232,448 B; off by default, on by the switch."""
    monkeypatch.delenv(c512.VARIANT_SWITCH, raising=False)
    assert [c for c in c512.SUPPORTED_CHANNELS if 5 in c512.variants(c)] == list(c512.PREFETCH_WIDTHS) == [64, 128]
    assert c512.smem_bytes(64, 5) == 222480 and c512.smem_bytes(128, 5) == 230672
    assert c512.smem_bytes(256, 5) == c512.smem_bytes(512, 5) == 0
    assert c512.smem_bytes(128, 5) <= c512.SMEM_LIMIT == 232448
    # C = 256 would need 32 KB of X more: over the limit
    assert c512.smem_bytes(128, 5) + 16384 > c512.SMEM_LIMIT
    assert [c512.default_variant(c, 28) for c in (64, 128, 256)] == [6, 5, 8]  # 6 at C = 64, 5 at 128: measured faster
    monkeypatch.setenv(c512.VARIANT_SWITCH, "5")
    assert [c512.default_variant(c, 28) for c in (64, 128, 256, 512)] == [5, 5, 8, 0]  # 512 at W > 18: 0
    monkeypatch.setenv(c512.VARIANT_SWITCH, "64:5,128:3")
    assert [c512.default_variant(c, 56 if c == 64 else 28) for c in (64, 128, 256)] == [5, 3, 8]


def _largest_shifted_window(max_width: int, heights_images, buffer_pixels: int) -> int:
    """For every W <= max_width, (H, N) in heights_images and (W, 2), and every 64-pixel tile: shifted_window's
    loaded indices first .. end - 1 sit at buffer pixels first - shift .. end - 1 - shift inside one buffer of
    buffer_pixels, the shift keeps the swizzle's row % 8, the window is <= 2 W + 73 pixels, and every in-image tap
    reads a loaded index. Returns the largest window seen."""
    most = 0
    for w in range(1, max_width + 1):
        for h, n in (*heights_images, (w, 2)):
            pixels = n * h * w
            for p0 in range(0, pixels, 64):
                row_lo, shift, first, end = c512.shifted_window(p0, w, pixels)
                assert shift % 8 == 0 and 0 <= shift <= first < end
                assert end - shift <= min(2 * w + 73, buffer_pixels)
                most = max(most, end - shift)
                for pix in range(p0, min(p0 + 64, pixels)):
                    grow, col = divmod(pix, w)
                    for dy, dx in itertools.product((-1, 0, 1), repeat=2):
                        if 0 <= grow % h + dy < h and 0 <= col + dx < w:
                            assert first <= pix + dy * w + dx - row_lo * w < end
    return most


def test_prefetch_window_fits_a_buffer_and_covers_every_tap():
    """Variant 5's shifted window (shifted_window, as conv_stream addresses it): for every W <= 56 and
    every tile, the loaded indices first .. end - 1 sit at buffer pixels first - shift .. end - 1 - shift
    inside one 192-pixel buffer, the shift keeps the swizzle's row % 8, and every in-image tap reads a
    loaded index; the bound 2 W + 73 <= 185 is reached."""
    most = _largest_shifted_window(c512.max_width(64), ((1, 3), (2, 2), (7, 3), (29, 1), (3, 5), (56, 1)),
                                   c512.PREFETCH_HALO_PIXELS)
    assert 150 < most <= 185


def _halo_stream_float64(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, sms: int, halo_pixels: int,
                         units_of, first_tile_direct: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A conv stream over the persistent schedule in float64, as variants 5 and 7 run it: per CTA two halo buffers of
    `halo_pixels` x 64 channels (NaN at first, then holding earlier units: a tap outside its window reads stale data),
    the CTA's units `units_of(tiles, channels)` (tile, slice, buffer), unit u + 1's window loaded into its buffer
    before unit u's taps read through the shift. `first_tile_direct`: each CTA's first tile comes from F.conv2d (the
    consumers' phase A in variant 5). Returns (got, want): the stream's output and F.conv2d's, [pixels, C]."""
    n, channels, h, w = x.shape
    flat = x.permute(0, 2, 3, 1).reshape(-1, channels)
    pixels = flat.shape[0]
    want = F.conv2d(x, weight, bias, padding=1, groups=channels // 8).permute(0, 2, 3, 1).reshape(-1, channels)
    got = torch.full_like(want, float("nan"))
    tiles = -(-pixels // 64)
    for my in c512.persistent_tiles(tiles, sms):
        if first_tile_direct:
            for p in range(my[0] * 64, min(my[0] * 64 + 64, pixels)):
                got[p] = want[p]
        bufs = torch.full((2, halo_pixels, 64), float("nan"), dtype=torch.float64)
        units = units_of(len(my), channels)

        def issue(u):
            if u < len(units):
                k, s, b = units[u]
                p0 = my[k] * 64
                row_lo, shift, first, end = c512.shifted_window(p0, w, pixels)
                rows = flat[row_lo * w + first : row_lo * w + end, 64 * s : 64 * s + 64]
                bufs[b, first - shift : end - shift] = rows

        issue(0)
        for u, (k, s, b) in enumerate(units):
            issue(u + 1)
            p0 = my[k] * 64
            row_lo, shift, _, _ = c512.shifted_window(p0, w, pixels)
            for pix in range(p0, min(p0 + 64, pixels)):
                grow, col = divmod(pix, w)
                for g in range(8 * s, 8 * s + 8):
                    acc = bias[8 * g : 8 * g + 8].clone()
                    for tap in range(9):
                        dy, dx = tap // 3 - 1, tap % 3 - 1
                        if 0 <= grow % h + dy < h and 0 <= col + dx < w:
                            q = (grow + dy - row_lo) * w + col + dx
                            acc += weight[8 * g : 8 * g + 8, :, dy + 1, dx + 1] @ bufs[b, q - shift, 8 * (g - 8 * s) : 8 * (g - 8 * s) + 8]
                    got[pix, 8 * g : 8 * g + 8] = acc
    return got, want


def _conv_stream_float64(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                         sms: int) -> tuple[torch.Tensor, torch.Tensor]:
    """conv_stream (variant 5's conv warpgroup) transliterated in float64: buffers of PREFETCH_HALO_PIXELS, its
    prefetch_units (every tile but each CTA's first, which the consumers' phase A computes)."""
    return _halo_stream_float64(x, weight, bias, sms, c512.PREFETCH_HALO_PIXELS, c512.prefetch_units, True)


@pytest.mark.parametrize("channels,n,h,w,sms", [(128, 2, 5, 13, 3), (128, 1, 28, 28, 4), (64, 1, 9, 56, 2),
                                                (64, 3, 7, 3, 2), (128, 2, 3, 1, 1)])
def test_prefetched_conv_stream_matches_the_grouped_conv(channels, n, h, w, sms):
    """The conv warpgroup of variant 5 (two buffers, shifted windows, unit u + 1 landing before unit u's
    taps) computes the grouped conv of every tile of every CTA exactly (float64, stale buffers)."""
    torch.manual_seed(4)
    x = torch.randn(n, channels, h, w, dtype=torch.float64)
    weight = torch.randn(channels, 8, 3, 3, dtype=torch.float64)
    bias = torch.randn(channels, dtype=torch.float64)
    got, want = _conv_stream_float64(x, weight, bias, sms)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


def test_prefetch_units_alternate_buffers():
    assert c512.prefetch_units(3, 128) == [(1, 0, 0), (1, 1, 1), (2, 0, 0), (2, 1, 1)]
    assert c512.prefetch_units(4, 64) == [(1, 0, 0), (2, 0, 1), (3, 0, 0)]
    assert c512.prefetch_units(1, 64) == c512.prefetch_units(0, 128) == []


@pytest.mark.parametrize("channels,nchunks", [(128, 3), (128, 2), (128, 6), (64, 3), (64, 2), (64, 5)])
@pytest.mark.parametrize("seed", range(20))
def test_prefetch_protocol_has_no_deadlock_or_overwrite(seed, channels, nchunks):
    """Variant 5 over four tiles: four conv warps with their named barrier, copies landing at any time, two
    halo buffers, X written in parts; no deadlock, no buffer refilled while read, no taps on unlanded copies."""
    _run_persistent_model(tiles=4, nchunks=nchunks, seed=seed, channels=channels, prefetch=True, conv_warps=4)


@pytest.mark.parametrize("bug,message", [
    ({"halo_buffers": 1}, "halo"),
    ({"refill_before_sync": True}, "halo"),
    ({"wait_depth": 1}, "not all landed"),
])
def test_prefetch_model_catches_the_bugs(bug, message):
    """The model is not blind: one halo buffer, the refill issued before the conv warps' sync, or a
    wait_group 1 before the taps (the unit's own copies may still be in flight) each fail somewhere."""
    failures = 0
    for seed in range(100):
        try:
            _run_persistent_model(tiles=4, nchunks=2, seed=seed, channels=128, prefetch=True, conv_warps=3,
                                  conv_bug=bug)
        except AssertionError as error:
            assert message in str(error), str(error)
            failures += 1
    assert failures > 0


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,batch,h,w", [
    (64, 6, 128, 56, 56), (64, 4, 128, 56, 56), (64, 6, 1, 56, 56), (64, 4, 37, 56, 56), (64, 6, 3, 55, 55),
    (64, 2, 7, 9, 9), (64, 6, 1, 1, 1), (64, 8, 2, 56, 9), (64, 10, 3, 29, 29), (64, 6, 5, 31, 55),
    (64, 6, 300, 7, 7),
    (128, 6, 128, 28, 28), (128, 4, 128, 28, 28), (128, 6, 1, 28, 28), (128, 4, 37, 28, 28), (128, 3, 19, 28, 28),
    (128, 6, 3, 27, 25), (128, 3, 1, 5, 7), (128, 4, 2, 9, 5), (128, 6, 1, 1, 1), (128, 4, 300, 14, 14),
])
def test_prefetch_variant(channels, expansion, batch, h, w):
    """Variant 5 against float64 (<= 2x PyTorch fp16's error, NaN-poisoned output): batch 128 / 1 / odd,
    odd sizes, 1 to 6272 tiles (up to 48 per thread block), alpha 2 to 10 (odd chunk counts at C = 128)."""
    check_kernel(expansion, batch, h, w, variant=5, channels=channels)


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,batch,h,w", [
    (64, 6, 128, 56, 56), (64, 4, 37, 55, 55), (64, 10, 5, 29, 29), (128, 6, 128, 28, 28), (128, 3, 19, 28, 27),
    (128, 4, 2, 9, 5),
])
def test_prefetch_variant_is_bitwise_variant_3(channels, expansion, batch, h, w):
    """Variant 5 does each tile's arithmetic as variant 3 (the same taps from the same halo values, the same
    wgmma groups, the epilogue's acc + b + x in the same order): equal bit for bit, over repeated launches."""
    block = block_c(channels, expansion, seed=7).cuda().half()
    x = channels_last(torch.randn(batch, channels, h, w, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    _assert_launches_equal(x, weights, 5, c512.run(x, weights, variant=3))


def test_bench_variant_lines(tmp_path):
    """bench_c512.variant_lines: the device script's "V5 <case> v3=..us v5=..us" lines from a bench file."""
    import json

    from cuda_kernels import bench_c512

    def entry(channels, expansion, size, times):
        backends = {f"cuda_kernels_v{v}": {"latency_ms": {"median": t}} for v, t in times.items()}
        return {"channels": channels, "expansion": expansion, "size": size, "batch": 128, "backends": backends}

    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"results": {"cases": [entry(64, 6, 56, {3: 0.177, 5: 0.1204}),
                                                      entry(128, 6, 28, {3: 0.137})]}}))
    assert bench_c512.variant_lines(str(path)) == ["V5 c64:6:56 v3=177.0us v5=120.4us",
                                                   "V5 c128:6:28 v3=137.0us v5=failed"]
    assert bench_c512.variant_lines(str(tmp_path / "missing.json")) == []


@pytest.mark.parametrize("variant,tests_k,smoke,bench,beside", [
    (5, "prefetch", "64:6:8:56 128:6:32:28", "c64:6:56 c64:4:56 c128:6:28", ""),
    (6, "pingpong", "64:6:8:56 64:4:8:56", "c64:6:56 c64:4:56", ""),
    (7, "ksplit", "256:6:96:14 256:4:96:14 128:6:32:28", "c256:6:14 c256:4:14 c128:6:28", ""),
    (8, "variant8 or smem_matches", "256:6:96:14 256:4:96:14", "c256:6:14 c256:4:14", 'BESIDE="3 7" '),
])
def test_device_scripts_of_the_variants(variant, tests_k, smoke, bench, beside):
    """device_run_v5/6/7/8.sh hand their variant, GPU tests, smoke and bench cases (and, for 8, the variants beside
    it: 3 and 7) to device_run_c512_variant.sh, which is valid bash: build, smoke first (stops on a hang or failure),
    the tests, the bench of the variants beside and the one under test, the V<n> lines and V<n>_OK last."""
    import pathlib
    import subprocess

    here = pathlib.Path(__file__).resolve().parents[1] / "cuda_kernels"
    wrapper = here / f"device_run_v{variant}.sh"
    generic = here / "device_run_c512_variant.sh"
    for script in (wrapper, generic):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script
    text = " ".join(wrapper.read_text().replace("\\\n", " ").split())  # line continuations joined
    assert (f'{beside}exec bash cuda_kernels/device_run_c512_variant.sh "${{1:?output folder}}" {variant} "{tests_k}" '
            f'"{smoke}" "{bench}"') in text
    body = generic.read_text()
    order = [body.index(n) for n in ("step build", "step smoke", "step tests", "step bench", 'finish "$ok"')]
    assert order == sorted(order)
    for needle in ('-k "$tests_k"', 'beside=${BESIDE:-3}', '--variants "$variants"', "variant_lines", "_OK=$1",
                   "-res-usage", "err <= 2 * torch_err", 'float("nan")', "for v in (*beside, variant)",
                   "torch.equal(outs[near], outs[variant])"):
        assert needle in body, needle
    # the list of variants that bench_c512 and variant_lines get, as the script computes it
    listed = subprocess.run(["bash", "-c", f'variant={variant}; {beside}beside=${{BESIDE:-3}}; '
                             'echo $beside $variant | tr " " ","'], capture_output=True, text=True).stdout.strip()
    assert listed == ("3,7,8" if variant == 8 else f"3,{variant}")


# ---- variant 6 (C = 64): one tile per consumer warpgroup, two X buffers ----

def test_pingpong_variant_layout_and_switch(monkeypatch):
    """Variant 6 exists at C = 64 only; Shape6 (two X buffers, the ring, variant 5's halo buffers, 8 full and 4 X
    barriers, no H) is 197,856 B; the default at C = 64 since its H200 run (162.6 vs 177.3 us), by the switch at C = 64
    only."""
    monkeypatch.delenv(c512.VARIANT_SWITCH, raising=False)
    assert [c for c in c512.SUPPORTED_CHANNELS if 6 in c512.variants(c)] == list(c512.PINGPONG_WIDTHS) == [64]
    assert c512.smem_bytes(64, 6) == 197856 == 1024 + 2 * 8192 + 8 * 16384 + 2 * 192 * 128 + 128 + 64 + 32
    assert all(c512.smem_bytes(c, 6) == 0 for c in (128, 256, 384, 512))
    assert [c512.default_variant(c, 28) for c in (64, 128, 256)] == [6, 5, 8]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "6")
    assert [c512.default_variant(c, 28) for c in (64, 128, 256, 512)] == [6, 5, 8, 0]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "64:6,128:3")
    assert [c512.default_variant(c, 28) for c in (64, 128)] == [6, 3]


def test_pingpong_resident_weights_and_fallback(monkeypatch):
    """Variant 6 keeps every slot resident: hidden <= 512 (2 slots per chunk in 8); beyond it the switch falls back to
    variant 3 and an explicit variant 6 is refused before anything runs."""
    assert c512.PINGPONG_MAX_HIDDEN // c512.HIDDEN_CHUNK * c512.slots_per_chunk(64) == 8
    assert [c512.pingpong_fallback(6, h) for h in (128, 256, 384, 512, 640, 768)] == [6, 6, 6, 6, 3, 3]
    assert c512.pingpong_fallback(5, 640) == 5 and c512.pingpong_fallback(3, 128) == 3
    weights = _kernel_weights(block_c(64, 10))
    x = channels_last(torch.zeros(1, 64, 9, 9, dtype=torch.float16))
    with pytest.raises(ValueError, match="variant 6 needs hidden <= 512"):
        c512.run(x, weights, variant=6)


@pytest.mark.parametrize("tiles", [1, 2, 3, 5, 131, 132, 133, 263, 264, 265, 392, 6272])
@pytest.mark.parametrize("sms", [132, 1, 2])
def test_pingpong_schedule_covers_every_tile_once(tiles, sms):
    """Every tile exactly once over thread blocks and consumer warpgroups; block b's local tile k on warpgroup k % 2,
    as the kernel's loops (k = wg; k < my_tiles; k += 2) and the conv warpgroup's X buffer k % 2 take them; an odd
    count leaves warpgroup 1 one tile short."""
    schedule = c512.pingpong_tiles(tiles, sms)
    grid = min(tiles, sms)
    assert len(schedule) == grid
    seen = sorted(t for wg0, wg1 in schedule for t in (*wg0, *wg1))
    assert seen == list(range(tiles))
    for b, (wg0, wg1) in enumerate(schedule):
        my_tiles = (tiles - 1 - b) // grid + 1  # the kernel's my_tiles
        kernel = [[b + k * grid for k in range(wg, my_tiles, 2)] for wg in (0, 1)]
        assert [wg0, wg1] == kernel
        assert len(wg0) - len(wg1) == my_tiles % 2
        local = [b + k * grid for k in range(my_tiles)]
        assert all(local.index(t) % 2 == wg for wg, mine in enumerate((wg0, wg1)) for t in mine)


def _emulate_pingpong(x: torch.Tensor, block: nn.Module, weights: c512.KernelWeights) -> torch.Tensor:
    """ffn64_own's arithmetic in float64 from the resident slots (slot 2 j: U_j, slot 2 j + 1: V_j's k panels), in its
    group order: per chunk S1a / S1b = X . U rows 64 h .., ReLU with b1[128 j + 64 h ..], S2a / S2b = H_h . V slot rows
    64 h .. into one accumulator over every chunk; the epilogue acc + b2 + x."""
    n, c, h, w = x.shape
    X = F.conv2d(x, block.conv.weight, block.conv.bias, padding=1, groups=c // 8).permute(0, 2, 3, 1).reshape(-1, c)
    slots = weights.wpack.view(torch.float16).reshape(-1, 128, 64)
    assert slots.shape[0] == 2 * (weights.hidden // 128) <= 8  # resident
    b1, b2 = weights.b1.double(), weights.b2.double()
    acc2 = torch.zeros(X.shape[0], 64, dtype=torch.float64)
    for j in range(weights.hidden // 128):
        u = cuda_kernels.ops._swizzle_128b(slots[2 * j]).double()
        v = cuda_kernels.ops._swizzle_128b(slots[2 * j + 1]).double()
        for half in range(2):
            acc1 = X @ u[64 * half : 64 * half + 64].T
            hid = torch.relu(acc1 + b1[128 * j + 64 * half : 128 * j + 64 * half + 64])
            acc2 += hid @ v[64 * half : 64 * half + 64].T
    out = acc2 + b2 + x.permute(0, 2, 3, 1).reshape(-1, c)
    return out.reshape(n, h, w, c).permute(0, 3, 1, 2)


@pytest.mark.parametrize("expansion", [2, 4, 6, 8])
def test_pingpong_dataflow_is_the_block(expansion):
    """Variant 6's FFN (one accumulator over both hidden halves of every chunk, the resident slots) is the block."""
    block = block_c(64, expansion, seed=expansion).half().double()
    x = torch.randn(2, 64, 3, 5, dtype=torch.float64)
    with torch.no_grad():
        want = block(x)
        got = _emulate_pingpong(x, block, _kernel_weights(block))
    assert relative_error(got, want) < 1e-12


def _consumer_program_v6(wg: int, my_tiles: int, nchunks: int, x_empty_early: bool = False, one_x: bool = False,
                         full_parity_off: bool = False) -> list[tuple]:
    """Variant 6's consumer warpgroup `wg` (convfirst_c64_pingpong_kernel, ffn64_own) as operations: each slot's one
    fill awaited before the first tile; per own tile k (local tiles wg, wg + 2, ...; round r) wait x_full[b] parity
    r % 2, then the wgmma groups S1a(0) S1b(0) | S2a(j) S1a(j + 1) S2b(j) S1b(j + 1) with the kernel's waits, x_empty[b]
    after S1b of the last chunk retires, the epilogue after wait 0. The keyword arguments are planted bugs."""
    nslots = 2 * nchunks
    ops = [("wait_full", s) for s in range(nslots)] if wg < my_tiles else []
    for r, k in enumerate(range(wg, my_tiles, 2)):
        b = 0 if one_x else k % 2
        ops.append(("wait_bar", ("x_full", b), (r + full_parity_off) & 1))
        s1 = lambda j: ("issue", 2 * j, None, (b, k))  # stage 1 reads X buffer b (tile k) and U slot 2 j
        s2 = lambda j: ("issue", 2 * j + 1, None, None)  # stage 2 reads registers and V slot 2 j + 1
        ops += [s1(0), s1(0)]
        for j in range(nchunks):
            more = j + 1 < nchunks
            ops += [("wait_groups", 1 if j == 0 else 2), s2(j)] + ([s1(j + 1)] if more else [])
            if x_empty_early and not more:
                ops.append(("arrive", ("x_empty", b)))
            ops.append(("wait_groups", 2 if more else 1))
            if not x_empty_early and not more:
                ops.append(("arrive", ("x_empty", b)))
            ops += [s2(j)] + ([s1(j + 1)] if more else [])
        ops += [("wait_groups", 0), ("epilogue", k)]
    return ops


def _conv_program_v6(my_tiles: int, one_x: bool = False, empty_parity_off: bool = False) -> list[tuple]:
    """Variant 6's conv warp (conv_stream6): every tile k from 0, halo buffer k % 2 loaded one tile ahead (variant 5's
    unit stream with units = tiles), then X of tile k into buffer k % 2 after x_empty[k % 2] phase k / 2 - 1 (k >= 2)."""
    ops, nsync = [("issue_halo", 0, 0)], 0
    for k in range(my_tiles):
        b = 0 if one_x else k % 2
        ops += [("cp_wait", 0), ("conv_sync", nsync), ("issue_halo", k + 1, (k + 1) % 2),
                ("taps_begin", k, k % 2), ("taps_end", k, k % 2)]
        nsync += 1
        if k >= 2 or (one_x and k >= 1):
            wait_round = (k // 2 - 1) if not one_x else k - 1
            ops.append(("wait_bar", ("x_empty", b), (wait_round + empty_parity_off) & 1))
        ops += [("write_x", k, b), ("arrive", ("x_full", b))]
    return ops


def _run_pingpong_model(my_tiles: int, nchunks: int, seed: int, conv_warps: int = 4, **bugs) -> None:
    """One thread block of variant 6 under random interleavings (actors at random speeds per seed): the producer
    filling the 2 x nchunks resident slots once, `conv_warps` conv warps (their named barrier, cp.async copies landing
    in any order, two halo buffers, X written in parts, x_full[b] counting every conv warp) and two consumer warpgroups
    on their own tiles (wgmma groups retiring in order, the mbarriers' parity waits as the hardware has them: a wait on
    parity P passes while the completed phase count has the other parity; x_empty[b] counts the owning warpgroup).
    Asserts no deadlock, every tile's epilogue once, X buffer b never rewritten while a stage-1 group reads it and
    always holding the tile a stage-1 group reads, slots read only once filled."""
    import random

    rng = random.Random(seed)
    stages, nslots = 8, 2 * nchunks
    assert nslots <= stages
    consumer_bugs = {k: v for k, v in bugs.items() if k in ("x_empty_early", "one_x", "full_parity_off")}
    conv_bugs = {k: v for k, v in bugs.items() if k in ("one_x", "empty_parity_off")}
    slot_index, fills = [None] * stages, [0] * stages
    released = [[0] * stages for _ in range(2)]
    groups = [[], []]  # per consumer warpgroup: (slot, None, (X buffer, tile) or None)
    bars = {("x_full", b): [conv_warps, 0, 0] for b in (0, 1)}
    bars.update({("x_empty", b): [1, 0, 0] for b in (0, 1)})
    programs = [_consumer_program_v6(w, my_tiles, nchunks, **consumer_bugs) for w in range(2)]
    programs += [_conv_program_v6(my_tiles, **conv_bugs) for _ in range(conv_warps)]
    cws = range(2, 2 + conv_warps)
    halo = {"units": my_tiles, "parts": {}, "inflight": {w: [] for w in cws}, "reading": {w: None for w in cws},
            "arrived": {w: 0 for w in cws}}
    x_part = {(b, i): None for b in (0, 1) for i in range(conv_warps)}  # the tile each conv warp's part of X b holds
    done = []
    pc, produced = [0] * len(programs), 0
    speed = {key: rng.choice([0.01, 0.2, 1.0, 5.0]) for key in ["produce", *(("retire", w) for w in range(2)),
                                                                *(("step", w) for w in range(len(programs))),
                                                                *(("land", w) for w in range(len(programs)))]}
    while True:
        acts = _enabled(programs, pc, groups, produced, nslots, stages, released, fills, [None, None], bars, halo)
        if not acts:
            assert produced == nslots and pc == [len(p) for p in programs], f"deadlock at {pc}, seed {seed}"
            assert sorted(done) == list(range(my_tiles)), "a tile's epilogue missing or repeated"
            return
        act = rng.choices(acts, [speed[a if a[0] != "produce" else "produce"] for a in acts])[0]
        if act[0] == "produce":
            produced = _produce(produced, stages, slot_index, fills, groups)
            continue
        if act[0] == "retire":
            groups[act[1]].pop(0)
            continue
        if act[0] == "land":
            copies = halo["inflight"][act[1]]
            buf, unit = copies.pop(rng.randrange(len(copies)))
            halo["parts"][buf, act[1]] = (unit, True)
            continue
        w = act[1]
        op = programs[w][pc[w]]
        if w >= 2 and not _step_conv(op, w, halo):
            continue
        if op[0] in ("wait_full", "issue"):
            _step_ring(op, w, stages, slot_index, released)
        if op[0] == "issue":
            if op[3] is not None:
                b, k = op[3]
                assert all(x_part[b, i] == k for i in range(conv_warps)), \
                    f"stage 1 of tile {k} reads X buffer {b} holding {[x_part[b, i] for i in range(conv_warps)]}"
            groups[w].append((op[1] % stages, None, op[3]))
        elif op[0] == "write_x":
            k, b = op[1], op[2]
            assert all(g[2] is None or g[2][0] != b for v in (0, 1) for g in groups[v]), \
                "X overwritten while a wgmma reads it"
            x_part[b, w - 2] = k
        elif op[0] == "arrive":
            bar = bars[op[1]]
            bar[1] += 1
            if bar[1] == bar[0]:
                bar[1], bar[2] = 0, bar[2] + 1
        elif op[0] == "epilogue":
            assert not groups[w], "epilogue before the tile's groups retired"
            done.append(op[1])
        pc[w] += 1


@pytest.mark.parametrize("my_tiles,nchunks", [(1, 3), (2, 3), (3, 3), (4, 2), (5, 3), (6, 1), (7, 4), (5, 2)])
@pytest.mark.parametrize("seed", range(15))
def test_pingpong_protocol_has_no_deadlock_or_overwrite(seed, my_tiles, nchunks):
    """Variant 6 over 1 to 7 tiles per thread block (odd counts: warpgroup 1 a tile short), 1 to 4 chunks."""
    _run_pingpong_model(my_tiles, nchunks, seed)


@pytest.mark.parametrize("bug,message", [
    ({"x_empty_early": True}, "X overwritten while a wgmma reads it"),
    ({"one_x": True}, "X"),
    ({"empty_parity_off": True}, "X"),
    ({"full_parity_off": True}, "stage 1 of tile"),
])
def test_pingpong_model_catches_the_bugs(bug, message):
    """The model is not blind: x_empty arrived before the last stage-1 group retires, one X buffer for both
    warpgroups, the conv warpgroup's x_empty wait a phase off (it overwrites X the owner still reads), or the
    consumers' x_full wait a phase off (stage 1 reads the previous tile's X) each fail somewhere (or deadlock)."""
    failures = 0
    for seed in range(100):
        try:
            _run_pingpong_model(5, 3, seed, conv_warps=2, **bug)
        except AssertionError as error:
            assert message in str(error) or "deadlock" in str(error), str(error)
            failures += 1
    assert failures > 0


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (6, 128, 56, 56), (4, 128, 56, 56), (2, 128, 56, 56), (8, 3, 56, 56), (6, 1, 56, 56), (4, 37, 56, 56),
    (6, 3, 55, 55), (2, 7, 9, 9), (6, 1, 1, 1), (6, 1, 8, 8), (4, 1, 8, 16), (6, 1, 12, 16), (8, 2, 56, 9),
    (6, 5, 31, 55), (6, 300, 7, 7), (4, 11, 40, 38), (2, 1, 3, 5),
])
def test_pingpong_variant(expansion, batch, h, w):
    """Variant 6 against float64 (<= 2x PyTorch fp16's error, NaN-poisoned output): alpha 2 / 4 / 6 / 8 (1 to 4
    resident chunks), batch 128 / 1 / odd, odd sizes, 1 tile (1x1, 8x8), 2, 3, 49, 262 (two or one per block and
    warpgroup, odd counts) to 6272 tiles (24 per consumer warpgroup)."""
    check_kernel(expansion, batch, h, w, variant=6, channels=64)


@pytest.mark.cuda
def test_pingpong_variant_is_deterministic_and_falls_back():
    """Repeated launches agree bit for bit (each tile's arithmetic is fixed); alpha 10 (hidden 640) is refused by the
    raw op and the switch falls back to variant 3 (bit-identical to it)."""
    block = block_c(64, 6, seed=8).cuda().half()
    x = channels_last(torch.randn(37, 64, 56, 56, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    _assert_launches_equal(x, weights, 6, c512.run(x, weights, variant=6))
    block10 = block_c(64, 10, seed=8).cuda().half()
    weights10 = _kernel_weights(block10)
    x10 = channels_last(torch.randn(3, 64, 29, 29, device="cuda", dtype=torch.float16))
    n, c, h, w = x10.shape
    rows = x10.permute(0, 2, 3, 1).reshape(-1, c)
    with pytest.raises(RuntimeError, match="variant 6 needs hidden"):
        c512._extension().convfirst_c512(rows, weights10.conv_w, weights10.conv_b, weights10.wpack, weights10.b1,
                                         weights10.b2, h, w, 6, torch.empty(0, device="cuda"), False)
    import os
    old = os.environ.get(c512.VARIANT_SWITCH)
    os.environ[c512.VARIANT_SWITCH] = "6"
    try:
        assert torch.equal(c512.run(x10, weights10), c512.run(x10, weights10, variant=3))
    finally:
        if old is None:
            del os.environ[c512.VARIANT_SWITCH]
        else:
            os.environ[c512.VARIANT_SWITCH] = old


# ---- variant 7 (C = 128, 256): the FFN split by k, stage 2 from registers, the conv on the consumers ----

KSPLIT_SMEM = {256: 231680, 128: 198912}


def test_ksplit_variant_layout_and_switch(monkeypatch, small_weights):
    """Variant 7 exists at C = 128 and 256; Shape7 (X and the exchange's other half, the ring, two 132-pixel halo
    buffers, a zero pixel, 16 ring barriers) fits the H200's 232,448 B; off by default, on by the switch."""
    monkeypatch.delenv(c512.VARIANT_SWITCH, raising=False)
    assert [c for c in c512.SUPPORTED_CHANNELS if 7 in c512.variants(c)] == list(c512.KSPLIT_WIDTHS) == [128, 256]
    for channels, want in KSPLIT_SMEM.items():
        area = 2 * (channels // 64) * 8192
        assert c512.smem_bytes(channels, 7) == want == 1024 + area + 8 * 16384 + 2 * 132 * 128 + 128 + 16 * 8
        assert want <= c512.SMEM_LIMIT
    assert c512.smem_bytes(64, 7) == c512.smem_bytes(384, 7) == c512.smem_bytes(512, 7) == 0
    assert c512.SMEM_LIMIT - KSPLIT_SMEM[256] == 768  # what is left at C = 256
    assert [c512.default_variant(c, 14) for c in (64, 128, 256)] == [6, 5, 8]  # 7 off by default
    monkeypatch.setenv(c512.VARIANT_SWITCH, "7")
    assert [c512.default_variant(c, 14) for c in (64, 128, 256, 384, 512)] == [6, 7, 7, 4, 4]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "256:7")
    assert [c512.default_variant(c, 28) for c in (128, 256)] == [5, 7]
    x = channels_last(torch.zeros(1, 512, 7, 7, dtype=torch.float16))
    with pytest.raises(ValueError, match="no variant 7 at C=512"):
        c512.run(x, small_weights, variant=7)


@pytest.mark.parametrize("channels", [256, 128])
@pytest.mark.parametrize("nchunks", [1, 2, 3, 12])
def test_ksplit_stage2_reads_its_k_panel_from_adjacent_slots(channels, nchunks):
    """The slot stream (per chunk C / 64 U slots, then per k panel the C / 128 V blocks) as the kernel indexes it over 3
    tiles: warpgroup w's stage-2 slots it + C/64 + w C/128 + q are the V blocks of k panel w, and they lie side by side in
    the ring (one m64nCk16 B operand of C rows: ring slots 4 + 2w, 5 + 2w at C = 256); the other k panel's are the other
    warpgroup's; stage 1 reads every U slot."""
    order = c512.slot_order(128 * nchunks, channels)
    spc, vb, kps = c512.slots_per_chunk(channels), channels // 128, channels // 64
    assert spc == kps + 2 * vb and (8 % spc == 0)
    for tile in range(3):
        for j in range(nchunks):
            it = (tile * nchunks + j) * spc  # the stream index at the chunk's start
            assert [order[(it + kp) % len(order)] for kp in range(kps)] == [("U", j, kp, 0) for kp in range(kps)]
            for wg in (0, 1):
                mine = [it + kps + wg * vb + q for q in range(vb)]
                ring = [m % 8 for m in mine]
                assert ring == list(range(ring[0], ring[0] + vb)), "the B operand would span non-adjacent slots"
                assert [order[m % len(order)] for m in mine] == [("V", j, wg, q) for q in range(vb)]
                theirs = [it + kps + (1 - wg) * vb + q for q in range(vb)]
                assert sorted(mine + theirs) == list(range(it + kps, it + spc))


def test_ksplit_halo_window_fits_a_buffer():
    """Variant 7's halo buffers (132 pixels) hold a tile's shifted window for every W <= 28 (variant 5's scheme:
    <= 2 W + 73 = 129 pixels), the bound reached; every in-image tap reads a loaded index."""
    most = _largest_shifted_window(c512.max_width(256), ((1, 3), (2, 2), (7, 3), (29, 1), (3, 5)),
                                   c512.KSPLIT_HALO_PIXELS)
    assert 120 < most <= 129 <= c512.KSPLIT_HALO_PIXELS


def test_ksplit_units_alternate_buffers():
    assert c512.ksplit_units(2, 256) == [(0, s, s % 2) for s in range(4)] + [(1, s, s % 2) for s in range(4)]
    assert c512.ksplit_units(2, 128) == [(0, 0, 0), (0, 1, 1), (1, 0, 0), (1, 1, 1)]
    assert c512.ksplit_units(0, 256) == []


def _ksplit_conv_float64(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                         sms: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The consumers' conv of variant 7 in float64: buffers of KSPLIT_HALO_PIXELS, every tile's ksplit_units (the kernel
    issues unit u + 1 after unit u's barrier, before its taps)."""
    return _halo_stream_float64(x, weight, bias, sms, c512.KSPLIT_HALO_PIXELS, c512.ksplit_units, False)


@pytest.mark.parametrize("channels,n,h,w,sms", [(256, 1, 14, 14, 2), (256, 1, 5, 28, 1), (128, 2, 5, 13, 3),
                                                (128, 1, 3, 1, 1)])
def test_ksplit_conv_stream_matches_the_grouped_conv(channels, n, h, w, sms):
    """The consumers' conv stream of variant 7 (two buffers, shifted windows, every tile's units) computes the grouped
    conv of every tile of every CTA exactly (float64, stale buffers)."""
    torch.manual_seed(7)
    x = torch.randn(n, channels, h, w, dtype=torch.float64)
    weight = torch.randn(channels, 8, 3, 3, dtype=torch.float64)
    bias = torch.randn(channels, dtype=torch.float64)
    got, want = _ksplit_conv_float64(x, weight, bias, sms)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


def _acc_position(index: int, wq: int, lane: int) -> tuple[int, int]:
    """(row, column) of accumulator register `index` of thread (wq, lane) of a warpgroup in a m64nNk16 wgmma."""
    n, e = divmod(index, 4)
    return 16 * wq + lane // 4 + 8 * (e // 2), 8 * n + 2 * (lane % 4) + e % 2


def _emulate_ksplit(x: torch.Tensor, block: nn.Module, weights: c512.KernelWeights) -> torch.Tensor:
    """convfirst_c512_ksplit_kernel's FFN in float64 through an emulated 8-slot ring: the slots land at ring slot
    index % 8 in stream order; warpgroup w's stage 1 reads rows 64w.. of the chunk's U slots, H_w = ReLU(. + b1[128 j +
    64 w ..]), its stage 2 reads C rows of the flat ring from ring slot (it + C/64 + w C/128) % 8 on (the n = C B
    operand: across two slots at C = 256) into its own 64 x C accumulator; per tile the exchange through the kernel's
    float4 indices (give[i * 128 + t], warpgroup w giving acc2[C/4 (1 - w) + 4 i ..], keeping acc2[C/4 w + 4 i ..]);
    the epilogue acc + b2 + x."""
    n, c, h, w = x.shape
    X = F.conv2d(x, block.conv.weight, block.conv.bias, padding=1, groups=c // 8).permute(0, 2, 3, 1).reshape(-1, c)
    slots = weights.wpack.view(torch.float16).reshape(-1, 128, 64)
    spc, vb, kps = c512.slots_per_chunk(c), c // 128, c // 64
    b1, b2 = weights.b1.double(), weights.b2.double()
    ring = torch.full((8 * 128, 64), float("nan"), dtype=torch.float64)  # the ring as one flat run of rows
    out = torch.full((X.shape[0], c), float("nan"), dtype=torch.float64)
    it = 0
    for p0 in range(0, X.shape[0], 64):
        xt = torch.zeros(64, c, dtype=torch.float64)
        xt[: min(64, X.shape[0] - p0)] = X[p0 : p0 + 64]
        acc2 = [torch.zeros(64, c, dtype=torch.float64) for _ in range(2)]
        for j in range(weights.hidden // 128):
            for s in range(spc):  # the producer's fills of this chunk (the ring holds a chunk at C = 256)
                r = (it + s) % 8
                ring[128 * r : 128 * r + 128] = cuda_kernels.ops._swizzle_128b(slots[(it + s) % slots.shape[0]]).double()
            for wg in range(2):
                acc1 = torch.zeros(64, 64, dtype=torch.float64)
                for kp in range(kps):
                    r = (it + kp) % 8
                    acc1 += xt[:, 64 * kp : 64 * kp + 64] @ ring[128 * r + 64 * wg : 128 * r + 64 * wg + 64].T
                hid = torch.relu(acc1 + b1[128 * j + 64 * wg : 128 * j + 64 * wg + 64])
                r = (it + kps + wg * vb) % 8
                acc2[wg] += hid @ ring[128 * r : 128 * r + c].T  # n = C rows from ring slot r on
            it += spc
        # the exchange, register by register: thread (wq, lane) of warpgroup w holds acc2[w][pos(index)]
        keep = c // 4
        area = torch.full((2, keep // 4, 128, 4), float("nan"), dtype=torch.float64)
        regs = {}
        for wg in range(2):
            for t in range(128):
                regs[wg, t] = [acc2[wg][_acc_position(i, t // 32, t % 32)] for i in range(c // 2)]
                give = 0 if wg else keep  # warpgroup 1 gives the low half (warpgroup 0's columns)
                for i in range(keep // 4):
                    area[wg, i, t] = torch.stack(regs[wg, t][give + 4 * i : give + 4 * i + 4])
        for wg in range(2):
            for t in range(128):
                kept = 0 if wg == 0 else keep
                for i in range(keep // 4):
                    for e in range(4):
                        row, col = _acc_position(4 * i + e, t // 32, t % 32)
                        col += (c // 2) * wg  # the kept sums sit in acc2[0 .. keep): columns C/2 w + ...
                        if p0 + row < X.shape[0]:
                            out[p0 + row, col] = regs[wg, t][kept + 4 * i + e] + area[wg ^ 1, i, t, e]
    out = out + b2 + x.permute(0, 2, 3, 1).reshape(-1, c)
    return out.reshape(n, h, w, c).permute(0, 3, 1, 2)


@pytest.mark.parametrize("channels,expansion", [(256, 6), (256, 4), (256, 2), (128, 6), (128, 3), (128, 2)])
def test_ksplit_dataflow_is_the_block(channels, expansion):
    """Variant 7's dataflow from the packed slots through the ring (the n = C B operand across adjacent slots), the
    two k halves, the exchange by the kernel's indices and the kept columns is the block (float64, 1e-12)."""
    block = block_c(channels, expansion, seed=expansion).half().double()
    x = torch.randn(1, channels, 9, 9, dtype=torch.float64)  # 81 pixels: a full and a partial tile
    with torch.no_grad():
        want = block(x)
        got = _emulate_ksplit(x, block, _kernel_weights(block))
    assert relative_error(got, want) < 1e-12


def test_ksplit_exchange_is_a_permutation_within_the_area():
    """Every (row, column) of the 64 x C output is given by exactly one thread and register, once per warpgroup half,
    and the float4 indices cover the exchange area (X and as much after it) exactly, 32 consecutive float4 per warp
    (conflict-free)."""
    for c in c512.KSPLIT_WIDTHS:
        info = c512.ksplit_exchange(c)
        keep = c // 4
        assert info["float4_per_thread"] == keep // 4 and 2 * info["bytes_per_warpgroup"] == info["area"]
        assert info["area"] == 64 * c * 4 == 2 * (c // 64) * 8192
        for wg in range(2):
            cols = set()
            for t in range(128):
                for i in range(keep):
                    row, col = _acc_position(i, t // 32, t % 32)
                    cols.add((row, col + (c // 2) * wg))
            assert len(cols) == 64 * c // 2 and {cc for _, cc in cols} == set(range((c // 2) * wg, (c // 2) * (wg + 1)))
        index = [wg * (keep // 4) * 128 + i * 128 + t for wg in range(2) for i in range(keep // 4) for t in range(128)]
        assert sorted(index) == list(range(info["area"] // 16))
        for i in range(keep // 4):  # one warp's 32 lanes: 32 consecutive float4, 512 contiguous bytes
            assert [i * 128 + 32 * 1 + lane for lane in range(32)] == list(range(i * 128 + 32, i * 128 + 64))


def _consumer_program_v7(wg: int, my_tiles: int, nchunks: int, channels: int, give_early: bool = False,
                         take_early: bool = False, no_x_barrier: bool = False, one_halo: bool = False,
                         refill_before_sync: bool = False) -> list[tuple]:
    """Consumer warpgroup `wg` of convfirst_c512_ksplit_kernel as operations: halo unit 0 issued; per tile k its conv
    units (own copies landed, the 256-thread barrier, issue unit u + 1, the taps of u writing this warpgroup's half of
    X panel s), the barrier after the conv, per chunk stage 1 (one U slot per wgmma group, `wait_group 1`, the pending
    slot released), `wait_group 0`, stage 2 on this warpgroup's k panel's V slots (the other panel's waited for and
    released at once), then `wait_group 0`, the barrier, the give into the exchange, the barrier, the take, the
    epilogue. The keyword arguments are planted bugs."""
    slices, vb, spc = channels // 64, channels // 128, c512.slots_per_chunk(channels)
    nbuf = 1 if one_halo else 2
    ops, it, pending, u = [("issue_halo", 0, 0)], 0, [], 0
    for k in range(my_tiles):
        for s in range(slices):
            nxt = ("issue_halo", u + 1, (u + 1) % nbuf)
            sync = ("barrier", ("conv", u))
            ops += [("cp_wait", 0)] + ([nxt, sync] if refill_before_sync else [sync, nxt])
            ops += [("taps_begin", u, u % nbuf), ("taps_end", u, u % nbuf), ("write_x", k, s)]
            u += 1
        if not no_x_barrier:
            ops.append(("barrier", ("x", k)))
        for j in range(nchunks):
            for _ in range(slices):
                ops += [("wait_full", it), ("issue", [it], k), ("wait_groups", 1)]
                ops += [("release", p) for p in pending]
                pending, it = [it], it + 1
            ops += [("wait_groups", 0)] + [("release", p) for p in pending]
            mine = [it + wg * vb + q for q in range(vb)]
            theirs = [it + (1 - wg) * vb + q for q in range(vb)]
            ops += [("wait_full", m) for m in mine] + [("issue", mine, None)]
            for t in theirs:
                ops += [("wait_full", t), ("release", t)]
            pending, it = mine, it + spc - slices
        ops += [("wait_groups", 0)] + [("release", p) for p in pending]
        pending = []
        if not give_early:
            ops.append(("barrier", ("give", k)))
        ops.append(("give", k))
        if not take_early:
            ops.append(("barrier", ("take", k)))
        ops += [("take", k), ("epilogue", k)]
    nbar = itertools.count()  # the named barrier counts arrivals: the n-th barrier of one warpgroup meets the other's n-th
    return [op + (next(nbar),) if op[0] == "barrier" else op for op in ops]


def _run_ksplit_model(my_tiles: int, nchunks: int, seed: int, channels: int, stages: int = 8, **bugs) -> None:
    """One thread block of variant 7 under random interleavings (actors at random speeds per seed): the producer
    streaming my_tiles x nchunks x slots_per_chunk slots over the 8-slot ring (refilling a slot once both warpgroups
    released its previous fill), two consumer warpgroups (`_consumer_program_v7`: wgmma groups retiring in order, each
    reading one U slot or its V slots; their 256-thread named barriers; their cp.async copies landing in any order at
    any time into two halo buffers). Asserts no deadlock, every tile's epilogue once per warpgroup, no slot refilled
    while a group reads it, no release toward another fill, stage 1 reading X of its own tile whole, X (and warpgroup
    0's half of the exchange, which is X) never rewritten while a stage-1 group reads it or before the other warpgroup
    took it, the take reading the other warpgroup's give of the same tile, and the halo rules."""
    import random

    rng = random.Random(seed)
    slices, spc = channels // 64, c512.slots_per_chunk(channels)
    nslots = my_tiles * nchunks * spc
    slot_index, fills = [None] * stages, [0] * stages
    released = [[0] * stages for _ in range(2)]
    groups = [[], []]  # per warpgroup: (ring slots read, X tile read or None)
    programs = [_consumer_program_v7(w, my_tiles, nchunks, channels, **bugs) for w in range(2)]
    x_part = {(w, s): None for w in range(2) for s in range(slices)}  # the tile each warpgroup's half of panel s holds
    area = {0: None, 1: None}  # the tile whose give each half of the exchange holds (half 0 is X)
    taken = {0: None, 1: None}  # the last tile whose give of warpgroup v the other warpgroup took
    halo = {"units": my_tiles * slices, "parts": {}, "inflight": {0: [], 1: []}, "reading": {0: None, 1: None}}
    arrived = [0, 0]  # named-barrier arrivals per warpgroup
    done = []
    pc, produced = [0, 0], 0
    speed = {key: rng.choice([0.01, 0.2, 1.0, 5.0]) for key in ["produce", *(("retire", w) for w in range(2)),
                                                                *(("step", w) for w in range(2)),
                                                                *(("land", w) for w in range(2))]}

    def may_step(w, op):
        if op[0] == "wait_full":
            return fills[op[1] % stages] > op[1] // stages
        if op[0] == "wait_groups":
            return len(groups[w]) <= op[1]
        if op[0] == "barrier":  # arrive, then pass once the other warpgroup has arrived at its barrier op[2]
            return arrived[w] <= op[2] or arrived[w ^ 1] > op[2]
        if op[0] == "cp_wait":
            return not halo["inflight"][w]
        return True

    while True:
        acts = []
        if produced < nslots:
            s, rnd = produced % stages, produced // stages
            if all(r[s] >= rnd for r in released):
                acts.append(("produce",))
        for w in range(2):
            if groups[w]:
                acts.append(("retire", w))
            if pc[w] < len(programs[w]) and may_step(w, programs[w][pc[w]]):
                acts.append(("step", w))
            if halo["inflight"][w]:
                acts.append(("land", w))
        if not acts:
            assert produced == nslots and pc == [len(p) for p in programs], f"deadlock at {pc}, seed {seed}"
            assert sorted(done) == sorted(list(range(my_tiles)) * 2), "a tile's epilogue missing or repeated"
            return
        act = rng.choices(acts, [speed[a if a[0] != "produce" else "produce"] for a in acts])[0]
        if act[0] == "produce":
            s = produced % stages
            assert all(s not in g[0] for gs in groups for g in gs), "slot refilled while a wgmma reads it"
            slot_index[s], fills[s] = produced, fills[s] + 1
            produced += 1
            continue
        if act[0] == "retire":
            groups[act[1]].pop(0)
            continue
        if act[0] == "land":
            copies = halo["inflight"][act[1]]
            buf, unit = copies.pop(rng.randrange(len(copies)))
            halo["parts"][buf, act[1]] = (unit, True)
            continue
        w = act[1]
        op = programs[w][pc[w]]
        if op[0] == "barrier" and arrived[w] <= op[2]:
            arrived[w] = op[2] + 1
            if arrived[w ^ 1] <= op[2]:
                continue  # arrived; passes once the other warpgroup is there
        elif op[0] == "wait_full":
            assert slot_index[op[1] % stages] == op[1], "the slot holds another index than awaited"
        elif op[0] == "release":
            s = op[1] % stages
            assert released[w][s] == op[1] // stages, "release counted toward another phase"
            released[w][s] += 1
        elif op[0] == "issue":
            for i in op[1]:
                assert slot_index[i % stages] == i, "a wgmma reads a slot holding another index"
            if op[2] is not None:
                held = [x_part[v, s] for v in range(2) for s in range(slices)]
                assert all(t == op[2] for t in held), f"stage 1 of tile {op[2]} reads X holding {held}"
            groups[w].append(([i % stages for i in op[1]], op[2]))
        elif op[0] == "issue_halo":
            unit, buf = op[1], op[2]
            if unit < halo["units"]:  # past the last unit: an empty commit group
                assert all(r != buf for r in halo["reading"].values()), "halo buffer refilled while a warp reads it"
                halo["parts"][buf, w] = (unit, False)
                halo["inflight"][w].append((buf, unit))
        elif op[0] in ("taps_begin", "taps_end"):
            unit, buf = op[1], op[2]
            assert all(halo["parts"].get((buf, v)) == (unit, True) for v in range(2)), \
                "the taps read a halo whose copies have not all landed (or another unit's)"
            halo["reading"][w] = buf if op[0] == "taps_begin" else None
        elif op[0] == "write_x":
            k, s = op[1], op[2]
            assert all(g[1] is None for v in range(2) for g in groups[v]), "X overwritten while a wgmma reads it"
            assert area[0] is None or taken[0] == area[0], "exchange overwritten before it was read"
            area[0] = None
            x_part[w, s] = k
        elif op[0] == "give":
            k = op[1]
            if w == 0:  # warpgroup 0's half of the exchange is X
                assert all(g[1] is None for v in range(2) for g in groups[v]), "X overwritten while a wgmma reads it"
                for key in x_part:
                    x_part[key] = None
            assert area[w] is None or taken[w] == area[w], "exchange overwritten before it was read"
            area[w] = k
        elif op[0] == "take":
            assert area[w ^ 1] == op[1], "exchange read before the other warpgroup wrote it"
            taken[w ^ 1] = op[1]
        elif op[0] == "epilogue":
            assert not groups[w], "epilogue before the tile's groups retired"
            done.append(op[1])
        pc[w] += 1


@pytest.mark.parametrize("channels,my_tiles,nchunks", [(256, 1, 2), (256, 3, 3), (256, 2, 1), (256, 3, 2),
                                                        (128, 3, 3), (128, 4, 2), (128, 2, 6), (128, 1, 1)])
@pytest.mark.parametrize("seed", range(20))
def test_ksplit_protocol_has_no_deadlock_or_overwrite(seed, channels, my_tiles, nchunks):
    """Variant 7 over 1 to 4 tiles per thread block, 1 to 6 chunks (the 8-slot ring holds one chunk at C = 256, two at
    128), the warpgroups at skewed speeds (no barrier between them per chunk: only the ring couples them)."""
    _run_ksplit_model(my_tiles, nchunks, seed, channels)


@pytest.mark.parametrize("bug,message", [
    ({"give_early": True}, "X"),  # X overwritten under a stage-1 group, or before the other warpgroup's stage 1
    ({"take_early": True}, "exchange read before the other warpgroup wrote it"),
    ({"no_x_barrier": True}, "stage 1 of tile"),
    ({"one_halo": True}, "halo"),
    ({"refill_before_sync": True}, "halo"),
])
def test_ksplit_model_catches_the_bugs(bug, message):
    """The model is not blind: the give without the barrier before it (the other warpgroup's last stage 1 may still read
    X), the take without the barrier after the give, the FFN starting without the barrier after the conv (stage 1 reads
    a half-written X), one halo buffer, or unit u + 1's copies issued before the unit barrier each fail somewhere (or
    deadlock)."""
    failures = 0
    for seed in range(150):
        try:
            _run_ksplit_model(3, 2, seed, 256, **bug)
        except AssertionError as error:
            assert message in str(error) or "deadlock" in str(error), str(error)
            failures += 1
    assert failures > 0


@pytest.mark.cuda
@pytest.mark.parametrize("channels,expansion,batch,h,w", [
    (256, 6, 128, 14, 14), (256, 4, 128, 14, 14), (256, 2, 37, 14, 14), (256, 8, 3, 14, 14), (256, 6, 1, 14, 14),
    (256, 4, 37, 13, 13), (256, 6, 128, 7, 7), (256, 6, 1, 1, 1), (256, 4, 2, 28, 28), (256, 6, 5, 9, 27),
    (256, 6, 1, 8, 8), (256, 4, 1, 8, 16), (256, 6, 300, 14, 14),
    (128, 6, 128, 28, 28), (128, 4, 128, 28, 28), (128, 3, 19, 28, 28), (128, 2, 1, 28, 28), (128, 8, 3, 27, 25),
    (128, 6, 37, 14, 14), (128, 4, 1, 1, 1), (128, 6, 2, 9, 5),
])
def test_ksplit_variant(channels, expansion, batch, h, w):
    """Variant 7 against float64 (<= 2x PyTorch fp16's error, NaN-poisoned output): alpha 2 / 3 / 4 / 6 / 8, batch 128 /
    1 / odd, odd sizes, 1 tile (1x1, 8x8), 2, 392 (3 per thread block), 919 and 1568 (12 per thread block) tiles."""
    check_kernel(expansion, batch, h, w, variant=7, channels=channels)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", [7, 8], ids=["ksplit", "variant8"])
def test_split_k_launches_are_deterministic(variant):
    """Variants 7 and 8: repeated launches agree bit for bit (each tile's arithmetic is fixed, whatever the warpgroups'
    interleaving)."""
    block = block_c(256, 6, seed=9).cuda().half()
    x = channels_last(torch.randn(37, 256, 14, 14, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    _assert_launches_equal(x, weights, variant, c512.run(x, weights, variant=variant))


# ---- every persistent variant beside variant 3 (5 prefetch, 6 ping-pong, 7 k-split) ----

@pytest.mark.cuda
@pytest.mark.parametrize("variant", [5, 6, 7, 8])
def test_variant_smem_matches_the_extension(variant):
    ext = c512._extension()
    assert ext.num_variants == len(c512.VARIANTS) == 9
    for channels in c512.SUPPORTED_CHANNELS:
        assert ext.smem_bytes(channels, variant) == c512.smem_bytes(channels, variant)


@pytest.mark.cuda
@pytest.mark.parametrize("switch,widths,channels,size,seed", [
    ("5", "64,128", 64, 56, 5),  # variant 5 at C = 64 (and 128)
    ("64:6", "64", 64, 56, 6),
    ("7", "128,256", 256, 14, 7),
])
def test_variant_in_the_swapped_network(monkeypatch, switch, widths, channels, size, seed):
    """CUDA_KERNELS_C512_VARIANT sends the blocks of a swapped network (alpha 6 and 4) to the variant it names."""
    monkeypatch.setenv(c512.VARIANT_SWITCH, switch)
    monkeypatch.setenv(c512.WGMMA_SWITCH, widths)
    torch.manual_seed(seed)
    net = nn.Sequential(block_c(channels, 6, seed=1), block_c(channels, 4, seed=2)).cuda().half()
    x = channels_last(torch.randn(2, channels, size, size, device="cuda", dtype=torch.float16))
    swap, got, exact = swap_against_float64(net, x)
    assert swap.fused["ConvFirstBlock"] == 2 and all(type(m).__name__ == "FusedConvFirstC512" for m in net)
    assert relative_error(got, exact) < 5e-3


# ---- variant 8 (C = 256): variant 7's FFN without the conv (its own kernel into a scratch), epilogue operands in smem ----

VARIANT8_SMEM = 231600  # NOTES.md "Variant 8: built": 2 x 32 KB X + 32 KB exchange + 8 x 16 KB ring + 1 KB b2 + 22 barriers


def _panel_offset(row: int, chunk: int) -> int:
    """Byte offset of 16-byte chunk `chunk` of row `row` in a 128-byte-swizzled panel (csrc/ptx.cuh panel_offset)."""
    return row * 128 + (((chunk ^ row) & 7) << 4)


def test_variant8_layout_and_switch(monkeypatch, small_weights):
    """Variant 8 exists at C = 256 only; Shape8 (two X buffers, the 32 KB exchange, the ring, b2, 22 barriers) is
    231,600 B, 848 B under the H200's 232,448; off by default, on by CUDA_KERNELS_C512_VARIANT=8 or 256:8."""
    monkeypatch.delenv(c512.VARIANT_SWITCH, raising=False)
    assert [c for c in c512.SUPPORTED_CHANNELS if 8 in c512.variants(c)] == list(c512.CONV8_WIDTHS) == [256]
    assert c512.smem_bytes(256, 8) == VARIANT8_SMEM == 1024 + 65536 + 32768 + 131072 + 1024 + 176
    assert 232448 - VARIANT8_SMEM == 848 and c512.SMEM_LIMIT == 232448
    assert VARIANT8_SMEM - 231592 == 8  # the design's 21 barriers + x_dead (NOTES.md)
    assert [c512.smem_bytes(c, 8) for c in (64, 128, 384, 512)] == [0, 0, 0, 0]
    assert [c512.default_variant(c, 14) for c in (64, 128, 256, 384, 512)] == [6, 5, 8, 4, 4]  # 8: the default
    monkeypatch.setenv(c512.VARIANT_SWITCH, "8")
    assert [c512.default_variant(c, 14) for c in (64, 128, 256, 384, 512)] == [6, 5, 8, 4, 4]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "256:8")
    assert [c512.default_variant(c, 28) for c in (64, 128, 256, 512)] == [6, 5, 8, 0]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "128:8")  # C = 128 has no variant 8: its default stays
    assert [c512.default_variant(c, 28) for c in (128, 256)] == [5, 8]
    monkeypatch.setenv(c512.VARIANT_SWITCH, "256:3")  # the previous default, by the switch
    assert c512.default_variant(256, 14) == 3
    monkeypatch.setenv(c512.VARIANT_SWITCH, "256:7,256:8")  # the last entry for a width wins
    assert c512.default_variant(256, 14) == 8
    x = channels_last(torch.zeros(1, 512, 7, 7, dtype=torch.float16))
    with pytest.raises(ValueError, match="no variant 8 at C=512"):
        c512.run(x, small_weights, variant=8)


def test_variant8_scratch_bytes():
    """Whole 64-pixel tiles of 256 fp16 channels (32 KB each): batch 128 at 14x14 is 392 tiles = 12,845,056 B."""
    assert c512.conv8_scratch_bytes(128 * 14 * 14) == 392 * 32768 == 12845056
    assert [c512.conv8_scratch_bytes(p) for p in (1, 63, 64, 65, 81, 196)] == [32768, 32768, 32768, 65536, 65536, 131072]


@pytest.mark.parametrize("pixels", [1, 64, 81, 196])
def test_variant8_scratch_layout_is_the_kernels_panels(pixels):
    """conv8_scratch_layout puts X[p, c] at half (t C/64 + s) 4096 + (row 128 + ((chunk ^ row) % 8) 16) / 2 + c % 8
    (t = p // 64, row = p % 64, s = c // 64, chunk = c % 64 // 8), pad rows zero; conv8_scratch_rows inverts it."""
    torch.manual_seed(pixels)
    X = torch.randn(pixels, 256, dtype=torch.float64)
    got = c512.conv8_scratch_layout(X)
    assert got.numel() * 2 == c512.conv8_scratch_bytes(pixels)
    want = torch.zeros_like(got)
    p, c = torch.meshgrid(torch.arange(pixels), torch.arange(256), indexing="ij")
    row, chunk = p % 64, c % 64 // 8
    index = ((p // 64) * 4 + c // 64) * 4096 + (row * 128 + ((chunk ^ row) % 8) * 16) // 2 + c % 8
    want[index.reshape(-1)] = X.reshape(-1)
    assert torch.equal(got, want)
    assert torch.equal(c512.conv8_scratch_rows(got, pixels), X)
    as_bytes = c512.conv8_scratch_layout(X.half()).view(torch.uint8)
    assert torch.equal(c512.conv8_scratch_rows(as_bytes, pixels), X.half())


def _conv8_kernel_scratch(Xp: torch.Tensor) -> torch.Tensor:
    """convfirst_c512_conv8_kernel's writes, thread by thread: per CTA (tile, slice s) warp (wg, wq) lane stores the two
    halves of its m16n8 fragment (rows (wg + 2 j) 16 + lane / 4 (+ 8), group pair wq, columns 2 (lane % 4)) into the
    staging panel at panel_offset(row, 2 wq + gi) + 4 (lane % 4), then thread t copies 16-byte chunks t, t + 256 of
    the panel to the scratch at (tile C/64 + s) 8 KB. Xp: [tiles 64, 256] rows (past P: b_c, as the kernel writes)."""
    tiles = Xp.shape[0] // 64
    scratch = torch.full((tiles * 4 * 4096,), float("nan"), dtype=Xp.dtype)
    for tile in range(tiles):
        for s in range(4):
            panel = torch.full((4096,), float("nan"), dtype=Xp.dtype)
            for warp in range(8):
                wg, wq = warp >> 2, warp & 3
                for lane in range(32):
                    for j in range(2):
                        for gi in range(2):
                            chunk = 2 * wq + gi
                            col = 64 * s + 8 * chunk + 2 * (lane & 3)
                            for hr in range(2):
                                row = (wg + 2 * j) * 16 + lane // 4 + 8 * hr
                                off = (_panel_offset(row, chunk) + 4 * (lane & 3)) // 2
                                assert panel[off : off + 2].isnan().all()  # each half written once
                                panel[off : off + 2] = Xp[64 * tile + row, col : col + 2]
            base = (tile * 4 + s) * 4096
            for i in range(2):
                for t in range(256):
                    scratch[base + (i * 256 + t) * 8 : base + (i * 256 + t) * 8 + 8] = panel[(i * 256 + t) * 8 : (i * 256 + t) * 8 + 8]
    return scratch


def _emulate_variant8(x: torch.Tensor, block: nn.Module, weights: c512.KernelWeights, sms: int) -> torch.Tensor:
    """Variant 8 in float64 over the persistent schedule: the conv kernel's scratch (`_conv8_kernel_scratch`, checked
    against conv8_scratch_layout), per CTA two X buffers: tile k's X as the 32 KB of the scratch at its tile (one bulk
    copy) read as four swizzled panels; the FFN split by k (warpgroup w: hidden 128 j + 64 w ..); then the copiers'
    shortcut rows into the same (dead) buffer (warp cw of 3: rows cw, cw + 3, ..; lane = 16-byte chunk, zero past P), b2
    once per CTA (16-byte chunks ct, ct + 96 of 96 threads), the exchange in two rounds through a 32 KB area by the
    kernel's register and float4 indices, and the epilogue reading b2 and the shortcut at the kernel's addresses."""
    n, c, h, w = x.shape
    P = n * h * w
    tiles = -(-P // 64)
    xr = x.permute(0, 2, 3, 1).reshape(P, c)
    X = F.conv2d(x, block.conv.weight, block.conv.bias, padding=1, groups=c // 8).permute(0, 2, 3, 1).reshape(P, c)
    Xp = block.conv.bias.detach().double().expand(tiles * 64, c).clone()  # past P: b_c (a zero pixel's taps)
    Xp[:P] = X
    scratch = _conv8_kernel_scratch(Xp)
    assert torch.equal(scratch, c512.conv8_scratch_layout(Xp))
    w1, w2 = (t.double() for t in c512.unpack_weights(weights.wpack, weights.hidden, c))
    b1, b2 = weights.b1.double(), weights.b2.double()
    out = torch.full((P, c), float("nan"), dtype=torch.float64)
    written = torch.zeros(P, c, dtype=torch.int64)
    pos = [[_acc_position(i, t // 32, t % 32) for i in range(c // 2)] for t in range(128)]
    rows_idx = torch.tensor([[r for r, _ in p] for p in pos])
    cols_idx = torch.tensor([[cc for _, cc in p] for p in pos])
    keep, per_round = c // 4, c // 32  # 64 kept registers; 8 float4 per thread per round
    for my in c512.persistent_tiles(tiles, sms):
        xbuf = torch.full((2, 16384), float("nan"), dtype=torch.float64)  # two X buffers, in halves
        b2s = torch.full((c,), float("nan"), dtype=torch.float64)
        for k, tile in enumerate(my):
            b, p0 = k & 1, 64 * tile
            xbuf[b] = scratch[16384 * tile : 16384 * (tile + 1)]  # the producer's bulk copy
            xt = torch.empty(64, c, dtype=torch.float64)  # stage 1's A operand from the four panels
            for kp in range(c // 64):
                for row in range(64):
                    for chunk in range(8):
                        off = kp * 4096 + _panel_offset(row, chunk) // 2
                        xt[row, 64 * kp + 8 * chunk : 64 * kp + 8 * chunk + 8] = xbuf[b, off : off + 8]
            acc2 = torch.zeros(2, 64, c, dtype=torch.float64)
            for j in range(weights.hidden // 128):
                for wg in range(2):
                    rows = slice(128 * j + 64 * wg, 128 * j + 64 * wg + 64)
                    acc2[wg] += torch.relu(xt @ w1[rows].T + b1[rows]) @ w2[:, rows].T
            xbuf[b] = float("nan")  # X is dead: the copiers overwrite the whole buffer
            for cw in range(3):
                for row in range(cw, 64, 3):
                    for lane in range(32):
                        dst = (lane >> 3) * 4096 + _panel_offset(row, lane & 7) // 2
                        src = xr[p0 + row, 8 * lane : 8 * lane + 8] if p0 + row < P else torch.zeros(8, dtype=torch.float64)
                        xbuf[b, dst : dst + 8] = src
            assert not xbuf[b].isnan().any()
            if k == 0:
                for ct in range(96):
                    for i in range(ct, c * 4 // 16, 96):
                        b2s[4 * i : 4 * i + 4] = b2[4 * i : 4 * i + 4]
            regs = torch.stack([acc2[wg][rows_idx, cols_idx] for wg in range(2)])  # [wg, thread, register]
            for r in range(2):
                area = torch.full((2, per_round, 128, 4), float("nan"), dtype=torch.float64)
                for wg in range(2):
                    for i in range(per_round):
                        lo = 4 * (r * per_round + i)
                        src = lo if wg else keep + lo
                        area[wg, i] = regs[wg, :, src : src + 4]
                for wg in range(2):
                    for i in range(per_round):
                        lo = 4 * (r * per_round + i)
                        mine = regs[wg, :, keep + lo : keep + lo + 4] if wg else regs[wg, :, lo : lo + 4]
                        regs[wg, :, lo : lo + 4] = mine + area[wg ^ 1, i]
            for wg in range(2):
                for t in range(128):
                    wq, lane = t // 32, t % 32
                    rl, col0 = 16 * wq + lane // 4, (c // 2) * wg + 2 * (lane & 3)
                    for hr in range(2):
                        if p0 + rl + 8 * hr >= P:
                            continue
                        for nb in range(keep // 4):
                            col = col0 + 8 * nb
                            off = (2 * wg + (nb >> 3)) * 4096 + (_panel_offset(rl + 8 * hr, nb & 7) + 4 * (lane & 3)) // 2
                            v = regs[wg, t, 4 * nb + 2 * hr : 4 * nb + 2 * hr + 2] + b2s[col : col + 2] + xbuf[b, off : off + 2]
                            out[p0 + rl + 8 * hr, col : col + 2] = v
                            written[p0 + rl + 8 * hr, col : col + 2] += 1
    assert (written == 1).all()
    return out.reshape(n, h, w, c).permute(0, 3, 1, 2)


@pytest.mark.parametrize("expansion,size,sms", [(6, 9, 1), (4, 14, 2), (2, 14, 3), (2, 8, 5)])
def test_variant8_dataflow_is_the_block(expansion, size, sms):
    """Variant 8's dataflow (the conv kernel's panel writes, the scratch, one bulk copy per tile into alternating X
    buffers, the shortcut and b2 copies into shared memory, the two-round exchange, the epilogue's shared-memory reads)
    is the block in float64 (1e-12): 81 pixels (a partial tile) on one CTA, 196 pixels (4 tiles) on 2 and 3 CTAs, one
    tile on one of 5."""
    block = block_c(256, expansion, seed=expansion).half().double()
    x = torch.randn(1, 256, size, size, dtype=torch.float64)
    with torch.no_grad():
        want = block(x)
        got = _emulate_variant8(x, block, _kernel_weights(block), sms)
    assert relative_error(got, want) < 1e-12


def test_variant8_copies_and_reads_cover_their_areas():
    """The copiers' shortcut copy (3 warps, whole rows) is a permutation of a 32 KB X buffer; b2's 64 16-byte chunks are
    copied once; the exchange's two rounds each fill the 32 KB area once (32 consecutive float4 per warp); the
    epilogue's shortcut reads of one warp hit 32 different banks for each (n, hr) (conflict-free)."""
    chunks = [(lane >> 3) * 8192 + _panel_offset(row, lane & 7) for cw in range(3) for row in range(cw, 64, 3)
              for lane in range(32)]
    assert sorted(chunks) == list(range(0, 32768, 16))
    assert sorted(i for ct in range(96) for i in range(ct, 64, 96)) == list(range(64))
    index = [wg * 8 * 128 + i * 128 + t for wg in range(2) for i in range(8) for t in range(128)]
    assert sorted(index) == list(range(32768 // 16))
    for wg in range(2):
        for wq in range(4):
            for nb in range(16):
                for hr in range(2):
                    addr = [(2 * wg + (nb >> 3)) * 8192 + _panel_offset(16 * wq + lane // 4 + 8 * hr, nb & 7) + 4 * (lane & 3)
                            for lane in range(32)]
                    assert len({a // 4 % 32 for a in addr}) == 32
    # b2's float2 reads: 4 addresses per warp (lane % 4), broadcast
    assert len({(128 * 0 + 2 * (lane & 3)) for lane in range(32)}) == 4


def test_variant8_host_checks(small_weights):
    """`run`'s checks of variant 8's scratch, on CPU tensors (before the device check): uint8, contiguous, large
    enough, 16-byte aligned, apart from x and out; only variant 8 takes one; C = 256 only."""
    weights = _kernel_weights(block_c(256, 2))
    x = channels_last(torch.zeros(1, 256, 9, 9, dtype=torch.float16))
    need = c512.conv8_scratch_bytes(81)
    assert need == 65536
    cases = [
        (torch.zeros(need // 2, dtype=torch.float16), "contiguous uint8"),
        (torch.zeros(2, need, dtype=torch.uint8)[:, ::2], "contiguous uint8"),
        (torch.zeros(need - 16, dtype=torch.uint8), f"needs {need}"),
        (torch.zeros(need + 16, dtype=torch.uint8)[1 : need + 1], "16-byte aligned"),
    ]
    for xconv, message in cases:
        with pytest.raises(ValueError, match=message):
            c512.run(x, weights, variant=8, xconv=xconv)
    storage = torch.zeros(81 * 256 * 2 + need, dtype=torch.uint8)
    shared_x = storage[: 81 * 512].view(torch.float16).view(1, 9, 9, 256).permute(0, 3, 1, 2)
    with pytest.raises(ValueError, match="must not overlap x"):
        c512.run(shared_x, weights, variant=8, xconv=storage[: need])
    storage = torch.zeros(need, dtype=torch.uint8)  # out in the first 41,472 bytes of the scratch
    out = storage[: 81 * 512].view(torch.float16).view(1, 9, 9, 256).permute(0, 3, 1, 2)
    with pytest.raises(ValueError, match="must not overlap out"):
        c512.run(x, weights, out=out, variant=8, xconv=storage)
    with pytest.raises(ValueError, match="variant 8's scratch, not variant 7's"):
        c512.run(x, weights, variant=7, xconv=torch.zeros(need, dtype=torch.uint8))
    # a good scratch passes every check before the device's
    with pytest.raises(ValueError, match="CUDA tensor"):
        c512.run(x, weights, variant=8, xconv=torch.zeros(need, dtype=torch.uint8))
    with pytest.raises(ValueError, match="CUDA tensor"):
        c512.run(x, weights, variant=8)
    with pytest.raises(ValueError, match="no variant 8 at C=512"):
        c512.run(channels_last(torch.zeros(1, 512, 7, 7, dtype=torch.float16)), small_weights, variant=8)


def _kernel_text(name: str) -> str:
    """The body of __global__ function `name` in csrc/convfirst_c512.cu, comments stripped."""
    import pathlib

    return kernel_body(strip_comments((pathlib.Path(c512.__file__).parent / "csrc" / "convfirst_c512.cu").read_text()),
                       name)


def test_variant8_pdl_order():
    """PDL (csrc/pdl.h): the conv kernel reads x and writes the scratch only after its wait, and triggers after it; in the
    fused kernel the producer's only X copies are issued from `after_first_chunk`, whose wait comes first (the weight
    slots of the first chunk go ahead of it), the copiers wait before reading x, the consumers before writing out."""
    conv = _kernel_text("convfirst_c512_conv8_kernel")
    wait = conv.index("pdl::wait()")
    assert wait < conv.index("pdl::launch_dependents()")
    for token in ("p.x", "dst[", "cp_async16("):
        assert conv.index(token) > wait, token
    ffn = _kernel_text("convfirst_c512_ffn8_kernel")
    producer = ffn[ffn.index("auto issue_x") : ffn.index("const int ct")]
    define_x = producer[: producer.index("auto after_first_chunk")]
    after = producer[producer.index("auto after_first_chunk") :]
    after = after[: after.index("};") + 2]
    assert after.index("pdl::wait()") < after.index("issue_x(0)")
    # every call of issue_x is in after_first_chunk (the rest of the producer only calls after_first_chunk)
    assert producer.count("issue_x(") == define_x.count("issue_x(") + after.count("issue_x(") and "issue_x(" not in define_x
    assert "xconv" in define_x and "xconv" not in producer.replace(define_x, "")
    copiers = ffn[ffn.index("const int ct") : ffn.index("setmaxnreg_inc")]
    assert copiers.index("pdl::wait()") < copiers.index("p.x") and copiers.index("pdl::wait()") < copiers.index("p.b2")
    consumers = ffn[ffn.index("setmaxnreg_inc") :]
    assert consumers.index("pdl::wait()") < consumers.index("p.out")
    assert consumers.index("pdl::wait()") < consumers.index("pdl::launch_dependents()")
    assert "p.x" not in consumers  # the shortcut comes through shared memory


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (6, 128, 14, 14), (4, 128, 14, 14), (2, 37, 14, 14), (8, 3, 14, 14), (6, 1, 14, 14), (4, 37, 13, 13),
    (6, 128, 7, 7), (6, 1, 1, 1), (4, 2, 28, 28), (6, 5, 9, 27), (6, 1, 8, 8), (4, 1, 8, 16), (6, 300, 14, 14),
    (2, 128, 14, 14),
])
def test_variant8(expansion, batch, h, w):
    """Variant 8 against float64 (<= 2x PyTorch fp16's error, NaN-poisoned output): alpha 2 / 4 / 6 / 8, batch 128 / 1 /
    odd, odd sizes, 1 tile (1x1, 8x8), 2, 392 (3 per thread block: both X buffers reused), 919 tiles (7 per block)."""
    check_kernel(expansion, batch, h, w, variant=8, channels=256)


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [(6, 128, 14, 14), (4, 37, 13, 13), (2, 1, 9, 27), (8, 3, 28, 28)])
def test_variant8_equals_variant7_bit_for_bit(expansion, batch, h, w):
    """The conv kernel computes X with variant 7's arithmetic (the same m16n8k8 chains over the same halo window, the
    bias after the taps, one rounding) and the fused kernel variant 7's FFN, exchange and epilogue order (acc + b + x):
    expected bit for bit equal to variant 7."""
    block = block_c(256, expansion, seed=expansion + h).cuda().half()
    x = channels_last(torch.randn(batch, 256, h, w, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    want = c512.run(x, weights, variant=7)
    _assert_launches_equal(x, weights, 8, want, launches=2)


@pytest.mark.cuda
@pytest.mark.parametrize("batch,size", [(3, 14), (1, 9), (2, 28)])
def test_variant8_scratch_is_the_conv(batch, size):
    """The scratch the conv kernel leaves (a caller's, reused twice) holds conv(x) + b_c rounded to fp16: within PyTorch
    fp16's error of float64, rows past the last pixel b_c; the extension's scratch size is conv8_scratch_bytes."""
    block = block_c(256, 4, seed=size).cuda()
    x = channels_last(torch.randn(batch, 256, size, size, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    pixels = batch * size * size
    assert c512._extension().conv8_scratch_bytes(pixels) == c512.conv8_scratch_bytes(pixels)
    xconv = torch.full((c512.conv8_scratch_bytes(pixels) + 64,), 255, dtype=torch.uint8, device="cuda")
    first = c512.run(x, weights, variant=8, xconv=xconv)
    again = c512.run(x, weights, variant=8, xconv=xconv)
    torch.cuda.synchronize()
    assert torch.equal(first, again)
    got = c512.conv8_scratch_rows(xconv, pixels).float()
    conv, bias = block.conv.weight, block.conv.bias
    exact = F.conv2d(x.double(), conv.double(), bias.double(), padding=1, groups=32).permute(0, 2, 3, 1).reshape(pixels, 256)
    torch_fp16 = F.conv2d(x, conv.half(), bias.half(), padding=1, groups=32).permute(0, 2, 3, 1).reshape(pixels, 256)
    assert relative_error(got, exact) <= 2 * relative_error(torch_fp16, exact)
    tiles = -(-pixels // 64)
    padded = c512.conv8_scratch_rows(xconv, tiles * 64)[pixels:]
    assert torch.equal(padded, bias.half().expand_as(padded))
    assert (xconv[c512.conv8_scratch_bytes(pixels):] == 255).all()  # nothing written past the scratch


@pytest.mark.cuda
def test_variant8_binding_checks():
    """The raw ops refuse what `run` refuses first: variant 8 through convfirst_c512 (it needs the scratch), a short or
    overlapping scratch, C != 256."""
    ext = c512._extension()
    block = block_c(256, 2, seed=3).cuda()
    weights = _kernel_weights(block)
    rows = torch.randn(81, 256, device="cuda", dtype=torch.float16)
    args = (weights.conv_w, weights.conv_b, weights.wpack, weights.b1, weights.b2, 9, 9)
    empty = torch.empty(0, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="convfirst_c512_v8"):
        ext.convfirst_c512(rows, *args, 8, empty)
    with pytest.raises(RuntimeError, match="needs 65536"):
        ext.convfirst_c512_v8(rows, *args, empty, torch.empty(65520, device="cuda", dtype=torch.uint8))
    buf = torch.zeros(65536, device="cuda", dtype=torch.uint8)  # x in the scratch's first 41,472 bytes
    with pytest.raises(RuntimeError, match="overlap"):
        ext.convfirst_c512_v8(buf[: 81 * 512].view(torch.float16).view(81, 256), *args, empty, buf)
    with pytest.raises(RuntimeError, match="256"):
        ext.convfirst_c512_v8(torch.randn(81, 128, device="cuda", dtype=torch.float16), *args, empty, buf)


@pytest.mark.cuda
def test_variant8_pdl_chain(monkeypatch):
    """Three variant-8 blocks in a row with programmatic dependent launch (CUDA_KERNELS_PDL=1: conv, fused, conv, ...
    chained) give the bits of the same chain without it."""
    blocks = [block_c(256, a, seed=20 + a).cuda().half() for a in (6, 4, 2)]
    weights = [_kernel_weights(b) for b in blocks]
    x = channels_last(torch.randn(64, 256, 14, 14, device="cuda", dtype=torch.float16))
    outs = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("CUDA_KERNELS_PDL", flag)
        y = x
        for w in weights:
            y = c512.run(y, w, variant=8)
        torch.cuda.synchronize()
        outs[flag] = y
    assert torch.equal(outs["0"], outs["1"]) and torch.isfinite(outs["1"]).all()


@pytest.mark.cuda
@pytest.mark.parametrize("switch,widths,seed", [("8", "128,256", 8), ("256:8", "256", 9)])
def test_variant8_in_the_swapped_network(monkeypatch, switch, widths, seed):
    """CUDA_KERNELS_C512_VARIANT=8 / 256:8 sends a swapped network's C = 256 blocks (alpha 6 and 4) to variant 8: the
    module allocates the scratch per call (`run`)."""
    test_variant_in_the_swapped_network(monkeypatch, switch, widths, 256, 14, seed)


def test_variant8_device_script_states_its_prediction():
    """device_run_v8.sh's header carries the prediction written before any run (NOTES.md "Next: variant 8"), ahead of
    the call it makes (test_device_scripts_of_the_variants checks the call)."""
    import pathlib

    text = (pathlib.Path(__file__).resolve().parents[1] / "cuda_kernels" / "device_run_v8.sh").read_text()
    header = text[: text.index("set -uo pipefail")]
    assert "~78 us (range 72-90" in header and "v3 103.4" in header and "v7 101.8" in header


# ---- variant 8's protocol: the producer (weight ring + X pairs), the copier warps, two consumer warpgroups ----

class _Mbar:
    """An mbarrier: `expected` arrivals and the copy bytes announced (as copies) complete a phase; try_wait.parity(P)
    passes when the number of completed phases has the other parity (a fresh barrier passes parity 1)."""

    def __init__(self, expected: int):
        self.expected, self.arrived, self.tx, self.phases = expected, 0, 0, 0

    def _check(self):
        if self.arrived == self.expected and self.tx == 0:
            self.arrived, self.phases = 0, self.phases + 1

    def arrive(self, count: int = 1, tx: int = 0):
        assert self.arrived + count <= self.expected, "more arrivals than the barrier counts in one phase"
        self.arrived += count
        self.tx += tx
        self._check()

    def land(self):
        self.tx -= 1
        self._check()

    def passes(self, parity: int) -> bool:
        return self.phases % 2 != parity


def _run_variant8_model(my_tiles: int, nchunks: int, seed: int, **bugs) -> None:
    """One CTA of convfirst_c512_ffn8_kernel under random interleavings (actors at random speeds, copies landing in any
    order): the producer thread (every tile's 8 slots per chunk; after tile k's first chunk, tile k + 1's X into buffer
    (k + 1) % 2 once tile k - 1's epilogue released it; tile 0's and 1's X after tile 0's first chunk), three copier warps
    (per tile: x_dead, their third of the shortcut rows into the tile's X buffer by cp.async, wait, sc_full), two consumer
    warpgroups (x_full, per chunk stage 1 on the 4 U slots with wait_group 1 / 0 and the slot releases, x_dead after the
    last chunk's stage 1, stage 2 on their 2 V slots (the other 2 released once full), wait_group 0, the exchange in two
    rounds of sync / give / sync / take, sc_full, the epilogue's reads of the shortcut, x_empty). Asserts: no deadlock;
    every read sees the content it expects for its whole duration (X of the tile, the shortcut of the tile, a weight
    slot of its stream index, the other warpgroup's give of this tile and round); no give overwrites an untaken one.
    `bugs`: planted ones (no_x_empty_wait, no_x_dead_wait, no_sc_wait, x_full_parity_k, no_first_exchange_sync)."""
    import random

    rng = random.Random(seed)
    spc, stages = 8, 8
    full = [_Mbar(1) for _ in range(stages)]
    empty = [_Mbar(8) for _ in range(stages)]
    x_full, x_empty = [_Mbar(1), _Mbar(1)], [_Mbar(8), _Mbar(8)]
    x_dead, sc_full = _Mbar(8), _Mbar(96)
    ring = [None] * stages
    xbuf = [[None] * 3 for _ in range(2)]  # per X buffer: the content of its three thirds
    area = [None, None]  # the exchange: per warpgroup's give region (tile, round, taken)
    inflight = []  # (land function) of bulk copies and cp.async copies
    cp_pending = {cw: 0 for cw in range(3)}
    readers = []  # (description, check function) of reads in progress
    nbar = {"gen": 0, "arrived": 0}

    def check_reads():
        for what, ok in readers:
            assert ok(), f"overwritten while read: {what}"

    def wait(bar, parity):
        while not bar.passes(parity):
            yield False
        yield True

    def producer():
        def issue_x(kk):
            b = kk & 1
            if kk >= 2 and not bugs.get("no_x_empty_wait"):
                yield from wait(x_empty[b], ((kk >> 1) & 1) ^ 1)
            x_full[b].arrive(1, tx=1)

            def land(b=b, kk=kk):
                xbuf[b][:] = [("X", kk)] * 3
                x_full[b].land()
            inflight.append(land)
            yield True

        def after_first_chunk(k):
            if k == 0:
                yield from issue_x(0)
                if my_tiles > 1:
                    yield from issue_x(1)
            elif k + 1 < my_tiles:
                yield from issue_x(k + 1)

        g, nslots = 0, nchunks * spc
        for k in range(my_tiles):
            for it in range(nslots):
                if it == spc:
                    yield from after_first_chunk(k)
                slot = g % stages
                yield from wait(empty[slot], ((g // stages) & 1) ^ 1)
                full[slot].arrive(1, tx=1)

                def land(slot=slot, g=g):
                    ring[slot] = ("W", g)
                    full[slot].land()
                inflight.append(land)
                g += 1
                yield True
            if nslots == spc:
                yield from after_first_chunk(k)

    def copier(cw):
        for k in range(my_tiles):
            if not bugs.get("no_x_dead_wait"):
                yield from wait(x_dead, k & 1)
            b = k & 1
            cp_pending[cw] += 1

            def land(b=b, k=k, cw=cw):
                xbuf[b][cw] = ("SC", k)
                cp_pending[cw] -= 1
            inflight.append(land)
            yield True
            while cp_pending[cw]:
                yield False
            sc_full.arrive(32)
            yield True

    def sync(wg):
        gen = nbar["gen"]
        nbar["arrived"] += 1
        if nbar["arrived"] == 2:
            nbar["arrived"], nbar["gen"] = 0, gen + 1
        while nbar["gen"] == gen:
            yield False
        yield True

    def consumer(wg):
        it = 0
        groups = []  # wgmma groups in flight: lists of reader entries
        pending = []  # stream indices to release once the group that read them has retired

        def begin(what, ok):
            entry = (what, ok)
            assert ok(), f"read of stale data: {what}"
            readers.append(entry)
            return entry

        def retire(keep):
            while len(groups) > keep:
                for entry in groups.pop(0):
                    assert entry[1](), f"overwritten while read: {entry[0]}"
                    readers.remove(entry)

        for k in range(my_tiles):
            b = k & 1
            parity = (k & 1) if bugs.get("x_full_parity_k") else (k >> 1) & 1
            yield from wait(x_full[b], parity)
            for j in range(nchunks):
                for _ in range(4):
                    slot = it % stages
                    yield from wait(full[slot], (it // stages) & 1)
                    groups.append([begin(("U", it), lambda s=slot, i=it: ring[s] == ("W", i)),
                                   begin(("X", k), lambda b=b, k=k: xbuf[b] == [("X", k)] * 3)])
                    yield True
                    retire(1)
                    for p in pending:
                        empty[p % stages].arrive(4)
                    pending, it = [it], it + 1
                    yield True
                retire(0)
                for p in pending:
                    empty[p % stages].arrive(4)
                pending = []
                if j == nchunks - 1:
                    x_dead.arrive(4)
                yield True
                mine = [it + 2 * wg + q for q in range(2)]
                theirs = [it + 2 * (1 - wg) + q for q in range(2)]
                for m in mine:
                    yield from wait(full[m % stages], (m // stages) & 1)
                groups.append([begin(("V", m), lambda s=m % stages, i=m: ring[s] == ("W", i)) for m in mine])
                yield True
                for t in theirs:
                    yield from wait(full[t % stages], (t // stages) & 1)
                    empty[t % stages].arrive(4)
                    yield True
                pending, it = mine, it + 4
            retire(0)
            for p in pending:
                empty[p % stages].arrive(4)
            pending = []
            yield True
            for r in range(2):
                if r or not bugs.get("no_first_exchange_sync"):
                    yield from sync(wg)
                assert area[wg] is None or area[wg][2], f"give of tile {k} round {r} over an untaken one"
                area[wg] = [k, r, False]
                yield True
                yield from sync(wg)
                got = area[1 - wg]
                assert got is not None and got[:2] == [k, r] and not got[2], f"take of tile {k} round {r} saw {got}"
                got[2] = True
                yield True
            if not bugs.get("no_sc_wait"):
                yield from wait(sc_full, k & 1)
            entry = begin(("SC", k), lambda b=b, k=k: xbuf[b] == [("SC", k)] * 3)
            yield True
            assert entry[1](), f"shortcut of tile {k} overwritten while read"
            readers.remove(entry)
            x_empty[b].arrive(4)
            yield True

    actors = {"producer": producer(), **{f"copier{c}": copier(c) for c in range(3)},
              **{f"consumer{w}": consumer(w) for w in range(2)}}
    speed = {name: rng.choice([1, 2, 5, 20]) for name in actors}
    done, blocked = set(), set()
    for _ in range(500000):
        live = [n for n in actors if n not in done]
        if not live and not inflight:
            return
        choices = [n for n in live if n not in blocked]
        if not choices and not inflight:
            raise AssertionError(f"deadlock: {sorted(live)} blocked (tiles {my_tiles}, chunks {nchunks})")
        if inflight and (not choices or rng.random() < 0.3):
            inflight.pop(rng.randrange(len(inflight)))()
            check_reads()
            blocked.clear()
            continue
        name = rng.choices(choices, weights=[speed[n] for n in choices])[0]
        try:
            value = next(actors[name])
        except StopIteration:
            done.add(name)
            blocked.clear()
            continue
        if value is False:
            blocked.add(name)
        else:
            blocked.clear()
    raise AssertionError("no end within the step limit")


@pytest.mark.parametrize("my_tiles,nchunks", [(1, 1), (2, 1), (3, 1), (1, 2), (2, 2), (4, 2), (3, 3), (5, 4)])
@pytest.mark.parametrize("seed", range(12))
def test_variant8_protocol_has_no_deadlock_or_overwrite(my_tiles, nchunks, seed):
    """Variant 8's barriers over 1 to 5 tiles per thread block and 1 to 4 chunks (the ring holds one), actors at skewed
    speeds and copies landing in any order: no deadlock, no read of stale or overwritten data."""
    _run_variant8_model(my_tiles, nchunks, seed)


@pytest.mark.parametrize("bug,message", [
    ({"no_x_empty_wait": True}, "shortcut"),  # tile k + 2's X over tile k's shortcut
    ({"no_x_dead_wait": True}, "overwritten"),  # the shortcut over X while stage 1 reads it
    ({"no_sc_wait": True}, "stale"),  # the epilogue before the shortcut landed
    ({"x_full_parity_k": True}, "stale"),  # tile 1 taken for landed with tile 0's phase
    ({"no_first_exchange_sync": True}, "untaken"),  # a give over the other warpgroup's untaken round 1
])
def test_variant8_model_catches_the_bugs(bug, message):
    """The protocol model finds each planted bug in some of 40 interleavings (1 chunk per tile, where the ring couples
    the warpgroups least)."""
    failures = 0
    for seed in range(40):
        try:
            _run_variant8_model(4, 1, seed, **bug)
        except AssertionError as error:
            assert message in str(error) or "deadlock" in str(error) or "stale" in str(error) or \
                "overwritten" in str(error), str(error)
            failures += 1
    assert failures > 0


# ---- variant 8's conv kernel, version b (CUDA_KERNELS_CONV8B=1): one CTA per tile, all four slices ----

CONV8B_REGION = 132 * 128 + 128  # a slice's shifted window (variant 7's 132 pixels), then its zero pixel
CONV8B_COPY_STEPS = 4  # 32 window pixels per step


def test_conv8b_switch(monkeypatch):
    """CUDA_KERNELS_CONV8B: off unset, on for 1 / on, off for 0, a typo is an error; its shared memory (four regions,
    68,096 B) lets three CTAs share an SM (228 KB, 1 KB reserved per CTA), four copy steps of 32 pixels (the fewest)
    cover a window (p0 - W - 1 .. p0 + 64 + W: 2 W + 66 = 122 pixels at W = 28, the widest image), and a window from its
    eight-aligned start (<= 2 W + 73 = 129) fits a region's 132 pixels."""
    monkeypatch.delenv(c512.CONV8B_SWITCH, raising=False)
    assert c512.CONV8B_SWITCH == "CUDA_KERNELS_CONV8B" and c512.conv8b_enabled() is False
    for value, want in (("1", True), ("on", True), ("0", False), ("", False)):
        monkeypatch.setenv(c512.CONV8B_SWITCH, value)
        assert c512.conv8b_enabled() is want
    monkeypatch.setenv(c512.CONV8B_SWITCH, "2")
    with pytest.raises(ValueError, match="CUDA_KERNELS_CONV8B"):
        c512.conv8b_enabled()
    assert c512.CONV8B_SMEM == 4 * CONV8B_REGION == 68096
    assert 3 * (68096 + 1024) <= 228 * 1024 < 4 * (68096 + 1024)
    assert c512.CONV8B_COPY_STEPS == CONV8B_COPY_STEPS and 32 * (CONV8B_COPY_STEPS - 1) < 2 * 28 + 66 <= 32 * 4
    assert c512.MAX_WIDTH == 28 and 2 * 28 + 66 + 7 <= 132
    assert 64 * 128 <= 132 * 128  # a slice's X panel is staged inside its window area, below the zero pixel


def test_conv8b_switch_reaches_the_op(monkeypatch):
    """`run` passes CUDA_KERNELS_CONV8B, read at the call, to the variant-8 op as `conv8b` (the other variants' op has no
    such argument)."""
    calls = []

    class Extension:
        def convfirst_c512_v8(self, x, *args):
            calls.append(args[-1])
            return args[-4]  # out

    monkeypatch.setattr(c512, "_extension", lambda: Extension())
    monkeypatch.setattr(c512, "check_input", lambda *a: None)
    monkeypatch.setattr(c512, "require_sm90", lambda *a: None)
    block = block_c(256, 2, seed=1)
    weights = _kernel_weights(block)
    x = channels_last(torch.zeros(1, 256, 8, 8, dtype=torch.float16))
    for value in (None, "1", "0"):
        if value is None:
            monkeypatch.delenv(c512.CONV8B_SWITCH, raising=False)
        else:
            monkeypatch.setenv(c512.CONV8B_SWITCH, value)
        c512.run(x, weights, out=torch.zeros_like(x), variant=8)
    assert calls == [False, True, False]


def _conv8b_tap_offsets(pix: int, pixels: int, height: int, width: int, row_lo: int, local_group: int) -> list:
    """conv8b_tap_addrs by hand: the lane's nine ldmatrix row addresses (dy-major) as byte offsets from the shifted
    window's origin, window index q at q 128 + ((local_group ^ q) % 8) 16; None where the tap reads the zero pixel (a
    row or column outside the image, or a pixel past the last)."""
    if pix >= pixels:
        return [None] * 9
    grow, w = divmod(pix, width)
    h = grow % height
    out = []
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            q = (grow + dy - row_lo) * width + w + dx
            inside = 0 <= h + dy < height and 0 <= w + dx < width
            out.append(q * 128 + (((local_group ^ q) & 7) << 4) if inside else None)
    return out


def _conv8b_reads(pixels: int, height: int, width: int) -> torch.Tensor:
    """convfirst_c512_conv8b_kernel's shared-memory traffic, thread by thread: per tile the four zero pixels, the window
    copies (thread t: chunk t % 8 of window pixels qa + t / 8 + 32 k, k < 4 while inside the window, into region s at the
    shifted origin), each 16-byte destination inside its region's window area and written once; then every lane's
    ldmatrix row of every (slice, warp, m-tile, tap). Returns src [tiles 64, 32 groups, 9 taps]: the image pixel each
    read lands on (-1: the zero pixel), after checking that it is the right slice's and group's chunk."""
    tiles = -(-pixels // 64)
    src = torch.full((tiles * 64, 32, 9), -2, dtype=torch.long)
    for tile in range(tiles):
        p0 = 64 * tile
        rows_total = pixels // width
        p_last = min(p0 + 64, pixels) - 1
        row_lo = max(p0 // width - 1, 0)
        row_hi = min(p_last // width + 1, rows_total - 1)
        qa = max(p0 - width - 1, row_lo * width) - row_lo * width
        qb = min(p0 + 64 + width + 1, (row_hi + 1) * width) - row_lo * width
        origin = -(qa & ~7) * 128
        smem = {s * CONV8B_REGION + 132 * 128 + 16 * c: None for s in range(4) for c in range(8)}
        for t in range(256):
            q1, c = qa + t // 8, t % 8
            for s in range(4):
                for k in range(CONV8B_COPY_STEPS):
                    if 32 * k < qb - q1:
                        dst = origin + _panel_offset(q1, c) + s * CONV8B_REGION + k * 32 * 128
                        assert s * CONV8B_REGION <= dst < s * CONV8B_REGION + 132 * 128 and dst not in smem
                        smem[dst] = (row_lo * width + q1 + 32 * k, s, c)
        for s in range(4):
            for warp in range(8):
                wg, wq = warp >> 2, warp & 3
                for j in range(2):
                    for lane in range(32):
                        group = 2 * wq + (lane >> 4)
                        pix = p0 + (wg + 2 * j) * 16 + (lane & 15)
                        for tap, off in enumerate(_conv8b_tap_offsets(pix, pixels, height, width, row_lo, group)):
                            addr = s * CONV8B_REGION + (132 * 128 if off is None else origin + off)
                            tag = smem[addr]  # a KeyError: a read of bytes nobody wrote
                            assert tag is None or tag[1:] == (s, group), (tile, s, warp, lane, tap)
                            assert src[pix, 8 * s + group, tap] == -2
                            src[pix, 8 * s + group, tap] = -1 if tag is None else tag[0]
    assert (src >= -1).all()
    return src


@pytest.mark.parametrize("batch,h,w", [(2, 14, 14), (3, 13, 13), (2, 9, 27), (3, 1, 1), (1, 8, 8), (1, 28, 28),
                                       (5, 7, 7), (1, 2, 28)])
def test_conv8b_reads_are_the_grouped_conv(batch, h, w):
    """The pixels conv8b's lanes read, taken as the A rows of the nine-tap chains (float64), give the grouped 3x3 conv
    (PyTorch's, float64) plus b_c for every pixel, image edges and partial tiles included, and b_c alone past the last
    pixel (rows of the scratch the fused kernel ignores, as conv8 writes them)."""
    torch.manual_seed(h * 31 + w + batch)
    pixels = batch * h * w
    weight = torch.randn(256, 8, 3, 3, dtype=torch.float64)
    bias = torch.randn(256, dtype=torch.float64)
    x = torch.randn(batch, 256, h, w, dtype=torch.float64)
    src = _conv8b_reads(pixels, h, w)
    rows = torch.cat([x.permute(0, 2, 3, 1).reshape(pixels, 256), torch.zeros(1, 256, dtype=torch.float64)])
    index = torch.where(src < 0, pixels, src)  # [T, 32, 9]: the zero row for the zero pixel
    a = rows[index].reshape(-1, 32, 9, 32, 8)  # [T, group, tap, every group's 8 channels]
    a = a[:, torch.arange(32), :, torch.arange(32)].permute(1, 0, 2, 3)  # the group's own chunk: [T, 32, 9, 8]
    wr = weight.reshape(32, 8, 8, 9)  # [group, n, k, tap]
    got = torch.einsum("pgtk,gnkt->pgn", a, wr).reshape(-1, 256) + bias
    want = F.conv2d(x, weight, bias, padding=1, groups=32).permute(0, 2, 3, 1).reshape(pixels, 256)
    assert torch.allclose(got[:pixels], want, rtol=0, atol=1e-12)
    assert torch.equal(got[pixels:], bias.expand_as(got[pixels:]))


def test_conv8b_source_is_the_model():
    """The kernel's text holds the arithmetic the model above re-implements (so the model checks the kernel): the
    copies' destination and source steps, the tap addresses' validity and swizzle, the per-slice offset of every
    ldmatrix, conv8's warp job and B fragments, the bias after the taps and one rounding; PDL as conv8's: the wait
    before x and the scratch, the trigger after it; the barriers in the order that lets a region take its slice's X."""
    import pathlib

    src = strip_comments((pathlib.Path(c512.__file__).parent / "csrc" / "convfirst_c512.cu").read_text())
    addrs = src[src.index("void conv8b_tap_addrs(") : src.index("void cp_async_wait_upto3(")]
    for needle in ("row_ok[3] = {in_range && h > 0, in_range, in_range && h + 1 < H}", "col_ok[3] = {w > 0, true, w + 1 < W}",
                   "qc = (grow - row_lo) * W + w", "qr = qc + dy * W", "q = qr + dx",
                   "halo + q * 128 + (((local_group ^ q) & 7) << 4) : zero_addr"):
        assert needle in " ".join(addrs.split()), needle
    body = " ".join(_kernel_text("convfirst_c512_conv8b_kernel").split())
    for needle in ("q1 = qa + (t >> 3), c = t & 7, n = qb - q1", "if (32 * k < n) cp_async16(dst + s * kConv8bRegion + k * 32 * 128, src + k * 32 * C + s * 64, true)",
                   "halo = base - (qa & ~7) * 128", "base + kHalo7Bytes, wq * 2 + (lane >> 4)",
                   "p0 + (wg + 2 * j) * 16 + (lane & 15)", "ldmatrix_x4(a, addr[j][tap] + s * kConv8bRegion)",
                   "mma_m16n8k8(acc[j][0], a[0], a[1], bfrag[0][tap])", "mma_m16n8k8(acc[j][1], a[2], a[3], bfrag[1][tap])",
                   "pack_half2(acc[j][gi][0] + cb[gi].x, acc[j][gi][1] + cb[gi].y)",
                   "wsrc = p.conv_w + ((size_t)(wq * 2) * 9 * 32 + lane)", "wsrc += 8 * 9 * 32, bsrc += 64",
                   "bfrag[1][tap] = __ldg(src + (9 + tap) * 32)", "(t >> 3) * kConv8bRegion + kHalo7Bytes"):
        assert needle in body, needle
    taps = " ".join(body.replace("#pragma unroll", "").split())  # taps outer, m-tiles inner
    assert taps.index("for (int tap = 0; tap < 9; ++tap) for (int j = 0; j < 2; ++j) { uint32_t a[4]; ldmatrix_x4(") > 0
    wait = body.index("pdl::wait()")
    assert wait < body.index("pdl::launch_dependents()")
    for token in ("p.x", "dst[", "cp_async16("):
        assert body.index(token) > wait, token
    loop = body[body.index("for (int s = 0; s < kSlices8; ++s, wsrc"):]
    order = [loop.index(n) for n in ("cp_async_wait_upto3(kSlices8 - 1 - s)", "__syncthreads()", "if (s > 0)",
                                     "ldmatrix_x4(", "load_bfrag(wsrc + 8 * 9 * 32)", "__syncthreads(); uint8_t* const panel",
                                     "pack_half2(")]
    assert order == sorted(order)
    tail = loop[loop.index("pack_half2(") :]
    assert tail.index("__syncthreads()") < tail.index("(kSlices8 - 1) * kConv8bRegion")
    launch = " ".join(src[src.index("cudaError_t launch_v8(") :].split())
    assert "if (conv8b) {" in launch and "convfirst_c512_conv8b_kernel<256>, dim3(tiles), dim3(kConv8Threads), kConv8bSmem" in launch
    assert "cudaFuncSetAttribute(convfirst_c512_conv8b_kernel<256>, cudaFuncAttributeMaxDynamicSharedMemorySize, kConv8bSmem)" in launch
    assert "kConv8bRegion = kHalo7Bytes + 128" in src and "kConv8bCopySteps = 4" in src


def test_conv8b_device_script():
    """device_run_conv8b.sh is valid bash: build, smoke (float64 and the bits of v8b against v8), the GPU tests, the
    bench of variants 3 and 8 with the switch off and on (two bench_c512 runs into two files: it times a variant once per
    call), CONV8B_OK last; its header carries the prediction (NOTES.md "Variant 8's conv kernel, version b")."""
    import pathlib
    import subprocess

    script = pathlib.Path(__file__).resolve().parents[1] / "cuda_kernels" / "device_run_conv8b.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    header = text[: text.index("set -uo pipefail")]
    assert "timeout 170 bash cuda_kernels/device_run_conv8b.sh OUTDIR" in header and "~8 us" in header
    order = [text.rindex(n) for n in ("step build", "step smoke", "step tests", "for mode in off on", "step bench_$mode",
                                     'echo "CONV8B_OK=$ok"')]
    assert order == sorted(order)
    for needle in ('-k "conv8b and not convfirstnet"', "env CUDA_KERNELS_CONV8B=$flag", "--variants 3,8",
                   "--case c256:6:14 --case c256:4:14", 'flag=$([ $mode = on ] && echo 1 || echo 0)',
                   '--out "$out/conv8b_$mode.json"', "torch.equal(scratch", 'float("nan")', "err <= 2 * torch_err",
                   "-res-usage", "os.environ[c512.CONV8B_SWITCH] = flag"):
        assert needle in text, needle
    # the flag each bench step gets, as the script computes it
    for mode, want in (("off", "0"), ("on", "1")):
        got = subprocess.run(["bash", "-c", f"mode={mode}; " + 'echo $([ $mode = on ] && echo 1 || echo 0)'],
                             capture_output=True, text=True).stdout.strip()
        assert got == want
    assert text.rstrip().endswith('echo "CONV8B_OK=$ok"')


def _xconv_run(x, weights, flag: str, monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Variant 8 with CUDA_KERNELS_CONV8B=flag into a NaN-poisoned output and a 255-poisoned scratch (64 bytes spare)."""
    monkeypatch.setenv(c512.CONV8B_SWITCH, flag)
    n, _, h, w = x.shape
    xconv = torch.full((c512.conv8_scratch_bytes(n * h * w) + 64,), 255, dtype=torch.uint8, device=x.device)
    out = c512.run(x, weights, out=channels_last(torch.full_like(x, float("nan"))), variant=8, xconv=xconv)
    torch.cuda.synchronize()
    return out, xconv


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (6, 128, 14, 14), (4, 128, 14, 14), (2, 37, 14, 14), (8, 3, 14, 14), (6, 1, 14, 14), (4, 37, 13, 13),
    (6, 128, 7, 7), (6, 1, 1, 1), (4, 2, 28, 28), (6, 5, 9, 27), (6, 1, 8, 8), (4, 1, 8, 16), (6, 300, 14, 14),
    (2, 128, 14, 14),
])
def test_conv8b_equals_conv8_bit_for_bit(monkeypatch, expansion, batch, h, w):
    """test_variant8's shapes with the conv kernel's version b: the scratch (every byte, nothing written past it) and
    the block's output equal conv8's bit for bit, twice (determinism)."""
    block = block_c(256, expansion, seed=expansion + h).cuda().half()
    x = channels_last(torch.randn(batch, 256, h, w, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    want, want_xconv = _xconv_run(x, weights, "0", monkeypatch)
    assert torch.isfinite(want).all()
    for _ in range(2):
        got, xconv = _xconv_run(x, weights, "1", monkeypatch)
        assert torch.equal(xconv, want_xconv) and (xconv[-64:] == 255).all()
        assert torch.equal(got, want)


@pytest.mark.cuda
def test_conv8b_smoke_case():
    """bench_c512.smoke_case (device_run_conv8b.sh's smoke): the case's shapes, a float64 reference within fp16's reach
    of the fp16 block, weights the kernel takes."""
    from cuda_kernels.bench_c512 import smoke_case

    x, weights, exact, torch_err = smoke_case("256:4:3:13")
    assert x.shape == exact.shape == (3, 256, 13, 13) and x.dtype == torch.float16 and exact.dtype == torch.float64
    assert x.is_contiguous(memory_format=torch.channels_last) and 0 < torch_err < 1e-2
    assert weights.channels == 256 and weights.hidden == 1024


@pytest.mark.cuda
def test_conv8b_pdl_chain(monkeypatch):
    """Three variant-8 blocks in a row, conv8b on, with and without PDL: the bits of the chain with conv8."""
    blocks = [block_c(256, a, seed=30 + a).cuda().half() for a in (6, 4, 2)]
    weights = [_kernel_weights(b) for b in blocks]
    x = channels_last(torch.randn(64, 256, 14, 14, device="cuda", dtype=torch.float16))
    outs = {}
    for pdl, conv8b in (("0", "0"), ("1", "1"), ("0", "1")):
        monkeypatch.setenv("CUDA_KERNELS_PDL", pdl)
        monkeypatch.setenv(c512.CONV8B_SWITCH, conv8b)
        y = x
        for w in weights:
            y = c512.run(y, w, variant=8)
        torch.cuda.synchronize()
        outs[pdl, conv8b] = y
    assert torch.isfinite(outs["0", "0"]).all()
    assert torch.equal(outs["1", "1"], outs["0", "0"]) and torch.equal(outs["0", "1"], outs["0", "0"])


@pytest.mark.cuda
def test_conv8b_in_the_swapped_network(monkeypatch):
    """CUDA_KERNELS_CONV8B=1 in a swapped network of C = 256 blocks (variant 8, alpha 6 and 4): within float64's check."""
    monkeypatch.setenv(c512.CONV8B_SWITCH, "1")
    test_variant_in_the_swapped_network(monkeypatch, "256:8", "256", 256, 14, 11)


@pytest.mark.cuda
def test_conv8b_in_convfirstnet_h200(monkeypatch):
    """ConvFirstNet-H200 swapped with today's defaults (variant 8 at C = 256, 14 blocks): with CUDA_KERNELS_CONV8B=1 its
    output is finite and bit for bit the one with the switch off."""
    from perfmodel.zoo import MODELS

    monkeypatch.delenv(c512.VARIANT_SWITCH, raising=False)
    torch.manual_seed(0)
    net = fold_batchnorm(randomize_batchnorm(MODELS["convfirstnet_h200"](), seed=0)).eval().cuda().half()
    swap = cuda_kernels.replace_blocks(net)
    assert swap.fallback == {}
    assert sum(isinstance(m, c512.FusedConvFirstC512) and m.channels == 256 for m in net.modules()) == 14
    x = channels_last(torch.randn(4, 3, 224, 224, device="cuda", dtype=torch.float16))
    outs = {}
    with torch.no_grad():
        for flag in ("0", "1"):
            monkeypatch.setenv(c512.CONV8B_SWITCH, flag)
            outs[flag] = net(x)
            torch.cuda.synchronize()
    assert torch.isfinite(outs["0"]).all() and torch.equal(outs["1"], outs["0"])
