"""The tensor machine (paper section 5.1): describe a kernel, get its traffic and its bound.

Three memory spaces: DRAM (off-chip), global (on-chip, shared by all processors: L2 /
distributed shared memory) and local (per processor: shared memory and registers).
A *program* is a sequence of kernels; a kernel is a body of operations and loops over
tiles. Operations: ``load``/``store`` between spaces, ``matmul`` (channels-mode product
of an activation tile and a weight matrix), ``grouped_conv``, ``multiply`` (element-wise
product), ``add``, ``activation`` and ``pool`` (global average pool).

Counting follows the rest of perfmodel:

- MACs of an op are per execution, multiplied by the trip counts of its enclosing loops.
- A bias vector adds its length in ops once per layer (eq. 22).
- DRAM traffic is compulsory (eq. 23): each DRAM tensor a kernel loads is read once and
  each it stores is written once, however the loops tile it (overlapping halos are
  served by the caches). Reading a tensor again costs again only in another kernel,
  which is exactly what two-pass designs pay.
- Working set: the bytes of a kernel's local tiles (per processor) and global tensors.
- Bytes are elements x dtype size. Programs are built with float16 tensors; analysing a
  program in another dtype recasts every tensor to that dtype's size first.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from math import prod
from typing import Iterator, Union

from .analysis import kernel_time
from .dtypes import DType, parse_dtype
from .fmt import pct, si, sig
from .hardware import Hardware

DRAM, GLOBAL, LOCAL = "dram", "global", "local"
SPACES = (DRAM, GLOBAL, LOCAL)


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    space: str
    weight: bool = False
    itemsize: int = 2  # float16

    def __post_init__(self):
        if self.space not in SPACES:
            raise ValueError(f"tensor {self.name}: space must be one of {SPACES}")

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


def dram(name: str, *shape: int, weight: bool = False) -> Tensor:
    return Tensor(name, tuple(shape), DRAM, weight)


def glob(name: str, *shape: int, weight: bool = False) -> Tensor:
    return Tensor(name, tuple(shape), GLOBAL, weight)


def local(name: str, *shape: int) -> Tensor:
    return Tensor(name, tuple(shape), LOCAL)


@dataclass(frozen=True)
class Op:
    kind: str  # load | store | matmul | grouped_conv | multiply | add | activation | pool
    inputs: tuple[Tensor, ...]
    output: Tensor
    macs: int = 0  # per execution
    bias: Tensor | None = None
    label: str = ""


@dataclass(frozen=True)
class Loop:
    name: str
    trips: int
    body: tuple["Step", ...]


Step = Union[Op, Loop]


def _cast(step: Step, itemsize: int) -> Step:
    """The step with every tensor it touches stored in `itemsize`-byte elements."""
    if isinstance(step, Loop):
        return replace(step, body=tuple(_cast(s, itemsize) for s in step.body))
    size = lambda t: t if t is None else replace(t, itemsize=itemsize)  # noqa: E731
    return replace(step, inputs=tuple(map(size, step.inputs)), output=size(step.output),
                   bias=size(step.bias))


def load(src: Tensor, dst: Tensor) -> Op:
    return Op("load", (src,), dst, label=f"load {src.name}")


def store(src: Tensor, dst: Tensor) -> Op:
    return Op("store", (src,), dst, label=f"store {dst.name}")


def matmul(x: Tensor, w: Tensor, out: Tensor, bias: Tensor | None = None) -> Op:
    """out[p, k] (+)= x[p, c] w[c, k] (+ bias): prod(x.shape[:-1]) * c * k MACs."""
    return Op("matmul", (x, w) + ((bias,) if bias else ()), out,
              prod(x.shape[:-1]) * x.shape[-1] * w.shape[-1], bias, "×")


def grouped_conv(x: Tensor, w: Tensor, out: Tensor, group_width: int, taps: int,
                 bias: Tensor | None = None) -> Op:
    """Grouped conv: every output element takes group_width * taps MACs."""
    return Op("grouped_conv", (x, w) + ((bias,) if bias else ()), out,
              out.numel * group_width * taps, bias, "⊛")


def multiply(a: Tensor, b: Tensor, out: Tensor) -> Op:
    return Op("multiply", (a, b), out, label="⊙")


def add(a: Tensor, b: Tensor, out: Tensor) -> Op:
    return Op("add", (a, b), out, label="+")


def activation(x: Tensor, out: Tensor | None = None, fn: str = "relu") -> Op:
    return Op("activation", (x,), out or x, label=fn)


def pool(x: Tensor, out: Tensor) -> Op:
    return Op("pool", (x,), out, label="avg")


@dataclass(frozen=True)
class Kernel:
    name: str
    body: tuple[Step, ...]

    def ops(self) -> Iterator[tuple[Op, int]]:
        """Every op with the product of its enclosing loops' trip counts."""
        def walk(steps, trips):
            for s in steps:
                if isinstance(s, Loop):
                    yield from walk(s.body, trips * s.trips)
                else:
                    yield s, trips
        yield from walk(self.body, 1)

    def tensors(self) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for op, _ in self.ops():
            for t in op.inputs + (op.output,):
                out.setdefault(t.name, t)
        return out

    @property
    def macs(self) -> int:
        return sum(op.macs * trips for op, trips in self.ops())

    @property
    def flops(self) -> int:
        """2 x MACs + each bias vector's length once (eq. 22)."""
        biases = {op.bias.name: op.bias.numel for op, _ in self.ops() if op.bias is not None}
        return 2 * self.macs + sum(biases.values())

    def _dram(self, kind: str, weight: bool | None = None) -> int:
        seen: dict[str, int] = {}
        for op, _ in self.ops():
            if op.kind != kind:
                continue
            t = op.inputs[0] if kind == "load" else op.output
            if t.space == DRAM and (weight is None or t.weight == weight):
                seen[t.name] = t.nbytes
        return sum(seen.values())

    @property
    def dram_read_bytes(self) -> int:
        return self._dram("load")

    @property
    def dram_weight_bytes(self) -> int:
        return self._dram("load", weight=True)

    @property
    def dram_write_bytes(self) -> int:
        return self._dram("store")

    @property
    def dram_bytes(self) -> int:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def local_bytes(self) -> int:
        """Working set per processor: every local tile of the kernel."""
        return sum(t.nbytes for t in self.tensors().values() if t.space == LOCAL)

    @property
    def global_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors().values() if t.space == GLOBAL)


