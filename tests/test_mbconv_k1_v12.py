"""Kernel 1 with a producer warpgroup and two consumer warpgroups (csrc/mbconv_v12.cuh, CUDA_KERNELS_K1_V12=1; off by
default until measured; NOTES.md, "Design sketch: kernel 1 with a producer and consumers").

CPU: the mirrors of the rule and the shared memory (by hand at B0's 6.1), which blocks take it, ptxas (no spills
under the producer's and consumers' register budgets), and the two E buffers' mbarrier protocol simulated over random
interleavings of one producer and the consumers with the source's phase parities (a consumer never reads a buffer
before the producer wrote that item into it, the producer never overwrites one a consumer still reads). GPU
(@pytest.mark.cuda): the block's output equals version 8's one-image kernel bit for bit (the same D values and pool
sums), with the profiler naming the kernel; B0 on its own activations."""

import random
import re
import subprocess
from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from perfmodel.zoo import fold_batchnorm

from mbconv_helpers import block_of, mbconv_shapes

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v12.cuh").read_text()


def test_mirrors_match_the_source():
    assert re.search(r"kV12Threads = (\d+), kV12Producers = (\d+), kV12Consumers = (\d+);", SOURCE).groups() == \
        ("384", str(mb.V12_PRODUCERS), str(mb.V12_CONSUMERS))
    assert "constexpr int kV12TwoCtaSmem = 113 * 1024;" in SOURCE and mb.V12_TWO_CTA_SMEM == 113 * 1024
    assert 'kernel1_switch("CUDA_KERNELS_K1_V12")' in SOURCE and mb.K1_V12_SWITCH == "CUDA_KERNELS_K1_V12"
    assert "2 * (kV12Consumers / 24) * 48 * 4 + ks * ks * 24 * 4 + 24 * 8 + 5 * 8;" in SOURCE
    # registers: two CTAs of 384 threads start at 80; the producer gives 16 each, the consumers take 8 each
    regs = re.search(r"kV12ProducerRegs = (\d+), kV12ConsumerRegs = (\d+);", SOURCE).groups()
    assert (int(regs[0]), int(regs[1])) == (64, 88) and 128 * 64 + 256 * 88 == 384 * 80 == 65536 // 2 - 2048
    dispatch = (CSRC / "mbconv_v8.cuh").read_text()
    assert "return launch_expand_dw_v12<KS>(p, stream, pdl);" in dispatch


