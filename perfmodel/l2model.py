"""What DRAM sees of a kernel sequence once the L2 cache is in the picture (issue 14).

The paper's byte model (eq. 23) charges every kernel its compulsory traffic: each input and
weight read once, each output written once. Nsight Compute disagrees in two ways, both
measured on an H200 (examples/measurements/fidelity/):

- A kernel's last writes are still dirty in L2 when it ends: with ``ncu --cache-control all``
  the flush before the next kernel writes them back unattributed, so a kernel that writes
  200 MB shows about 24 MiB less, and one that writes 13 MB shows none.
- Without a flush, the next kernel finds what the previous ones left where the tensor fits
  in that residue: a 13 MB activation passes from kernel to kernel almost entirely in L2
  (ResNet-50's layer3), while a 51 MB one is read from DRAM in full (its resident tail is
  evicted by the reads of its head before the reader gets there). A dead tensor's dirty
  lines never reach DRAM where PyTorch's caching allocator gives its memory to the next
  tensor of its size, whose writes overwrite them in L2.

`dram_traffic` replays a plan's kernels through a model with those rules: a
least-recently-used cache of `resident_bytes` (the hardware's ``l2_resident_mib``, measured
by ``perfmodel l2-probe``) tracked per memory block; evicted dirty bytes are the evicting
kernel's writes; blocks are handed out as the caching allocator does (`_Allocator`: a
freed block goes to the next tensor of its size, an in-place op writes into its input's
block); ``flushed=True`` empties the cache before each kernel (``--cache-control all``).
Weights are always read from DRAM (each is used once per pass). The model moves bytes
between kernels and drops only dirty lines that a reused block overwrites.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .plan import Kernel


@dataclass(frozen=True)
class Traffic:
    """Predicted DRAM bytes of one kernel under an L2 model."""

    read_bytes: int
    write_bytes: int

    @property
    def dram_bytes(self) -> int:
        return self.read_bytes + self.write_bytes


class _L2:
    """Least-recently-used residency per memory block: block -> [resident bytes, dirty
    bytes], oldest first."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.lines: OrderedDict[int, list[int]] = OrderedDict()
        self.used = 0

    def hit(self, vid: int, nbytes: int) -> int:
        """Bytes of a read of `vid` served by L2. A tensor larger than the cache gets none:
        its resident part is its tail, and a reader that starts at its head evicts that tail
        before it gets there (least-recently-used against a sequential scan)."""
        if nbytes > self.capacity or vid not in self.lines:
            return 0
        return min(nbytes, self.lines[vid][0])

    def touch(self, vid: int, nbytes: int, dirty: bool) -> int:
        """Make the last min(nbytes, capacity) bytes of `vid` most recent; return the dirty
        bytes evicted to make room (its own streamed-through head included)."""
        old = self.lines.pop(vid, [0, 0])
        self.used -= old[0]
        keep = min(nbytes, self.capacity)
        written = max(0, nbytes - keep) if dirty else max(0, old[1] - keep)
        self.lines[vid] = [keep, keep if dirty else min(old[1], keep)]
        self.used += keep
        return written + self._evict()

    def _evict(self) -> int:
        written = 0
        while self.used > self.capacity:
            vid, (res, dirty) = next(iter(self.lines.items()))
            out = min(res, self.used - self.capacity)
            written += max(0, dirty - (res - out))  # the oldest bytes go first, dirty or not
            self.used -= out
            if out == res:
                del self.lines[vid]
            else:
                self.lines[vid] = [res - out, min(dirty, res - out)]
        return written

    def drop(self, vid: int) -> None:
        """Forget `vid`'s lines without a write-back (a new tensor overwrites them)."""
        res, _ = self.lines.pop(vid, [0, 0])
        self.used -= res

    def clear(self) -> None:
        self.lines.clear()
        self.used = 0


