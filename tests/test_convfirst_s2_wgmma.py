"""The stride-2 ConvFirst kernel on wgmma (cuda_kernels/convfirst_s2_wgmma.py, csrc/convfirst_s2_wgmma.cu).

CPU: the packing (elements checked by hand), the slot order, the shared-memory layout and budget per width, a
float64 transliteration of the kernel's tile dataflow over the packed slots against the zoo's stride-2 block,
the switch and the routing of `convfirst_s2.run`, the operator's fake implementation. GPU (marked cuda): the
kernel against the float64 zoo block (at most twice PyTorch fp16's error; outputs poisoned with NaN first) at the
ConvFirstNet-H200/M shapes, batches 128 / 1 / odd, odd H and W, tiles across images, and the routing itself.
"""


import pytest
import torch
from torch import nn
from torch.nn import functional as F

from cuda_kernels import convfirst_s2 as s2
from cuda_kernels import convfirst_s2_wgmma as s2w
from cuda_kernels.ops import _swizzle_128b
from helpers import channels_last, check_against_float64
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm


def down_block(cin: int, expansion: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    block = ConvFirstBlock(cin, expansion, 2 * cin, stride=2)
    return fold_batchnorm(randomize_batchnorm(block, seed=seed))


# ---- CPU ----

def test_slot_order_and_counts():
    order = s2w.slot_order(64, 384)
    # shortcut: two k panels (the second zero) x one 128-row block; then per chunk 1 U + 2 k panels x 1 V block
    assert order[:2] == [("S", 0, 0, 0), ("S", 0, 1, 0)]
    assert order[2:5] == [("U", 0, 0, 0), ("V", 0, 0, 0), ("V", 0, 1, 0)]
    assert len(order) == s2w.shortcut_slots(64) + 3 * s2w.slots_per_chunk(64) == 2 + 3 * 3
    order = s2w.slot_order(128, 768)
    assert order[:4] == [("S", 0, 0, 0), ("S", 0, 0, 1), ("S", 0, 1, 0), ("S", 0, 1, 1)]
    assert order[4:10] == [("U", 0, 0, 0), ("U", 0, 1, 0), ("V", 0, 0, 0), ("V", 0, 0, 1), ("V", 0, 1, 0),
                           ("V", 0, 1, 1)]
    assert len(order) == 4 + 6 * 6
    order = s2w.slot_order(256, 512)
    assert len(order) == s2w.shortcut_slots(256) + 4 * s2w.slots_per_chunk(256) == 16 + 4 * 12
    assert order[16:20] == [("U", 0, k, 0) for k in range(4)]
    assert order[20:24] == [("V", 0, 0, q) for q in range(4)]


def test_packing_by_hand():
    cin, hidden = 64, 256
    cout = 2 * cin
    w1 = torch.arange(hidden * cin, dtype=torch.float32).reshape(hidden, cin) % 2003
    w2 = torch.arange(cout * hidden, dtype=torch.float32).reshape(cout, hidden) % 1999
    ws = torch.arange(cout * cin, dtype=torch.float32).reshape(cout, cin) % 1997
    pack = s2w.pack_weights(w1, w2, ws)
    assert pack.dtype == torch.uint8 and pack.numel() == len(s2w.slot_order(cin, hidden)) * s2w.SLOT_BYTES
    h = pack.view(torch.float16).reshape(-1, 128, 64)

    def at(slot: int, row: int, col: int) -> float:  # the 128-byte swizzle: chunk col // 8 of row r at chunk ^ (r % 8)
        return float(h[slot, row, ((col // 8) ^ (row % 8)) * 8 + col % 8])

    assert at(0, 0, 0) == ws[0, 0] and at(0, 5, 17) == ws[5, 17] and at(0, 127, 63) == ws[127, 63]
    assert at(1, 3, 9) == 0 and float(h[1].abs().sum()) == 0  # the shortcut's zero k panel
    assert at(2, 7, 33) == w1[7, 33] and at(2, 127, 1) == w1[127, 1]  # U of chunk 0
    assert at(3, 9, 10) == w2[9, 10]  # V chunk 0, k panel 0: hidden 0..63
    assert at(4, 9, 10) == w2[9, 64 + 10]  # k panel 1: hidden 64..127
    assert at(5, 100, 60) == w1[128 + 100, 60]  # U of chunk 1
    assert at(7, 126, 2) == w2[126, 128 + 64 + 2]  # V chunk 1, k panel 1
    # the inverse
    plain = s2w.unpack_slots(pack)
    assert torch.equal(plain[2], w1[:128].half()) and torch.equal(plain[4], w2[:, 64:128].half())
    assert torch.equal(_swizzle_128b(_swizzle_128b(plain[3])), plain[3])


def test_packing_second_row_block_and_k_panel():
    cin, hidden = 128, 256
    w1, w2, ws = torch.randn(hidden, cin), torch.randn(2 * cin, hidden), torch.randn(2 * cin, cin)
    plain = s2w.unpack_slots(s2w.pack_weights(w1, w2, ws))
    order = s2w.slot_order(cin, hidden)
    assert torch.equal(plain[order.index(("S", 0, 1, 1))], ws[128:, 64:].half())
    assert torch.equal(plain[order.index(("U", 1, 1, 0))], w1[128:, 64:].half())
    assert torch.equal(plain[order.index(("V", 1, 0, 1))], w2[128:, 128:192].half())


@pytest.mark.parametrize("cin,hidden", [(32, 128), (64, 100), (96, 192)])
def test_packing_refuses_other_shapes(cin, hidden):
    with pytest.raises(ValueError, match="cannot pack"):
        s2w.pack_weights(torch.zeros(hidden, cin), torch.zeros(2 * cin, hidden), torch.zeros(2 * cin, cin))


@pytest.mark.parametrize("cin", s2w.IN_CHANNELS)
def test_shared_memory_budget(cin):
    lay = s2w.smem_layout(cin)
    assert lay.total == {64: 189_568, 128: 197_760, 256: 230_528}[cin]
    assert lay.total <= 232_448  # the H200's opt-in per block
    # X, Xs, ring and H 1024-aligned (the 128-byte swizzle); phase A's buffers after the preloaded slots
    for off in (lay.xs, lay.ring, lay.h):
        assert off % 1024 == 0
    assert lay.work >= lay.ring + lay.preload * s2w.SLOT_BYTES and lay.work + s2w.PHASE_A_BYTES <= lay.bars
    assert lay.work % 128 == 0 and lay.preload == 5
    assert s2w.PHASE_A_BYTES == 79_936


@pytest.mark.parametrize("w", [2, 3, 13, 14, 27, 28, 55, 56])
def test_tile_rows_fit_phase_a(w):
    """R whole output rows of Wo <= 64 pixels; phase A's input rows (2R + 3) W <= 680 and conv rows
    (2R + 1) W <= 568 (convfirst_s2.cuh's kXPix, kYPix)."""
    r = s2w.rows_per_tile(w)
    assert r >= 1 and r * s2w.output_size(w) <= 64 and (r + 1) * s2w.output_size(w) > 64
    assert (2 * r + 3) * w <= 680 and (2 * r + 1) * w <= 568


@pytest.mark.parametrize("cin,expansion,n,h,w,rows", [
    (64, 6, 2, 8, 8, None), (64, 2, 3, 7, 5, None), (64, 4, 2, 5, 9, 2), (128, 2, 2, 6, 6, None),
    (128, 1, 3, 3, 4, 3), (256, 1, 2, 4, 4, None),
])
def test_tile_dataflow_matches_the_zoo_block(cin, expansion, n, h, w, rows):
    """The kernel's dataflow over the packed slots in float64 against the folded zoo block: tiles of whole
    output rows crossing images, the shortcut as stage 2 over Xs, the warpgroups' rows of each slot."""
    if (cin * expansion) % 128:
        pytest.skip("hidden must be a multiple of 128")
    block = down_block(cin, expansion).double()
    x = torch.randn(n, cin, h, w, dtype=torch.float64)
    folded = s2.FoldedWeights.from_block(block)
    wpack = s2w.pack_weights(folded.w1.reshape(folded.w1.shape[0], cin), folded.w2.reshape(2 * cin, -1),
                             folded.ws.reshape(2 * cin, cin))
    with torch.no_grad():
        want = block(x)
        got = s2w.tile_forward(x, folded, wpack, rows)
    assert got.shape == want.shape
    # wpack is fp16: compare against the block with the GEMM weights rounded the same way
    rounded = down_block(cin, expansion).double()
    with torch.no_grad():
        for m in (rounded.ffn.expand, rounded.ffn.project, rounded.shortcut[1]):
            m.weight.copy_(m.weight.half().double())
        want = rounded(x)
    assert relative_error(got, want) < 1e-12


def test_switch(monkeypatch):
    monkeypatch.delenv(s2w.SWITCH, raising=False)
    assert s2w.enabled_widths() == (128, 256)  # the measured winners (64 -> 128 is slower than mma.sync)
    for value, widths in [("0", ()), ("1", (64, 128, 256)), ("all", (64, 128, 256)), ("64", (64,)),
                          ("64,128", (64, 128)), ("256, 32", (256,))]:
        monkeypatch.setenv(s2w.SWITCH, value)
        assert s2w.enabled_widths() == widths


def _s2_weights(cin: int, expansion: int = 6):
    return s2.prepare_weights(s2.FoldedWeights.from_block(down_block(cin, expansion)))


def test_routing_needs_the_switch_and_a_cuda_sm90_input(monkeypatch):
    w = _s2_weights(64)
    x = channels_last(torch.randn(1, 64, 8, 8).half())
    monkeypatch.setenv(s2w.SWITCH, "1")
    assert not s2w.routes(x, w)  # a CPU tensor
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert s2w.routes(x, w)
    assert not s2w.routes(channels_last(torch.randn(1, 64, 8, 57).half()), w)  # W > 56
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert not s2w.routes(x, w)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setenv(s2w.SWITCH, "128")
    assert not s2w.routes(x, w) and s2w.routes(channels_last(torch.randn(1, 128, 4, 4).half()), _s2_weights(128))
    monkeypatch.delenv(s2w.SWITCH)
    assert not s2w.routes(x, w)  # C_in 64 is not a default width
    assert s2w.routes(channels_last(torch.randn(1, 128, 4, 4).half()), _s2_weights(128))
    monkeypatch.setenv(s2w.SWITCH, "0")
    assert not s2w.routes(channels_last(torch.randn(1, 128, 4, 4).half()), _s2_weights(128))
    assert not s2w.routes(channels_last(torch.randn(1, 32, 8, 8).half()), _s2_weights(32))


def test_convfirst_s2_run_routes_when_switched_on(monkeypatch):
    """convfirst_s2.run without a variant goes to this kernel (weights packed once, cached); with a variant,
    or with the switch off, to the mma.sync kernel."""
    calls = []
    monkeypatch.setattr(s2w, "routes", lambda x, w: True)
    monkeypatch.setattr(s2w, "run", lambda x, w, rows=0, out=None: calls.append((w, rows, out)) or "wgmma")
    w = _s2_weights(64)
    x = channels_last(torch.randn(1, 64, 8, 8).half())
    assert s2.run(x, w) == "wgmma" and s2.run(x, w, rows_per_tile=2) == "wgmma"
    assert len(calls) == 2 and calls[0][0] is calls[1][0]  # one packing
    assert calls[0][1] == 0 and calls[1][1] == 2
    assert torch.equal(calls[0][0].wpack, s2w.pack_weights(w.w1, w.w2, w.ws))
    assert calls[0][0].bo is w.bo and calls[0][0].conv_w is w.conv_w
    s2.run(x, w, rows_per_tile=17)  # 17 rows of 4 > 64 pixels: the launcher picks
    assert calls[-1][1] == 0
    monkeypatch.setattr(s2w, "routes", lambda x, w: False)
    with pytest.raises(Exception):  # the mma.sync path: no GPU here
        s2.run(x, w)
    assert len(calls) == 3


def test_from_s2_weights_cache_follows_in_place_changes():
    w = _s2_weights(64, 2)
    a = s2w.from_s2_weights(w)
    assert s2w.from_s2_weights(w) is a
    with torch.no_grad():
        w.w1.add_(1)
    b = s2w.from_s2_weights(w)
    assert b is not a and not torch.equal(a.wpack, b.wpack)


def test_prepare_weights_and_reasons():
    folded = s2.FoldedWeights.from_block(down_block(128, 4))
    k = s2w.prepare_weights(folded)
    assert (k.in_channels, k.out_channels, k.hidden) == (128, 256, 512)
    assert k.wpack.numel() == len(s2w.slot_order(128, 512)) * s2w.SLOT_BYTES
    assert torch.allclose(k.bo.double(), folded.b2.double() + folded.bs.double())
    assert "C 32 -> 64" in s2w.unsupported_shape(32, 64, 192)
    assert "hidden" in s2w.unsupported_shape(64, 128, 192)
    with pytest.raises(ValueError, match="cannot run"):
        s2w.prepare_weights(s2.FoldedWeights.from_block(down_block(64, 3)))


def test_host_checks():
    k = s2w.prepare_weights(s2.FoldedWeights.from_block(down_block(64, 2)))
    with pytest.raises(ValueError, match="channels"):
        s2w.check_input(channels_last(torch.zeros(1, 128, 8, 8).half()), k)
    with pytest.raises(ValueError, match="W <= 56"):
        s2w.check_input(channels_last(torch.zeros(1, 64, 8, 58).half()), k)
    with pytest.raises(ValueError, match="H >= 2"):
        s2w.check_input(channels_last(torch.zeros(1, 64, 1, 8).half()), k)


def test_fake_operator_gives_the_strided_channels_last_output():
    from torch._subclasses.fake_tensor import FakeTensorMode

    k = s2w.prepare_weights(s2.FoldedWeights.from_block(down_block(64, 2)))
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = channels_last(torch.empty(3, 64, 7, 9, dtype=torch.float16))
        y = torch.ops.convfirst_s2_wgmma.block(x, *(getattr(k, n) for n in s2w.WEIGHT_FIELDS))
    assert tuple(y.shape) == (3, 128, 4, 5)
    assert y.stride() == (4 * 5 * 128, 1, 5 * 128, 128) and y.dtype == torch.float16


# ---- GPU ----

def check_kernel(cin: int, expansion: int, batch: int, h: int, w: int | None = None, rows: int = 0) -> float:
    w = h if w is None else w
    block = down_block(cin, expansion, seed=cin + h).cuda()
    x = channels_last(torch.randn(batch, cin, h, w, device="cuda", dtype=torch.float16))
    weights = s2w.prepare_weights(s2.FoldedWeights.from_block(block))
    shape = (batch, 2 * cin, s2w.output_size(h), s2w.output_size(w))
    return check_against_float64(block, x, lambda out: s2w.run(x, weights, rows=rows, out=out), shape)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,expansion,size", [(64, 6, 56), (128, 6, 28), (64, 4, 56), (128, 4, 28),
                                                (256, 6, 14), (256, 4, 14)])
@pytest.mark.parametrize("batch", [128, 1, 37])
def test_convfirstnet_h200_and_m_shapes(cin, expansion, size, batch):
    check_kernel(cin, expansion, batch, size)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,expansion,batch,h,w", [
    (64, 6, 3, 13, 13), (64, 2, 1, 7, 7), (128, 6, 5, 9, 9), (64, 6, 2, 55, 55), (64, 4, 7, 10, 6),
    (128, 2, 3, 2, 2), (256, 2, 3, 3, 5), (128, 6, 2, 27, 27), (64, 8, 3, 56, 2), (256, 6, 2, 15, 13),
])
def test_odd_sizes_and_batches(cin, expansion, batch, h, w):
    check_kernel(cin, expansion, batch, h, w)


@pytest.mark.cuda
@pytest.mark.parametrize("rows", [1, 2, 3])
@pytest.mark.parametrize("cin,size", [(64, 13), (128, 7), (256, 9)])
def test_tiles_across_images(cin, size, rows):
    """Explicit tile heights: tiles of 1-3 output rows straddle images (Ho = 7, 4, 5)."""
    check_kernel(cin, 2, 3, size, rows=rows)


@pytest.mark.cuda
@pytest.mark.parametrize("cin", s2w.IN_CHANNELS)
def test_routed_through_convfirst_s2_matches_direct_bit_for_bit(monkeypatch, cin):
    """The switch sends convfirst_s2.run here: the same bits as calling the kernel directly; with a variant the
    mma.sync kernel runs (when it has the width)."""
    monkeypatch.setenv(s2w.SWITCH, "1")
    block = down_block(cin, 2).cuda()
    x = channels_last(torch.randn(2, cin, 14, 14, device="cuda", dtype=torch.float16))
    folded = s2.FoldedWeights.from_block(block)
    weights = s2.prepare_weights(folded)
    direct = s2w.run(x, s2w.prepare_weights(folded))
    assert torch.equal(s2.run(x, weights), direct)
    assert torch.equal(torch.ops.convfirst_s2.block(x, *(getattr(weights, n) for n in s2.WEIGHT_FIELDS)), direct)


@pytest.mark.cuda
def test_extension_agrees_on_shared_memory_and_slots():
    ext = s2w._extension()
    for cin in s2w.IN_CHANNELS:
        assert ext.smem_bytes(cin) == s2w.smem_bytes(cin)
        assert ext.shortcut_slots(cin) == s2w.shortcut_slots(cin)
        assert ext.slots_per_chunk(cin) == s2w.slots_per_chunk(cin)
    assert ext.smem_bytes(32) == 0


@pytest.mark.cuda
def test_raw_op_refuses_bad_shapes():
    k = s2w.prepare_weights(s2.FoldedWeights.from_block(down_block(64, 2).cuda()))
    ext = s2w._extension()
    x = torch.randn(2 * 8 * 8, 64, device="cuda", dtype=torch.float16)
    empty = torch.empty(0, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="weight shapes"):
        ext.convfirst_s2_wgmma(x, k.conv_w, k.conv_b, k.wpack[:-16], k.b1, k.bo, 2, 8, 8, 0, empty)
    with pytest.raises(RuntimeError, match="bad N, H, W"):
        ext.convfirst_s2_wgmma(x, k.conv_w, k.conv_b, k.wpack, k.b1, k.bo, 2, 8, 9, 0, empty)
    with pytest.raises(RuntimeError, match="64-pixel tile"):
        ext.convfirst_s2_wgmma(x, k.conv_w, k.conv_b, k.wpack, k.b1, k.bo, 2, 8, 8, 17, empty)
    with pytest.raises(RuntimeError, match="overlap"):
        ext.convfirst_s2_wgmma(x, k.conv_w, k.conv_b, k.wpack, k.b1, k.bo, 2, 8, 8, 0, x.view(-1)[: 32 * 128].view(32, 128))


@pytest.mark.cuda
@pytest.mark.parametrize("cin,expansion,size", [(64, 6, 56), (128, 6, 28)])
def test_close_to_the_mma_sync_kernel(cin, expansion, size):
    """Same phase-A arithmetic (s2::phase_a), different GEMM order: the two kernels agree to fp16 rounding."""
    block = down_block(cin, expansion).cuda()
    x = channels_last(torch.randn(4, cin, size, size, device="cuda", dtype=torch.float16))
    folded = s2.FoldedWeights.from_block(block)
    a = s2w.run(x, s2w.prepare_weights(folded))
    b = s2.run(x, s2.prepare_weights(folded), variant=0)
    assert relative_error(a, b) < 2e-3


def test_producer_matches_phase_a_barriers():
    """The producer warpgroup takes part in each of s2::phase_a's __syncthreads (3 per 32-channel slice:
    Shape::kPhaseABarriers) and one more; a change of phase_a's barriers would hang the kernel. phase_a's body
    must still have its four sites: before a slice's loads (all but the first), after them, after the conv, at
    the end."""
    from pathlib import Path

    csrc = Path(s2w.__file__).parent / "csrc"
    text = (csrc / "convfirst_s2.cuh").read_text()
    body = text[text.index("__device__ __forceinline__ void phase_a("):text.index("// This block's part of the weights")]
    assert body.count("__syncthreads()") == 4
    assert "if (s > 0) __syncthreads();" in body
    assert body.count("for (int s = 0; s < K::CIN / kCS; ++s)") == 1
    kernel = (csrc / "convfirst_s2_wgmma.cu").read_text()
    assert "kPhaseABarriers = 3 * (CIN / s2::kCS)" in kernel
    assert "for (int b = 0; b < S::kPhaseABarriers + 1; ++b) __syncthreads();" in kernel


@pytest.mark.cuda
@pytest.mark.parametrize("cin,size", [(64, 13), (128, 14), (256, 7)])
def test_bits_do_not_depend_on_the_tiling(cin, size):
    """Each output pixel's arithmetic (its conv taps, blur sums, k order of every product) is the same in any
    tile row: an image alone, inside a batch whose tiles cross images, and any tile height give the same bits."""
    block = down_block(cin, 2, seed=3).cuda()
    x = channels_last(torch.randn(3, cin, size, size, device="cuda", dtype=torch.float16))
    weights = s2w.prepare_weights(s2.FoldedWeights.from_block(block))
    whole = s2w.run(x, weights)
    alone = s2w.run(channels_last(x[1:2].clone()), weights)
    assert torch.equal(whole[1:2], alone)
    for rows in (1, 2, 3):
        assert torch.equal(s2w.run(x, weights, rows=rows), whole)


def test_from_s2_weights_cache_is_per_tensor_not_per_address():
    """Packed weights are cached per w1 tensor (weakly): a new weight set never gets an old set's packing, even at
    a reused address, and the entry goes with its tensor."""
    import gc

    w = _s2_weights(64, 2)
    a = s2w.from_s2_weights(w)
    other = s2.KernelWeights(w.conv_w, w.conv_b, w.w1.clone(), w.b1, w.w2, w.ws, w.bo)
    assert s2w.from_s2_weights(other) is not a
    n = len(s2w._FROM_S2)
    del other
    gc.collect()
    assert len(s2w._FROM_S2) == n - 1


@pytest.mark.parametrize("on", [False, True])
def test_run_passes_the_pdl_flag(monkeypatch, on):
    """CUDA_KERNELS_PDL is read at each launch and handed to the binding (csrc/pdl.h; the launcher then adds the
    programmatic-serialisation attribute, the kernel waits before phase A reads x)."""
    seen = []

    class Ext:
        @staticmethod
        def convfirst_s2_wgmma(*args):
            seen.append(args[-1])
            n, h, w = args[6:9]
            return torch.empty(n * ((h + 1) // 2) * ((w + 1) // 2), 128, dtype=torch.float16)

    monkeypatch.setenv("CUDA_KERNELS_PDL", "1" if on else "0")
    monkeypatch.setattr(s2w, "_extension", lambda: Ext)
    monkeypatch.setattr(s2w, "check_input", lambda x, w, out=None: None)  # x is a CPU tensor here
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    k = s2w.prepare_weights(s2.FoldedWeights.from_block(down_block(64, 2)))
    y = s2w.run(channels_last(torch.randn(2, 64, 6, 6).half()), k)
    assert seen == [on] and tuple(y.shape) == (2, 128, 3, 3)


def test_kernel_waits_before_phase_a_and_launches_with_the_flag():
    from pathlib import Path

    full = (Path(s2w.__file__).parent / "csrc" / "convfirst_s2_wgmma.cu").read_text()
    # the one-tile kernel (the persistent variant after it has its own test)
    text = full[full.index("convfirst_s2w_kernel(const Params p)"):full.index("// ---- the persistent variant")]
    wait, trigger, phase_a = (text.index(m) for m in ("pdl::wait();", "pdl::launch_dependents();", "s2::phase_a<"))
    assert wait < trigger < phase_a and text.count("pdl::wait();") == 1
    assert "if (p.pdl) return pdl::launch(convfirst_s2w_kernel<CIN>" in full


@pytest.mark.cuda
def test_pdl_on_gives_the_same_bits(monkeypatch):
    """Two chained launches, the second reading the first's output (64 -> 128 -> 256): PDL on == off."""
    w64 = s2w.prepare_weights(s2.FoldedWeights.from_block(down_block(64, 2).cuda()))
    w128 = s2w.prepare_weights(s2.FoldedWeights.from_block(down_block(128, 2, seed=1).cuda()))
    x = channels_last(torch.randn(2, 64, 14, 14, device="cuda", dtype=torch.float16))
    results = []
    for flag in ("0", "1"):
        monkeypatch.setenv("CUDA_KERNELS_PDL", flag)
        results.append(s2w.run(s2w.run(x, w64), w128))
    torch.cuda.synchronize()
    assert results[0].shape == (2, 256, 4, 4) and torch.equal(results[0], results[1])


# ---- the persistent variant (NOTES.md "Stride 2 on wgmma, persistent") ----

def _persistent_source() -> str:
    from pathlib import Path

    text = (Path(s2w.__file__).parent / "csrc" / "convfirst_s2_wgmma.cu").read_text()
    return text[text.index("// ---- the persistent variant"):]


@pytest.mark.parametrize("cin", s2w.PERSISTENT_IN_CHANNELS)
def test_persistent_shared_memory_budget(cin):
    """X + Xs + ring + H as the one-tile kernel, then two halo buffers of 392 pixels, 294 conv pixels (32 bytes
    each), a zero pixel, the ring's 16 mbarriers, x_full / x_empty, 1024 B slack: within the H200's 232,448 B;
    the kernel's static_assert states the same numbers."""
    total = s2w.persistent_smem_bytes(cin)
    assert total == {64: 224_112, 128: 232_304}[cin] and total <= 232_448
    assert total - s2w.smem_bytes(cin) == (2 * 392 + 294 + 1) * 32 + 16  # the one-tile kernel's layout + these
    assert f"(CIN == 64 ? 224112 : 232304)" in _persistent_source()
    with pytest.raises(ValueError):
        s2w.persistent_smem_bytes(256)


def test_persistent_buffers_hold_every_width():
    """The halo and conv-row buffers hold a tile's rows at every W = 2..56 with the launcher's R; the maxima are
    the kernel's kHaloPixP / kConvPixP."""
    hx, hy = zip(*(s2w.halo_rows(s2w.rows_per_tile(w), w) for w in range(2, 57)))
    assert max(hx) == s2w.HALO_PIXELS == 392 and max(hy) == s2w.CONV_PIXELS == 294
    src = _persistent_source()
    assert "constexpr int kHaloPixP = 392;" in src and "constexpr int kConvPixP = 294;" in src


def test_persistent_register_split():
    """setmaxnreg: every warp enters at 65,536 / 512 = 128; the producer decs, consumers and conv warpgroup inc, and
    the sum fits the register file."""
    r = s2w.PERSISTENT_REGS
    entry = 65536 // s2w.PERSISTENT_THREADS
    assert entry == 128 and r["producer"] < entry < min(r["consumer"], r["conv"])
    assert 128 * (2 * r["consumer"] + r["producer"] + r["conv"]) <= 65536
    assert all(v % 8 == 0 for v in r.values())
    src = _persistent_source()
    assert (f"kRegConsumerP = {r['consumer']}, kRegProducerP = {r['producer']}, kRegConvP = {r['conv']};") in src
    assert "setmaxnreg_inc<kRegConvP>" in src and "setmaxnreg_dec<kRegProducerP>" in src
    assert "setmaxnreg_inc<kRegConsumerP>" in src


@pytest.mark.parametrize("tiles,grid", [(1, 132), (7, 3), (132, 132), (1792, 132), (448, 132), (100, 132), (13, 1),
                                        (37, 5)])
def test_persistent_schedule_takes_every_tile_once(tiles, grid):
    g = s2w.persistent_grid(tiles, grid)
    sched = s2w.persistent_schedule(tiles, g)
    flat = sorted(t for cta in sched for t in cta)
    assert flat == list(range(tiles)) and len(sched) == g <= tiles
    # the kernel's count: my_tiles = (tiles - 1 - b) / G + 1
    assert [len(c) for c in sched] == [(tiles - 1 - b) // g + 1 for b in range(g)]
    assert max(len(c) for c in sched) - min(len(c) for c in sched) <= 1
    assert s2w.persistent_grid(tiles, 132, grid_limit=2) == min(tiles, 2)


def test_persistent_switch_and_selection(monkeypatch):
    monkeypatch.delenv(s2w.PERSISTENT_SWITCH, raising=False)
    assert not s2w.persistent_enabled() and not s2w.use_persistent(64, None)
    assert s2w.DEFAULT_WIDTHS == (128, 256)  # the default is unchanged
    monkeypatch.setenv(s2w.PERSISTENT_SWITCH, "1")
    assert s2w.use_persistent(64, None) and s2w.use_persistent(128, None) and not s2w.use_persistent(256, None)
    assert not s2w.use_persistent(64, False)
    monkeypatch.setenv(s2w.PERSISTENT_SWITCH, "0")
    assert not s2w.use_persistent(64, None) and s2w.use_persistent(64, True)
    with pytest.raises(ValueError):
        s2w.use_persistent(256, True)


@pytest.mark.parametrize("env,arg,want", [(None, None, False), ("1", None, True), (None, True, True),
                                          ("1", False, False)])
def test_run_calls_the_persistent_binding(monkeypatch, env, arg, want):
    seen = []

    class Ext:
        @staticmethod
        def convfirst_s2_wgmma(*args):
            seen.append(("one", args[-1]))
            n, h, w = args[6:9]
            return torch.empty(n * ((h + 1) // 2) * ((w + 1) // 2), 128, dtype=torch.float16)

        @staticmethod
        def convfirst_s2_wgmma_persistent(*args):
            seen.append(("persistent", args[-2], args[-1]))
            n, h, w = args[6:9]
            return torch.empty(n * ((h + 1) // 2) * ((w + 1) // 2), 128, dtype=torch.float16)

    if env is None:
        monkeypatch.delenv(s2w.PERSISTENT_SWITCH, raising=False)
    else:
        monkeypatch.setenv(s2w.PERSISTENT_SWITCH, env)
    monkeypatch.setenv("CUDA_KERNELS_PDL", "1")
    monkeypatch.setattr(s2w, "_extension", lambda: Ext)
    monkeypatch.setattr(s2w, "check_input", lambda x, w, out=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    k = s2w.prepare_weights(s2.FoldedWeights.from_block(down_block(64, 2)))
    y = s2w.run(channels_last(torch.randn(2, 64, 6, 6).half()), k, persistent=arg, grid=3)
    assert tuple(y.shape) == (2, 128, 3, 3)
    assert seen == ([("persistent", True, 3)] if want else [("one", True)])


def test_persistent_kernel_pdl_and_handshakes_in_source():
    """PDL: the conv warpgroup waits before it reads x, the consumers before they write out, and trigger at the CTA's
    last tile; the launcher passes the attribute. The handshake sites the model below checks are in the code."""
    src = _persistent_source()
    kernel = src[src.index("convfirst_s2w_persistent_kernel(const Params p)"):src.index("int smem_bytes_persistent")]
    conv = kernel[kernel.index("if (warp >= kConvWarp0P)"):kernel.index("} else if (warp >= kConsumerWarps)")]
    assert conv.index("pdl::wait();") < conv.index("phase_a_stream<CIN>(")
    cons = kernel[kernel.index("// ---- consumers ----"):]
    assert cons.index("pdl::wait();") < cons.index("store_rows<") and "pdl::launch_dependents();" in cons
    assert "if (k == my_tiles - 1) pdl::launch_dependents();" in cons
    assert kernel.count("pdl::wait();") == 2
    assert "if (p.pdl)\n    return pdl::launch(convfirst_s2w_persistent_kernel<CIN>" in src
    stream = src[src.index("__device__ __forceinline__ void phase_a_stream("):src.index("template <int CIN>\n__global__")]
    # per unit: wait own copies, sync, then the refill; the blur after a second sync; X after x_empty
    unit = stream[stream.index("bf::cp_async_wait<0>();  // unit u"):]
    assert unit.index("conv_sync_p();") < unit.index("issue(u + 1);") < unit.index("conv_sync_p();  // yb complete")
    assert unit.index("conv_sync_p();  // yb complete") < unit.index("// blur + stride 2")
    assert unit.index("if (k > 0) bf::mbar_wait(x_empty, (k - 1) & 1);") < unit.index("bf::mbar_arrive(x_full);")
    assert "bf::mbar_wait(x_full, k & 1);" in cons and "(jg & 1) * c5::kHChunkBytes" in cons
    last = cons.index("c5::stage1<S::kKPanels>(")
    assert last < cons.index("if (j == nchunks - 1 && lane == 0) bf::mbar_arrive(x_empty);")


# float64 emulation of the conv warpgroup's phase A, through its buffers and index arithmetic (phase_a_stream):
# 16-channel units, 32-byte pixels with the chunk swizzle, the halo as a flat array of 16-byte chunks (a wrong
# swizzle or index reads another pixel's chunk or a NaN-poisoned one), the zero pixel, the conv rows in yb, the
# blurs at the kernel's addresses, X / Xs at their panel offsets.
def _px32(q: int, c: int) -> int:
    """px32_offset in 16-byte chunks."""
    return 2 * q + ((c ^ (q >> 2)) & 1)


def persistent_phase_a(x: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor, j0: int, rows: int):
    """X and Xs [64, C_in] of the tile at output row j0, as phase_a_stream computes them (float64)."""
    n, cin, h, w = x.shape
    ho, wo = s2w.output_size(h), s2w.output_size(w)
    rows_out, last_row = n * ho, n * h - 1
    flat = x.permute(0, 2, 3, 1).reshape(n * h * w, cin)  # NHWC pixels
    nrows = min(rows, rows_out - j0)
    c0 = (j0 // ho) * h + 2 * (j0 % ho)
    jl = j0 + nrows - 1
    c1 = (jl // ho) * h + 2 * (jl % ho)
    ylo, yhi = max(c0 - 1, 0), min(c1 + 1, last_row)
    xlo, xhi = max(ylo - 1, 0), min(yhi + 1, last_row)
    npix_x, npix_y = (xhi - xlo + 1) * w, (yhi - ylo + 1) * w
    assert npix_x <= s2w.HALO_PIXELS and npix_y <= s2w.CONV_PIXELS
    nvalid = nrows * wo
    xt = torch.zeros(64, cin, dtype=torch.float64)
    xst = torch.zeros(64, cin, dtype=torch.float64)
    nan = float("nan")
    for s in range(cin // 16):
        halo = torch.full((2 * s2w.HALO_PIXELS, 8), nan, dtype=torch.float64)
        for i in range(npix_x * 2):  # issue: q = i / 2, chunk i % 2
            q, c = divmod(i, 2)
            halo[_px32(q, c)] = flat[xlo * w + q, 16 * s + 8 * c : 16 * s + 8 * c + 8]
        zero = torch.zeros(8, dtype=torch.float64)
        yb = torch.full((2 * s2w.CONV_PIXELS, 8), nan, dtype=torch.float64)
        for q in range(((npix_y + 15) // 16) * 16):  # every m-tile row
            if q >= npix_y:
                continue
            grow, col = ylo + q // w, q % w
            hh = grow % h
            for gi in range(2):
                g = 2 * s + gi
                acc = torch.zeros(8, dtype=torch.float64)
                for tap in range(9):
                    dy, dx = tap // 3 - 1, tap % 3 - 1
                    ok = 0 <= hh + dy < h and 0 <= col + dx < w
                    xq = (grow + dy - xlo) * w + col + dx
                    a = halo[_px32(xq, gi)] if ok else zero
                    acc += conv_w[8 * g : 8 * g + 8, :, dy + 1, dx + 1] @ a
                yb[_px32(q, gi)] = acc + conv_b[8 * g : 8 * g + 8]
        for t in range(128):  # blur: output pixel r = t / 2, chunk t % 2
            r, cc = divmod(t, 2)
            if r >= nvalid:
                continue
            jj = j0 + r // wo
            img, orow, ocol = jj // ho, jj % ho, r % wo
            ay = torch.zeros(8, dtype=torch.float64)
            ax = torch.zeros(8, dtype=torch.float64)
            for a in range(3):
                grow = img * h + s2w._reflect(2 * orow + a - 1, h)
                for b in range(3):
                    col = s2w._reflect(2 * ocol + b - 1, w)
                    f = (2.0 if a == 1 else 1.0) * (2.0 if b == 1 else 1.0)
                    ay += f * yb[_px32((grow - ylo) * w + col, cc)]
                    ax += f * halo[_px32((grow - xlo) * w + col, cc)]
            ch = 16 * s + 8 * cc
            xt[r, ch : ch + 8] = ay * 0.0625
            xst[r, ch : ch + 8] = ax * 0.0625
    return xt, xst


@pytest.mark.parametrize("cin,n,h,w,rows", [(64, 2, 7, 9, None), (64, 3, 5, 5, 2), (128, 2, 6, 4, None),
                                            (64, 1, 2, 2, None), (128, 3, 3, 7, 1)])
def test_persistent_phase_a_emulation_matches_blur_of_conv(cin, n, h, w, rows):
    """Every tile's X = Blur(conv(x) + b_c) and Xs = Blur(x) (reflect padding, stride 2) through the conv
    warpgroup's units, buffers and indices, tiles across images, rows past the batch's end zero."""
    torch.manual_seed(cin + h)
    x = torch.randn(n, cin, h, w, dtype=torch.float64)
    conv_w = torch.randn(cin, 8, 3, 3, dtype=torch.float64)
    conv_b = torch.randn(cin, dtype=torch.float64)
    blur = torch.tensor([1.0, 2.0, 1.0], dtype=torch.float64)
    k2 = (blur[:, None] * blur[None, :] / 16).expand(cin, 1, 3, 3)
    y = F.conv2d(x, conv_w, conv_b, padding=1, groups=cin // 8)
    bx = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), k2, stride=2, groups=cin)
    by = F.conv2d(F.pad(y, (1, 1, 1, 1), mode="reflect"), k2, stride=2, groups=cin)
    ho, wo = by.shape[-2:]
    r = rows or s2w.rows_per_tile(w)
    want_x = by.permute(0, 2, 3, 1).reshape(n * ho, wo, cin)
    want_s = bx.permute(0, 2, 3, 1).reshape(n * ho, wo, cin)
    for j0 in range(0, n * ho, r):
        xt, xst = persistent_phase_a(x, conv_w, conv_b, j0, r)
        nrows = min(r, n * ho - j0)
        valid = nrows * wo
        assert torch.isfinite(xt).all() and torch.isfinite(xst).all()
        assert torch.allclose(xt[:valid], want_x[j0 : j0 + nrows].reshape(valid, cin), rtol=0, atol=1e-12)
        assert torch.allclose(xst[:valid], want_s[j0 : j0 + nrows].reshape(valid, cin), rtol=0, atol=1e-12)
        assert not xt[valid:].any() and not xst[valid:].any()


def test_px32_swizzle_is_conflict_free_and_a_bijection():
    """Eight consecutive pixels' same chunk (one ldmatrix phase) land in eight distinct 16-byte bank groups."""
    for q0 in range(0, 64):
        for c in range(2):
            groups = {(_px32(q0 + i, c) * 16 % 128) // 16 for i in range(8)}
            assert len(groups) == 8
    assert sorted(_px32(q, c) for q in range(100) for c in range(2)) == list(range(200))


# ---- model checker of the persistent variant's handshakes ----
# Agents are generators over the kernel's steps; a step yields a guard (None: always enabled) and runs when the
# random scheduler picks it with its guard true. Modelled: two conv warps (named barrier 2, halo buffers u % 2 in
# per-warp parts, yb, the X / Xs handoff behind x_empty, x_full with 128 -> one arrive per conv warp here), two
# consumer warps (one per warpgroup: x_full parity wait, the shortcut and stage-1 reads of X / Xs until the last
# stage 1 retires, x_empty, H buffers by global chunk behind the consumer barrier), one producer over an 8-slot
# ring whose slots the consumers release. Every read checks that the data it reads is the unit's / tile's /
# chunk's / slot's own; a write over data another warp may still read, or a deadlock, is a violation.

class _Bar:  # mbarrier: count arrivals per phase; wait(parity) passes once the phase of that parity completed
    def __init__(self, count):
        self.count, self.pending, self.completed = count, 0, 0

    def arrive(self):
        self.pending += 1
        if self.pending == self.count:
            self.pending, self.completed = 0, self.completed + 1

    def passed(self, parity):
        return (self.completed & 1) != parity


class _Named:  # named barrier of n warps
    def __init__(self, n):
        self.n, self.count, self.gen = n, 0, 0

    def arrive(self):
        gen = self.gen
        self.count += 1
        if self.count == self.n:
            self.count, self.gen = 0, self.gen + 1
        return gen


class _Violation(Exception):
    pass


def _check(cond, what):
    if not cond:
        raise _Violation(what)


def simulate_persistent(my_tiles=3, units=2, nchunks=3, slots_per_tile=5, stages=4, seed=0, bug=None):
    """One random interleaving; returns None or the first violation / deadlock as text."""
    import random

    rng = random.Random(seed)
    CW, NC = 2, 2  # conv warps, consumer warps
    conv_bar, cons_bar = _Named(CW), _Named(NC)
    x_full, x_empty = _Bar(CW), _Bar(NC)
    full = [_Bar(1) for _ in range(stages)]
    empty = [_Bar(NC) for _ in range(stages)]
    halo = [[None] * CW for _ in range(2)]  # halo[b][warp part] = unit tag
    yb = [None] * CW
    X = [None] * CW  # X / Xs parts by conv warp: tile tag
    H = [[None] * NC for _ in range(2)]  # H[b][consumer part] = global chunk tag
    ring = [None] * stages
    done_blur = [-1] * CW  # last unit whose blur (halo and yb reads) a conv warp finished
    done_taps = [-1] * CW
    reading_x = [None] * NC  # tile whose X / Xs reads a consumer warp has in flight
    reading_h = [[None, None] for _ in range(NC)]  # H buffer -> chunk this warp's stage 2 may still read
    nunits = my_tiles * units

    def conv(wi):
        def issue(u):
            if u < nunits:
                b = u % 2
                for o in range(CW):  # a refill must not land on data another warp still reads
                    _check(done_blur[o] >= u - 2, f"halo {b} refilled with unit {u} while warp {o} reads unit {u - 2}")
                halo[b][wi] = u
        issue(0)
        u = 0
        for k in range(my_tiles):
            for s in range(units):
                yield None
                if bug == "refill_before_sync":
                    issue(u + 1)
                g = conv_bar.arrive()
                yield lambda g=g: conv_bar.gen > g
                if bug != "refill_before_sync":
                    issue(u + 1)
                yield None
                _check(all(t == u for t in halo[u % 2]), f"taps of unit {u} read halo {halo[u % 2]}")
                for o in range(CW):
                    _check(done_blur[o] >= u - 1, f"yb overwritten by unit {u} while warp {o} blurs unit {u - 1}")
                yb[wi] = u
                done_taps[wi] = u
                if bug != "blur_before_sync":
                    g = conv_bar.arrive()
                    yield lambda g=g: conv_bar.gen > g
                yield None
                _check(all(t == u for t in yb), f"blur of unit {u} read yb {yb}")
                _check(all(t == u for t in halo[u % 2]), f"blur of unit {u} read halo {halo[u % 2]}")
                done_blur[wi] = u
                if bug == "blur_before_sync":
                    g = conv_bar.arrive()
                    yield lambda g=g: conv_bar.gen > g
                u += 1
            if k > 0 and bug != "x_before_empty":
                yield lambda k=k: x_empty.passed((k - 1) & 1)
            for c in range(NC):
                _check(reading_x[c] is None, f"X written for tile {k} while consumer {c} reads tile {reading_x[c]}")
            X[wi] = k
            yield None
            x_full.arrive()

    def producer():
        g = 0
        for k in range(my_tiles):
            for it in range(slots_per_tile):
                slot = g % stages
                yield lambda slot=slot, g=g: empty[slot].passed(((g // stages) & 1) ^ 1)
                _check(ring[slot] is None or ring[slot] == ("free", g - stages), f"slot {slot} overwritten in use")
                ring[slot] = g
                full[slot].arrive()
                g += 1

    def consumer(ci):
        it = 0
        jg = 0
        released = {}

        def read_slot():
            nonlocal it
            slot = it % stages
            yield lambda slot=slot, it=it: full[slot].passed((it // stages) & 1)
            _check(ring[slot] == it, f"consumer {ci} read slot {slot} holding {ring[slot]}, wanted {it}")
            released[it] = released.get(it, 0)
            it += 1

        def release(index):
            slot = index % stages
            empty[slot].arrive()
            if empty[slot].pending == 0:
                ring[slot] = ("free", index)

        per_chunk = (slots_per_tile - 1) // nchunks  # one shortcut slot, the rest over the chunks
        for k in range(my_tiles):
            parity = (k + 1) & 1 if bug == "x_full_parity" else k & 1
            yield lambda parity=parity: x_full.passed(parity)
            reading_x[ci] = k
            _check(all(t == k for t in X), f"consumer {ci} reads X {X} for tile {k}")
            yield from read_slot()  # the shortcut (reads Xs)
            yield None
            release(it - 1)
            for j in range(nchunks):
                if bug == "empty_before_last_stage1" and j == nchunks - 1:
                    reading_x[ci] = None
                    x_empty.arrive()
                for _ in range(per_chunk):
                    yield from read_slot()  # stage 1 (reads X); the slot and X until its wait retires it
                    yield None
                    _check(all(t == k for t in X), f"consumer {ci} stage 1 of tile {k} read X {X}")
                    release(it - 1)
                if j == nchunks - 1 and bug != "empty_before_last_stage1":
                    reading_x[ci] = None
                    x_empty.arrive()
                b = (j & 1) if bug == "h_by_local_chunk" else (jg & 1)
                for o in range(NC):
                    _check(reading_h[o][b] is None or o == ci and reading_h[o][b] < jg,
                           f"H {b} written for chunk {jg} while consumer {o} reads chunk {reading_h[o][b]}")
                H[b][ci] = jg
                reading_h[ci][1 - b] = None  # this warp's stage 2 of the chunk before retired in stage 1
                g = cons_bar.arrive()
                yield lambda g=g: cons_bar.gen > g
                _check(all(t == jg for t in H[b]), f"stage 2 of chunk {jg} read H {H[b]}")
                reading_h[ci][b] = jg
                yield None
                jg += 1
            yield None  # epilogue: the last stage 2 retired
            reading_h[ci] = [None, None]

    agents = [conv(0), conv(1), producer(), consumer(0), consumer(1)]
    guards = [None] * len(agents)
    live = list(range(len(agents)))
    try:
        for a in live:
            guards[a] = next(agents[a])
        while live:
            ready = [a for a in live if guards[a] is None or guards[a]()]
            if not ready:
                return "deadlock"
            a = rng.choice(ready)
            try:
                guards[a] = agents[a].send(None)
            except StopIteration:
                live.remove(a)
    except _Violation as v:
        return str(v)
    return None


def test_persistent_protocol_holds_under_random_interleavings():
    for seed in range(400):
        for cfg in ({}, {"my_tiles": 4, "units": 1, "nchunks": 1, "slots_per_tile": 2, "stages": 2},
                    {"my_tiles": 1}, {"units": 4, "nchunks": 2, "slots_per_tile": 5, "stages": 8}):
            assert simulate_persistent(seed=seed, **cfg) is None, (seed, cfg)


@pytest.mark.parametrize("bug", ["x_before_empty", "empty_before_last_stage1", "refill_before_sync",
                                 "blur_before_sync", "h_by_local_chunk", "x_full_parity"])
def test_persistent_protocol_model_catches_planted_bugs(bug):
    found = [simulate_persistent(seed=seed, bug=bug) for seed in range(400)]
    assert any(found), f"the model missed the planted bug {bug}"


# ---- the persistent variant on the GPU ----

def check_persistent(cin: int, expansion: int, batch: int, h: int, w: int | None = None, rows: int = 0,
                     grid: int = 0) -> float:
    w = h if w is None else w
    block = down_block(cin, expansion, seed=cin + h).cuda()
    x = channels_last(torch.randn(batch, cin, h, w, device="cuda", dtype=torch.float16))
    weights = s2w.prepare_weights(s2.FoldedWeights.from_block(block))
    shape = (batch, 2 * cin, s2w.output_size(h), s2w.output_size(w))
    return check_against_float64(
        block, x, lambda out: s2w.run(x, weights, rows=rows, out=out, persistent=True, grid=grid), shape)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,expansion,size", [(64, 6, 56), (64, 4, 56), (128, 6, 28), (128, 4, 28)])
@pytest.mark.parametrize("batch", [128, 1, 37])
def test_persistent_h200_and_m_shapes(cin, expansion, size, batch):
    check_persistent(cin, expansion, batch, size)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,expansion,batch,h,w", [
    (64, 6, 3, 13, 13), (64, 2, 1, 7, 7), (128, 6, 5, 9, 9), (64, 6, 2, 55, 55), (64, 4, 7, 10, 6),
    (128, 2, 3, 2, 2), (128, 6, 2, 27, 27), (64, 8, 3, 56, 2), (64, 6, 2, 42, 42), (64, 2, 1, 2, 3),
])
def test_persistent_odd_sizes_and_batches(cin, expansion, batch, h, w):
    check_persistent(cin, expansion, batch, h, w)


@pytest.mark.cuda
@pytest.mark.parametrize("grid", [1, 2, 3, 7, 0])
@pytest.mark.parametrize("cin,size,rows", [(64, 13, 1), (64, 13, 3), (128, 7, 2), (64, 56, 0)])
def test_persistent_tiles_per_cta(cin, size, rows, grid):
    """1 .. many tiles per CTA (grid 1: one CTA walks every tile), tiles across images."""
    check_persistent(cin, 2 if size < 56 else 6, 3, size, rows=rows, grid=grid)


@pytest.mark.cuda
@pytest.mark.parametrize("cin,size,batch", [(64, 56, 4), (128, 28, 5), (64, 13, 3)])
def test_persistent_bits_equal_the_one_tile_kernel(cin, size, batch):
    """Same per-pixel arithmetic (taps, blur sums, k order): the persistent variant's bits are the one-tile
    kernel's, at the launcher's grid and at grid 2."""
    block = down_block(cin, 6, seed=5).cuda()
    x = channels_last(torch.randn(batch, cin, size, size, device="cuda", dtype=torch.float16))
    weights = s2w.prepare_weights(s2.FoldedWeights.from_block(block))
    one = s2w.run(x, weights, persistent=False)
    assert torch.equal(s2w.run(x, weights, persistent=True), one)
    assert torch.equal(s2w.run(x, weights, persistent=True, grid=2), one)


@pytest.mark.cuda
def test_persistent_extension_and_switch(monkeypatch):
    ext = s2w._extension()
    assert [ext.smem_bytes_persistent(c) for c in (64, 128, 256)] == [224_112, 232_304, 0]
    block = down_block(64, 2).cuda()
    x = channels_last(torch.randn(2, 64, 14, 14, device="cuda", dtype=torch.float16))
    weights = s2w.prepare_weights(s2.FoldedWeights.from_block(block))
    monkeypatch.setenv(s2w.PERSISTENT_SWITCH, "1")
    by_env = s2w.run(x, weights)
    assert torch.equal(by_env, s2w.run(x, weights, persistent=True))
    y = channels_last(torch.randn(1, 64, 4, 56, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError):  # 3 rows x Wo 28 > 64 pixels
        s2w.run(y, weights, rows=3, persistent=True)
    with pytest.raises(ValueError):  # C_in 256 has no persistent instance
        s2w.run(channels_last(torch.randn(1, 256, 4, 4, device="cuda", dtype=torch.float16)),
                s2w.prepare_weights(s2.FoldedWeights.from_block(down_block(256, 1).cuda())), persistent=True)


def test_persistent_device_script_and_bench_option():
    """device_run_s2w_persistent.sh: valid bash, within 150 s of steps, the smoke stops the script, the bench times
    the persistent variant; bench_s2_wgmma's --persistent / --mma-variants parse."""
    import pathlib
    import subprocess

    from cuda_kernels import bench_s2_wgmma as bench

    script = pathlib.Path(__file__).resolve().parents[1] / "cuda_kernels" / "device_run_s2w_persistent.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "source cuda_kernels/device_lib.sh" in text and "left() { echo $((148 -" in text
    assert "step smoke 20" in text and "finish 0" in text and "--persistent" in text
    assert "persistent=True" in text and text.rstrip().endswith("finish $ok") and "S2WP_OK=$1" in text
    assert bench.PERSISTENT == "wgmma_persistent"
    assert "--mma-variants" in pathlib.Path(bench.__file__).read_text()
