"""Measurement files meet the model: each file is checked when it is read, and its spec is
analysed once, for `compare` and `gap` to use (they take results and run no pipeline).

Checks (README, "Measurements and the byte model"):

- the file measures the model it is compared with (spec reference or model name);
- the measured median is not below T_min of the plan that models its backend (op for
  eager, layer for Inductor, block for the fused kernels) on the hardware config that
  describes the file's GPU: a measurement cannot beat its bound, so one of the two is wrong;
- a file measured on another GPU than the chosen hardware config is a warning naming both.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path

from .api import Result, analyze_spec, reanalyze
from .errors import InputError
from .hardware import Hardware, list_hardware, load_hardware
from .measure import Measurement
from .spec import ModelSpec, load_spec

BOUND_PLANS = {"eager": "op", "inductor": "layer", "cuda_kernels": "block"}
# The plans that model what a runtime launches (named rules found by measurement); their
# T_min against the chosen plan's is the cost of the runtime's kernel boundaries.
RUNTIME_PLANS = {"eager": "eager", "inductor": "inductor"}


class MeasurementWarning(UserWarning):
    """Something about a measurement file that does not stop the analysis."""


@dataclass(frozen=True)
class Checked:
    """A measurement with its spec, the analysis to show it against, and its bound."""

    measurement: Measurement
    spec: ModelSpec
    result: Result  # on the chosen hardware, under the chosen plan
    bound: Result  # the backend's plan on the file's own hardware: bound.t_min <= measured
    runtime: Result | None = None  # the runtime's plan (RUNTIME_PLANS) on the chosen hardware


def hardware_of(m: Measurement, chosen: Hardware) -> Hardware | None:
    """The config that describes the GPU `m` was measured on: `chosen` if it does, else the
    built-in config for that GPU with the highest ceilings (the lowest, safest bound)."""
    if not m.gpu:
        return None
    if chosen.device_name == m.gpu:
        return chosen
    matches = [hw for hw in _builtin_hardware() if hw.device_name == m.gpu]
    return max(matches, key=lambda hw: (hw.peak_ops(m.dtype), hw.dram_gbps), default=None)


@functools.lru_cache(maxsize=1)
def _builtin_hardware() -> tuple[Hardware, ...]:
    return tuple(load_hardware(name) for name in list_hardware())


def _spec_of(m: Measurement, model: ModelSpec | str | None) -> ModelSpec:
    if model is None:
        try:
            return load_spec(m.spec)
        except InputError as exc:
            raise InputError(f"cannot load the spec it names: {exc}", file=m.where,
                             field="workload.spec") from exc
    spec = model if isinstance(model, ModelSpec) else load_spec(model)
    stem = Path(spec.path).stem if spec.path else None
    if m.spec not in (spec.name, spec.path, stem) and m.model != spec.name:
        raise InputError(f"measures {m.model} (spec {m.spec}), not {spec.name}: compare it with "
                         f"`{m.spec}`", file=m.where, field="workload.spec")
    return spec


def check_bound(m: Measurement, bound: Result) -> None:
    """Raise InputError (naming the file) if `m` is faster than `bound` allows."""
    t_min_ms = bound.totals.t_min_s * 1e3
    if m.latency_ms < t_min_ms:
        raise InputError(
            f"measured median {m.latency_ms:.4g} ms is below T_min {t_min_ms:.4g} ms of the "
            f"{bound.plan} plan on {bound.hardware.name} ({bound.summary()['byte_model']}): a "
            f"{m.backend} run cannot beat that bound, so the file or the bound is wrong",
            file=m.where, field="results.latency_ms.median")


def check_measurements(measurements: list[Measurement], hardware: Hardware | str,
                       plan: str | None = None, *, model: ModelSpec | str | None = None,
                       spec_plan: bool = False, l2_carry: bool = False) -> list[Checked]:
    """Check every measurement and analyse its spec (traced once per spec, batch and dtype).

    Without `plan`, each file is analysed under its spec's plan if `spec_plan`, else under
    the plan that models its backend (BOUND_PLANS). `model`, when given, is the spec the
    files must measure (else each file's own `workload.spec`)."""
    hw = load_hardware(hardware)
    traced: dict[tuple, Result] = {}
    checked = []
    for m in measurements:
        spec = _spec_of(m, model)
        own = hardware_of(m, hw)
        if own is None:
            warnings.warn(f"{m.where}: no hardware config describes GPU {m.gpu or '(not recorded)'}; "
                          f"its bound uses {hw.name}", MeasurementWarning, stacklevel=2)
        elif hw.device_name and own.device_name != hw.device_name:
            warnings.warn(f"{m.where} was measured on {m.gpu}, but {hw.name} describes "
                          f"{hw.device_name}; its bound uses {own.name}", MeasurementWarning,
                          stacklevel=2)
        key = (spec.path or spec.name, m.batch, m.dtype)
        if key not in traced:
            traced[key] = analyze_spec(spec, batch=m.batch, dtype=m.dtype, hardware=hw,
                                       l2_carry=l2_carry)
        base = traced[key]
        bound = reanalyze(base, plan=BOUND_PLANS[m.backend], hardware=own or hw)
        check_bound(m, bound)
        result = reanalyze(base, plan=plan or (spec.plan if spec_plan else BOUND_PLANS[m.backend]))
        runtime = RUNTIME_PLANS.get(m.backend)
        if runtime == "inductor" and m.workload.get("freezing"):
            runtime = "inductor:freezing"
        checked.append(Checked(m, spec, result, bound,
                               reanalyze(base, plan=runtime) if runtime else None))
    return checked
