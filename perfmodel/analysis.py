"""Roofline, waterline, mediant roofline and Amdahl's roofline of a kernel sequence.

Per kernel i with n_i ops and b_i DRAM bytes on a processor of peak R and bandwidth B:
``t_i = max(n_i/R, b_i/B)`` (eq. 11); ``T_min = sum t_i`` (eq. 12); ``C_max = N/(R T_min)``
(eq. 13). The mediant intensity ``sum n_i / sum b_i`` (eq. 29) gives the whole-network
roofline, which overestimates C_max when compute- and memory-bound kernels mix.
Amdahl's roofline: with f the share of ops in memory-bound kernels
and I_mem their mediant intensity, ``C_max = 1 / ((1 - f) + f rho / I_mem)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .dtypes import DType
from .errors import InputError
from .hardware import Hardware

if TYPE_CHECKING:  # the report imports this module; a hardware table needs no torch
    from .plan import Kernel


@dataclass(frozen=True)
class KernelTime:
    """A kernel with its roofline time on one processor."""

    kernel: Kernel
    t_min_s: float
    memory_bound: bool
    l2_credit: int = 0  # DRAM bytes the L2-carry refinement assumes come from L2 instead

    @property
    def t_min_ms(self) -> float:
        return self.t_min_s * 1e3

    @property
    def flops(self) -> int:
        return self.kernel.flops

    @property
    def dram_bytes(self) -> int:
        return self.kernel.dram_bytes - self.l2_credit

    @property
    def intensity(self) -> float:
        return self.kernel.flops / self.dram_bytes if self.dram_bytes else 0.0


def l2_credits(kernels: list[Kernel], l2_bytes: float) -> list[int]:
    """The L2-carry refinement of the byte model (not the paper's; off by default).

    A tensor that the previous kernel wrote and that fits in L2 is still there when the next
    kernel reads it: that read is credited. A larger tensor is streamed through L2 and
    evicted before it is read again, so it is not. Writes still reach DRAM.

    Checked against Nsight Compute (dram__bytes_read.sum + dram__bytes_write.sum per
    module, eager, batch 128, H200; examples/measurements/h200_*_eager_kernels.json): the
    median of measured/predicted bytes is 1.08 (ResNet-50), 0.95 (EfficientNet-B0) and
    1.04 (ConvNeXt-T), against 0.87, 0.61 and 0.97 for compulsory loads alone.
    """
    credits = [0]
    for prev, k in zip(kernels, kernels[1:]):
        credits.append(sum(min(n, prev.writes[v]) for v, n in k.reads.items()
                           if v in prev.writes and prev.writes[v] <= l2_bytes))
    return credits


@dataclass(frozen=True)
class Waterline:
    """Totals of a kernel sequence on one processor and dtype."""

    peak_ops: float  # R, ops/s
    dram_bytes_per_s: float  # B
    flops: int  # N
    dram_bytes: int
    t_min_s: float
    memory_flops: int  # ops in memory-bound kernels (N_mem)
    memory_bytes: int  # their bytes (B_mem)
    n_memory_bound: int

    @property
    def op_byte(self) -> float:
        return self.peak_ops / self.dram_bytes_per_s

    @property
    def t_ideal_s(self) -> float:
        """Ideal latency N/R (eq. 1)."""
        return self.flops / self.peak_ops

    @property
    def c_max(self) -> float:
        """Maximum attainable computational efficiency N / (R T_min) (eq. 13)."""
        return self.t_ideal_s / self.t_min_s if self.t_min_s else 0.0

    @property
    def mediant_intensity(self) -> float:
        return self.flops / self.dram_bytes if self.dram_bytes else float("inf")

    @property
    def mediant_c_max(self) -> float:
        """C_max of the whole-network roofline: min(1, I_med / rho)."""
        return min(1.0, self.mediant_intensity / self.op_byte)

    @property
    def memory_fraction(self) -> float:
        """Amdahl's f: share of ops in memory-bound kernels."""
        return self.memory_flops / self.flops if self.flops else 1.0

    @property
    def memory_intensity(self) -> float:
        """Amdahl's I_mem: mediant intensity of the memory-bound kernels."""
        return self.memory_flops / self.memory_bytes if self.memory_bytes else float("inf")

    def fusion_speedup(self, intensity: float) -> float:
        """Predicted speedup if fusion raised the memory-bound kernels to `intensity`."""
        return amdahl_speedup(self.flops, self.memory_flops, self.memory_bytes, self.op_byte,
                              intensity)


@dataclass(frozen=True)
class EfficiencyGap:
    """Ideal, attainable and actual latency (paper section 3, eqs. 1-9).

    t_ideal <= T_min <= t_actual, so C = t_ideal/t_actual = C_max * C_impl: the share of
    the gap the memory system forces on the plan, and the share the software leaves."""

    t_ideal_ms: float
    t_min_ms: float
    t_actual_ms: float

    @property
    def c(self) -> float:
        """Computational efficiency (eq. 7)."""
        return self.t_ideal_ms / self.t_actual_ms

    @property
    def c_max(self) -> float:
        return self.t_ideal_ms / self.t_min_ms

    @property
    def c_impl(self) -> float:
        return self.t_min_ms / self.t_actual_ms


def kernel_time(flops: int, dram_bytes: int, peak_ops: float, bandwidth: float) -> float:
    """Minimum latency of one kernel (eq. 11): max(n/R, b/B)."""
    return max(flops / peak_ops, dram_bytes / bandwidth)


def roofline(intensity: float, peak_ops: float, bandwidth: float) -> float:
    """Attainable throughput of a kernel of this intensity (eq. 10): min(R, B I)."""
    return min(peak_ops, bandwidth * intensity)


def amdahl_roofline(intensity: float, f: float, peak_ops: float, op_byte: float) -> float:
    """Attainable throughput when a share f of the ops runs at `intensity` (Amdahl's roofline).

    f = 1 is the classic roofline min(R, B I).
    """
    return peak_ops / ((1 - f) + f * max(1.0, op_byte / intensity)) if intensity > 0 else 0.0


def amdahl_speedup(flops: int, memory_flops: int, memory_bytes: int, op_byte: float,
                   intensity: float) -> float:
    """Speedup of T_min when memory-bound kernels are lifted to `intensity` (ops/byte).

    Written with bytes rather than I_mem so that kernels with no matrix ops (poolings,
    normalizations) keep their memory time: f rho / I_mem = rho B_mem / N.
    """
    if not flops:
        return 1.0
    f = memory_flops / flops
    before = (1 - f) + op_byte * memory_bytes / flops
    after = (1 - f) + f * max(1.0, op_byte / intensity)
    return before / after


def waterline(kernels: list[Kernel], hw: Hardware, dtype: DType,
              l2_carry: bool = False) -> tuple[list[KernelTime], Waterline]:
    """Time every kernel on `hw` and total the sequence.

    `l2_carry` applies the refinement of :func:`l2_credits`; the default is the paper's
    compulsory-load model (eq. 23)."""
    peak, bw = hw.peak_ops(dtype), hw.dram_bytes_per_s
    rho = peak / bw
    if l2_carry and not hw.l2_mib:
        raise InputError("the L2-carry refinement needs the hardware's l2_mib",
                         file=hw.path, field="l2_mib")
    credits = l2_credits(kernels, hw.l2_mib * 2**20) if l2_carry else [0] * len(kernels)
    times = []
    t_total = 0.0
    mem_flops = mem_bytes = n_mem = total_bytes = 0
    for k, credit in zip(kernels, credits):
        nbytes = k.dram_bytes - credit
        t = kernel_time(k.flops, nbytes, peak, bw)
        memory_bound = k.flops < rho * nbytes  # intensity below op:byte (or no ops)
        times.append(KernelTime(k, t, memory_bound, credit))
        t_total += t
        total_bytes += nbytes
        if memory_bound:
            mem_flops += k.flops
            mem_bytes += nbytes
            n_mem += 1
    total = Waterline(peak, bw, sum(k.flops for k in kernels), total_bytes, t_total, mem_flops,
                      mem_bytes, n_mem)
    return times, total


def c_max_at(kernels: "list[Kernel] | list[KernelTime]", op_byte: float) -> float:
    """Waterline C_max on a processor of the given op:byte ratio (kernels or timed kernels,
    whose bytes carry the byte model they were timed under).

    C_max = N / (R sum max(n_i/R, b_i/B)) = N / sum max(n_i, rho b_i): it depends on the
    processor only through rho.
    """
    n = sum(k.flops for k in kernels)
    denominator = sum(max(k.flops, op_byte * k.dram_bytes) for k in kernels)
    return n / denominator if denominator else 0.0


def mediant_c_max_at(kernels: "list[Kernel] | list[KernelTime]", op_byte: float) -> float:
    """Whole-network roofline C_max: min(1, I_med / rho)."""
    n, b = sum(k.flops for k in kernels), sum(k.dram_bytes for k in kernels)
    return min(1.0, n / b / op_byte) if b else 1.0


def sweep(kernels: "list[Kernel] | list[KernelTime]",
          op_bytes) -> tuple[list[float], list[float]]:
    """C_max against op:byte for the waterline and for the mediant roofline (paper Fig. 4)."""
    return ([c_max_at(kernels, r) for r in op_bytes],
            [mediant_c_max_at(kernels, r) for r in op_bytes])