@dataclass(frozen=True)
class KernelReport:
    kernel: Kernel
    t_min_s: float
    memory_bound: bool


@dataclass(frozen=True)
class Program:
    name: str
    kernels: tuple[Kernel, ...]
    description: str = ""

    @property
    def macs(self) -> int:
        return sum(k.macs for k in self.kernels)

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.kernels)

    @property
    def dram_bytes(self) -> int:
        return sum(k.dram_bytes for k in self.kernels)

    def with_itemsize(self, itemsize: int) -> "Program":
        """The same program with every tensor stored in `itemsize`-byte elements."""
        kernels = tuple(replace(k, body=tuple(_cast(s, itemsize) for s in k.body))
                        for k in self.kernels)
        return replace(self, kernels=kernels)

    def analyze(self, hw: Hardware, dtype: str | DType = "float16") -> "ProgramReport":
        """Time the program's kernels with its tensors in `dtype` (bytes follow the dtype)."""
        dtype = parse_dtype(dtype)
        program = self.with_itemsize(dtype.itemsize)
        peak, bw = hw.peak_ops(dtype), hw.dram_bytes_per_s
        reports = tuple(KernelReport(k, kernel_time(k.flops, k.dram_bytes, peak, bw),
                                     k.flops < peak / bw * k.dram_bytes) for k in program.kernels)
        _check_local_memory(program, hw)
        return ProgramReport(program, hw, dtype, reports)


def _check_local_memory(program: Program, hw: Hardware) -> None:
    """A kernel whose local tiles exceed an SM's shared memory cannot run as tiled: its
    compulsory-traffic T_min is then not attainable, and saying C_max 100% would mislead."""
    if not hw.smem_kib_per_sm:
        return
    for k in program.kernels:
        if k.local_bytes > hw.smem_kib_per_sm * 1024:
            warnings.warn(f"{program.name}: kernel '{k.name}' keeps {sig(k.local_bytes / 1024)} "
                          f"KiB of local tiles per processor, more than the "
                          f"{hw.smem_kib_per_sm:g} KiB of shared memory per SM of "
                          f"{hw.name}: it cannot run as tiled, so its T_min is not attainable "
                          f"(smaller tiles or chunks: --set)", stacklevel=3)


@dataclass(frozen=True)
class ProgramReport:
    program: Program
    hardware: Hardware
    dtype: DType
    kernels: tuple[KernelReport, ...] = field(default_factory=tuple)

    @property
    def t_min_s(self) -> float:
        return sum(k.t_min_s for k in self.kernels)

    @property
    def c_max(self) -> float:
        return self.program.flops / self.hardware.peak_ops(self.dtype) / self.t_min_s

    def lines(self) -> list[str]:
        p = self.program
        out = [f"{p.name}: {si(p.macs, 'MACs')}, {si(p.dram_bytes, 'B')} DRAM, "
               f"intensity {sig(p.flops / p.dram_bytes)} ops/byte, T_min "
               f"{sig(self.t_min_s * 1e6)} us, C_max {pct(self.c_max)} on {self.hardware.name}"]
        for r in self.kernels:
            k = r.kernel
            out.append(f"  {k.name:34s} {si(k.flops, 'FLOP'):>11s}  read "
                       f"{si(k.dram_read_bytes, 'B'):>9s} (weights "
                       f"{si(k.dram_weight_bytes, 'B'):>9s})  write "
                       f"{si(k.dram_write_bytes, 'B'):>9s}  local {sig(k.local_bytes / 1024):>5s} "
                       f"KiB  global {sig(k.global_bytes / 1024):>6s} KiB  t "
                       f"{sig(r.t_min_s * 1e6):>7s} us  {'memory' if r.memory_bound else 'compute'}")
        return out
