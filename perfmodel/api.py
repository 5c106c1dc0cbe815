"""The engine behind the command line and the Python API: trace -> costs -> plan -> analysis."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import torch

from .analysis import KernelTime, Waterline, waterline
from .costs import unsupported_ops
from .dtypes import DType, parse_dtype
from .errors import AnalysisError, InputError, TraceError
from .fmt import sig
from .hardware import Hardware, load_hardware
from .plan import PlanSpec, make_kernels
from .spec import ModelSpec, build_model, check_batch, input_metas, load_spec, parse_inputs
from .trace import Graph, TensorMeta, trace


@dataclass(frozen=True)
class Result:
    """A model's kernels on one processor, with the sequence's totals.

    Plain data: its renderers (perfmodel.kernel_table, write_csv, write_json and the plots)
    take it as an argument; it imports none of them."""

    model: str
    hardware: Hardware
    plan: PlanSpec
    batch: int
    dtype: DType
    graph: Graph
    kernels: list[KernelTime]
    totals: Waterline
    unsupported: dict[str, int]
    l2_carry: bool = False

    @property
    def macs(self) -> int:
        return sum(k.kernel.macs for k in self.kernels)

    @property
    def other_ops(self) -> int:
        return sum(k.kernel.cost.other_ops for k in self.kernels)

    @property
    def gmacs_per_image(self) -> float:
        return self.macs / self.batch / 1e9

    @property
    def n_compute_bound(self) -> int:
        return len(self.kernels) - self.totals.n_memory_bound

    def summary(self) -> dict:
        """The headline numbers, as plain data (what `perfmodel waterline` prints)."""
        t = self.totals
        return {
            "model": self.model,
            "hardware": self.hardware.name,
            "plan": str(self.plan),
            "batch": self.batch,
            "dtype": self.dtype.name,
            "gmacs_per_image": self.gmacs_per_image,
            "gflops": t.flops / 1e9,
            "other_gops": self.other_ops / 1e9,
            "dram_gb": t.dram_bytes / 1e9,
            "t_ideal_ms": t.t_ideal_s * 1e3,
            "t_min_ms": t.t_min_s * 1e3,
            "c_max": t.c_max,
            "op_byte": t.op_byte,
            "mediant_intensity": t.mediant_intensity,
            "mediant_c_max": t.mediant_c_max,
            "memory_fraction": t.memory_fraction,
            "memory_intensity": t.memory_intensity,
            "kernels": len(self.kernels),
            "compute_bound": self.n_compute_bound,
            "memory_bound": t.n_memory_bound,
            "unsupported_ops": dict(self.unsupported),
            "byte_model": "compulsory loads, eq. 23" + (", L2 carry" if self.l2_carry else ""),
        }


def analyze(model: torch.nn.Module, inputs: Sequence[int] | Sequence[Sequence[int]] | dict
            | torch.Tensor | Sequence[torch.Tensor], *, hardware: str | Hardware = "a5000-paper",
            plan: str | PlanSpec = "layer", batch: int = 128, dtype: str | DType = "float16",
            strict: bool = False, name: str | None = None, l2_carry: bool = False) -> Result:
    """Analyse a module on `hardware`.

    `inputs` is what a spec's `input` takes: a per-sample shape (``(3, 224, 224)``),
    ``{"shape": [128], "dtype": "int64"}`` for token ids, or a list of either; or example
    tensors (their full shapes are used, batch included, and `batch` is read from them).
    Bad values raise InputError naming the argument, as the command line does.
    """
    dtype = parse_dtype(dtype)
    if isinstance(inputs, torch.Tensor) or (isinstance(inputs, (list, tuple)) and inputs
                                            and isinstance(inputs[0], torch.Tensor)):
        tensors = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        shapes = [TensorMeta(tuple(t.shape), dtype.torch if t.is_floating_point()
                             else t.dtype) for t in tensors]
        batch = check_batch(tensors[0].shape[0] if tensors[0].dim() else 0, field="inputs")
    else:
        per_sample, input_dtypes = parse_inputs(inputs, field="inputs")
        shapes = input_metas(per_sample, input_dtypes, check_batch(batch), dtype)
    plan = plan if isinstance(plan, PlanSpec) else PlanSpec.parse(plan)
    return _run(model, shapes, load_hardware(hardware), plan, batch, dtype, strict,
                name or type(model).__name__, l2_carry)


def analyze_spec(spec: ModelSpec | str | Path, *, strict: bool = False, l2_carry: bool = False,
                 **overrides) -> Result:
    """Analyse a model spec (a YAML path, a built-in name, or a ModelSpec)."""
    if not isinstance(spec, ModelSpec):
        spec = load_spec(spec)
    spec = spec.with_overrides(**overrides)
    given = {key for key, value in overrides.items() if value is not None}
    try:
        hw = load_hardware(_near_spec(spec.hardware, spec))
        model = build_model(spec)
        return _run(model, spec.input_metas, hw, spec.plan, spec.batch, spec.dtype, strict,
                    spec.name, l2_carry)
    except TraceError as exc:
        field = "input" if _is_shape_error(str(exc)) else "model"
        raise TraceError(f"cannot trace {spec.model} with input {spec.input_text}: "
                         f"{exc.reason}", file=spec.path, field=field) from exc
    except InputError as exc:
        if exc.file is None:
            raise _blame(exc, spec, given) from exc
        raise


def _blame(exc: InputError, spec: ModelSpec, given: set[str]) -> InputError:
    """An error about a value names where the value came from: the option that overrode
    the spec (``--plan``), else the spec's file and field (an unknown hardware, a group)."""
    if exc.field in given:
        return InputError(exc.reason, field=f"--{exc.field}")
    if spec.path:
        return InputError(exc.reason, file=spec.path, field=exc.field)
    return exc


