"""ConvFirstNet-L's C = 768 kernels (cuda_kernels/convfirst_c768.py; csrc/convfirst_c768.cu, stride 1 on
wgmma as a two-CTA cluster exchanging H through distributed shared memory, and csrc/convfirst_s2_c768.cu,
the stride-2 block 384 -> 768 with its output columns split over two thread blocks).

CPU: the switch (CUDA_KERNELS_C768, off by default) and the fallback reasons, the weight packing (round
trip, elements by hand), a float64 transliteration of the stride-1 kernel's dataflow over the packed slots
(which rank and warpgroup reads which rows of which slot, the H panels each rank writes and receives, which
accumulator lands on which output columns) against the zoo block, the pair's synchronisation model-checked
(the weight ring, the H panels, h_full / h_empty, asynchronous wgmma retirement and bulk copies, under random
interleavings; and that the checker catches the protocol's two guards left out), the host checks, the fake
operator, the shared-memory budget. GPU (marked cuda, the switch on): C = 768 alpha 6 at 7x7 for batch 128,
1 and an odd batch, odd sizes, alpha 2 and 4, W up to 28 (the single-buffered halo), and the stride-2 block
at batch 128 / 1 / odd, odd sizes, tiles across images; each output poisoned with NaN first, the error
against the float64 zoo block at most twice PyTorch float16's.
"""

import random

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import cuda_kernels
from cuda_kernels import convfirst_c768 as c768
from cuda_kernels import convfirst_s2 as s2
from cuda_kernels.ops import _swizzle_128b
from helpers import channels_last, check_against_float64, stride1_host_check_cases, swap_against_float64
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm


