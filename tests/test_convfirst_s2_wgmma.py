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
