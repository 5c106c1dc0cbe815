"""How well the byte model predicts what the GPU moves (issue 14's yardstick).

A plan's kernels are set beside the kernels Nsight Compute measured (``results.ncu`` of a
measurement file). In eager every row carries the module that launched it; per module, when
the plan predicts as many kernels as ran, they are paired in launch order and compared one by
one; otherwise the module's kernels are compared as one unit. A compiled graph has no module
ranges: its file is compared in total and by kernel count only. A unit is right when its
measured DRAM bytes (read + written) are within the tolerance of the prediction; the share of
right units, over all and over those moving at least `large_bytes`, and the ratio of the
totals say how far the byte model is from the hardware.

Byte models: ``compulsory`` (eq. 23, the default everywhere) and ``l2`` (``l2model``: the
cache between kernels; flushed before each kernel where the file was measured with
``--cache-control all``). Readers take results: this module runs no pipeline.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .api import Result
from .errors import InputError
from .l2model import Rules, Traffic, dram_traffic
from .measure import Measurement

TOLERANCE = 0.15
LARGE_BYTES = 1_000_000
BYTE_MODELS = ("compulsory", "l2")


@dataclass(frozen=True)
class Unit:
    """One compared unit: a kernel, or a module whose kernels could not be paired."""

    module: str
    kernels: int  # predicted kernels in the unit
    predicted: Traffic
    measured_read: int
    measured_write: int
    index: int = -1  # position of the unit's first kernel in the plan (launch order)

    @property
    def measured_bytes(self) -> int:
        return self.measured_read + self.measured_write

    @property
    def ratio(self) -> float:
        p = self.predicted.dram_bytes
        return self.measured_bytes / p if p else (1.0 if not self.measured_bytes else float("inf"))

    def within(self, tolerance: float, floor: int) -> bool:
        """Within the tolerance, or both sides below `floor` bytes (a 3 kB kernel that moves
        4 kB is not a miss of the byte model)."""
        if max(self.measured_bytes, self.predicted.dram_bytes) < floor:
            return True
        return abs(self.ratio - 1) <= tolerance


@dataclass(frozen=True)
class ByteFidelity:
    model: str
    plan: str
    byte_model: str
    cache_control: str  # how Nsight Compute treated the caches ("none": as a real run)
    units: tuple[Unit, ...]
    measured_bytes: int  # every Nsight Compute row
    predicted_bytes: int  # every planned kernel
    measured_kernels: int
    predicted_kernels: int
    tolerance: float = TOLERANCE
    large_bytes: int = LARGE_BYTES
    small_floor: int = 100_000

    def _within(self, units) -> int:
        return sum(u.within(self.tolerance, self.small_floor) for u in units)

    @property
    def large(self) -> tuple[Unit, ...]:
        return tuple(u for u in self.units
                     if max(u.measured_bytes, u.predicted.dram_bytes) >= self.large_bytes)

    @property
    def within(self) -> int:
        return self._within(self.units)

    @property
    def large_within(self) -> int:
        return self._within(self.large)

    @property
    def paired_kernels(self) -> int:
        return sum(1 for u in self.units if u.kernels == 1)

    @property
    def share_within(self) -> float | None:
        return self.within / len(self.units) if self.units else None

    @property
    def share_large_within(self) -> float | None:
        return self.large_within / len(self.large) if self.large else None

    @property
    def total_ratio(self) -> float:
        return self.measured_bytes / self.predicted_bytes if self.predicted_bytes else float("inf")


def cache_control(method: dict) -> str:
    """The --cache-control mode a measurement file's ncu note records ('?' if none)."""
    note = str(method.get("ncu") or "")
    words = note.split()
    return words[words.index("--cache-control") + 1].rstrip(",") if "--cache-control" in words else "?"


def trace_addresses(kernels, ops) -> dict[int, int]:
    """Measured placement for the l2 model: plan value id -> device address, from an
    allocator trace of the same eager forward (``ops``: ``[module, aten op, inputs,
    outputs]``, each tensor ``[address, bytes, ...]``, as examples/measurements/fidelity/
    l2probe2.py writes them). Per module path and size: the k-th output of n bytes the plan's
    kernels of that module write (launch order) is the k-th output of n bytes the trace
    shows for that module. Outputs the trace lacks stay unplaced (the allocator rule places
    them)."""
    traced: dict[tuple[str, int], list[int]] = defaultdict(list)
    for module, _op, _inputs, outputs in ops:
        for t in outputs:
            traced[module, t[1]].append(t[0])
    taken: dict[tuple[str, int], int] = defaultdict(int)
    out: dict[int, int] = {}
    for k in kernels:
        for vid, n in k.writes.items():
            key = (k.name, n)
            if taken[key] < len(traced.get(key, ())):
                out[vid] = traced[key][taken[key]]
                taken[key] += 1
    return out


