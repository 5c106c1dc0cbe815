"""The L2 byte model's rules (perfmodel.l2model), each by literal arithmetic on hand-made
kernels: 1 MB or 1 MiB chunks, sizes that are whole chunks, the other rules switched off
where they would blur the number."""
import math
from types import MappingProxyType

import pytest

from perfmodel.l2model import (MIB, CachingAllocator, Rules, Traffic, dram_traffic,
                               module_lifetimes, survival)
from perfmodel.plan import Kernel

MB = 1_000_000


def _kernel(name, reads=(), writes=(), weights=0, ops=("op",)):
    reads, writes = dict(reads), dict(writes)
    return Kernel(name, ops=ops, input_bytes=sum(reads.values()), weight_bytes=weights,
                  output_bytes=sum(writes.values()), reads=MappingProxyType(reads),
                  writes=MappingProxyType(writes))


def _only(*names):
    """Rules with only `names` on."""
    return Rules.without(set(("interleave", "set-assoc", "dirty-cap", "allocator",
                              "module-lifetimes")) - set(names))


def test_rules_are_named_and_switch_off_one_by_one():
    assert Rules().off == ()
    assert Rules.without(["dirty-cap", "allocator"]).off == ("dirty-cap", "allocator")
    with pytest.raises(ValueError, match="unknown L2 rule"):
        Rules.without(["lru"])


@pytest.mark.parametrize("interleave, written, then", [(True, 80 * MB, 5 * MB), (False, 90 * MB, 0)])
def test_interleave_leaves_the_tail_of_every_operand(interleave, written, then):
    """Flushed L2 (--cache-control all), resident 30 MB. Interleaved, a kernel that reads
    60 MB while writing 120 MB touches one input chunk per two output chunks, and the L2
    (2 x 30 = 60 MB) keeps the last 60 chunks touched: 20 of input, 40 of output, so
    120 - 40 = 80 MB of output reach DRAM. Without the rule: inputs first, then the output,
    and the L2 keeps 30 MB of output: 90 MB written. The reader of the 120 MB finds nothing
    (flushed) and writes 10 MB as it reads: output chunk j (of 10) is touched at 12(j + 1/2)
    of its 120 read chunks, and 130 (1 - (j + 1/2)/10) chunks follow it, 60 or more for
    j <= 4: 5 MB of its output leave L2 before it ends. Inputs first, all 10 MB stay."""
    kernels = [_kernel("a", {1: 60 * MB}, {2: 120 * MB}), _kernel("b", {2: 120 * MB}, {3: 10 * MB})]
    rules = _only("interleave") if interleave else _only()
    got = dram_traffic(kernels, 30 * MB, flushed=True, rules=rules, chunk=MB)
    assert got == [Traffic(60 * MB, written), Traffic(120 * MB, then)]


def test_set_associative_survival_is_the_poisson_tail():
    """ways = 2: a line survives D bytes of later traffic with probability
    P[Poisson(2D/C) <= 1] = exp(-2D/C) (1 + 2D/C); at D = C/2 that is 2/e. Fully associative:
    1 below the capacity, 0 from it on."""
    s = survival(100, 2)
    assert s(0) == 1.0
    assert s(50) == pytest.approx(2 / math.e)
    assert s(100) == pytest.approx(3 * math.exp(-2))
    lru = survival(100, None)
    assert (lru(99), lru(100)) == (1.0, 0.0)