def _near_spec(hardware, spec: ModelSpec):
    """A relative hardware path that is not found from here is looked up next to the spec."""
    if isinstance(hardware, str) and hardware.endswith((".yaml", ".yml")) and spec.path:
        path = Path(hardware)
        beside = Path(spec.path).parent / path
        if not path.is_absolute() and not path.exists() and beside.exists():
            return beside
    return hardware


def _is_shape_error(message: str) -> bool:
    words = ("shape", "size", "Expected", "dimension", "image height", "image width", "channels")
    return any(w in message for w in words)


def _run(model, shapes, hw: Hardware, plan: PlanSpec, batch: int, dtype: DType, strict: bool,
         name: str, l2_carry: bool = False) -> Result:
    hw.peak_ops(dtype)  # fail early on a dtype the hardware has no peak for
    graph = trace(model, shapes, dtype.torch)
    unsupported = unsupported_ops(graph)
    if strict and unsupported:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(unsupported.items()))
        raise AnalysisError(f"ops without a cost formula (--strict): {listed}")
    return _plan(Result(name, hw, plan, batch, dtype, graph, [], None, unsupported, l2_carry))


def _plan(result: Result) -> Result:
    """`result` with its kernels and totals made from its graph, plan and hardware."""
    kernels = make_kernels(result.graph, result.plan)
    times, totals = waterline(kernels, result.hardware, result.dtype, result.l2_carry)
    _check_device_memory(result.model, result.batch, kernels, result.hardware)
    return replace(result, kernels=times, totals=totals)


def _check_device_memory(model: str, batch: int, kernels, hw: Hardware) -> None:
    """While a kernel runs, the weights and that kernel's inputs and outputs are all in DRAM:
    a batch that needs more than the GPU holds cannot run, whatever T_min says."""
    if not hw.dram_gib or not kernels:
        return
    largest = max(kernels, key=lambda k: k.input_bytes + k.output_bytes)
    need = sum(k.weight_bytes for k in kernels) + largest.input_bytes + largest.output_bytes
    if need > hw.dram_gib * 2**30:
        warnings.warn(f"{model} at batch {batch} needs at least {sig(need / 2**30)} GiB of "
                      f"device memory (its weights, and the inputs and outputs of kernel "
                      f"'{largest.name or '(root)'}'), more than the {hw.dram_gib:g} GiB of "
                      f"{hw.name}: this batch cannot run as modelled", stacklevel=3)


def reanalyze(result: Result, *, plan: str | PlanSpec | None = None,
              hardware: str | Hardware | None = None) -> Result:
    """The same traced model under another plan or on other hardware, without tracing again."""
    plan = result.plan if plan is None else plan if isinstance(plan, PlanSpec) else PlanSpec.parse(plan)
    hw = result.hardware if hardware is None else load_hardware(hardware)
    hw.peak_ops(result.dtype)
    return _plan(replace(result, plan=plan, hardware=hw))


__all__ = ["Result", "analyze", "analyze_spec", "reanalyze", "InputError"]
