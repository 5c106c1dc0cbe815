"""Predicted against measured: per kernel and in total.

Measured kernels carry the module path whose forward launched them (eager); predicted
kernels carry the module path of their first op. Both sides are summed per module path
and matched exactly; measured kernels that match no predicted kernel are kept as
*unmatched*, never dropped. Totals compare T_min with the measured latency:
C = t_ideal / t_a = C_max * C_impl.
"""
from __future__ import annotations

from dataclasses import dataclass

from .analysis import EfficiencyGap
from .api import Result
from .kernel_trace import UNATTRIBUTED
from .measure import KernelMeasurement, Measurement


@dataclass(frozen=True)
class ModuleComparison:
    module: str
    predicted_ms: float
    measured_ms: float
    flops: int
    dram_bytes: int
    memory_bound: bool
    measured_dram_bytes: int | None = None  # from Nsight Compute, where recorded

    @property
    def ratio(self) -> float:
        """Measured over predicted: >= 1 where the model is a true bound."""
        return self.measured_ms / self.predicted_ms if self.predicted_ms else float("inf")

    @property
    def intensity(self) -> float:
        return self.flops / self.dram_bytes if self.dram_bytes else 0.0

    @property
    def bytes_ratio(self) -> float | None:
        """Measured over predicted DRAM bytes."""
        if self.measured_dram_bytes is None or not self.dram_bytes:
            return None
        return self.measured_dram_bytes / self.dram_bytes


@dataclass(frozen=True)
class Comparison:
    result: Result
    measurement: Measurement
    modules: list[ModuleComparison]
    unmatched: list[KernelMeasurement]

    @property
    def gap(self) -> EfficiencyGap:
        t = self.result.totals
        return EfficiencyGap(t.t_ideal_s * 1e3, t.t_min_s * 1e3, self.measurement.latency_ms)

    @property
    def unmatched_ms(self) -> float:
        return sum(k.duration_ms for k in self.unmatched)

    @property
    def unattributed_ms(self) -> float:
        """Kernels launched outside every module range (kernel_trace.UNATTRIBUTED)."""
        return sum(k.duration_ms for k in self.unmatched if k.module == UNATTRIBUTED)

    @property
    def median_bytes_ratio(self) -> float | None:
        ratios = sorted(r for r in (m.bytes_ratio for m in self.modules) if r is not None)
        if not ratios:
            return None
        mid = len(ratios) // 2
        return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


def compare(result: Result, measurement: Measurement) -> Comparison:
    predicted: dict[str, list] = {}
    for kt in result.kernels:
        row = predicted.setdefault(kt.kernel.name, [0.0, 0, 0, 0.0])
        row[0] += kt.t_min_ms
        row[1] += kt.kernel.flops
        row[2] += kt.dram_bytes
        row[3] += kt.t_min_ms if kt.memory_bound else 0.0
    measured: dict[str, float] = {}
    unmatched = []
    for k in measurement.kernels:
        if k.module in predicted:
            measured[k.module] = measured.get(k.module, 0.0) + k.duration_ms
        else:
            unmatched.append(k)
    ncu: dict[str, int] = {}
    for row in measurement.ncu:
        ncu[row.module] = ncu.get(row.module, 0) + row.dram_bytes
    modules = [ModuleComparison(m, t, measured[m], n, b, mem_t > t / 2, ncu.get(m))
               for m, (t, n, b, mem_t) in predicted.items() if m in measured]
    return Comparison(result, measurement, modules, unmatched)
