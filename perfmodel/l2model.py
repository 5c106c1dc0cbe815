"""What DRAM sees of a kernel sequence once the L2 cache is in the picture (issue 14).

The paper's byte model (eq. 23) charges every kernel its compulsory traffic: each input and
weight read once, each output written once. Nsight Compute disagrees, measured on an H200
(examples/measurements/fidelity/): a kernel's last writes are still dirty in L2 when it ends
(with ``ncu --cache-control all`` the flush writes them back unattributed), and without a
flush the next kernels find in L2 what the previous ones left there, and pay for the dirty
lines they evict.

`dram_traffic` replays a plan's kernels through a model of the L2 and of where eager
PyTorch puts each tensor in memory. Memory is cut into chunks (`chunk` bytes, by address);
the L2 is a stack of chunks, most recently used on top. Its rules, each switched on or off
by name (`RULES`; `Rules`):

``interleave``
    A kernel streams its operands concurrently: the chunks of every input, weight and
    output are touched in order of their relative position (an element-wise kernel reads
    element i of its inputs as it writes element i of its output). What stays in L2 at its
    end is therefore the tail of each operand in proportion to its size, not the tail of
    its output alone. Off: each operand in turn, inputs first, and the L2 holds
    `resident_bytes` (what a copy leaves is then the tail of its output alone).
``set-assoc``
    A chunk's lines survive in proportion to a set-associative cache with hashed set
    indexing: a line is evicted once `ways` more recently used lines map to its set; with
    D bytes used after it, the number that do is Poisson with mean ways·D/capacity, so it
    survives with probability P[Poisson(ways·D/capacity) <= ways - 1]. Off: fully
    associative LRU (it survives while D < capacity: a cliff).
``dirty-cap``
    The L2 holds at most `dirty_bytes` of dirty data; beyond that the oldest dirty chunks
    are written back (by the kernel that made the excess) and stay as clean copies.
``allocator``
    Tensors are placed as PyTorch's caching allocator places them (`CachingAllocator`:
    best fit among freed blocks, lowest address first, blocks split and merged), so a new
    tensor often lands on a dead one whose dirty lines are still in L2; writing over them
    costs no write-back. Off: every tensor gets fresh memory, so every dirty line is
    written back once.
``module-lifetimes``
    A tensor is freed when eager PyTorch drops its last reference: a module's caller holds
    each argument until the module returns (``nn.Sequential`` keeps a child's input until
    the child returns), so a value read inside a module call lives until that call's last
    kernel. Off: freed after the last kernel that reads it.

Where a kernel's dirty lines go when they leave L2 is charged to the kernel running then
(an eviction, or the dirty cap). Capacity: `resident_bytes` is the hardware's
``l2_resident_mib``, what a flushed copy of >= 64 MiB leaves unwritten (the L2 probe); a
copy streams as much as it reads as it writes, so under ``interleave`` the L2 holds twice
that: ``capacity = 2 * resident_bytes``. ``flushed=True`` empties the cache before each
kernel (``--cache-control all``). The sequence is replayed `passes` times (ncu profiles a
forward after warm-up ones: the allocator's blocks and the L2 contents come from the
previous pass); the last pass is returned.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:  # the CLI reads RULES without importing the planner (and torch)
    from .plan import Kernel

MIB = 2**20
RULES = ("interleave", "set-assoc", "dirty-cap", "allocator", "module-lifetimes")


@dataclass(frozen=True)
class Traffic:
    """Predicted DRAM bytes of one kernel under an L2 model."""

    read_bytes: int
    write_bytes: int

    @property
    def dram_bytes(self) -> int:
        return self.read_bytes + self.write_bytes


@dataclass(frozen=True)
class Rules:
    """Which of the L2 model's rules are on (all by default); see the module docstring."""

    interleave: bool = True
    set_assoc: bool = True
    dirty_cap: bool = True
    allocator: bool = True
    module_lifetimes: bool = True

    @classmethod
    def without(cls, names: Iterable[str]) -> "Rules":
        """All rules but `names` (as in RULES: 'set-assoc', ...)."""
        off = set(names)
        unknown = off - set(RULES)
        if unknown:
            raise ValueError(f"unknown L2 rule(s) {', '.join(sorted(unknown))} "
                             f"(choose from {', '.join(RULES)})")
        return cls(**{f.name: f.name.replace("_", "-") not in off for f in fields(cls)})

    @property
    def off(self) -> tuple[str, ...]:
        return tuple(f.name.replace("_", "-") for f in fields(self) if not getattr(self, f.name))


