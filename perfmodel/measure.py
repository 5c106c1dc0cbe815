"""Measurement files: what a GPU measured, in a form the CPU-only tools read back.

One JSON file per run (written by `perfmodel bench`, perfmodel.bench)::

    {
      "schema": "perfmodel.measurement/1",
      "command": "perfmodel bench resnet50 --backend eager -o ...",
      "environment": {"gpu": "NVIDIA H200", "driver": "...", "torch": "2.11.0", ...},
      "workload": {"spec": "resnet50", "model": "ResNet-50", "batch": 128,
                   "dtype": "float16", "input": [[3, 224, 224]],
                   "memory_format": "channels_last", "backend": "eager"},
      "method": {"warmup": 10, "repeats": 50, "statistic": "median",
                 "timer": "cuda_events", "cuda_graphs": false},
      "results": {"latency_ms": {"median": 1.0, "p20": 0.99, "p80": 1.01},
                  "kernels": [{"name": "...", "module": "layer1.0.conv1",
                               "duration_ms": 0.01, "count": 1}]}
    }

Files measured on a real GPU live in ``examples/measurements/`` and are never edited by
hand; `workload.spec` names the model spec (built-in name or path) the run measured.
Per-kernel rows whose launch ran outside every module have the module
``kernel_trace.UNATTRIBUTED``; ``results.kernel_totals`` keeps their sum beside the latency.

Kernel runs (``python -m cuda_kernels.bench``) use the same envelope with
``workload.kind: "blocks"`` and ``results: {"ceilings": ..., "cases": [...]}``; one reader,
`read_measurement_file`, checks the envelope of both (and of the kernel runs written before
the envelope was shared, ``"kind": "perfmodel.measurement"`` with a list of results).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .dtypes import canonical_dtype
from .errors import InputError
from .outputs import write_text
from .yamlio import type_names

SCHEMA = "perfmodel.measurement/1"
LEGACY_KERNEL_RUN = "perfmodel.measurement"  # kernel runs before the shared envelope
BACKENDS = ("eager", "inductor", "cuda_kernels")
KINDS = ("model", "blocks")


@dataclass(frozen=True)
class KernelMeasurement:
    name: str
    duration_ms: float
    module: str = ""
    count: int = 1


@dataclass(frozen=True)
class NcuKernel:
    """One kernel as Nsight Compute measured it."""

    module: str
    name: str
    dram_read_bytes: int
    dram_write_bytes: int
    duration_ms: float

    @property
    def dram_bytes(self) -> int:
        return self.dram_read_bytes + self.dram_write_bytes


@dataclass(frozen=True)
class Measurement:
    spec: str
    model: str
    batch: int
    dtype: str
    backend: str
    latency_ms: float  # median
    p20_ms: float
    p80_ms: float
    environment: dict[str, Any] = field(default_factory=dict)
    method: dict[str, Any] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    kernels: tuple[KernelMeasurement, ...] = ()
    ncu: tuple[NcuKernel, ...] = ()
    path: str | None = None

    @property
    def gpu(self) -> str | None:
        return self.environment.get("gpu")

    @property
    def setting(self) -> str:
        """The backend with the settings that change its speed, e.g. 'inductor (freezing,
        CUDA graphs)' or 'cuda_kernels (compiled rest)'."""
        w = self.workload
        notes = [w["compile_mode"] if w.get("compile_mode", "default") != "default" else "",
                 "freezing" if w.get("freezing") else "",
                 "compiled rest" if w.get("compile_rest") else "",
                 "CUDA graphs" if self.method.get("cuda_graphs") else ""]
        notes = [n for n in notes if n]
        return f"{self.backend} ({', '.join(notes)})" if notes else self.backend

    @property
    def kernel_sum_ms(self) -> float:
        """Sum of the per-kernel times of one pass (0 without per-kernel rows)."""
        return sum(k.duration_ms for k in self.kernels)

    @property
    def where(self) -> str:
        """How messages name this measurement: its file, else its spec."""
        return self.path or f"measurement of {self.spec}"