def test_set_assoc_rule_evicts_part_of_a_chunk_early():
    """L2 of 4 MB (resident 2 MB), 2 ways, 1 MB chunks. a writes 1 MB (dirty, in L2);
    b reads 2 MB of other data: a's chunk now has 2 MB used after it, so 1 - 2/e of it leaves
    L2 (dirty: b writes it back); c reads a's 1 MB and misses the same 1 - 2/e. Fully
    associative, 2 MB of later traffic evicts nothing from 4 MB: no write, no miss."""
    kernels = [_kernel("a", {}, {1: MB}), _kernel("b", {0: 2 * MB}, {}),
               _kernel("c", {1: MB}, {})]
    lost = round((1 - 2 / math.e) * MB)
    got = dram_traffic(kernels, 2 * MB, flushed=False, ways=2, rules=_only("interleave", "set-assoc"),
                       chunk=MB, passes=1, keep=frozenset({1}))
    assert got == [Traffic(0, 0), Traffic(2 * MB, lost), Traffic(lost, 0)]
    lru = dram_traffic(kernels, 2 * MB, flushed=False, rules=_only("interleave"), chunk=MB,
                       passes=1, keep=frozenset({1}))
    assert lru == [Traffic(0, 0), Traffic(2 * MB, 0), Traffic(0, 0)]


@pytest.mark.parametrize("cap, written", [(15 * MB, 5 * MB), (None, 0)])
def test_dirty_cap_writes_back_the_oldest_dirty_bytes_and_keeps_them(cap, written):
    """L2 of 100 MB, at most 15 MB dirty: a makes 10 MB dirty, b 10 more, so b writes back
    the 5 least recently used dirty MB. Those stay in L2, clean: c reads 30 MB of other data
    (no write-back: nothing is evicted from 100 MB), d reads a's 10 MB from L2."""
    kernels = [_kernel("a", {}, {1: 10 * MB}), _kernel("b", {1: 10 * MB}, {2: 10 * MB}),
               _kernel("c", {0: 30 * MB}, {}), _kernel("d", {1: 10 * MB}, {})]
    rules = _only("interleave", "dirty-cap")
    got = dram_traffic(kernels, 50 * MB, flushed=False, dirty_bytes=cap, rules=rules, chunk=MB,
                       passes=1, keep=frozenset({1, 2}))
    assert got == [Traffic(0, 0), Traffic(0, written), Traffic(30 * MB, 0), Traffic(0, 0)]


def test_caching_allocator_best_fit_lowest_address_split_and_merge():
    """3 MB rounds up to 3,000,320 bytes (512-byte units); a large-pool request under 10 MiB
    gets a 20 MiB segment, split. A freed 3,000,320-byte block is the best fit for 2 MB;
    what would remain (999,936 bytes) is not over 1 MiB, so it is not split. Freeing
    everything merges the segment back: 20 MiB fit at its start again."""
    memory = CachingAllocator()
    a = memory.malloc(3 * MB)
    b = memory.malloc(3 * MB)
    assert b - a == 3_000_320
    memory.release(a)
    assert memory.malloc(2 * MB) == a
    c = memory.malloc(3 * MB)
    assert c == b + 3_000_320
    for addr in (a, b, c):
        memory.release(addr)
    assert memory.malloc(20 * MIB) == a
    small = memory.malloc(1000)
    assert memory.malloc(1000) == small + 1024  # small pool, 512-byte units


@pytest.mark.parametrize("allocator, written", [(True, 8 * MIB), (False, 12 * MIB)])
def test_a_tensor_placed_on_a_dead_ones_dirty_lines_saves_their_write_back(allocator, written):
    """1 MiB chunks, L2 of 32 MiB. a writes v1 (4 MiB), b reads v1 and writes v2, v1 dies;
    c's v3 is placed as the caching allocator does, on v1's freed block, and overwrites its
    dirty lines in L2. d reads 64 MiB of other data and writes back all that is dirty:
    v2 and v3, 8 MiB. With fresh memory for every tensor v1 is written back too: 12 MiB."""
    kernels = [_kernel("a", {}, {1: 4 * MIB}), _kernel("b", {1: 4 * MIB}, {2: 4 * MIB}),
               _kernel("c", {2: 4 * MIB}, {3: 4 * MIB}), _kernel("d", {0: 64 * MIB}, {})]
    rules = _only("interleave", "allocator") if allocator else _only("interleave")
    got = dram_traffic(kernels, 16 * MIB, flushed=False, rules=rules, chunk=MIB, passes=1,
                       keep=frozenset({3}))
    assert got[:3] == [Traffic(0, 0)] * 3
    assert got[3] == Traffic(64 * MIB, written)