class _Allocator:
    """Which memory block each tensor lives in, as PyTorch's caching allocator hands them
    out: a tensor whose last reader has run frees its block, and the next tensor of the same
    size takes the most recently freed one; an in-place op writes into its input's block."""

    def __init__(self):
        self.block: dict[int, int] = {}  # value id -> block id
        self.free: dict[int, list[int]] = {}  # size -> freed blocks, most recent last
        self.size: dict[int, int] = {}
        self.users: dict[int, int] = {}  # block -> live values in it

    def place(self, vid: int, nbytes: int, in_place_of: int | None) -> tuple[int, bool]:
        """The block `vid` is written to, and whether it was taken from the free list."""
        if in_place_of is not None and in_place_of in self.block:
            block, reused = self.block[in_place_of], False
        elif self.free.get(nbytes):
            block, reused = self.free[nbytes].pop(), True
        else:
            block, reused = len(self.size), False
            self.size[block] = nbytes
        self.block[vid] = block
        self.users[block] = self.users.get(block, 0) + 1
        return block, reused

    def release(self, vid: int) -> None:
        block = self.block.pop(vid, None)
        if block is None:
            return
        self.users[block] -= 1
        if not self.users[block]:
            self.free.setdefault(self.size[block], []).append(block)


def dram_traffic(kernels: list[Kernel], resident_bytes: int, *, flushed: bool,
                 keep: frozenset[int] = frozenset()) -> list[Traffic]:
    """Each kernel's DRAM reads and writes under the L2 model (see the module docstring).
    `keep`: value ids never freed (the graph's outputs)."""
    last_use: dict[int, int] = {}
    for i, k in enumerate(kernels):
        for vid in list(k.reads) + list(k.writes):
            last_use[vid] = i
    l2, memory = _L2(resident_bytes), _Allocator()
    out = []
    for i, k in enumerate(kernels):
        if flushed:
            l2.clear()  # ncu writes back what is dirty, attributed to no kernel
        blocks = {v: memory.block.get(v, -1 - v) for v in k.reads}  # inputs: -1 - vid
        read = k.weight_bytes + sum(n - l2.hit(blocks[v], n) for v, n in k.reads.items())
        # activations not tracked per tensor (reads the plan could not name) count as misses
        read += max(0, k.input_bytes - sum(k.reads.values()))
        written = 0
        for vid, n in k.reads.items():
            written += l2.touch(blocks[vid], n, dirty=False)
        in_place = k.ops[-1].endswith("_") if k.ops else False
        for vid, n in k.writes.items():
            source = next((v for v, m in k.reads.items() if m == n), None) if in_place else None
            block, reused = memory.place(vid, n, source)
            if reused:
                l2.drop(block)  # the new tensor overwrites the old one's lines in L2
            written += l2.touch(block, n, dirty=True)
        untracked = max(0, k.output_bytes - sum(k.writes.values()))
        for vid in [v for v, last in last_use.items() if last == i]:
            del last_use[vid]
            if vid not in keep:
                memory.release(vid)
        out.append(Traffic(read, written + untracked))
    return out


def probe_kernels(sizes_mib, evict_mib: int = 1024) -> tuple[list[Kernel], frozenset[int]]:
    """The L2 probe (`perfmodel.ncu._probe`) as plan kernels, to replay through
    `dram_traffic`: per size S, ``copy`` (reads a, writes b, S MiB each), ``chain`` (reads b,
    writes c) and ``evict`` (reads 1 GiB of other data). Returns the kernels and the value
    ids that stay allocated (all of them: the probe keeps its tensors)."""
    from types import MappingProxyType

    def kernel(name, reads, writes):
        return Kernel(name, input_bytes=sum(reads.values()), output_bytes=sum(writes.values()),
                      reads=MappingProxyType(reads), writes=MappingProxyType(writes))

    mib, kernels, vid = 2**20, [], 2
    for s in sizes_mib:
        a, b, c = vid, vid + 1, vid + 2
        vid += 3
        kernels += [kernel(f"probe.{s}.copy", {a: s * mib}, {b: s * mib}),
                    kernel(f"probe.{s}.chain", {b: s * mib}, {c: s * mib}),
                    kernel(f"probe.{s}.evict", {0: evict_mib * mib}, {1: 2})]
    return kernels, frozenset(range(vid))


def resident_mib(rows, min_mib: int = 64) -> float:
    """``l2_resident_mib`` from the probe's rows measured with ``--cache-control all``: the
    median over the copies of at least `min_mib` of (bytes copied - bytes written), in MiB.
    Smaller copies leave their input in L2 too, so they understate it."""
    from statistics import median

    mib, out = 2**20, []
    for row in rows:
        parts = row["module"].split(".")
        if len(parts) == 3 and parts[0] == "probe" and parts[2] == "copy" and int(parts[1]) >= min_mib:
            out.append(int(parts[1]) - row["dram_write_bytes"] / mib)
    if not out:
        raise ValueError(f"no probe copies of >= {min_mib} MiB in the rows")
    return median(out)