def survival(capacity: float, ways: int | None):
    """s(D): the share of a chunk's lines still in L2 after D bytes were used more recently.
    ways=None: fully associative LRU, 1 while D < capacity, then 0. Else the set-associative
    estimate P[Poisson(ways·D/capacity) <= ways - 1]."""
    if ways is None:
        return lambda d: 1.0 if d < capacity else 0.0

    def s(d: float) -> float:
        lam = ways * d / capacity
        if lam > 4 * ways + 40:
            return 0.0
        term = total = math.exp(-lam)
        for k in range(1, ways):
            term *= lam / k
            total += term
        return min(1.0, total)
    return s


class CachingAllocator:
    """Where PyTorch's CUDA caching allocator (native backend, default settings) puts each
    tensor: sizes rounded up to 512 bytes; requests of <= 1 MiB from a small pool of 2 MiB
    segments, larger ones from a large pool (segments of 20 MiB below 10 MiB, else the size
    rounded up to 2 MiB); the free block chosen is the smallest one that fits, lowest
    address first; a larger block is split (small pool: if >= 512 bytes remain; large: if
    > 1 MiB remains); a freed block merges with free neighbours of its segment."""

    def __init__(self):
        self._next = 1 << 40
        self._free: dict[str, list[tuple[int, int]]] = {"small": [], "large": []}  # (size, addr)
        self._blocks: dict[int, list] = {}  # addr -> [size, segment start, free, pool]

    @staticmethod
    def rounded(nbytes: int) -> int:
        return max(512, -(-nbytes // 512) * 512)

    def malloc(self, nbytes: int) -> int:
        size = self.rounded(nbytes)
        pool = "small" if size <= MIB else "large"
        free = self._free[pool]
        i = bisect.bisect_left(free, (size, -1))
        if i < len(free):
            have, addr = free.pop(i)
        else:
            if pool == "small":
                have = 2 * MIB
            elif size < 10 * MIB:
                have = 20 * MIB
            else:
                have = -(-size // (2 * MIB)) * 2 * MIB
            addr, self._next = self._next, self._next + have + 2 * MIB
            self._blocks[addr] = [have, addr, True, pool]
        block = self._blocks[addr]
        rest = have - size
        if (rest >= 512) if pool == "small" else (rest > MIB):
            self._blocks[addr + size] = [rest, block[1], True, pool]
            bisect.insort(free, (rest, addr + size))
            block[0] = size
        block[2] = False
        return addr

    def release(self, addr: int) -> None:
        block = self._blocks[addr]
        block[2] = True
        free = self._free[block[3]]
        after = addr + block[0]
        nxt = self._blocks.get(after)
        if nxt is not None and nxt[2] and nxt[1] == block[1]:
            free.remove((nxt[0], after))
            block[0] += nxt[0]
            del self._blocks[after]
        for prev_addr, prev in self._blocks.items():
            if prev_addr + prev[0] == addr and prev[2] and prev[1] == block[1]:
                free.remove((prev[0], prev_addr))
                prev[0] += block[0]
                del self._blocks[addr]
                addr, block = prev_addr, prev
                break
        bisect.insort(free, (block[0], addr))


class _Fenwick:
    """Prefix sums over touch order: bytes of chunks touched after a given touch."""

    def __init__(self, n: int):
        self.n, self.tree = n, [0.0] * (n + 1)

    def add(self, i: int, value: float) -> None:
        i += 1
        while i <= self.n:
            self.tree[i] += value
            i += i & -i

    def prefix(self, i: int) -> float:  # sum over [0, i)
        total = 0.0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


class _Cache:
    """The L2 as a recency stack of chunks. Each chunk: [touch number, bytes, dirty share at
    its last touch, survival already charged]; its resident share is survival(D), D the bytes
    of chunks touched after it; its dirty bytes are (dirty share) x (resident share) x bytes."""

    def __init__(self, survive, touches: int, prune_above: int, eps: float = 1e-4):
        self.survive, self.eps = survive, eps
        self.size, self.prune_above = touches, prune_above
        self.clear()

    def clear(self) -> None:
        self.tree, self.total, self.clock = _Fenwick(self.size), 0.0, 0
        self.chunks: dict[int, list] = {}
        self.dirty: set[int] = set()

    def _distance(self, entry) -> float:
        return self.total - self.tree.prefix(entry[0] + 1)

    def _renumber(self) -> None:
        order = sorted(self.chunks.items(), key=lambda kv: kv[1][0])
        self.tree, self.total, self.clock = _Fenwick(self.size), 0.0, 0
        for _, entry in order:
            entry[0] = self.clock
            self.tree.add(self.clock, entry[1])
            self.total += entry[1]
            self.clock += 1

    def _settle(self, key: int, entry) -> float:
        """Dirty bytes that left L2 since the chunk was last settled."""
        left = self.survive(self._distance(entry))
        out = entry[2] * (entry[3] - left) * entry[1]
        entry[3] = left
        if left < self.eps:
            out += entry[2] * left * entry[1]
            entry[2] = entry[3] = 0.0
            self.dirty.discard(key)
        return out

    def touch(self, key: int, nbytes: int, write: bool) -> tuple[float, float]:
        """Read or write a whole chunk: (bytes read from DRAM, dirty bytes written back)."""
        entry = self.chunks.get(key)
        written, missed, dirty = 0.0, float(nbytes), 1.0 if write else 0.0
        if entry is not None:
            if entry[2]:
                written = self._settle(key, entry)
            left = self.survive(self._distance(entry))
            missed = (1 - left) * nbytes
            if not write:
                dirty = entry[2] * left
            self.tree.add(entry[0], -entry[1])
            self.total -= entry[1]
        if self.clock >= self.size:
            self._renumber()
            if self.clock >= self.size:
                self.size *= 2
                self._renumber()
        self.tree.add(self.clock, nbytes)
        self.total += nbytes
        self.chunks[key] = [self.clock, nbytes, dirty, 1.0]
        self.clock += 1
        (self.dirty.add if dirty else self.dirty.discard)(key)
        return (0.0 if write else missed), written

    def end_kernel(self, dirty_cap: float | None) -> float:
        """Settle every dirty chunk (the write-backs the kernel's traffic caused), then write
        back the oldest dirty bytes beyond `dirty_cap`; forget chunks gone from L2."""
        written = sum(self._settle(key, self.chunks[key]) for key in list(self.dirty))
        if dirty_cap is not None:
            held = sorted((self.chunks[key][0], key) for key in self.dirty)
            excess = sum(self.chunks[k][2] * self.chunks[k][3] * self.chunks[k][1] for _, k in held)
            excess -= dirty_cap
            for _, key in held:
                if excess <= 0:
                    break
                entry = self.chunks[key]
                amount = entry[2] * entry[3] * entry[1]
                written += amount
                excess -= amount
                entry[2] = 0.0
                self.dirty.discard(key)
        if len(self.chunks) > self.prune_above:
            for key in [k for k, e in self.chunks.items()
                        if not e[2] and self.survive(self._distance(e)) < self.eps]:
                entry = self.chunks.pop(key)
                self.tree.add(entry[0], -entry[1])
                self.total -= entry[1]
        return written


def module_lifetimes(kernels: list[Kernel], last_use: dict[int, int]) -> dict[int, int]:
    """The kernel after which each value is freed under the ``module-lifetimes`` rule: a
    value read by a kernel of module path ``a.b.c`` and made in ``a.x`` entered the call of
    ``a.b`` (and of ``a.b.c``) as an argument, so it lives until that call of ``a.b`` returns:
    the last kernel of the unbroken run of ``a.b`` kernels the reader is in (a module called
    twice, as ResNet's shared ``relu``, makes two runs). Module paths are the kernels' names."""
    paths = [k.name.split(".") if k.name else [] for k in kernels]

    def inside(i: int, prefix: list[str]) -> bool:
        return i < len(paths) and paths[i][:len(prefix)] == prefix

    run_end: list[dict[int, int]] = [{} for _ in kernels]  # prefix length -> end of its run
    for i in range(len(kernels) - 1, -1, -1):
        for n in range(len(paths[i]) + 1):
            prefix = paths[i][:n]
            run_end[i][n] = run_end[i + 1][n] if inside(i + 1, prefix) else i
    producer: dict[int, list[str]] = {}
    for k, path in zip(kernels, paths):
        for vid in k.writes:
            producer.setdefault(vid, path)
    out = dict(last_use)
    for i, k in enumerate(kernels):
        for vid in k.reads:
            made = producer.get(vid)
            if made is None:
                continue
            n = 0
            while n < min(len(made), len(paths[i])) and made[n] == paths[i][n]:
                n += 1
            if n < len(paths[i]):
                out[vid] = max(out[vid], run_end[i][n + 1])
    return out


def dram_traffic(kernels: list[Kernel], resident_bytes: int, *, flushed: bool,
                 keep: frozenset[int] = frozenset(), dirty_bytes: int | None = None,
                 ways: int | None = None, rules: Rules = Rules(), passes: int = 3,
                 chunk: int = MIB // 2, addresses: Mapping[int, int] | None = None) -> list[Traffic]:
    """Each kernel's DRAM reads and writes under the L2 model (see the module docstring).
    `keep`: value ids never freed within a pass (the graph's outputs). `dirty_bytes` and
    `ways` are needed by the ``dirty-cap`` and ``set-assoc`` rules (None: that rule is off).
    `addresses`: measured placement, value id -> device address (an allocator trace of the
    same forward, `fidelity.trace_addresses`); those values sit there in every pass, whatever
    the ``allocator`` rule says, and the others are placed by the rule as before."""
    capacity = 2 * resident_bytes if rules.interleave else resident_bytes
    survive = survival(capacity, ways if rules.set_assoc else None)
    cap = dirty_bytes if rules.dirty_cap else None
    written_by = {vid for k in kernels for vid in k.writes}
    last_use: dict[int, int] = {}
    for i, k in enumerate(kernels):
        for vid in list(k.reads) + list(k.writes):
            last_use[vid] = i
    if rules.module_lifetimes:
        last_use = module_lifetimes(kernels, last_use)
    frees: dict[int, list[int]] = {}
    for vid, i in last_use.items():
        frees.setdefault(i, []).append(vid)

    memory = CachingAllocator()
    fresh = [-(-(1 << 50) // chunk) * chunk]  # chunk-aligned

    def place(nbytes: int) -> int:
        if rules.allocator:
            return memory.malloc(nbytes)
        addr, fresh[0] = fresh[0], fresh[0] + -(-nbytes // chunk) * chunk + chunk
        return addr

    measured = dict(addresses or {})
    at_measured = set(measured.values())

    def place_value(vid: int, nbytes: int) -> int:
        return measured[vid] if vid in measured else place(nbytes)

    def release(addr: int) -> None:
        if rules.allocator and addr not in at_measured:
            memory.release(addr)

    # inputs of the graph (never written) and weights live at fixed addresses throughout
    fixed = {}
    for k in kernels:
        for vid, n in k.reads.items():
            if vid not in written_by and vid not in fixed:
                fixed[vid] = place_value(vid, n)
    weights = {i: place(k.weight_bytes) for i, k in enumerate(kernels) if k.weight_bytes}

    touches = sum(-(-n // chunk) + 1 for k in kernels
                  for n in [*k.reads.values(), *k.writes.values(), k.weight_bytes] if n)
    cache = _Cache(survive, touches + 16, prune_above=8 * capacity // chunk + 64)
    out: list[Traffic] = []
    for _ in range(1 if flushed else passes):
        where: dict[int, int] = dict(fixed)
        users: dict[int, int] = {}  # address -> live values there
        out = []
        for i, k in enumerate(kernels):
            if flushed:
                cache.clear()  # ncu writes back what is dirty, attributed to no kernel
            in_place = k.ops[-1].endswith("_") if k.ops else False
            streams = []  # (address, bytes, write)
            for vid, n in k.reads.items():
                if vid not in where:  # read before any kernel wrote it: a value the plan made elsewhere
                    where[vid] = place_value(vid, n)
                    users[where[vid]] = users.get(where[vid], 0) + 1
                streams.append((where[vid], n, False))
            if k.weight_bytes:
                streams.append((weights[i], k.weight_bytes, False))
            for vid, n in k.writes.items():
                source = next((v for v, m in k.reads.items() if m == n), None) if in_place else None
                if vid not in where:
                    where[vid] = where[source] if source is not None else place_value(vid, n)
                    users[where[vid]] = users.get(where[vid], 0) + 1
                streams.append((where[vid], n, True))
            events = []
            for s, (addr, n, write) in enumerate(streams):
                first, last = addr // chunk, (addr + n - 1) // chunk
                count = last - first + 1
                for j in range(count):
                    key = first + j
                    part = min(addr + n, (key + 1) * chunk) - max(addr, key * chunk)
                    order = ((j + 0.5) / count, write, s) if rules.interleave else (s, j)
                    events.append((order, key, part, write))
            events.sort(key=lambda e: e[0])
            read = written = 0.0
            for _, key, part, write in events:
                missed, evicted = cache.touch(key, chunk, write)
                read += missed * part / chunk
                written += evicted
            written += cache.end_kernel(cap)
            read += max(0, k.input_bytes - sum(k.reads.values()))  # activations the plan could not name
            written += max(0, k.output_bytes - sum(k.writes.values()))
            out.append(Traffic(round(read), round(written)))
            for vid in frees.get(i, ()):
                if vid in fixed or vid in keep or vid not in where:
                    continue
                addr = where.pop(vid)
                users[addr] -= 1
                if not users[addr]:
                    release(addr)
        for vid in keep:  # the pass's outputs are dropped before the next one
            addr = where.pop(vid, None)
            if addr is not None and vid not in fixed:
                users[addr] -= 1
                if not users[addr]:
                    release(addr)
    return out


def probe_kernels(sizes_mib, evict_mib: int = 1024) -> tuple[list[Kernel], frozenset[int]]:
    """The L2 probe (`perfmodel.ncu._probe`) as plan kernels, to replay through
    `dram_traffic`: per size S, ``copy`` (reads a, writes b, S MiB each), ``chain`` (reads b,
    writes c) and ``evict`` (reads 1 GiB of other data). Returns the kernels and the value
    ids that stay allocated (all of them: the probe keeps its tensors)."""
    from types import MappingProxyType

    from .plan import Kernel

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


def dirty_mib(rows) -> float:
    """``l2_dirty_mib`` from the probe's rows measured with ``--cache-control none``: the
    most any ``evict`` kernel wrote back, in MiB. An evict kernel reads 1 GiB of other data,
    so it writes back all that is dirty in L2 when it starts: after the 16 MiB copy and
    chain (32 MiB made dirty, all within the L2's capacity) that is the most the L2 holds.
    The first evict is left out: it also writes back what the probe's set-up left dirty."""
    evicts = [row for row in rows if row["module"].startswith("probe.")
              and row["module"].endswith(".evict")]
    if len(evicts) < 2:
        raise ValueError("the dirty capacity needs at least two probe evict rows")
    return max(row["dram_write_bytes"] for row in evicts[1:]) / 2**20
