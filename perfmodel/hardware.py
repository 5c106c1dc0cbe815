"""Hardware descriptions: peak throughput, DRAM bandwidth and the op:byte ratio.

A config is a YAML file in ``configs/hardware`` (or any path). Throughput is dense
tensor-core throughput in TFLOP/s (1 MAC = 2 ops; sparse figures must not be used);
bandwidth is DRAM GB/s (10^9 bytes/s). The op:byte ratio is derived, never stored.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .dtypes import PEAK_KEYS, DType, parse_dtype
from .errors import InputError
from .resources import builtin_dir, builtin_names, resolve_config
from .yamlio import Fields, load_mapping

_FIELDS = {"name", "vendor", "description", "device_name", "peak_tflops", "accumulate", "vector_tflops",
           "dram_gbps", "dram_gib", "l2_mib", "smem_kib_per_sm", "sm_count", "clock_mhz",
           "memory_clock_mhz", "source", "notes", "calibration", "l2_resident_mib",
           "l2_dirty_mib", "l2_ways"}


@dataclass(frozen=True)
class Hardware:
    name: str
    vendor: str
    peak_tflops: Mapping[str, float]
    dram_gbps: float
    accumulate: str = "float32"
    vector_tflops: Mapping[str, float] = field(default_factory=dict)
    dram_gib: float | None = None
    l2_mib: float | None = None
    # bytes of a kernel's latest traffic still in L2 when it ends (the L2 probe measures it;
    # the l2 byte model, perfmodel.l2model, uses it)
    l2_resident_mib: float | None = None
    # the most dirty data L2 holds (the probe's largest evict write-back) and its set
    # associativity (the l2 byte model's dirty-cap and set-assoc rules)
    l2_dirty_mib: float | None = None
    l2_ways: int | None = None
    smem_kib_per_sm: float | None = None  # shared memory per SM: room for local tiles
    sm_count: int | None = None
    clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    description: str = ""
    device_name: str = ""  # the GPU's name as CUDA reports it (torch.cuda.get_device_name)
    source: str = ""
    notes: str = ""
    path: str | None = None
    calibration: str | None = None  # calibration file (perfmodel.calibration) for the estimate

    def peak_ops(self, dtype: str | DType) -> float:
        """Peak matrix throughput R in ops/s for arithmetic in `dtype`.

        Tensor-core peak where the config gives one for the dtype, else its vector peak
        (float32 runs on CUDA cores unless TF32 is enabled; name `tf32` to use it)."""
        key = parse_dtype(dtype).peak_key
        if key not in self.peak_tflops and key in self.vector_tflops:
            return self.vector_tflops[key] * 1e12  # e.g. float32 without TF32 tensor cores
        if key not in self.peak_tflops:
            raise InputError(f"hardware '{self.name}' gives no peak for {key} "
                             f"(it has: {', '.join(self.peak_tflops)})",
                             file=self.path, field="peak_tflops")
        return self.peak_tflops[key] * 1e12

    @property
    def dram_bytes_per_s(self) -> float:
        return self.dram_gbps * 1e9

    def op_byte(self, dtype: str | DType) -> float:
        """Processor op:byte ratio rho = R / B (ops per DRAM byte)."""
        return self.peak_ops(dtype) / self.dram_bytes_per_s

    def with_(self, *, peak_tflops: float | None = None, dtype: str | DType = "float16",
              dram_gbps: float | None = None) -> "Hardware":
        """A copy with a different peak (for `dtype`) or bandwidth, e.g. for op:byte sweeps."""
        peaks = dict(self.peak_tflops)
        if peak_tflops is not None:
            peaks[parse_dtype(dtype).peak_key] = peak_tflops
        return replace(self, peak_tflops=MappingProxyType(peaks),
                        dram_gbps=self.dram_gbps if dram_gbps is None else dram_gbps)


def _peak_table(f: Fields, name: str, required: bool) -> Mapping[str, float]:
    table = f.get(name, ... if required else {}, dict)
    if required and not table:
        raise f.error(name, "needs at least one dtype")
    for key, value in table.items():
        if key not in PEAK_KEYS:
            raise f.error(f"{name}.{key}", f"unknown dtype (choose from {', '.join(PEAK_KEYS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise f.error(f"{name}.{key}", f"must be a positive number, got {value!r}")
    return MappingProxyType({k: float(v) for k, v in table.items()})


def parse_hardware(data: dict, file: str) -> Hardware:
    f = Fields(data, file, _FIELDS)
    accumulate = f.get("accumulate", "float32", str)
    if accumulate not in ("float32", "float16"):
        raise f.error("accumulate", f"must be float32 or float16, got {accumulate!r}")
    return Hardware(
        name=f.get("name", types=str),
        vendor=f.get("vendor", "", str),
        description=f.get("description", "", str),
        device_name=f.get("device_name", "", str),
        peak_tflops=_peak_table(f, "peak_tflops", True),
        accumulate=accumulate,
        vector_tflops=_peak_table(f, "vector_tflops", False),
        dram_gbps=float(f.positive("dram_gbps")),
        dram_gib=f.positive("dram_gib", None),
        l2_mib=f.positive("l2_mib", None),
        l2_resident_mib=f.positive("l2_resident_mib", None),
        l2_dirty_mib=f.positive("l2_dirty_mib", None),
        l2_ways=f.positive("l2_ways", None, integer=True),
        smem_kib_per_sm=f.positive("smem_kib_per_sm", None),
        sm_count=f.positive("sm_count", None, integer=True),
        clock_mhz=f.positive("clock_mhz", None),
        memory_clock_mhz=f.positive("memory_clock_mhz", None),
        source=f.get("source", ..., str),
        notes=f.get("notes", "", str),
        path=file,
        calibration=_calibration_path(f, file),
    )


def _calibration_path(f: Fields, file: str) -> str | None:
    """The optional calibration file, relative to the config's folder: it must exist and is
    validated here (errors name the calibration file and its field; read once per process)."""
    from .calibration import load_calibration

    name = f.get("calibration", None, str)
    if name is None:
        return None
    path = Path(file).parent / name
    if not path.is_file():
        raise f.error("calibration", f"file not found: {path}")
    load_calibration(path)
    return str(path)


def load_hardware(name_or_path: str | Path) -> Hardware:
    """Load a built-in config by name (``h200-sxm``) or a YAML file by path."""
    if isinstance(name_or_path, Hardware):
        return name_or_path
    path = resolve_config(name_or_path, "hardware")
    if path is None:
        if str(name_or_path).endswith((".yaml", ".yml")):
            raise InputError("file not found", file=str(name_or_path))
        raise InputError(f"unknown hardware '{name_or_path}' (built-in: "
                         f"{', '.join(list_hardware())}; or give a YAML path)", field="hardware")
    return parse_hardware(load_mapping(path), str(path))


def list_hardware() -> list[str]:
    return builtin_names("hardware")


__all__ = ["Hardware", "load_hardware", "list_hardware", "parse_hardware", "builtin_dir"]