def test_shared_memory_by_hand_and_which_blocks_take_it():
    # 6.1: X 49 -> 64 padded rows of 200 halves, U 48 x 200, E 2 x 11 x 12 pixels x 60 halves, sums 2 x 10 x 48 fp32,
    # taps 25 x 24 half2 and bias 24 float2, 5 mbarriers
    assert mb.kernel1_v12_smem_bytes(7, 7, 5, 192, 192) == \
        64 * 200 * 2 + 48 * 200 * 2 + 2 * 11 * 12 * 60 * 2 + 2 * 10 * 48 * 4 + 25 * 24 * 4 + 24 * 8 + 40 == 82_952
    taken = set()
    for path, (c, h, w) in mbconv_shapes("efficientnet_b0").items():
        params = mb.block_params(fold_batchnorm(block_of("efficientnet_b0", path)))
        if params.expand_w is None or mb.chunk_for(params.hidden) != 48:
            continue
        k_pad = mb.prepare_weights(params).w_exp.shape[1]
        rows = mb.band_rows(h, w, params.kernel_size, params.stride, k_pad, 48, True, 11, c)
        row_blocks = -(-mb.output_size(h, params.stride) // rows)
        if mb.kernel1_v12(True, row_blocks, h, w, params.kernel_size, params.stride, c, k_pad, True):
            taken.add(path)
    assert taken == {"features.6.1", "features.6.2", "features.6.3"}  # 5.x at 14 x 14: 154 KB, one CTA per SM


def test_compiles_without_spills(tmp_path):
    import os

    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    if not nvcc.exists():
        pytest.skip("nvcc not found (set CUDA_HOME)")
    cmd = [str(nvcc), "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v", f"-I{CSRC}",
           "-c", str(CSRC / "mbconv_v8_k5.cu"), "-o", str(tmp_path / "k5.o")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (result.stdout + result.stderr).splitlines()
    entry = next(i for i, line in enumerate(lines) if "Compiling entry function" in line and "expand_dw_v12" in line)
    spill = next(line for line in lines[entry:] if "spill stores" in line)
    assert " 0 bytes spill stores, 0 bytes spill loads" in spill, spill


# ---- the two E buffers' protocol ----

def _parity_waits():
    """The source's phase parities: the producer's wait on empty[b] before item j >= 2, the consumers' on full[b]."""
    assert "if (j >= 2) bf::mbar_wait(empty(b), ((j >> 1) - 1) & 1);" in SOURCE
    assert "bf::mbar_wait(full(b), (j >> 1) & 1);" in SOURCE
    return (lambda j: ((j >> 1) - 1) & 1), (lambda j: (j >> 1) & 1)


class _Barrier:
    """An mbarrier: `count` arrivals complete a phase; try_wait.parity(P) holds once the current phase's parity is
    not P (a fresh barrier is in phase 0, so waiting on parity 1 passes)."""

    def __init__(self, count: int):
        self.count, self.arrived, self.completed = count, 0, 0

    def arrive(self):
        self.arrived += 1
        if self.arrived == self.count:
            self.arrived, self.completed = 0, self.completed + 1

    def passes(self, parity: int) -> bool:
        return (self.completed & 1) != parity


def _simulate(seed: int, producer_empty, consumer_full) -> None:
    """One producer and three consumers (standing for the 256 threads) over random interleavings; raises
    AssertionError on a read of a buffer the producer has not written for that item, an overwrite of a buffer being
    read, or a deadlock."""
    rng = random.Random(seed)
    items, consumers = rng.randint(3, 9), 3
    full, empty = [_Barrier(1), _Barrier(1)], [_Barrier(consumers), _Barrier(consumers)]
    buffer_item = [None, None]  # which item's E each buffer holds
    readers = [set(), set()]  # consumers reading each buffer now
    prod = {"j": 0, "state": "wait"}
    cons = [{"j": 0, "state": "wait"} for _ in range(consumers)]
    for _ in range(10_000):
        movable = [("p", None)] if prod["j"] < items else []
        movable += [("c", k) for k in range(consumers) if cons[k]["j"] < items]
        if not movable:
            return
        who, k = rng.choice(movable)
        if who == "p":
            j, b = prod["j"], prod["j"] & 1
            if prod["state"] == "wait":
                if j < 2 or empty[b].passes(producer_empty(j)):
                    assert not readers[b], f"item {j} overwrites buffer {b} while item {buffer_item[b]} is read"
                    buffer_item[b] = j  # the expand writes item j into buffer b
                    prod["state"] = "written"
            else:
                full[b].arrive()
                prod.update(j=j + 1, state="wait")
        else:
            c = cons[k]
            j, b = c["j"], c["j"] & 1
            if c["state"] == "wait":
                if full[b].passes(consumer_full(j)):
                    assert buffer_item[b] == j, f"consumer reads buffer {b} for item {j}, holding {buffer_item[b]}"
                    readers[b].add(k)
                    c["state"] = "reading"
            else:
                readers[b].discard(k)
                empty[b].arrive()
                c.update(j=j + 1, state="wait")
    raise AssertionError("deadlock")


@pytest.mark.parametrize("seed", range(30))
def test_the_buffers_protocol_under_random_interleavings(seed):
    _simulate(seed, *_parity_waits())


def test_a_wrong_parity_is_caught():
    """The simulation is not blind: the consumers waiting on the opposite parity read a buffer early, and a producer
    that skips its wait overwrites one being read."""
    producer_empty, consumer_full = _parity_waits()
    fresh = _Barrier(1)
    assert fresh.passes(1) and not fresh.passes(0)  # a fresh barrier: parity 1 passes at once
    for wrong in ((producer_empty, lambda j: 1 - consumer_full(j)), (lambda j: 1 - producer_empty(j), consumer_full)):
        failures = 0
        for seed in range(30):
            try:
                _simulate(seed, *wrong)
            except AssertionError:
                failures += 1
        assert failures > 0


# ---- GPU ----

@pytest.mark.cuda
@pytest.mark.parametrize("path,batch", [("features.6.1", 128), ("features.6.1", 5), ("features.6.2", 1),
                                        ("features.6.3", 3)])
def test_it_gives_the_one_image_kernels_values(path, batch, monkeypatch):
    from mbconv_helpers import assert_switch_keeps_the_bits

    assert_switch_keeps_the_bits(monkeypatch, path, batch, mb.K1_V12_SWITCH, "expand_dw_v12_kernel<5>")


@pytest.mark.cuda
@pytest.mark.parametrize("path,size,batch", [("features.6.1", 5, 7), ("features.6.1", 9, 2)])
def test_odd_sizes(path, size, batch, monkeypatch):
    from mbconv_helpers import check_b0_at_size

    monkeypatch.setenv(mb.K1_V12_SWITCH, "1")
    check_b0_at_size(path, size, batch, 11)


@pytest.mark.cuda
def test_efficientnet_b0_on_its_own_activations(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_V12_SWITCH: "1"}, {"MBConv": 16, "EffNetStem": 1}, 17)