def _need(data: dict, key: str, types, file: str, prefix: str = ""):
    if not isinstance(data, dict) or key not in data:
        raise InputError("missing (required)", file=file, field=prefix + key)
    value = data[key]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, types) or isinstance(value, bool) and bool not in allowed:
        raise InputError(f"expected {type_names(types)}, got {value!r}",
                         file=file, field=prefix + key)
    return value


def read_measurement_file(path: str | Path) -> dict:
    """The checked envelope of a measurement file, model run or kernel run: schema,
    command, environment, workload (with its ``kind``), method and results."""
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise InputError("file not found", file=file)
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid JSON: {exc}", file=file) from exc
    if isinstance(data, dict) and data.get("kind") == LEGACY_KERNEL_RUN:
        data = {**data, "schema": SCHEMA,
                "workload": {**data.get("workload", {}), "kind": "blocks"},
                "results": {"ceilings": data.get("ceilings"), "cases": data.get("results")}}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InputError(f"not a perfmodel measurement file (expected schema {SCHEMA!r})",
                         file=file, field="schema")
    workload = _need(data, "workload", dict, file)
    _need(data, "results", dict, file)
    kind = workload.get("kind", "model")
    if kind not in KINDS:
        raise InputError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})", file=file,
                         field="workload.kind")
    return {**data, "workload": {**workload, "kind": kind}}


def _kernel_rows(results: dict, file: str) -> tuple[KernelMeasurement, ...]:
    rows = results.get("kernels", [])
    if not isinstance(rows, list):
        raise InputError(f"expected a list of kernel rows, got {type(rows).__name__}", file=file,
                         field="results.kernels")
    out = []
    for i, k in enumerate(rows):
        where = f"results.kernels[{i}]."
        out.append(KernelMeasurement(
            str(_need(k, "name", str, file, where)),
            float(_need(k, "duration_ms", (int, float), file, where)),
            str(k.get("module", "")), int(k.get("count", 1))))
    return tuple(out)


def load_measurement(path: str | Path) -> Measurement:
    """A model run's measurement file (`perfmodel bench`), checked field by field."""
    data = read_measurement_file(path)
    file = str(path)
    workload, results = data["workload"], data["results"]
    if workload["kind"] != "model":
        raise InputError("a kernel benchmark file (cuda_kernels.bench), not a model run: "
                         "read it with `perfmodel kernels`", file=file, field="workload.kind")
    latency = _need(results, "latency_ms", dict, file, "results.")
    backend = _need(workload, "backend", str, file, "workload.")
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})",
                         file=file, field="workload.backend")
    stats = {k: float(_need(latency, k, (int, float), file, "results.latency_ms."))
             for k in ("median", "p20", "p80")}
    if not 0 < stats["p20"] <= stats["median"] <= stats["p80"]:
        raise InputError(f"expected 0 < p20 <= median <= p80, got {stats}", file=file,
                         field="results.latency_ms")
    dtype = _need(workload, "dtype", str, file, "workload.")
    canonical_dtype(dtype, file=file, field="workload.dtype")
    return Measurement(
        spec=_need(workload, "spec", str, file, "workload."),
        model=str(workload.get("model", workload["spec"])),
        batch=_need(workload, "batch", int, file, "workload."),
        dtype=dtype,
        backend=backend,
        latency_ms=stats["median"], p20_ms=stats["p20"], p80_ms=stats["p80"],
        environment=dict(data.get("environment", {})),
        method=dict(data.get("method", {})),
        workload=dict(workload),
        command=str(data.get("command", "")),
        kernels=_kernel_rows(results, file),
        ncu=tuple(NcuKernel(str(r["module"]), str(r["name"]), int(r["dram_read_bytes"]),
                            int(r["dram_write_bytes"]), float(r["duration_ms"]))
                  for r in results.get("ncu", [])),
        path=file,
    )


def write_measurement(path: str | Path, *, command: str, environment: dict, workload: dict,
                      method: dict, results: dict) -> Path:
    """Write a measurement file (the only writer; files are never edited by hand)."""
    return write_text(path, json.dumps({"schema": SCHEMA, "command": command,
                                        "environment": environment, "workload": workload,
                                        "method": method, "results": results}, indent=1) + "\n")