def test_module_lifetimes_hold_an_argument_until_its_module_returns():
    """x made by `prev` enters `seq` (read by seq.0.conv): it lives until seq's last kernel
    (3). y, made and read inside seq.0, dies after seq.0.bn (2), its last reader. z enters
    seq.1 (3); w enters `tail` (4)."""
    x, y, z, w = 1, 2, 3, 4
    kernels = [_kernel("prev", {}, {x: MB}), _kernel("seq.0.conv", {x: MB}, {y: MB}),
               _kernel("seq.0.bn", {y: MB}, {z: MB}), _kernel("seq.1.conv", {z: MB}, {w: MB}),
               _kernel("tail", {w: MB}, {})]
    last = {x: 1, y: 2, z: 3, w: 4}
    assert module_lifetimes(kernels, last) == {x: 3, y: 2, z: 3, w: 4}


def test_a_module_called_twice_holds_its_argument_for_one_call():
    """ResNet's blocks call one `relu` module three times: the input of the first call
    (made by b.bn1, index 1) lives until that call returns (2), not until the last relu (5)."""
    kernels = [_kernel("b.conv1", {0: MB}, {1: MB}), _kernel("b.bn1", {1: MB}, {2: MB}),
               _kernel("b.relu", {2: MB}, {3: MB}), _kernel("b.conv2", {3: MB}, {4: MB}),
               _kernel("b.bn2", {4: MB}, {5: MB}), _kernel("b.relu", {5: MB}, {6: MB})]
    last = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 5}
    got = module_lifetimes(kernels, last)
    assert (got[2], got[5]) == (2, 5)


def test_weights_and_untracked_bytes_are_read_from_dram():
    """A weight is used once per pass: read from DRAM; activations the plan could not name
    (input_bytes beyond `reads`) count as misses, outputs beyond `writes` as writes."""
    k = Kernel("a", ops=("op",), input_bytes=3 * MB, weight_bytes=2 * MB, output_bytes=4 * MB,
               reads=MappingProxyType({1: MB}), writes=MappingProxyType({2: MB}))
    got = dram_traffic([k], 10 * MB, flushed=True, chunk=MB, rules=_only("interleave"))
    assert got == [Traffic(MB + 2 * MB + 2 * MB, 3 * MB)]


@pytest.mark.parametrize("allocator, v3_at, written", [(False, 0, 8 * MIB), (True, 8 * MIB, 12 * MIB)])
def test_measured_addresses_override_the_allocator_rule(allocator, v3_at, written):
    """The allocator test's four kernels with measured addresses (base A, 1 MiB chunks):
    v1 at A, v2 at A + 4 MiB. v3 measured at A (on v1's dead dirty lines): d writes back v2
    and v3 only, 8 MiB, though the allocator rule is off. v3 measured at A + 8 MiB (fresh
    memory): v1's lines are written back too, 12 MiB, though the rule would have put v3 on v1."""
    base = 1 << 44
    kernels = [_kernel("a", {}, {1: 4 * MIB}), _kernel("b", {1: 4 * MIB}, {2: 4 * MIB}),
               _kernel("c", {2: 4 * MIB}, {3: 4 * MIB}), _kernel("d", {0: 64 * MIB}, {})]
    rules = _only("interleave", "allocator") if allocator else _only("interleave")
    got = dram_traffic(kernels, 16 * MIB, flushed=False, rules=rules, chunk=MIB, passes=1,
                       keep=frozenset({3}), addresses={1: base, 2: base + 4 * MIB, 3: base + v3_at})
    assert got[:3] == [Traffic(0, 0)] * 3
    assert got[3] == Traffic(64 * MIB, written)