def block_768(expansion: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return fold_batchnorm(randomize_batchnorm(ConvFirstBlock(768, expansion), seed=seed))


def down_block(expansion: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return fold_batchnorm(randomize_batchnorm(ConvFirstBlock(384, expansion, 768, stride=2), seed=seed))


def _kernel_weights(block: nn.Module):
    conv, expand, project = block.conv, block.ffn.expand, block.ffn.project
    return c768.prepare_weights(conv.weight, conv.bias, expand.weight, expand.bias, project.weight, project.bias)


@pytest.fixture
def c768_on(monkeypatch):
    monkeypatch.setenv(c768.SWITCH, "1")


@pytest.fixture(scope="module")
def small_weights():
    return _kernel_weights(block_768(1))


# ---- the switch, the policy (CPU) ----

@pytest.mark.parametrize("value,stride1,stride2", [
    (None, False, False), ("0", False, False), ("", False, False), ("1", True, True), ("all", True, True),
    ("stride1", True, False), ("stride2", False, True), ("stride1, stride2", True, True),
])
def test_switch(monkeypatch, value, stride1, stride2):
    if value is None:
        monkeypatch.delenv(c768.SWITCH, raising=False)
    else:
        monkeypatch.setenv(c768.SWITCH, value)
    assert (c768.enabled("stride1"), c768.enabled("stride2")) == (stride1, stride2)
    reason = s2.unsupported_shape(384, 768, 2304)
    assert (reason is None) == stride2
    if not stride2:
        assert reason.startswith("C 384 -> 768") and c768.SWITCH in reason
    block = block_768(6)
    reason = c768.FusedConvFirstC768.unsupported(block)
    if not stride1:
        assert reason.startswith("C=768") and c768.SWITCH in reason
    elif not torch.cuda.is_available() or torch.cuda.get_device_capability() == (9, 0):
        assert reason is None
    assert c768.takes(block)  # every C = 768 stride-1 block comes here, to fuse or to give the switch's reason


def test_variant_switches(monkeypatch):
    monkeypatch.delenv(c768.VARIANT_SWITCH, raising=False)
    monkeypatch.delenv(c768.S2_VARIANT_SWITCH, raising=False)
    assert c768.default_variant() == c768.DEFAULT_VARIANT and s2.default_variant(384, 14) == 0
    monkeypatch.setenv(c768.VARIANT_SWITCH, "1")
    monkeypatch.setenv(c768.S2_VARIANT_SWITCH, "1")
    assert c768.default_variant() == 1 and s2.default_variant(384, 14) == 1
    monkeypatch.setenv(c768.S2_VARIANT_SWITCH, "2")
    with pytest.raises(ValueError, match="CUDA_KERNELS_C768_S2_VARIANT"):
        s2.default_variant(384, 14)


def test_policy_refuses_other_shapes(c768_on):
    assert c768.unsupported_shape(512, 3072).startswith("C=512")
    assert c768.unsupported_shape(768, 768 * 6 + 64).startswith("hidden 4672")
    assert s2.unsupported_shape(384, 768, 384 * 5).startswith("hidden 1920")
    assert s2.VARIANTS[384] == (0, 1) == c768.S2_VARIANTS
    assert not c768.takes(block_768(2).conv)  # not a ConvFirst block


def test_replace_blocks_follows_the_switch(monkeypatch):
    def net():
        torch.manual_seed(0)
        return fold_batchnorm(nn.Sequential(ConvFirstBlock(384, 6, 768, stride=2), ConvFirstBlock(768, 6),
                                            ConvFirstBlock(768, 2)))

    monkeypatch.delenv(c768.SWITCH, raising=False)
    swap = cuda_kernels.replace_blocks(net())
    assert swap.fused["ConvFirstBlock"] == 0
    assert all(c768.SWITCH in swap.fallback[k] for k in ("0", "1", "2"))
    if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
        return
    monkeypatch.setenv(c768.SWITCH, "stride1")
    model = net()
    swap = cuda_kernels.replace_blocks(model)
    assert swap.fused["ConvFirstBlock"] == 2 and list(k for k in swap.fallback if "." not in k) == ["0"]
    monkeypatch.setenv(c768.SWITCH, "1")
    model = net()
    swap = cuda_kernels.replace_blocks(model)
    assert swap.fused["ConvFirstBlock"] == 3 and swap.fallback == {}
    assert [type(m).__name__ for m in model] == ["FusedConvFirstDown", "FusedConvFirstC768", "FusedConvFirstC768"]
    assert c768.FusedConvFirstC768 in cuda_kernels.FUSED_MODULES


def test_shared_memory_budget():
    """X 96 KB + H 32 KB + 6 ring slots + 17 barriers + 1 KB alignment: 230,536 B of the 232,448 an H200
    block may opt into; the stride-2 instance (mirror of convfirst_s2.cuh's Config): 192 KB."""
    assert c768.SMEM_BYTES == 230536 <= c768.SMEM_LIMIT
    panel = 64 * 128
    kp, kv, slot = 384 // 64, 128 // 64, max(128, 384) * 128
    phase_a = (4 * 128 + 3 * 56 + 1 + 4 * 128 + 56) * 64
    assert kp * panel + max(kv, kp) * panel + max(2 * slot, phase_a, 384 // 64 * panel) == 196608


# ---- the packing (CPU) ----

def test_slot_order():
    order = c768.slot_order(4608)
    assert len(order) == 2 * 36 * c768.SLOTS_PER_CHUNK and c768.SLOTS_PER_CHUNK == 12
    assert order[:6] == [("U", 0, 0, i, 0) for i in range(6)]
    assert order[6:12] == [("V", 0, 0, k, q) for k in range(2) for q in range(3)]
    assert order[36 * 12] == ("U", 1, 0, 0, 0) and order[-1] == ("V", 1, 35, 0, 2)  # rank 1: its own k panel 1 first
    assert order[36 * 12 + 6 : 36 * 12 + 12] == [("V", 1, 0, k, q) for k in (1, 0) for q in range(3)]


@pytest.mark.parametrize("hidden", [128, 256, 768 * 2])
def test_pack_round_trip_and_size(hidden):
    torch.manual_seed(hidden)
    w1, w2 = torch.randn(hidden, 768), torch.randn(768, hidden)
    packed = c768.pack_weights(w1, w2)
    assert packed.dtype == torch.uint8 and packed.numel() == 4 * hidden * 768
    u1, u2 = c768.unpack_weights(packed, hidden)
    assert torch.equal(u1, w1.half()) and torch.equal(u2, w2.half())


def test_pack_refuses_other_shapes():
    for w1, w2 in [(torch.zeros(256, 512), torch.zeros(512, 256)), (torch.zeros(200, 768), torch.zeros(768, 200))]:
        with pytest.raises(ValueError, match="cannot pack"):
            c768.pack_weights(w1, w2)


def test_pack_layout_by_hand():
    """Rank 1, chunk 2, U slot 3: row 5 is hidden channel 2 * 128 + 64 + 5, its columns input channels
    3 * 128 .. + 63; row 64 + 5 the same hidden channel at input channels 3 * 128 + 64 ... V slot (rank 1,
    chunk 0, k panel 1, block 2): row 7 is output channel 384 + 256 + 7, columns hidden 64 .. 127."""
    hidden = 384
    w1 = torch.arange(hidden * 768, dtype=torch.float32).reshape(hidden, 768) % 2039
    w2 = torch.arange(768 * hidden, dtype=torch.float32).reshape(768, hidden) % 2027
    slots = c768.pack_weights(w1, w2).view(torch.float16).reshape(-1, 128, 64)
    order = c768.slot_order(hidden)
    r, col = 5, 17  # chunk 2 of the 128-byte row, stored at 16-byte chunk 2 ^ (row % 8)
    u = order.index(("U", 1, 2, 3, 0))
    assert slots[u, r, ((2 ^ r) & 7) * 8 + 1] == w1[256 + 64 + r, 3 * 128 + col]
    assert slots[u, 64 + r, ((2 ^ (64 + r)) & 7) * 8 + 1] == w1[256 + 64 + r, 3 * 128 + 64 + col]
    v = order.index(("V", 1, 0, 1, 2))
    r = 7
    assert slots[v, r, ((2 ^ r) & 7) * 8 + 1] == w2[384 + 256 + r, 64 + col]


# ---- the stride-1 kernel's dataflow in float64 (CPU) ----

def emulate_kernel(x: torch.Tensor, block: nn.Module, weights) -> torch.Tensor:
    """The kernel's arithmetic in float64 from the packed slots in stream order, rank by rank: stage 1 of
    rank r, warpgroup w reads rows 32w .. 32w + 31 of each half of every U slot (half hk: X panel 2i + hk)
    into its 32 hidden columns, stored into H panel r at columns 32w ..; the partner's panel arrives whole;
    stage 2 of rank r, k panel r first: block 0 of each k panel into warpgroup 0's n128 accumulator, block 2
    into warpgroup 1's, block 1 rows 64w .. into warpgroup w's n64 one; output columns 384 r + (0 | 128 |
    192 | 256)."""
    n, c, h, w = x.shape
    X = F.conv2d(x, block.conv.weight, block.conv.bias, padding=1, groups=c // 8).permute(0, 2, 3, 1).reshape(-1, c)
    P = X.shape[0]
    slots = weights.wpack.view(torch.float16).reshape(-1, 128, 64)
    per_rank = weights.hidden // 128 * c768.SLOTS_PER_CHUNK
    b1, b2 = weights.b1.double(), weights.b2.double()
    nchunks = weights.hidden // 128
    # H[r][j]: rank r's copy of chunk j's two panels (its own, and the one its partner sent)
    panels = [[[None, None] for _ in range(nchunks)] for _ in range(2)]
    for r in range(2):
        it = r * per_rank
        for j in range(nchunks):
            acc1 = [torch.zeros(P, 32, dtype=torch.float64) for _ in range(2)]
            for i in range(6):
                s = _swizzle_128b(slots[it]).double()
                it += 1
                for hk in range(2):
                    for wg in range(2):
                        acc1[wg] += X[:, 64 * (2 * i + hk) : 64 * (2 * i + hk + 1)] @ s[64 * hk + 32 * wg : 64 * hk + 32 * wg + 32].T
            hid = [torch.relu(acc1[wg] + b1[128 * j + 64 * r + 32 * wg : 128 * j + 64 * r + 32 * wg + 32]) for wg in range(2)]
            panel = torch.cat(hid, 1)
            panels[r][j][r] = panel  # local
            panels[1 - r][j][r] = panel  # the bulk copy into the partner
            it += 6  # stage 2 later (after the exchange)
    out = torch.empty(P, c, dtype=torch.float64)
    for r in range(2):
        acc = {("n128", 0): 0, ("n64", 0): 0, ("n64", 1): 0, ("n128", 1): 0}
        it = r * per_rank
        for j in range(nchunks):
            it += 6
            hchunk = panels[r][j]
            assert hchunk[0] is not None and hchunk[1] is not None
            for ki in range(2):
                kp = ki ^ r
                for q in range(3):
                    s = _swizzle_128b(slots[it]).double()
                    it += 1
                    for wg in range(2):
                        if q == 1:
                            acc[("n64", wg)] = acc[("n64", wg)] + hchunk[kp] @ s[64 * wg : 64 * wg + 64].T
                        elif q == 2 * wg:
                            acc[("n128", wg)] = acc[("n128", wg)] + hchunk[kp] @ s.T
        c0 = 384 * r
        out[:, c0 : c0 + 128] = acc[("n128", 0)]
        out[:, c0 + 128 : c0 + 192] = acc[("n64", 0)]
        out[:, c0 + 192 : c0 + 256] = acc[("n64", 1)]
        out[:, c0 + 256 : c0 + 384] = acc[("n128", 1)]
    out = out + b2 + x.permute(0, 2, 3, 1).reshape(-1, c)
    return out.reshape(n, h, w, c).permute(0, 3, 1, 2)


@pytest.mark.parametrize("expansion", [1, 2])
def test_kernel_dataflow_is_the_block(expansion):
    """Weights rounded to fp16 first, so that the packed slots hold them exactly."""
    block = block_768(expansion, seed=expansion).half().double()
    x = torch.randn(2, 768, 3, 5, dtype=torch.float64)
    with torch.no_grad():
        want = block(x)
        got = emulate_kernel(x, block, _kernel_weights(block))
    assert relative_error(got, want) < 1e-12


# ---- the pair's synchronisation, model-checked (CPU) ----

STAGES, U_SLOTS, V_SLOTS = c768.STAGES, 6, 6


class Barrier:
    """An mbarrier: `count` arrivals and a transaction count per phase; `done` completed phases. A waiter
    for phase k (parity k % 2) must never find two phases past it: the hardware's parity wait would alias."""

    def __init__(self, count: int, name: str):
        self.count, self.pending, self.tx, self.done, self.name = count, count, 0, 0, name

    def _check(self):
        if self.pending == 0 and self.tx == 0:
            self.done += 1
            self.pending = self.count

    def arrive(self, expect_tx: int = 0):
        self.tx += expect_tx
        self.pending -= 1
        self._check()

    def complete_tx(self, n: int):
        self.tx -= n
        self._check()

    def passed(self, k: int) -> bool:
        assert self.done <= k + 1, f"{self.name}: phase {k} waited for with {self.done} phases completed (parity aliasing)"
        return self.done > k


class PairModel:
    """csrc/convfirst_c768.cu's consumer and producer loops for the two CTAs of a cluster, as Python
    generators yielding at every point where the hardware may interleave; wgmma groups retire (in order,
    per warpgroup) and bulk copies land at random times."""

    def __init__(self, nchunks: int, seed: int, stages: int = STAGES, skip_h_empty: bool = False,
                 skip_first_arrivals: bool = False, split_conv: bool = True, skip_x_wait: bool = False):
        self.rng = random.Random(seed)
        self.split_conv, self.skip_x_wait = split_conv, skip_x_wait
        self.x_full = [Barrier(1, f"x_full{c}") for c in range(2)]
        self.x_tag = [set(), set()]  # the halves of X a CTA holds (rank r convolves half r)
        self.nchunks, self.stages = nchunks, stages
        self.skip_h_empty, self.skip_first_arrivals = skip_h_empty, skip_first_arrivals
        self.nslots = nchunks * (U_SLOTS + V_SLOTS)
        self.full = [[Barrier(1, f"full{c}.{s}") for s in range(stages)] for c in range(2)]
        self.empty = [[Barrier(2, f"empty{c}.{s}") for s in range(stages)] for c in range(2)]  # per warpgroup here
        self.h_full = [[Barrier(1, f"h_full{c}.{b}") for b in range(2)] for c in range(2)]
        self.h_empty = [[Barrier(1, f"h_empty{c}.{b}") for b in range(2)] for c in range(2)]
        self.slot_tag = [[None] * stages for _ in range(2)]  # stream index the slot holds
        self.h_tag = [[[None, None] for _ in range(2)] for _ in range(2)]  # [cta][buffer][panel] = chunk
        self.halo = [0, 0]  # warpgroups of the CTA in phase A (H is the conv halo)
        self.groups = {(c, w): [] for c in range(2) for w in range(2)}  # live wgmma groups: reads
        self.copies = []  # in flight: bulk copies (kind, cta, ...)
        self.bar = {}  # named barrier arrivals per (cta, key)
        self.finished = 0

    # ---- what live readers hold ----
    def _reading(self, c, kind, *key):
        return any(r[0] == kind and r[1:] == key for w in range(2) for g in self.groups[(c, w)] for r in g)

    def _write_h(self, c, b, panel, j):
        assert self.halo[c] == 0, f"H of CTA {c} written while it is the conv halo"
        assert not self._reading(c, "H", b, panel), \
            f"H panel {panel} of CTA {c} buffer {b} overwritten while a wgmma reads it"
        assert not any(cp[0] == "H" and cp[1] == c and cp[2] == b and panel == c for cp in self.copies), \
            f"H panel {panel} of CTA {c} buffer {b} overwritten while a bulk copy reads it"
        self.h_tag[c][b][panel] = j

    def _fill(self, c, it):
        slot = it % self.stages
        assert not self._reading(c, "slot", slot), f"slot {slot} of CTA {c} refilled while read"
        self.slot_tag[c][slot] = it
        self.full[c][slot].complete_tx(1)

    # ---- programs ----
    def producer(self, c):
        for it in range(self.nslots):
            slot = it % self.stages
            k = it // self.stages
            while k > 0 and not self.empty[c][slot].passed(k - 1):
                yield
            self.full[c][slot].arrive(expect_tx=1)
            self.copies.append(("W", c, it))
            yield

    def barrier(self, c, key):
        self.bar[(c, key)] = self.bar.get((c, key), 0) + 1
        while self.bar[(c, key)] < 2:
            yield

    def wait_groups(self, c, w, most):
        while len(self.groups[(c, w)]) > most:
            yield

    def consumer(self, c, w):
        peer = c ^ 1
        self.halo[c] += 1
        for _ in range(40):  # the conv: H is its halo
            yield
        self.halo[c] -= 1
        self.x_tag[c] |= {c} if self.split_conv else {0, 1}
        yield from self.barrier(c, "A")
        if w == 0:
            if self.split_conv:
                self.x_full[c].arrive(expect_tx=1)
                self.copies.append(("X", c))
            if not self.skip_first_arrivals:
                self.h_empty[peer][0].arrive()
                self.h_empty[peer][1].arrive()
        if self.split_conv and not self.skip_x_wait:
            while not self.x_full[c].passed(0):
                yield
        it, pending = 0, None

        def release(index):
            self.empty[c][index % self.stages].arrive()

        def wait_full(index):
            while not self.full[c][index % self.stages].passed(index // self.stages):
                yield
            assert self.slot_tag[c][index % self.stages] == index, "a slot read before its fill landed"

        for j in range(self.nchunks):
            b = j & 1
            for _ in range(U_SLOTS):
                yield from wait_full(it)
                assert self.x_tag[c] == {0, 1}, f"CTA {c}: stage 1 read X before the partner's half arrived"
                self.groups[(c, w)].append([("slot", it % self.stages)])
                yield from self.wait_groups(c, w, 1)
                if pending is not None:
                    release(pending)
                pending, it = it, it + 1
            yield from self.wait_groups(c, w, 0)
            release(pending)
            pending = None
            first = j if not self.skip_first_arrivals else j - 2
            if not self.skip_h_empty and first >= 0:
                while not self.h_empty[c][b].passed(first >> 1):
                    yield
            self._write_h(c, b, c, j)
            yield
            yield from self.barrier(c, ("H", j))
            if w == 0:
                self.h_full[c][b].arrive(expect_tx=1)
                self.copies.append(("H", c, b, j))
                if j >= 1:
                    self.h_empty[peer][b ^ 1].arrive()
            for ki in range(2):
                kp = ki ^ c  # the rank's own panel first, the partner's after h_full
                if ki == 1:
                    while not self.h_full[c][b].passed(j >> 1):
                        yield
                assert self.h_tag[c][b][kp] == j, f"CTA {c} chunk {j}: stage 2 found H panels {self.h_tag[c][b]}"
                for q in range(3):
                    yield from wait_full(it)
                    if q == 1 or q == 2 * w:
                        self.groups[(c, w)].append([("slot", it % self.stages), ("H", b, kp)])
                        yield from self.wait_groups(c, w, 1)
                        if pending is not None:
                            release(pending)
                        pending = it
                    else:
                        release(it)
                    it += 1
        yield from self.wait_groups(c, w, 0)
        if pending is not None:
            release(pending)
        self.finished += 1

    def run(self):
        programs = [self.producer(0), self.producer(1)] + [self.consumer(c, w) for c in range(2) for w in range(2)]
        live = list(range(len(programs)))
        steps = 0
        while live or self.copies:
            steps += 1
            assert steps < 300000, "deadlock (no progress)"
            events = [("p", i) for i in live]
            events += [("g", key) for key, g in self.groups.items() if g]
            events += [("c", i) for i in range(len(self.copies))]
            kind, what = self.rng.choice(events)
            if kind == "p":
                try:
                    next(programs[what])
                except StopIteration:
                    live.remove(what)
            elif kind == "g":
                self.groups[what].pop(0)  # the oldest group retires
            else:
                copy = self.copies.pop(what)
                if copy[0] == "W":
                    self._fill(copy[1], copy[2])
                elif copy[0] == "X":
                    self.x_tag[copy[1] ^ 1].add(copy[1])
                    self.x_full[copy[1] ^ 1].complete_tx(1)
                else:
                    _, c, b, j = copy
                    assert self.h_tag[c][b][c] == j, "a bulk copy's source panel was overwritten before it ran"
                    self._write_h(c ^ 1, b, c, j)
                    self.h_full[c ^ 1][b].complete_tx(1)
        assert self.finished == 4


@pytest.mark.parametrize("nchunks", [1, 2, 3, 6])
@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("split_conv", [True, False])
def test_pair_protocol_has_no_deadlock_or_overwrite(nchunks, seed, split_conv):
    PairModel(nchunks, seed, split_conv=split_conv).run()


@pytest.mark.parametrize("mutation,message", [
    ({"skip_first_arrivals": True, "split_conv": False}, "conv halo"),
    ({"skip_h_empty": True, "split_conv": False}, "conv halo"),
    ({"skip_x_wait": True}, "before the partner's half arrived"),
])
def test_pair_model_catches_the_bugs(mutation, message):
    """Variant 1 without the arrivals after phase A (or without h_empty at all): the partner's first H copies
    land in the conv halo; variant 0 without the x_full wait: stage 1 reads the partner's half of X before it
    arrives."""
    with pytest.raises(AssertionError, match=message):
        for seed in range(60):
            PairModel(4, seed, **mutation).run()


def test_h_empty_after_the_first_chunks_is_implied():
    """What the model shows about h_empty: from chunk 2 on it never blocks anything the h_full chain does not
    already order (a rank's copy of chunk j + 2 follows its h_full wait for j + 1, so the partner's copy of j + 1,
    so the partner's stage 1 of j + 1, whose wait_group 0 retired its reads of chunk j). With the conv split
    (variant 0) even the first two are implied (x_full orders them after the partner's phase A). The kernel
    keeps the waits: they cost one passing try_wait per chunk and keep the protocol local."""
    for seed in range(30):
        PairModel(4, seed, skip_h_empty=True, split_conv=True).run()


def test_pair_protocol_with_a_smaller_ring():
    for seed in range(10):
        PairModel(3, seed, stages=4).run()


# ---- host checks (CPU) ----

@pytest.mark.parametrize("make,message", stride1_host_check_cases(768, 512, "512 channels"))
def test_host_checks(make, message, small_weights):
    with pytest.raises(ValueError, match=message):
        c768.check_input(make(), small_weights)


def test_host_checks_on_out(small_weights):
    x = channels_last(torch.zeros(2, 768, 7, 7, dtype=torch.float16))
    with pytest.raises(ValueError):
        c768.check_input(x, small_weights, out=x)
    with pytest.raises(ValueError):
        c768.check_input(x, small_weights, out=channels_last(torch.zeros(2, 768, 7, 6, dtype=torch.float16)))
    with pytest.raises(ValueError, match="CUDA tensor"):  # every other rule passed; the device is checked last
        c768.check_input(x, small_weights, out=channels_last(torch.zeros(2, 768, 7, 7, dtype=torch.float16)))


def test_weight_preparation(small_weights):
    w = small_weights
    assert (w.channels, w.hidden, w.conv_w.shape, w.wpack.numel()) == (768, 768, (96, 9, 32), 4 * 768 * 768)
    with pytest.raises(ValueError, match="C=512"):
        c768.prepare_weights(torch.zeros(512, 8, 3, 3), None, torch.zeros(1024, 512, 1, 1), None,
                             torch.zeros(512, 1024, 1, 1), None)


def test_fake_operator_keeps_the_channels_last_shape(small_weights):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        x = channels_last(torch.empty(3, 768, 7, 7, dtype=torch.float16))
        y = torch.ops.convfirst_c768.block(x, *(getattr(small_weights, n) for n in c768.WEIGHT_FIELDS))
    assert tuple(y.shape) == (3, 768, 7, 7) and y.stride() == x.stride() and y.dtype == torch.float16


# ---- GPU ----

def check_kernel(expansion: int, batch: int, h: int, w: int | None = None, variant: int | None = None) -> float:
    w = h if w is None else w
    block = block_768(expansion, seed=expansion + h).cuda()
    x = channels_last(torch.randn(batch, 768, h, w, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    return check_against_float64(block, x, lambda out: c768.run(x, weights, out=out, variant=variant),
                                 (batch, 768, h, w))


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [128, 1, 37])
@pytest.mark.parametrize("variant", c768.VARIANTS)
def test_convfirstnet_l_shape(c768_on, batch, variant):
    """ConvFirstNet-L stages.3.1-3: alpha 6, 7x7, both variants (the conv split between the ranks, or not)."""
    check_kernel(6, batch, 7, variant=variant)


@pytest.mark.cuda
@pytest.mark.parametrize("size", [7, 20])
def test_variants_agree_bitwise(c768_on, size):
    """Both variants compute X with the same instructions in the same order per slice: the same bits."""
    block = block_768(6, seed=size).cuda().half()
    x = channels_last(torch.randn(5, 768, size, size, device="cuda", dtype=torch.float16))
    weights = _kernel_weights(block)
    a, b = (c768.run(x, weights, variant=v) for v in c768.VARIANTS)
    assert torch.equal(a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (6, 3, 14, 14), (2, 5, 13, 11), (4, 2, 9, 5), (6, 1, 1, 1), (2, 3, 3, 17), (1, 2, 5, 7), (4, 2, 19, 19),
    (2, 2, 28, 28), (2, 3, 6, 25),
])
def test_odd_sizes_and_batches(c768_on, expansion, batch, h, w):
    """Odd tile counts (a last partial tile), hidden 768 .. 4608, both halo schemes (W <= 18 double-buffered
    in the halves of H, W > 18 single)."""
    check_kernel(expansion, batch, h, w)


@pytest.mark.cuda
def test_raw_op_refuses_bad_shapes(c768_on):
    block = block_768(1).cuda()
    weights = _kernel_weights(block)
    x = channels_last(torch.randn(1, 768, 7, 7, device="cuda", dtype=torch.float16))
    flat = x.permute(0, 2, 3, 1).reshape(-1, 768)
    ext = c768._extension()
    args = [weights.conv_w, weights.conv_b, weights.wpack, weights.b1, weights.b2]
    with pytest.raises(RuntimeError, match="768"):
        ext.convfirst_c768(flat[:, :512].contiguous(), *args, 7, 7, 0, torch.empty(0, device="cuda"))
    with pytest.raises(RuntimeError, match="H, W"):
        ext.convfirst_c768(flat, *args, 7, 29, 0, torch.empty(0, device="cuda", dtype=torch.float16))
    with pytest.raises(RuntimeError, match="overlap"):
        ext.convfirst_c768(flat, *args, 7, 7, 0, flat)
    with pytest.raises(RuntimeError, match="no variant 2"):
        ext.convfirst_c768(flat, *args, 7, 7, 2, torch.empty(0, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="no variant 2"):
        c768.run(x, weights, variant=2)


@pytest.mark.cuda
def test_swapped_blocks_match_pytorch(c768_on):
    """stride 2 384 -> 768 then two C = 768 blocks, swapped by replace_blocks, against float64."""
    net = nn.Sequential(down_block(6, seed=1), block_768(6, seed=2), block_768(4, seed=3)).cuda().half()
    x = channels_last(torch.randn(4, 384, 14, 14, device="cuda", dtype=torch.float16))
    swap, got, exact = swap_against_float64(net, x)
    assert swap.fused == {"ConvFirstBlock": 3, "FFN": 0} and swap.fallback == {}
    assert torch.isfinite(got).all() and relative_error(got, exact) < 5e-3


def check_stride2(expansion, batch, h, w=None, **kwargs):
    w = h if w is None else w
    block = down_block(expansion, seed=h + expansion).cuda()
    x = channels_last(torch.randn(batch, 384, h, w, device="cuda", dtype=torch.float16))
    weights = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    shape = (batch, 768, s2.output_size(h), s2.output_size(w))
    return check_against_float64(block, x, lambda out: s2.run(x, weights, out=out, **kwargs), shape)


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [128, 1, 37])
@pytest.mark.parametrize("variant", s2.VARIANTS[384])
def test_stride2_convfirstnet_l_shape(c768_on, batch, variant):
    """ConvFirstNet-L stages.3.0: 384 -> 768, alpha 6, 14x14 -> 7x7; both variants (stage 1 in both column
    halves, or split between them through a cluster)."""
    check_stride2(6, batch, 14, variant=variant)


@pytest.mark.cuda
@pytest.mark.parametrize("expansion,batch,h,w", [
    (2, 3, 13, 13), (4, 1, 7, 7), (6, 2, 9, 5), (2, 5, 2, 2), (4, 2, 28, 28), (2, 1, 56, 55), (6, 3, 15, 9),
])
@pytest.mark.parametrize("variant", s2.VARIANTS[384])
def test_stride2_odd_sizes(c768_on, expansion, batch, h, w, variant):
    check_stride2(expansion, batch, h, w, variant=variant)


@pytest.mark.cuda
@pytest.mark.parametrize("rows_per_tile", [1, 3, 9])
@pytest.mark.parametrize("size", [14, 13])
@pytest.mark.parametrize("variant", s2.VARIANTS[384])
def test_stride2_tiles_across_images(c768_on, size, rows_per_tile, variant):
    check_stride2(4, 3, size, rows_per_tile=rows_per_tile, variant=variant)


@pytest.mark.cuda
@pytest.mark.parametrize("size", [14, 9])
def test_stride2_variants_agree(c768_on, size):
    """Variant 1 computes each hidden column once, in the block that owns it, with the same mma order per
    16-column tile as variant 0 (stage-1 warp tiles 32 x 16 instead of 64 x 16): the same bits."""
    block = down_block(6, seed=size).cuda().half()
    x = channels_last(torch.randn(5, 384, size, size, device="cuda", dtype=torch.float16))
    weights = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    a, b = (s2.run(x, weights, variant=v) for v in s2.VARIANTS[384])
    assert torch.equal(a, b)


@pytest.mark.cuda
def test_stride2_raw_op_refuses_other_widths(c768_on):
    block = down_block(2).cuda()
    weights = s2.prepare_weights(s2.FoldedWeights.from_block(block))
    x = channels_last(torch.randn(1, 384, 8, 8, device="cuda", dtype=torch.float16))
    flat = x.permute(0, 2, 3, 1).reshape(-1, 384)
    args = [weights.conv_w, weights.conv_b, weights.w1, weights.b1, weights.w2, weights.ws, weights.bo]
    ext = c768._extension()
    with pytest.raises(RuntimeError, match="384"):
        ext.convfirst_s2_c768(flat[:, :256].contiguous(), *args, 1, 8, 8, 0, 0, torch.empty(0, device="cuda"))
    with pytest.raises(RuntimeError, match="rows|launch|invalid"):
        ext.convfirst_s2_c768(flat, *args, 1, 8, 8, 20, 0, torch.empty(0, device="cuda", dtype=torch.float16))
    with pytest.raises(RuntimeError, match="no variant 2"):
        ext.convfirst_s2_c768(flat, *args, 1, 8, 8, 0, 2, torch.empty(0, device="cuda", dtype=torch.float16))


def test_device_script_has_the_c768_step():
    from pathlib import Path

    text = (Path(cuda_kernels.__file__).parent / "device_run_c768.sh").read_text()
    for needle in ("tests/test_convfirst_c768.py", "bench_c768", "convfirstnet_l", "CUDA_KERNELS_C768=1",
                   "--backend inductor --freezing --cuda-graphs", "--compile-rest --freezing --cuda-graphs --repeats 30"):
        assert needle in text