def predicted_traffic(result: Result, byte_model: str, cache: str,
                      rules: Rules = Rules(), addresses=None) -> list[Traffic]:
    """Each planned kernel's DRAM reads and writes under `byte_model` (`rules`: which of the
    l2 model's rules are on; `addresses`: measured placement, `trace_addresses`)."""
    kernels = [kt.kernel for kt in result.kernels]
    if byte_model == "compulsory":
        return [Traffic(k.input_bytes + k.weight_bytes, k.output_bytes) for k in kernels]
    if byte_model != "l2":
        raise InputError(f"unknown byte model {byte_model!r} (choose from {', '.join(BYTE_MODELS)})")
    resident = result.hardware.l2_resident_mib
    if resident is None:
        raise InputError(f"the l2 byte model needs the L2 residency of {result.hardware.name} "
                         "(measure it with `perfmodel l2-probe`)",
                         file=result.hardware.path, field="l2_resident_mib")
    if cache not in ("none", "all"):
        raise InputError("the l2 byte model needs the file's --cache-control (none or all)",
                         field="method.ncu")
    hw = result.hardware
    for rule, value, name in (("dirty-cap", hw.l2_dirty_mib, "l2_dirty_mib"),
                              ("set-assoc", hw.l2_ways, "l2_ways")):
        if value is None and rule not in rules.off:
            raise InputError(f"the l2 byte model's {rule} rule needs {name} of {hw.name} "
                             f"(or switch the rule off)", file=hw.path, field=name)
    return dram_traffic(kernels, int(resident * 2**20), flushed=cache == "all",
                        keep=frozenset(result.graph.outputs),
                        dirty_bytes=int(hw.l2_dirty_mib * 2**20) if hw.l2_dirty_mib else None,
                        ways=hw.l2_ways, rules=rules, addresses=addresses)


def byte_fidelity(result: Result, measurement: Measurement, byte_model: str = "compulsory",
                  tolerance: float = TOLERANCE, large_bytes: int = LARGE_BYTES,
                  rules: Rules = Rules(), addresses=None) -> ByteFidelity:
    cache = cache_control(measurement.method)
    traffic = predicted_traffic(result, byte_model, cache, rules, addresses)
    predicted: dict[str, list[tuple[int, Traffic]]] = defaultdict(list)
    for i, (kt, t) in enumerate(zip(result.kernels, traffic)):
        predicted[kt.kernel.name].append((i, t))
    measured: dict[str, list] = defaultdict(list)
    for row in measurement.ncu:
        measured[row.module].append(row)
    units = []
    for module, rows in measured.items():
        plan = predicted.get(module)
        if not module or not plan:
            continue
        if len(plan) == len(rows):
            units += [Unit(module, 1, t, r.dram_read_bytes, r.dram_write_bytes, i)
                      for (i, t), r in zip(plan, rows)]
        else:
            units.append(Unit(module, len(plan), Traffic(sum(t.read_bytes for _, t in plan),
                                                          sum(t.write_bytes for _, t in plan)),
                              sum(r.dram_read_bytes for r in rows),
                              sum(r.dram_write_bytes for r in rows), plan[0][0]))
    return ByteFidelity(
        model=result.model, plan=str(result.plan), byte_model=byte_model, cache_control=cache,
        units=tuple(units), measured_bytes=sum(r.dram_bytes for r in measurement.ncu),
        predicted_bytes=sum(t.dram_bytes for t in traffic),
        measured_kernels=len(measurement.ncu), predicted_kernels=len(traffic),
        tolerance=tolerance, large_bytes=large_bytes)


MISS_CAUSES = ("write timing", "writes over", "writes under", "read timing", "reads over",
               "reads under", "reads and writes", "reads or writes")


def miss_causes(fidelity: ByteFidelity) -> list[tuple[Unit, str]]:
    """Each unit moving >= `large_bytes` outside the tolerance, with the side of the byte
    model it points at (MISS_CAUSES), in launch order:

    - writes alone: the unit would be within the tolerance with its measured writes in place
      of the predicted ones (its reads are right), and not with its measured reads. ``write timing`` when its
      writes summed with those of the previous and the next large unit are within the
      tolerance of the predicted sum (the write-backs are charged to a neighbour), else
      ``writes over`` / ``writes under`` (measured more / less than predicted);
    - reads alone: the same with reads (``read timing``, ``reads over`` = more read from
      DRAM than predicted, the L2 hit was over-credited, ``reads under``);
    - ``reads and writes``: neither side alone brings it within; ``reads or writes``: either does.
    """
    tol = fidelity.tolerance

    def near(measured: float, predicted: float) -> bool:
        return abs(measured / predicted - 1) <= tol if predicted else not measured

    large = sorted(fidelity.large, key=lambda u: u.index)
    out = []
    for n, u in enumerate(large):
        p = u.predicted
        if u.within(tol, fidelity.small_floor):
            continue
        by_writes = near(u.measured_bytes, p.read_bytes + u.measured_write)
        by_reads = near(u.measured_bytes, u.measured_read + p.write_bytes)
        window = large[max(0, n - 1):n + 2]
        if by_writes and by_reads:
            cause = "reads or writes"
        elif by_writes:
            cause = ("write timing" if near(sum(v.measured_write for v in window),
                                            sum(v.predicted.write_bytes for v in window))
                     else "writes over" if u.measured_write > p.write_bytes else "writes under")
        elif by_reads:
            cause = ("read timing" if near(sum(v.measured_read for v in window),
                                           sum(v.predicted.read_bytes for v in window))
                     else "reads over" if u.measured_read > p.read_bytes else "reads under")
        else:
            cause = "reads and writes"
        out.append((u, cause))
    return out
