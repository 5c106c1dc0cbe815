"""How well the byte model predicts what the GPU moves (issue 14's yardstick).

For a comparison of a plan with a measurement that carries Nsight Compute rows, per module:
measured DRAM bytes (read + written, all of the module's kernels) over predicted bytes (the
plan's kernels of that module). The share of modules within a tolerance, over all modules and
over those moving at least `large_bytes`, and the ratio of the totals say how far the byte
model is from the hardware; `fidelity_lines` prints them. Readers take results: this module
runs no pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass

from .compare import Comparison

TOLERANCE = 0.15
LARGE_BYTES = 1_000_000


@dataclass(frozen=True)
class ByteFidelity:
    model: str
    plan: str
    byte_model: str
    cache_control: str  # how Nsight Compute treated the caches ("none": as a real run)
    modules: int  # modules with both a prediction and a measurement
    within: int  # of them, within the tolerance
    large: int  # modules moving at least LARGE_BYTES (measured or predicted)
    large_within: int
    measured_bytes: int
    predicted_bytes: int
    measured_kernels: int = 0  # Nsight Compute rows: kernels launched in one pass
    predicted_kernels: int = 0  # the plan's kernels

    @property
    def share_within(self) -> float:
        return self.within / self.modules if self.modules else 0.0

    @property
    def share_large_within(self) -> float:
        return self.large_within / self.large if self.large else 0.0

    @property
    def total_ratio(self) -> float:
        return self.measured_bytes / self.predicted_bytes if self.predicted_bytes else float("inf")


def cache_control(method: dict) -> str:
    """The --cache-control mode a measurement file's ncu note records ('?' if none)."""
    note = str(method.get("ncu") or "")
    words = note.split()
    return words[words.index("--cache-control") + 1].rstrip(",") if "--cache-control" in words else "?"


def byte_fidelity(cmp: Comparison, tolerance: float = TOLERANCE,
                  large_bytes: int = LARGE_BYTES) -> ByteFidelity:
    rows = [m for m in cmp.modules if m.measured_dram_bytes is not None and m.dram_bytes]
    near = [abs(m.bytes_ratio - 1) <= tolerance for m in rows]
    big = [max(m.measured_dram_bytes, m.dram_bytes) >= large_bytes for m in rows]
    return ByteFidelity(
        model=cmp.result.model, plan=str(cmp.result.plan),
        byte_model=cmp.result.summary()["byte_model"],
        cache_control=cache_control(cmp.measurement.method),
        modules=len(rows), within=sum(near), large=sum(big),
        large_within=sum(n and b for n, b in zip(near, big)),
        measured_bytes=sum(m.measured_dram_bytes for m in rows),
        predicted_bytes=sum(m.dram_bytes for m in rows),
        measured_kernels=len(cmp.measurement.ncu), predicted_kernels=len(cmp.result.kernels))
